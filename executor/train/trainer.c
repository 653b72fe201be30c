/* trainer.c - the training loop of every method, its learning-rate schedule, checkpoints, exact resume
 * and stop requests (see trainer.h). The methods (trainer_sft.c, trainer_dpo.c, trainer_grpo.c) plug in
 * through their tables (trainer_internal.h): their data, steps, validation and metrics fields.
 *
 * Layout of a run in memory: `struct run` (trainer_internal.h) holds what the loop needs (model, the
 * method's state, the cursor) and the files it appends to. Sections: schedule, progress and events,
 * files, checkpoints, resume, set-up, the loop. */
#include "trainer.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat_template.h"
#include "json.h"
#include "model.h"
#include "tokenizer.h"
#include "trainer_internal.h"
#include "zstd_file.h"

/* ---------------------------------------------------------------- schedule */

double trainer_lr_at(const struct trainer_hparams *hp, int step, int total_steps) {
    double base = hp->learning_rate;
    int warmup = hp->warmup_steps;
    if (step < warmup) return base * (double)step / (double)(warmup > 1 ? warmup : 1);
    double span = total_steps - warmup > 1 ? (double)(total_steps - warmup) : 1.0;
    switch (hp->lr_scheduler) {
    case LR_CONSTANT:
        return base;
    case LR_LINEAR: {
        double f = (double)(total_steps - step) / span;
        return base * (f > 0 ? f : 0);
    }
    case LR_COSINE: {
        double progress = (double)(step - warmup) / span;
        double f = 0.5 * (1.0 + cos(M_PI * progress));
        return base * (f > 0 ? f : 0);
    }
    }
    return base;
}

/* ---------------------------------------------------------------- progress and events */

void trainer_progress(const struct run *r, const char *fmt, ...) {
    if (!r->io->progress) return;
    va_list ap;
    va_start(ap, fmt);
    if (r->rank) fprintf(r->io->progress, "whet train[rank %d]: ", r->rank);
    else fputs("whet train: ", r->io->progress);
    vfprintf(r->io->progress, fmt, ap);
    fputc('\n', r->io->progress);
    va_end(ap);
    fflush(r->io->progress);
}

void trainer_event_line(const struct run *r, const char *json_object_text) {
    if (!r->io->events) return;
    fprintf(r->io->events, "%s\n", json_object_text);
    fflush(r->io->events);
}

void trainer_data_event(struct run *r, json_t *event) {
    if (!r->data_events) r->data_events = json_array();
    json_array_append_new(r->data_events, event);
}

void trainer_file_event(struct run *r, const char *path, const struct sft_dataset *d, int truncated,
                        long long truncated_tokens, int untrained) {
    trainer_data_event(r, json_pack("{s:s, s:s, s:i, s:I, s:I, s:i, s:I, s:i}", "type", "data", "file", path, "examples",
                                    d->n_examples, "tokens", (json_int_t)d->n_tokens, "trained_tokens",
                                    (json_int_t)d->n_trained_tokens, "truncated_examples", truncated,
                                    "truncated_tokens", (json_int_t)truncated_tokens, "untrained_examples", untrained));
}

void trainer_metrics_line(const struct run *r, const char *json_object_text) {
    if (!r->metrics) return; /* a rank other than 0 */
    fprintf(r->metrics, "%s\n", json_object_text);
    fflush(r->metrics);
    if (r->io->events) {
        fprintf(r->io->events, "{\"type\":\"metrics\",%s\n", json_object_text + 1);
        fflush(r->io->events);
    }
}

/* ---------------------------------------------------------------- files and directories */

static void fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Moves the finished directory `tmp` to `dst`, replacing an older `dst` (a rerun of the same step). */
static int publish_dir(const char *tmp, const char *dst, const char *parent, struct whet_err *err) {
    char *old = NULL;
    struct stat st;
    if (stat(dst, &st) == 0) {
        old = xasprintf("%s.old-%d", dst, (int)getpid());
        whet_rm_rf(old);
        if (rename(dst, old)) {
            free(old);
            return whet_errf(err, "%s: cannot move aside: %s", dst, strerror(errno));
        }
    }
    if (rename(tmp, dst)) {
        int e = errno;
        free(old);
        return whet_errf(err, "%s: cannot rename into place: %s", dst, strerror(e));
    }
    fsync_dir(parent);
    if (old) whet_rm_rf(old);
    free(old);
    return 0;
}

