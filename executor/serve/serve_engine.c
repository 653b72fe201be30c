/* serve_engine.c - continuous batching of many adapters' sequences on one base (see serve_engine.h).
 *
 * State: requests wait in a FIFO until their n choices fit in free KV slots; a running choice owns a
 * slot (slot_seq[slot]). A step admits from the head of the queue (a request that does not fit
 * waits, and so does everything behind it: first come, first served), then builds the decode batch:
 * running sequences sorted by adapter (the order of the adapter table), one LoRA run per adapter,
 * each sequence's row drawing its next token from (its seed, its token count). */
#include "serve_engine.h"

#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "chat_template.h"
#include "model.h"
#include "rng.h"
#include "sampler.h"
#include "tokenizer.h"

struct serve_adapter {
    char *key; /* the adapter dir */
    struct model *view;
    int in_use;         /* running sequences on it */
    uint64_t last_used; /* the step it last ran in */
};

struct serve_req;

/* One choice of a request, in a KV slot. */
struct serve_seq {
    struct serve_req *req;
    int choice, slot, n_tokens, last_token;
    struct sample_row row;
    struct whet_buf text;
    size_t sent; /* text emitted so far */
};

struct serve_req {
    uint64_t id;
    struct serve_request r; /* prompt and stop strings owned; r.adapter NULL (adapter_dir is the copy) */
    char *adapter_dir;
    struct serve_adapter *adapter; /* loaded at admission (&own with a caller's view) */
    struct serve_adapter own;      /* the caller's view (r.view), in no table */
    int n_running, cancelled;
    struct serve_seq *seqs;
    struct serve_req *next;
};

struct serve_engine {
    struct model *base;
    struct tokenizer *tok;
    struct chat_template tpl;
    struct kv_cache *cache;
    int n_slots, max_len, max_adapters, vocab;
    struct serve_seq **slot_seq;         /* [n_slots]: NULL when free */
    struct serve_adapter *adapters;      /* [max_adapters], key NULL when empty */
    struct serve_req *waiting, *running; /* FIFO and list */
    uint64_t next_id;
    struct serve_stats stats;
};

int serve_engine_open(struct serve_engine **out, const struct serve_engine_opts *o, struct whet_err *err) {
    *out = NULL;
    if (o->n_slots < 1 || o->max_len < 2 || o->max_adapters < 1)
        return whet_errf(err, "serve: expected n_slots >= 1, max_len >= 2 and max_adapters >= 1");
    struct serve_engine *e = xcalloc(1, sizeof *e);
    e->n_slots = o->n_slots, e->max_len = o->max_len, e->max_adapters = o->max_adapters, e->next_id = 1;
    char *tok_path = xasprintf("%s/tokenizer.json", o->model_dir);
    struct model_opts mo = model_opts_default();
    mo.device = o->device;
    mo.train = mo.frozen_base = o->training;
    int rc = tokenizer_load(tok_path, &e->tok, err) || chat_template_load(&e->tpl, o->model_dir, err) ||
             model_load(&e->base, o->model_dir, &mo, err);
    free(tok_path);
    if (!rc && !(e->cache = kv_cache_new(e->base, e->n_slots, e->max_len, err))) rc = -1;
    if (rc) {
        serve_engine_close(e);
        return -1;
    }
    int V = model_get_config(e->base)->vocab_size;
    e->vocab = (int)tokenizer_vocab_size(e->tok) < V ? (int)tokenizer_vocab_size(e->tok) : V;
    e->slot_seq = xcalloc((size_t)e->n_slots, sizeof *e->slot_seq);
    e->adapters = xcalloc((size_t)e->max_adapters, sizeof *e->adapters);
    *out = e;
    return 0;
}

static void req_free(struct serve_req *q) {
    for (int c = 0; c < q->r.n && q->seqs; c++) whet_buf_free(&q->seqs[c].text);
    free(q->seqs);
    free((void *)q->r.prompt);
    for (int i = 0; i < q->r.n_stop; i++) free(q->r.stop[i]);
    free((void *)q->r.stop);
    free(q->adapter_dir);
    free(q);
}

