/* judge.c - score_model and label_model graders over a judge model loaded in the trainer (see judge.h). */
#include "judge.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "chat_template.h"
#include "model.h"
#include "rng.h"
#include "sampler.h"
#include "tokenizer.h"

/* One loaded judge: what sample_run loads, kept for every call. */
struct judge_model {
    char *name;
    struct tokenizer *tok;
    struct chat_template tpl;
    struct model *m;
};

struct judge_pool {
    pthread_mutex_t lock; /* one generation at a time: the model's buffers and the rng are shared */
    int n;
    struct judge_model *models;
    struct rng rng;
};

/* ---------------------------------------------------------------- loading */

static int load_model(struct judge_model *jm, const char *name, const char *dir, const char *device,
                      struct whet_err *err) {
    jm->name = xstrdup(name);
    char *tok_path = xasprintf("%s/tokenizer.json", dir);
    struct model_opts mo = model_opts_default();
    mo.device = device;
    int rc = tokenizer_load(tok_path, &jm->tok, err) || chat_template_load(&jm->tpl, dir, err) ||
                     model_load(&jm->m, dir, &mo, err)
                 ? -1
                 : 0;
    free(tok_path);
    if (rc) whet_err_prefix(err, "judge model \"%s\" (%s)", name, dir);
    return rc;
}

static void free_model(struct judge_model *jm) {
    free(jm->name);
    if (jm->tok) tokenizer_free(jm->tok);
    chat_template_free(&jm->tpl);
    if (jm->m) model_free(jm->m);
}

static struct judge_model *find_model(struct judge_pool *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->models[i].name, name)) return &p->models[i];
    return NULL;
}

struct load_walk {
    struct judge_pool *pool;
    const json_t *dirs;
    const char *device;
    struct whet_err *err;
    int failed;
};

static void load_one(void *ctx, const struct grader *g) {
    struct load_walk *w = ctx;
    enum grader_type type = grader_type_of(g);
    if (w->failed || (type != GRADER_SCORE_MODEL && type != GRADER_LABEL_MODEL)) return;
    const char *name = json_string_value(json_object_get(grader_json(g), "model"));
    if (find_model(w->pool, name)) return;
    const char *dir = json_string_value(json_object_get(w->dirs, name));
    if (!dir) {
        w->failed = 1;
        whet_errf(w->err, "%s grader \"%s\": judge model \"%s\" is not in judge_models", grader_type_name(type),
                  grader_name(g), name);
        return;
    }
    struct judge_pool *p = w->pool;
    p->models = xrealloc(p->models, (size_t)(p->n + 1) * sizeof *p->models);
    memset(&p->models[p->n], 0, sizeof *p->models);
    if (load_model(&p->models[p->n], name, dir, w->device, w->err)) w->failed = 1;
    p->n++; /* counted even when it failed, so judge_pool_free frees what it got */
}