/* ---------------------------------------------------------------- checkpoints */

static int write_state(const struct run *r, const char *dir, struct whet_err *err) {
    json_t *s = json_pack("{s:i, s:i, s:i, s:i, s:I, s:s, s:b, s:I, s:s}", "step", r->step, "total_steps",
                          r->total_steps, "epoch", r->cursor.epoch, "position", r->cursor.position, "seed",
                          (json_int_t)r->cfg->seed, "method", trainer_method_name(r->cfg->method), "lora",
                          r->cfg->lora.enabled, "tokens_seen", (json_int_t)r->tokens_seen,
                          /* The only randomness after initialisation is the shuffle of each epoch,
                           * drawn from (seed, epoch): the cursor is the whole RNG state. */
                          "shuffle", "splitmix64(seed, epoch)");
    char *text = json_dumps(s, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(s);
    char *path = xasprintf("%s/trainer_state.json", dir);
    int rc = whet_write_file_atomic(path, text, strlen(text), err);
    free(path);
    free(text);
    return rc;
}

static int write_model_files(const struct run *r, const char *dir, int final, struct whet_err *err) {
    if (model_is_lora(r->model)) return model_save_adapter(r->model, dir, err);
    /* Checkpoints are F32, so a resumed run starts from the same bits; the final model keeps the
     * base model's dtype when that was bfloat16 (half the bytes to store and serve). */
    int bf16 = final && !strcmp(model_get_config(r->model)->torch_dtype, "bfloat16");
    return model_save_hf(r->model, dir, bf16, err);
}

/* The optimizer moments, zstd-compressed (optimizer.safetensors.zst): for a full fine-tune they are
 * twice the model's size, the largest part of a checkpoint, and every checkpoint is uploaded. */
static int save_optimizer(struct run *r, const char *dir, struct whet_err *err) {
    char *raw = xasprintf("%s/optimizer.safetensors.raw", dir), *zst = xasprintf("%s/%s", dir, TRAINER_OPTIMIZER_FILE);
    int rc = trainer_gather_optimizer(r, raw, err);
    if (!rc) {
        int fd = open(zst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) rc = whet_errf(err, "%s: %s", zst, strerror(errno));
        else {
            rc = whet_zstd_compress_fd(raw, fd, 3, err);
            if (close(fd) != 0 && !rc) rc = whet_errf(err, "%s: %s", zst, strerror(errno));
        }
    }
    unlink(raw);
    free(raw);
    free(zst);
    return rc;
}

/* Loads a checkpoint's optimizer moments, decompressed through a temporary file in the output dir
 * (the checkpoint's own dir may be read-only). */
static int load_optimizer(struct run *r, const char *checkpoint, struct whet_err *err) {
    char *zst = xasprintf("%s/%s", checkpoint, TRAINER_OPTIMIZER_FILE);
    char *raw = xasprintf("%s/.optimizer-resume.%d", r->cfg->output_dir, (int)getpid());
    int rc = whet_mkdir_p(r->cfg->output_dir, err);
    int fd = rc ? -1 : open(raw, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (!rc && fd < 0) rc = whet_errf(err, "%s: %s", raw, strerror(errno));
    if (!rc) {
        rc = whet_zstd_decompress_fd(zst, fd, err);
        if (close(fd) != 0 && !rc) rc = whet_errf(err, "%s: %s", raw, strerror(errno));
        if (!rc) rc = model_load_optimizer(r->model, raw, err);
    }
    if (fd >= 0) unlink(raw);
    free(raw);
    free(zst);
    return rc;
}

/* checkpoints/step-N (with optimizer moments) or final (without). Rank 0 of a distributed run writes
 * it; the others only take part in gathering the moments (and under ZeRO-3 the parameters). */
static int write_gathered_checkpoint(struct run *r, int final, struct whet_err *err) {
    if (r->rank != 0) {
        if (!final) r->last_checkpoint_step = r->step;
        return final ? 0 : trainer_gather_optimizer(r, NULL, err);
    }
    const char *parent = final ? r->cfg->output_dir : r->checkpoints_dir;
    char *dst = final ? xasprintf("%s/final", parent) : xasprintf("%s/step-%d", parent, r->step);
    char *tmp = xasprintf("%s.tmp-%d", dst, (int)getpid());
    whet_rm_rf(tmp);
    int rc = whet_mkdir_p(tmp, err);
    if (!rc) rc = write_model_files(r, tmp, final, err);
    if (!rc && !final) rc = save_optimizer(r, tmp, err);
    if (!rc) rc = write_state(r, tmp, err);
    if (!rc) rc = publish_dir(tmp, dst, parent, err);
    if (rc) {
        whet_rm_rf(tmp);
    } else {
        char line[4200];
        snprintf(line, sizeof line, "{\"type\":\"%s\",\"step\":%d,\"path\":\"%s\"}", final ? "final" : "checkpoint",
                 r->step, dst);
        trainer_event_line(r, line);
        trainer_progress(r, "%s step %d written to %s", final ? "final model at" : "checkpoint at", r->step, dst);
        if (!final) r->last_checkpoint_step = r->step;
    }
    free(tmp);
    free(dst);
    return rc;
}

/* Under ZeRO-3 a full fine-tune's model is whole only while every rank holds it gathered: for the
 * writing, each rank holds all of it for a moment (a LoRA checkpoint is the adapter alone). */
static int write_checkpoint(struct run *r, int final, struct whet_err *err) {
    int whole = !model_is_lora(r->model);
    if (whole && model_gather_params(r->model, err)) return -1;
    int rc = write_gathered_checkpoint(r, final, err);
    if (whole) model_release_params(r->model);
    return rc;
}

/* ---------------------------------------------------------------- resume */

static int read_state(struct run *r, const char *dir, struct whet_err *err) {
    char *path = xasprintf("%s/trainer_state.json", dir);
    json_t *s = whet_json_load_file(path, 0, err);
    json_error_t jerr;
    int rc = -1;
    if (!s) {
        whet_err_prefix(err, "resume_from");
        goto out;
    }
    json_int_t step, total, epoch, position, seed, tokens;
    int lora;
    if (!json_object_get(s, "position") && json_object_get(s, "row")) {
        whet_errf(err, "resume_from: %s: written by an older whet whose data cursor counted packed rows, not "
                       "examples; start the run again without resume_from", path);
        goto out;
    }
    if (json_unpack_ex(s, &jerr, 0, "{s:I, s:I, s:I, s:I, s:I, s:b, s:I}", "step", &step, "total_steps", &total,
                       "epoch", &epoch, "position", &position, "seed", &seed, "lora", &lora, "tokens_seen", &tokens)) {
        whet_errf(err, "resume_from: %s: %s", path, jerr.text);
        goto out;
    }
    if ((uint64_t)seed != r->cfg->seed) {
        whet_errf(err, "resume_from: %s: written with seed %lld, the config says %llu (a resumed run must keep "
                       "its seed)", path, (long long)seed, (unsigned long long)r->cfg->seed);
        goto out;
    }
    const char *method = json_string_value(json_object_get(s, "method"));
    if (method && strcmp(method, trainer_method_name(r->cfg->method))) {
        whet_errf(err, "resume_from: %s: written by a %s run, the config asks for %s (the data cursor would not "
                       "mean the same)", path, method, trainer_method_name(r->cfg->method));
        goto out;
    }
    if (lora != r->cfg->lora.enabled) {
        whet_errf(err, "resume_from: %s: written by a %s run, the config asks for %s", path,
                  lora ? "LoRA" : "full fine-tuning", r->cfg->lora.enabled ? "LoRA" : "full fine-tuning");
        goto out;
    }
    if (total != r->total_steps)
        trainer_progress(r, "resume: the checkpoint planned %lld steps, this config plans %d (the schedule follows the config)",
                         (long long)total, r->total_steps);
    r->step = (int)step;
    r->cursor.epoch = (int)epoch;
    r->cursor.position = (int)position;
    r->tokens_seen = tokens;
    rc = 0;
out:
    json_decref(s);
    free(path);
    return rc;
}

/* metrics.jsonl keeps the lines of steps up to the one resumed from: a run that went past its last
 * checkpoint before it died must not leave those steps twice. */
static int trim_metrics(const char *path, int keep_through_step, struct whet_err *err) {
    char *data;
    size_t len;
    if (access(path, F_OK)) return 0;
    if (whet_read_file(path, (size_t)1 << 30, &data, &len, err)) return -1;
    char *out = xmalloc(len + 1);
    size_t n = 0;
    for (char *line = data; line < data + len;) {
        char *end = memchr(line, '\n', (size_t)(data + len - line));
        size_t l = end ? (size_t)(end - line) + 1 : (size_t)(data + len - line);
        const char *s = strstr(line, "\"step\":");
        if (s && s < line + l && atoi(s + 7) <= keep_through_step) {
            memcpy(out + n, line, l);
            n += l;
        }
        line += l;
    }
    int rc = whet_write_file_atomic(path, out, n, err);
    free(out);
    free(data);
    return rc;
}

/* ---------------------------------------------------------------- set-up */

/* Plans the run's steps and sends the "data" events, the training file's with the plan in it. */
static int plan_steps(struct run *r, struct whet_err *err) {
    const struct trainer_hparams *hp = &r->cfg->hp;
    int per_epoch = r->method->steps_per_epoch(r);
    long long total = r->cfg->max_steps ? r->cfg->max_steps : (long long)hp->n_epochs * per_epoch;
    if (total > 100000000) return whet_errf(err, "the run would take %lld steps; set max_steps", total);
    r->total_steps = (int)total;
    trainer_progress(r, "%d steps an epoch (batch_size %d: the examples of a step), %d steps in all%s", per_epoch,
                     hp->batch_size, r->total_steps, r->cfg->max_steps ? " (max_steps)" : "");
    for (size_t i = 0; i < json_array_size(r->data_events); i++) {
        json_t *ev = json_array_get(r->data_events, i);
        if (i == 0) {
            json_object_set_new(ev, "steps_per_epoch", json_integer(per_epoch));
            json_object_set_new(ev, "total_steps", json_integer(r->total_steps));
        }
        char *text = json_dumps(ev, JSON_COMPACT);
        trainer_event_line(r, text);
        free(text);
    }
    return 0;
}

static int load_model(struct run *r, struct whet_err *err) {
    const struct trainer_config *cfg = r->cfg;
    struct model_opts o = model_opts_default();
    o.train = 1;
    o.seed = cfg->seed;
    o.device = cfg->device;
    trainer_dist_model_opts(r, &o);
    const char *dir = cfg->model;
    if (cfg->lora.enabled) {
        o.lora_r = cfg->lora.r;
        o.lora_alpha = cfg->lora.alpha;
        o.use_rslora = cfg->lora.use_rslora;
        o.lora_targets = cfg->lora.n_target_modules ? 0 : LORA_ALL;
        for (int i = 0; i < cfg->lora.n_target_modules; i++) {
            unsigned t = lora_target_from_name(cfg->lora.target_modules[i]);
            if (!t)
                return whet_errf(err, "lora.target_modules: unknown module \"%s\" (known: q_proj, k_proj, v_proj, "
                                      "o_proj, gate_proj, up_proj, down_proj, all-linear)",
                                 cfg->lora.target_modules[i]);
            o.lora_targets |= t;
        }
        o.adapter_dir = cfg->resume_from ? cfg->resume_from : cfg->init_adapter;
    } else {
        o.lora_r = 0;
        if (cfg->resume_from) dir = cfg->resume_from; /* a full checkpoint is a whole model dir */
    }
    /* Co-trained: an adapter view of the shared frozen base, with its own gradients and moments. */
    if (r->cotrain_base ? model_load_adapter_view(&r->model, r->cotrain_base, &o, err) : model_load(&r->model, dir, &o, err))
        return -1;
    trainer_dist_attach(r, r->model);
    if (cfg->resume_from && load_optimizer(r, cfg->resume_from, err)) return whet_err_prefix(err, "resume_from");
    trainer_progress(r, "model %s: %zu parameters, %zu trainable (%s), %s chat format", cfg->model, model_num_params(r->model),
                     model_num_trainable(r->model), model_is_lora(r->model) ? "LoRA" : "full fine-tuning",
                     chat_family_name(r->tpl.family));
    return 0;
}

int trainer_load_reference(struct run *r, struct whet_err *err) {
    /* Full fine-tuning moves the base weights, so the reference is a frozen copy of them. */
    struct model_opts ro = model_opts_default();
    ro.lora_r = 0;
    ro.device = r->cfg->device;
    trainer_dist_model_opts(r, &ro);
    if (model_load(&r->ref_model, r->cfg->model, &ro, err))
        return whet_err_prefix(err, "%s reference model", trainer_method_name(r->cfg->method));
    trainer_dist_attach(r, r->ref_model);
    if (ro.shard_params) trainer_progress(r, "reference model: sharded as the policy (ZeRO-3), gathered unit by unit");
    return 0;
}

/* ---------------------------------------------------------------- the loop */

/* The metrics line and the progress line of the step just taken; `valid` is NULL when not measured. */
static void report_step(struct run *r, const struct step_figures *f, double seconds, const struct method_text *valid) {
    struct method_text own = {{0}, {0}};
    r->method->metrics(r, &own);
    double tps = seconds > 0 ? (double)f->tokens / seconds : 0;
    char line[4096], dist[128];
    trainer_dist_figures(r, dist, sizeof dist);
    snprintf(line, sizeof line,
             "{\"step\":%d,\"epoch\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens\":%lld,"
             "\"tokens_per_s\":%.1f%s%s%s}",
             r->step, f->epoch, f->loss, f->lr, f->grad_norm, f->tokens, tps, own.json, valid ? valid->json : "", dist);
    trainer_metrics_line(r, line);
    double eta = r->train_seconds / r->steps_timed * (r->total_steps - r->step);
    trainer_progress(r, "step %d/%d epoch %d loss %.4f%s lr %.3g grad_norm %.3f%s tokens %lld (%.0f tok/s) eta %.0fs",
                     r->step, r->total_steps, f->epoch, f->loss, valid ? valid->progress : "", f->lr, f->grad_norm,
                     own.progress, f->tokens, tps, eta);
}

int trainer_after_step(struct run *r, const struct step_figures *f, double seconds, struct whet_err *err) {
    const struct trainer_config *cfg = r->cfg;
    if (!isfinite(f->loss) || !isfinite(f->grad_norm))
        return whet_errf(err, "step %d: the loss or the gradient norm is not finite (loss %g, norm %g); lower the "
                              "learning_rate or set max_grad_norm", r->step + 1, f->loss, f->grad_norm);
    r->step++;
    r->tokens_seen += f->tokens;
    r->train_seconds += seconds;
    r->steps_timed++;
    /* Validation every eval_every_steps and after the last step (GRPO's refills may use the epochs'
     * prompts up before the planned step count). */
    int last = r->step == r->total_steps || (!cfg->max_steps && r->cursor.epoch >= cfg->hp.n_epochs);
    int eval_now = r->has_valid && ((cfg->eval_every_steps && r->step % cfg->eval_every_steps == 0) || last);
    struct method_text valid = {{0}, {0}};
    if (eval_now && r->method->validate(r, &valid, err)) return -1;
    report_step(r, f, seconds, eval_now ? &valid : NULL);
    if (cfg->checkpoint_every_steps && r->step % cfg->checkpoint_every_steps == 0 && r->step < r->total_steps &&
        write_checkpoint(r, 0, err))
        return -1;
    return 0;
}

static int train_step(struct run *r, struct whet_err *err) {
    double t0 = whet_now_mono();
    struct step_figures f = {0};
    r->comm_seconds = 0;
    if (r->method->step(r, &f, err) || trainer_agree_stop(r, &f, err)) return -1;
    /* the step alone: validation is not training throughput */
    return trainer_after_step(r, &f, whet_now_mono() - t0, err);
}

/* A stop request: alone, the signal's flag; in a gang, what the ranks agreed after the last step (a
 * rank that left on its own would leave the others waiting in a collective). */
static int stop_requested(const struct run *r) { return r->comm ? r->stop_agreed : r->io->stop && *r->io->stop; }

int trainer_has_step(const struct run *r) {
    return r->step < r->total_steps && !stop_requested(r) && (r->cfg->max_steps || r->cursor.epoch < r->cfg->hp.n_epochs);
}

int trainer_finish(struct run *r, int *stopped, struct whet_err *err) {
    if (stop_requested(r) && r->step < r->total_steps) {
        trainer_progress(r, "stop requested: checkpointing step %d", r->step);
        if (r->last_checkpoint_step != r->step && write_checkpoint(r, 0, err)) return -1;
        *stopped = 1;
        return 0;
    }
    return write_checkpoint(r, 1, err);
}

static int run_loop(struct run *r, int *stopped, struct whet_err *err) {
    while (trainer_has_step(r))
        if (train_step(r, err)) return -1;
    return trainer_finish(r, stopped, err);
}

/* The method table of each trainer_config method. */
static const struct trainer_method_ops *const methods[] = {
    [TRAINER_SFT] = &trainer_sft_method,
    [TRAINER_DPO] = &trainer_dpo_method,
    [TRAINER_GRPO] = &trainer_grpo_method,
};

int trainer_open(struct run *r, const struct trainer_config *cfg, const struct trainer_io *io, struct model *base,
                 struct tokenizer *tok, struct whet_err *err) {
    *r = (struct run){.cfg = cfg, .io = io, .method = methods[cfg->method], .last_checkpoint_step = -1,
                      .rank = cfg->dist.rank, .world = cfg->dist.world_size, .cotrain_base = base, .tok = tok,
                      .tok_borrowed = tok != NULL};
    int rc = -1;
    char *tok_path = xasprintf("%s/tokenizer.json", cfg->model);
    char *metrics_path = xasprintf("%s/metrics.jsonl", cfg->output_dir);
    r->checkpoints_dir = xasprintf("%s/checkpoints", cfg->output_dir);
    if (whet_mkdir_p(r->checkpoints_dir, err) || trainer_dist_open(r, err)) goto out;
    if (!r->tok && tokenizer_load(tok_path, &r->tok, err)) goto out;
    if (chat_template_load(&r->tpl, cfg->model, err)) goto out;
    if (r->method->load_data(r, err) || plan_steps(r, err)) goto out;
    if (cfg->resume_from && read_state(r, cfg->resume_from, err)) goto out;
    if (cfg->resume_from && trim_metrics(metrics_path, r->step, err)) goto out;
    if (load_model(r, err)) goto out;
    if (r->method->prepare && r->method->prepare(r, err)) goto out;
    if (r->rank == 0) r->metrics = fopen(metrics_path, cfg->resume_from ? "a" : "w");
    if (r->rank == 0 && !r->metrics) {
        whet_errf(err, "%s: cannot open: %s", metrics_path, strerror(errno));
        goto out;
    }
    trainer_progress(r, "%d steps (%s from step %d), batch %d examples in %d micro-batches, lr %g %s, warmup %d",
                     r->total_steps, cfg->resume_from ? "resuming" : "starting", r->step, cfg->hp.batch_size,
                     cfg->hp.gradient_accumulation_steps, cfg->hp.learning_rate, lr_scheduler_name(cfg->hp.lr_scheduler),
                     cfg->hp.warmup_steps);
    rc = 0;
out:
    free(metrics_path);
    free(tok_path);
    return rc;
}

void trainer_close(struct run *r) {
    if (r->metrics) fclose(r->metrics);
    trainer_dist_close(r);
    json_decref(r->data_events);
    if (r->model) model_free(r->model);
    if (r->ref_model) model_free(r->ref_model);
    r->method->free(r);
    chat_template_free(&r->tpl);
    if (r->tok && !r->tok_borrowed) tokenizer_free(r->tok);
    free(r->checkpoints_dir);
    *r = (struct run){0};
}

int trainer_run(const struct trainer_config *cfg, const struct trainer_io *io, int *stopped, struct whet_err *err) {
    /* Only rank 0 speaks for a gang: the other ranks' events (metrics, checkpoints) would repeat its. */
    struct trainer_io rank_io = *io;
    if (cfg->dist.rank != 0) rank_io.events = NULL;
    struct run r;
    *stopped = 0;
    int rc = trainer_open(&r, cfg, &rank_io, NULL, NULL, err) ? -1 : run_loop(&r, stopped, err);
    trainer_close(&r);
    return rc;
}