void serve_engine_close(struct serve_engine *e) {
    if (!e) return;
    struct serve_req *lists[2] = {e->waiting, e->running};
    for (int l = 0; l < 2; l++)
        for (struct serve_req *q = lists[l], *next; q; q = next) {
            next = q->next;
            req_free(q);
        }
    for (int i = 0; e->adapters && i < e->max_adapters; i++) {
        model_free(e->adapters[i].view);
        free(e->adapters[i].key);
    }
    free(e->adapters);
    free(e->slot_seq);
    kv_cache_free(e->cache);
    model_free(e->base);
    if (e->tok) tokenizer_free(e->tok);
    chat_template_free(&e->tpl);
    free(e);
}

struct model *serve_engine_base(const struct serve_engine *e) {
    return e->base;
}
const struct tokenizer *serve_engine_tokenizer(const struct serve_engine *e) { return e->tok; }
const struct chat_template *serve_engine_chat_template(const struct serve_engine *e) { return &e->tpl; }

struct serve_stats serve_engine_stats(const struct serve_engine *e) {
    struct serve_stats s = e->stats;
    for (struct serve_req *q = e->waiting; q; q = q->next) s.waiting++;
    for (struct serve_req *q = e->running; q; q = q->next) s.running++;
    for (int i = 0; i < e->max_adapters; i++) s.adapters_loaded += e->adapters[i].key != NULL;
    return s;
}

/* ---------------------------------------------------------------- requests */

int serve_engine_submit(struct serve_engine *e, const struct serve_request *r, uint64_t *id, struct whet_err *err) {
    if (r->n < 1 || r->n > e->n_slots)
        return whet_errf(err, "n: must be between 1 and %d (the worker's batch)", e->n_slots);
    if (r->max_tokens < 1) return whet_errf(err, "max_tokens: must be at least 1");
    if (r->n_prompt < 1) return whet_errf(err, "the prompt is empty");
    if (r->n_prompt + r->max_tokens > e->max_len)
        return whet_errf(err, "the prompt (%d tokens) and max_tokens %d exceed the %d tokens a sequence may have here",
                         r->n_prompt, r->max_tokens, e->max_len);
    if (!(r->sampling.temperature >= 0) || !(r->sampling.top_p > 0 && r->sampling.top_p <= 1) || r->sampling.top_k < 0)
        return whet_errf(err, "sampling: expected temperature >= 0, top_p in (0, 1] and top_k >= 0");
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= e->vocab)
            return whet_errf(err, "prompt token %d: id %d is outside the vocabulary", i, r->prompt[i]);
    struct serve_req *q = xcalloc(1, sizeof *q);
    q->id = e->next_id++;
    q->r = *r;
    int *prompt = xmalloc(sizeof(int) * (size_t)r->n_prompt);
    memcpy(prompt, r->prompt, sizeof(int) * (size_t)r->n_prompt);
    q->r.prompt = prompt;
    char **stop = xcalloc((size_t)r->n_stop + 1, sizeof *stop);
    for (int i = 0; i < r->n_stop; i++) stop[i] = xstrdup(r->stop[i]);
    q->r.stop = stop;
    q->r.adapter = NULL;
    q->adapter_dir = r->adapter && !r->view ? xstrdup(r->adapter) : NULL;
    if (r->view) q->own.view = r->view, q->adapter = &q->own;
    struct serve_req **tail = &e->waiting;
    while (*tail) tail = &(*tail)->next;
    *tail = q;
    *id = q->id;
    return 0;
}

void serve_engine_cancel(struct serve_engine *e, uint64_t id) {
    struct serve_req *lists[2] = {e->waiting, e->running};
    for (int l = 0; l < 2; l++)
        for (struct serve_req *q = lists[l]; q; q = q->next)
            if (q->id == id) q->cancelled = 1;
}

/* ---------------------------------------------------------------- adapters */

/* The loaded adapter of dir `key`, loading it into a free entry or the least recently used idle one.
 * NULL with *busy set when every entry is in use (the request waits), NULL with err when it cannot be
 * loaded. */