int judge_pool_new(struct judge_pool **out, const struct grader *g, const json_t *judge_models, const char *device,
                   uint64_t seed, struct whet_err *err) {
    *out = NULL;
    struct judge_pool *p = xcalloc(1, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
    rng_seed(&p->rng, seed);
    struct load_walk w = {p, judge_models, device, err, 0};
    grader_each(g, load_one, &w);
    if (w.failed || p->n == 0) {
        judge_pool_free(p);
        return w.failed ? -1 : 0;
    }
    *out = p;
    return 0;
}

void judge_pool_free(struct judge_pool *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) free_model(&p->models[i]);
    free(p->models);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* ---------------------------------------------------------------- the prompt */

struct render_errors {
    char *first; /* the first template error, owned */
};

static void on_template_error(void *ctx, enum grader_error_kind kind, const char *message) {
    (void)kind;
    struct render_errors *re = ctx;
    if (!re->first) re->first = xstrdup(message);
}

/* Appends the text of one content part (a string, or {"type": "input_text"|"output_text", "text"}). */
static int append_part(char **text, const json_t *part, const json_t *sample, const json_t *item,
                       struct render_errors *re, struct whet_err *err) {
    const char *tmpl = json_string_value(part);
    if (!tmpl && json_is_object(part)) {
        const char *type = json_string_value(json_object_get(part, "type"));
        tmpl = json_string_value(json_object_get(part, "text"));
        if (!tmpl || (type && strcmp(type, "input_text") && strcmp(type, "output_text")))
            return whet_errf(err, "judge models read text only (content of type \"%s\")", type ? type : "?");
    }
    if (!tmpl) return whet_errf(err, "a message content must be text");
    char *rendered = grader_template_render(tmpl, sample, item, on_template_error, re);
    char *joined = xasprintf("%s%s", *text, rendered);
    free(rendered);
    free(*text);
    *text = joined;
    return 0;
}

static char *answer_instruction(const json_t *gj, int score) {
    if (score) {
        const json_t *range = json_object_get(gj, "range");
        double lo = range ? json_number_value(json_array_get(range, 0)) : 0;
        double hi = range ? json_number_value(json_array_get(range, 1)) : 1;
        return xasprintf("Reply with only a number from %g to %g.", lo, hi);
    }
    char *list = xstrdup("");
    const json_t *labels = json_object_get(gj, "labels");
    for (size_t i = 0; i < json_array_size(labels); i++) {
        char *next = xasprintf("%s%s%s", list, i ? ", " : "", json_string_value(json_array_get(labels, i)));
        free(list);
        list = next;
    }
    char *text = xasprintf("Reply with only one of these labels: %s.", list);
    free(list);
    return text;
}

/* The grader's messages with templates filled and the answer instruction at the end: texts[] owned
 * (n + 1 slots), msgs[] pointing into them. Returns the message count or -1. */
static int build_messages(struct chat_message *msgs, char **texts, const json_t *gj, int score, const json_t *sample,
                          const json_t *item, struct whet_err *err) {
    const json_t *input = json_object_get(gj, "input");
    int n = (int)json_array_size(input);
    struct render_errors re = {NULL};
    for (int i = 0; i < n; i++) {
        const json_t *m = json_array_get(input, (size_t)i), *content = json_object_get(m, "content");
        const char *role = json_string_value(json_object_get(m, "role"));
        msgs[i] = (struct chat_message){!strcmp(role, "developer") ? "system" : role, NULL, 0};
        texts[i] = xstrdup("");
        int rc = 0;
        if (json_is_array(content)) {
            for (size_t k = 0; k < json_array_size(content) && !rc; k++)
                rc = append_part(&texts[i], json_array_get(content, k), sample, item, &re, err);
        } else {
            rc = append_part(&texts[i], content, sample, item, &re, err);
        }
        if (rc) {
            free(re.first);
            for (int k = 0; k <= i; k++) free(texts[k]);
            return whet_err_prefix(err, "input[%d]", i);
        }
    }
    if (re.first) {
        whet_errf(err, "%s", re.first);
        free(re.first);
        for (int k = 0; k < n; k++) free(texts[k]);
        return -1;
    }
    char *instruction = answer_instruction(gj, score);
    if (n && !strcmp(msgs[n - 1].role, "user")) {
        char *joined = xasprintf("%s\n\n%s", texts[n - 1], instruction);
        free(texts[n - 1]);
        texts[n - 1] = joined;
        free(instruction);
    } else {
        texts[n] = instruction;
        msgs[n++] = (struct chat_message){"user", NULL, 0};
    }
    for (int i = 0; i < n; i++) msgs[i].content = texts[i];
    return n;
}

/* ---------------------------------------------------------------- generation */

/* sampling_params: temperature, top_p, top_k, seed, max_completions_tokens / max_tokens. */
struct judge_sampling {
    float temperature, top_p;
    int top_k, max_tokens;
    int seeded;
    uint64_t seed;
};

static int sampling_of(struct judge_sampling *s, const json_t *params, struct whet_err *err) {
    *s = (struct judge_sampling){0, 1, 0, JUDGE_DEFAULT_MAX_TOKENS, 0, 0};
    const json_t *v;
    if ((v = json_object_get(params, "temperature")) && !json_is_null(v)) {
        if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 10)
            return whet_errf(err, "sampling_params.temperature: must be a number in [0, 10]");
        s->temperature = (float)json_number_value(v);
    }
    if ((v = json_object_get(params, "top_p")) && !json_is_null(v)) {
        if (!json_is_number(v) || json_number_value(v) <= 0 || json_number_value(v) > 1)
            return whet_errf(err, "sampling_params.top_p: must be a number in (0, 1]");
        s->top_p = (float)json_number_value(v);
    }
    if ((v = json_object_get(params, "top_k")) && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return whet_errf(err, "sampling_params.top_k: must be a non-negative integer");
        s->top_k = (int)json_integer_value(v);
    }
    if ((v = json_object_get(params, "seed")) && !json_is_null(v)) {
        if (!json_is_integer(v)) return whet_errf(err, "sampling_params.seed: must be an integer");
        s->seeded = 1;
        s->seed = (uint64_t)json_integer_value(v);
    }
    static const char *const max_names[] = {"max_completions_tokens", "max_tokens"};
    for (size_t k = 0; k < WHET_ARRAY_LEN(max_names); k++)
        if ((v = json_object_get(params, max_names[k])) && !json_is_null(v)) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 65536)
                return whet_errf(err, "sampling_params.%s: must be an integer in [1, 65536]", max_names[k]);
            s->max_tokens = (int)json_integer_value(v);
        }
    return 0;
}