static struct serve_adapter *adapter_get(struct serve_engine *e, const char *key, int *busy, struct whet_err *err) {
    *busy = 0;
    struct serve_adapter *victim = NULL;
    for (int i = 0; i < e->max_adapters; i++) {
        struct serve_adapter *a = &e->adapters[i];
        if (a->key && !strcmp(a->key, key)) return a;
        if (!a->key) {
            if (!victim || victim->key) victim = a;
        } else if (!a->in_use && (!victim || (victim->key && a->last_used < victim->last_used))) {
            victim = a;
        }
    }
    if (!victim) {
        *busy = 1;
        return NULL;
    }
    if (victim->key) {
        e->stats.adapter_evictions++;
        model_free(victim->view);
        free(victim->key);
        memset(victim, 0, sizeof *victim);
    }
    struct model *view;
    struct model_opts vo = model_opts_default();
    vo.adapter_dir = key;
    if (model_load_adapter_view(&view, e->base, &vo, err)) return NULL;
    victim->key = xstrdup(key);
    victim->view = view;
    e->stats.adapter_loads++;
    return victim;
}

/* ---------------------------------------------------------------- sequences */

static void emit_final(struct serve_seq *s, enum serve_finish finish, const char *text) {
    struct serve_req *q = s->req;
    struct serve_event ev = {.request = q->id,
                             .choice = s->choice,
                             .token = -1,
                             .text = text ? text : "",
                             .text_len = text ? strlen(text) : 0,
                             .finish = finish,
                             .prompt_tokens = q->r.n_prompt,
                             .completion_tokens = s->n_tokens};
    q->r.emit(q->r.ctx, &ev);
}

/* Frees sequence s's slot and, with the request's last sequence, the request itself. */
static void seq_end(struct serve_engine *e, struct serve_seq *s, enum serve_finish finish) {
    struct serve_req *q = s->req;
    emit_final(s, finish, NULL);
    e->slot_seq[s->slot] = NULL;
    kv_cache_clear(e->cache, s->slot);
    s->slot = -1;
    if (q->adapter) q->adapter->in_use--;
    if (--q->n_running > 0) return;
    for (struct serve_req **p = &e->running; *p; p = &(*p)->next)
        if (*p == q) {
            *p = q->next;
            break;
        }
    req_free(q);
}

/* The draws of n rows: each token with its log-prob and the top log-probs (host). */
struct draws {
    int *ids, *top_ids;
    float *logprob, *top_logprobs;
};

static void draws_alloc(struct draws *d, int n) {
    d->ids = xmalloc(sizeof(int) * (size_t)n);
    d->logprob = xmalloc(sizeof(float) * (size_t)n);
    d->top_ids = xmalloc(sizeof(int) * (size_t)n * SAMPLE_TOP_MAX);
    d->top_logprobs = xmalloc(sizeof(float) * (size_t)n * SAMPLE_TOP_MAX);
}

static void draws_free(struct draws *d) { free(d->ids), free(d->logprob), free(d->top_ids), free(d->top_logprobs); }

static struct sample_out draws_out(const struct draws *d, int want_tops) {
    return (struct sample_out){.ids = d->ids,
                               .logprob = d->logprob,
                               .top_ids = want_tops ? d->top_ids : NULL,
                               .top_logprobs = want_tops ? d->top_logprobs : NULL};
}

/* Draw i of d, the token of sequence s: emitted, and the end of s when it ends the turn, completes a
 * stop string or reaches max_tokens. */