/* The reply of a loaded judge to its messages (sample_reply on the chat-templated prompt). */
static int generate(struct judge_model *jm, const struct chat_message *msgs, int n_msgs, const struct judge_sampling *s,
                    uint64_t seed, char **text, struct whet_err *err) {
    int32_t *prompt = NULL;
    uint8_t *mask = NULL;
    int n_prompt = 0, n_tokens;
    if (chat_tokenize(&prompt, &mask, &n_prompt, &jm->tpl, jm->tok, msgs, n_msgs, 1, err)) return -1;
    free(mask);
    struct sample_row row = {.seed = seed, .temperature = s->temperature, .top_p = s->top_p, .top_k = s->top_k};
    int rc = sample_reply(jm->m, jm->tok, prompt, n_prompt, s->max_tokens, row, text, &n_tokens, err);
    free(prompt);
    return rc;
}

int judge_reply(struct judge_pool *p, const struct grader *g, const json_t *sample, const json_t *item, char **reply,
                struct whet_err *err) {
    const json_t *gj = grader_json(g);
    int score = grader_type_of(g) == GRADER_SCORE_MODEL;
    const char *name = json_string_value(json_object_get(gj, "model"));
    struct judge_model *jm = p ? find_model(p, name) : NULL;
    if (!jm) return whet_errf(err, "judge model \"%s\" is not loaded", name ? name : "?");
    struct judge_sampling s;
    if (sampling_of(&s, json_object_get(gj, "sampling_params"), err)) return -1;
    size_t n_input = json_array_size(json_object_get(gj, "input"));
    struct chat_message *msgs = xcalloc(n_input + 1, sizeof *msgs);
    char **texts = xcalloc(n_input + 1, sizeof *texts);
    int n = build_messages(msgs, texts, gj, score, sample, item, err), rc = -1;
    if (n >= 0) {
        pthread_mutex_lock(&p->lock);
        /* a seeded judge call draws the same reply every time; the others draw from the pool's stream */
        rc = generate(jm, msgs, n, &s, s.seeded ? s.seed : rng_u64(&p->rng), reply, err);
        pthread_mutex_unlock(&p->lock);
        for (int i = 0; i < n; i++) free(texts[i]);
    }
    free(texts);
    free(msgs);
    return rc;
}

/* ---------------------------------------------------------------- reading the reply */

/* Where the answer starts: after a closing </think> when the reply has one. */
static const char *skip_thinking(const char *reply) {
    const char *end = strstr(reply, "</think>");
    return end ? end + strlen("</think>") : reply;
}