static int seq_take(struct serve_engine *e, struct serve_seq *s, const struct draws *d, int i, struct whet_err *err) {
    struct serve_req *q = s->req;
    int id = d->ids[i];
    s->n_tokens++;
    s->last_token = id;
    size_t old = s->sent, hold = 0;
    int end = sample_is_end_token(e->tok, model_get_config(e->base), id), stopped = 0;
    if (!end && (stopped = sample_append_text(&s->text, e->tok, id, q->r.stop, q->r.n_stop, err)) < 0) return -1;
    /* a stop string may begin in the text's last bytes and end in a later token's, which cuts them: they
     * are held back (a stop string less a byte) until the sequence ends or a token moves past them */
    for (int k = 0; k < q->r.n_stop && !end && !stopped && s->n_tokens < q->r.max_tokens; k++)
        if (strlen(q->r.stop[k]) - 1 > hold) hold = strlen(q->r.stop[k]) - 1;
    s->sent = s->text.len > old + hold ? s->text.len - hold : old; /* a cut never reaches sent text */
    struct serve_event ev = {.request = q->id,
                             .choice = s->choice,
                             .token = id,
                             .finish = SERVE_RUNNING,
                             .text = s->text.data ? s->text.data + old : "",
                             .text_len = s->sent - old,
                             .logprob = d->logprob[i],
                             .n_top = s->row.top_logprobs,
                             .top_ids = d->top_ids + (size_t)i * SAMPLE_TOP_MAX,
                             .top_logprobs = d->top_logprobs + (size_t)i * SAMPLE_TOP_MAX};
    q->r.emit(q->r.ctx, &ev);
    if (end || stopped) seq_end(e, s, SERVE_STOP);
    else if (s->n_tokens >= q->r.max_tokens) seq_end(e, s, SERVE_LENGTH); /* submit kept it inside max_len */
    return 0;
}

/* ---------------------------------------------------------------- a step */

static int free_slots(const struct serve_engine *e) {
    int n = 0;
    for (int i = 0; i < e->n_slots; i++) n += !e->slot_seq[i];
    return n;
}

/* Ends every choice of a request that never ran (cancelled, or its adapter failed to load). */
static void req_abort(struct serve_req *q, enum serve_finish finish, const char *text) {
    for (int c = 0; c < q->r.n; c++) {
        struct serve_seq s = {.req = q, .choice = c};
        emit_final(&s, finish, text);
    }
    req_free(q);
}

/* Prefills request q into n free slots and draws the first token of each choice. */
static int admit(struct serve_engine *e, struct serve_req *q, struct whet_err *err) {
    int n = q->r.n, *slots = xmalloc(sizeof(int) * (size_t)n);
    struct draws first;
    draws_alloc(&first, n);
    struct sample_row *rows = xmalloc(sizeof *rows * (size_t)n);
    q->seqs = xcalloc((size_t)n, sizeof *q->seqs);
    for (int i = 0, c = 0; i < e->n_slots && c < n; i++)
        if (!e->slot_seq[i]) slots[c++] = i;
    for (int c = 0; c < n; c++) {
        struct serve_seq *s = &q->seqs[c];
        s->req = q, s->choice = c, s->slot = slots[c];
        s->row = q->r.sampling;
        s->row.seed = rng_stream(q->r.sampling.seed, (uint64_t)c);
        s->row.vocab = e->vocab;
        s->row.counter = 0;
        rows[c] = s->row;
        e->slot_seq[slots[c]] = s;
    }
    struct lora_run run = {q->adapter ? q->adapter->view : NULL, q->r.n_prompt};
    struct sample_out out = draws_out(&first, q->r.sampling.top_logprobs > 0);
    int rc = model_set_lora_runs(e->base, &run, 1, err) ||
             model_prefill_sample(e->base, e->cache, slots[0], q->r.prompt, q->r.n_prompt, n, rows, &out, err);
    for (int c = 1; c < n && !rc; c++) rc = kv_cache_copy_slot(e->cache, slots[c], slots[0], err);
    free(slots);
    free(rows);
    if (rc) {
        draws_free(&first);
        return -1;
    }
    e->stats.prefill_tokens += q->r.n_prompt;
    q->n_running = n;
    if (q->adapter) q->adapter->in_use += n;
    q->next = e->running;
    e->running = q;
    /* seq_take may end sequences (and free q with the last): hold the pointers first */
    struct serve_seq **seqs = xmalloc(sizeof *seqs * (size_t)n);
    for (int c = 0; c < n; c++) seqs[c] = &q->seqs[c];
    for (int c = 0; c < n && !rc; c++) rc = seq_take(e, seqs[c], &first, c, err);
    free(seqs);
    draws_free(&first);
    return rc;
}