int judge_parse_score(const char *reply, double lo, double hi, double *score) {
    for (const char *s = skip_thinking(reply); *s; s++) {
        int sign = (*s == '-' || *s == '+') && (isdigit((unsigned char)s[1]) || (s[1] == '.' && isdigit((unsigned char)s[2])));
        if (!sign && !isdigit((unsigned char)*s) && !(*s == '.' && isdigit((unsigned char)s[1]))) continue;
        char *end;
        double v = strtod(s, &end);
        if (end == s || !isfinite(v)) continue; /* "inf", "nan" and overflow are no answer */
        *score = v < lo ? lo : v > hi ? hi : v;
        return 0;
    }
    return -1;
}

static int is_word_char(unsigned char c) { return isalnum(c) || c == '_' || c >= 0x80; }

/* Whether `label` occurs in `text` at `at` as a whole word (ignoring case). */
static int word_at(const char *text, const char *at, const char *label, size_t len) {
    if (strncasecmp(at, label, len)) return 0;
    int starts = at == text || !is_word_char((unsigned char)at[-1]) || !is_word_char((unsigned char)label[0]);
    int ends = !at[len] || !is_word_char((unsigned char)at[len]) || !is_word_char((unsigned char)label[len - 1]);
    return starts && ends;
}

int judge_parse_label(const char *reply, const json_t *labels) {
    const char *text = skip_thinking(reply);
    /* the whole answer, trimmed of spaces, quotes and trailing punctuation */
    const char *b = text, *e = text + strlen(text);
    while (b < e && (isspace((unsigned char)*b) || *b == '"' || *b == '\'' || *b == '`' || *b == '*')) b++;
    while (e > b && (isspace((unsigned char)e[-1]) || strchr("\"'`*.!,;:", e[-1]))) e--;
    size_t n_labels = json_array_size(labels);
    for (size_t i = 0; i < n_labels; i++) {
        const char *label = json_string_value(json_array_get(labels, i));
        if (strlen(label) == (size_t)(e - b) && !strncasecmp(b, label, (size_t)(e - b))) return (int)i;
    }
    /* else the earliest whole-word mention, the longest label on a tie */
    int best = -1;
    const char *best_at = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < n_labels; i++) {
        const char *label = json_string_value(json_array_get(labels, i));
        size_t len = strlen(label);
        if (!len) continue;
        for (const char *at = text; *at; at++)
            if (word_at(text, at, label, len)) {
                if (!best_at || at < best_at || (at == best_at && len > best_len)) {
                    best = (int)i;
                    best_at = at;
                    best_len = len;
                }
                break;
            }
    }
    return best;
}

int judge_grade(void *ctx, const struct grader *g, const json_t *sample, const json_t *item, double *reward,
                struct whet_err *err) {
    char *reply = NULL;
    if (judge_reply(ctx, g, sample, item, &reply, err)) return -1;
    const json_t *gj = grader_json(g);
    int rc = 0;
    if (grader_type_of(g) == GRADER_SCORE_MODEL) {
        const json_t *range = json_object_get(gj, "range");
        double lo = range ? json_number_value(json_array_get(range, 0)) : 0;
        double hi = range ? json_number_value(json_array_get(range, 1)) : 1;
        if (judge_parse_score(reply, lo, hi, reward)) {
            *reward = 0;
            rc = 1;
            whet_errf(err, "the judge's reply holds no number: \"%.200s\"", reply);
        }
    } else {
        const json_t *labels = json_object_get(gj, "labels"), *passing = json_object_get(gj, "passing_labels");
        int k = judge_parse_label(reply, labels);
        *reward = 0;
        if (k < 0) {
            rc = 1;
            whet_errf(err, "the judge's reply names none of the labels: \"%.200s\"", reply);
        } else {
            const char *label = json_string_value(json_array_get(labels, (size_t)k));
            for (size_t i = 0; i < json_array_size(passing); i++)
                if (!strcmp(label, json_string_value(json_array_get(passing, i)))) *reward = 1;
        }
    }
    free(reply);
    return rc;
}