static int admit_waiting(struct serve_engine *e, struct whet_err *err) {
    while (e->waiting) {
        struct serve_req *q = e->waiting;
        if (q->cancelled) {
            e->waiting = q->next;
            req_abort(q, SERVE_CANCELLED, NULL);
            continue;
        }
        if (q->r.n > free_slots(e)) return 0;
        if (q->adapter_dir) {
            struct whet_err aerr;
            int busy;
            if (!(q->adapter = adapter_get(e, q->adapter_dir, &busy, &aerr))) {
                if (busy) return 0; /* every loaded adapter is running: wait for one to finish */
                e->waiting = q->next;
                char text[WHET_ERR_MAX + 8];
                req_abort(q, SERVE_ERROR, whet_err_text(&aerr, text, sizeof text));
                continue;
            }
            q->adapter->last_used = (uint64_t)e->stats.steps + 1;
        }
        e->waiting = q->next;
        q->next = NULL;
        if (admit(e, q, err)) return -1;
    }
    return 0;
}

/* The running sequences in batch order: grouped by adapter (base first), in slot order within one. */
static int batch_order(const struct serve_engine *e, struct serve_seq **out, struct lora_run *runs, int *n_runs) {
    int n = 0;
    *n_runs = 0;
    for (int a = -1; a < e->max_adapters; a++) {
        const struct serve_adapter *ad = a < 0 ? NULL : &e->adapters[a];
        if (ad && !ad->key) continue;
        int before = n;
        for (int i = 0; i < e->n_slots; i++) {
            struct serve_seq *s = e->slot_seq[i];
            if (s && s->req->adapter == ad && !s->req->cancelled) out[n++] = s;
        }
        if (n > before) runs[(*n_runs)++] = (struct lora_run){ad ? ad->view : NULL, n - before};
    }
    for (struct serve_req *q = e->running; q; q = q->next) { /* callers' views: a run per request */
        if (q->adapter != &q->own || q->cancelled) continue;
        int before = n;
        for (int c = 0; c < q->r.n; c++)
            if (q->seqs[c].slot >= 0 && e->slot_seq[q->seqs[c].slot] == &q->seqs[c]) out[n++] = &q->seqs[c];
        if (n > before) runs[(*n_runs)++] = (struct lora_run){q->own.view, n - before};
    }
    return n;
}

int serve_engine_step(struct serve_engine *e, struct whet_err *err) {
    /* cancelled running requests end first, freeing their slots */
    for (int i = 0; i < e->n_slots; i++)
        if (e->slot_seq[i] && e->slot_seq[i]->req->cancelled) seq_end(e, e->slot_seq[i], SERVE_CANCELLED);
    if (admit_waiting(e, err)) return -1;
    struct serve_seq **batch = xmalloc(sizeof *batch * (size_t)e->n_slots);
    struct lora_run *runs = xmalloc(sizeof *runs * (size_t)(e->max_adapters + 1 + e->n_slots));
    int n_runs, n = batch_order(e, batch, runs, &n_runs), rc = 0;
    if (n > 0) {
        int *slots = xmalloc(sizeof(int) * (size_t)n), *ids = xmalloc(sizeof(int) * (size_t)n), tops = 0;
        struct sample_row *rows = xmalloc(sizeof *rows * (size_t)n);
        struct draws next;
        draws_alloc(&next, n);
        for (int i = 0; i < n; i++) {
            slots[i] = batch[i]->slot, ids[i] = batch[i]->last_token;
            rows[i] = batch[i]->row;
            rows[i].counter = (uint32_t)batch[i]->n_tokens;
            tops |= rows[i].top_logprobs > 0;
            if (batch[i]->req->adapter) batch[i]->req->adapter->last_used = (uint64_t)e->stats.steps + 1;
        }
        struct sample_out out = draws_out(&next, tops);
        rc = model_set_lora_runs(e->base, runs, n_runs, err) ||
             model_decode_sample(e->base, e->cache, slots, ids, n, rows, &out, err);
        for (int i = 0; i < n && !rc; i++) rc = seq_take(e, batch[i], &next, i, err);
        e->stats.decoded_tokens += n;
        free(slots), free(ids), free(rows);
        draws_free(&next);
    }
    free(batch);
    free(runs);
    e->stats.steps++;
    if (rc) return -1;
    int busy = 0;
    for (struct serve_req *q = e->waiting; q; q = q->next) busy++;
    for (struct serve_req *q = e->running; q; q = q->next) busy++;
    return busy;
}
