/* job_request.c - see job_request.h. Sections: error and type helpers, hyperparameters (one table per
 * method), the whet extension object, then the body itself and the "auto" resolution. Graders are the
 * grader library's (grader_validate). */
#include "job_request.h"
#include "json.h"

#include "grader.h"
#include "job_spec.h"
#include "utf8.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

static int bad(char param[JOB_PARAM_MAX], struct whet_err *err, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad(char param[JOB_PARAM_MAX], struct whet_err *err, const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (path[0])
        whet_verrf_at(err, path, fmt, ap);
    else
        whet_verrf(err, fmt, ap);
    va_end(ap);
    snprintf(param, JOB_PARAM_MAX, "%s", path);
    utf8_trim_incomplete(param, strlen(param));
    return -1;
}


/* "parent.key" into out (JOB_PARAM_MAX bytes; long paths are cut, which only shortens messages). */
static void join(char out[JOB_PARAM_MAX], const char *parent, const char *key) {
    size_t p = strnlen(parent, JOB_PARAM_MAX - 1), k = strlen(key);
    memcpy(out, parent, p);
    size_t n = p;
    if (p && n < JOB_PARAM_MAX - 1) out[n++] = '.';
    if (k > JOB_PARAM_MAX - 1 - n) k = JOB_PARAM_MAX - 1 - n;
    memcpy(out + n, key, k);
    out[n + k] = 0;
    utf8_trim_incomplete(out, strlen(out));
}

static void join_index(char out[JOB_PARAM_MAX], const char *parent, size_t i) {
    char index[24];
    snprintf(index, sizeof index, "[%zu]", i);
    size_t p = strnlen(parent, JOB_PARAM_MAX - 1), k = strlen(index);
    memcpy(out, parent, p);
    if (k > JOB_PARAM_MAX - 1 - p) k = JOB_PARAM_MAX - 1 - p;
    memcpy(out + p, index, k);
    out[p + k] = 0;
    utf8_trim_incomplete(out, strlen(out));
}

static int one_of(const char *s, const char *const *set) {
    for (; *set; set++)
        if (strcmp(s, *set) == 0) return 1;
    return 0;
}

/* '"a", "b", "c"' for messages. */
static void list_names(char *out, size_t size, const char *const *set) {
    size_t n = 0;
    out[0] = 0;
    for (; *set; set++) {
        int w = snprintf(out + n, size - n, "%s\"%s\"", n ? ", " : "", *set);
        if (w < 0 || (size_t)w >= size - n) break;
        n += (size_t)w;
    }
}

static int known_keys(const json_t *obj, const char *const *allowed, const char *path, int top_level,
                      char param[JOB_PARAM_MAX], struct whet_err *err) {
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)obj, key, value) {
        if (one_of(key, allowed)) continue;
        char p[JOB_PARAM_MAX];
        join(p, path, key);
        if (top_level) return bad(param, err, p, "unrecognized request argument supplied");
        return bad(param, err, p, "unknown field");
    }
    return 0;
}

/* A string of 1..max bytes (also bounds what reaches the database). */
static int want_string(const json_t *v, size_t max, const char *path, char param[JOB_PARAM_MAX], struct whet_err *err) {
    if (!json_is_string(v)) return bad(param, err, path, "expected a string, found %s", whet_json_kind(v));
    size_t n = json_string_length(v);
    if (n == 0) return bad(param, err, path, "must not be empty");
    if (n > max) return bad(param, err, path, "longer than %zu characters", max);
    return 0;
}

static int want_enum(const json_t *v, const char *const *set, const char *path, char param[JOB_PARAM_MAX],
                     struct whet_err *err) {
    char names[256];
    list_names(names, sizeof names, set);
    if (!json_is_string(v) || !one_of(json_string_value(v), set))
        return bad(param, err, path, "expected one of %s", names);
    return 0;
}

/* Characters allowed in names the service matches on (GPU types, regions, suffixes). */
static int name_chars_ok(const char *s, const char *extra) {
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr(extra, c)))
            return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- fields of the job specification */

static int check_int(const json_t *v, long long min, long long max, const char *path, char param[JOB_PARAM_MAX],
                     struct whet_err *err) {
    if (!json_is_integer(v)) return bad(param, err, path, "expected an integer, found %s", whet_json_kind(v));
    json_int_t x = json_integer_value(v);
    if (x < min || x > max) return bad(param, err, path, "%lld is out of range: expected %lld..%lld", (long long)x, min, max);
    return 0;
}

/* A value of a job_spec field with an int, number, bool or enum type, against its API bounds. */
static int check_field(const json_t *v, const struct job_spec_field *f, const char *path, char param[JOB_PARAM_MAX],
                       struct whet_err *err) {
    const struct job_spec_range *r = &f->api;
    if (f->type == JOB_SPEC_ENUM) return want_enum(v, f->values, path, param, err);
    if (f->type == JOB_SPEC_BOOL) {
        if (!json_is_boolean(v)) return bad(param, err, path, "expected a boolean, found %s", whet_json_kind(v));
        return 0;
    }
    if (f->api_auto && json_is_string(v) && strcmp(json_string_value(v), "auto") == 0) return 0;
    const char *or_auto = f->api_auto ? "\"auto\" or " : "";
    if (f->type == JOB_SPEC_INT) {
        if (!json_is_integer(v)) return bad(param, err, path, "expected %san integer, found %s", or_auto, whet_json_kind(v));
        json_int_t x = json_integer_value(v);
        if (!job_spec_in_range(r, (double)x))
            return bad(param, err, path, "%lld is out of range: expected %lld..%lld", (long long)x, (long long)r->min,
                       (long long)r->max);
        return 0;
    }
    if (!json_is_number(v)) return bad(param, err, path, "expected %sa number, found %s", or_auto, whet_json_kind(v));
    double x = json_number_value(v);
    if (!job_spec_in_range(r, x))
        return bad(param, err, path, "%g is out of range: expected %s%g, %g%s", x, r->min_open ? "(" : "[", r->min, r->max,
                   r->max_open ? ")" : "]");
    return 0;
}

/* Checks `given` (an object, or NULL) for `method_type` and returns a new object with every
 * hyperparameter of the method ("auto", or an enum's default, where not given). */
static json_t *check_hyperparameters(const json_t *given, const char *method_type, const char *path,
                                     char param[JOB_PARAM_MAX], struct whet_err *err) {
    unsigned method = job_spec_method_bit(method_type);
    if (given && !json_is_null(given)) {
        if (!json_is_object(given)) {
            bad(param, err, path, "expected an object, found %s", whet_json_kind(given));
            return NULL;
        }
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)given, key, value) {
            const struct job_spec_field *f = job_spec_find(JOB_SPEC_HYPERPARAMETERS, key);
            char p[JOB_PARAM_MAX];
            join(p, path, key);
            if (!f || !(f->methods & method)) {
                bad(param, err, p, "not a hyperparameter of %s fine-tuning", method_type);
                return NULL;
            }
            if (check_field(value, f, p, param, err)) return NULL;
        }
    }
    json_t *out = json_object();
    for (size_t i = 0; i < job_spec_count; i++) {
        const struct job_spec_field *f = &job_spec_fields[i];
        if (f->place != JOB_SPEC_HYPERPARAMETERS || !(f->methods & method)) continue;
        json_t *v = given ? json_object_get(given, f->name) : NULL;
        json_object_set_new(out, f->name,
                            v ? json_deep_copy(v)
                              : json_string(f->type == JOB_SPEC_ENUM ? f->values[(int)f->service_default] : "auto"));
    }
    return out;
}

/* ---------------------------------------------------------------- the whet extension object */

/* A list of distinct names (GPU types, regions): 1..16 items of 1..64 characters [A-Za-z0-9._:-]. */
static int check_name_list(const json_t *v, const char *path, char param[JOB_PARAM_MAX], struct whet_err *err) {
    if (!json_is_array(v)) return bad(param, err, path, "expected an array of strings, found %s", whet_json_kind(v));
    if (json_array_size(v) == 0 || json_array_size(v) > 16) return bad(param, err, path, "expected 1 to 16 names");
    for (size_t i = 0; i < json_array_size(v); i++) {
        char ip[JOB_PARAM_MAX];
        join_index(ip, path, i);
        const json_t *item = json_array_get(v, i);
        if (want_string(item, 64, ip, param, err)) return -1;
        if (!name_chars_ok(json_string_value(item), "._:-"))
            return bad(param, err, ip, "expected letters, digits, '.', '_', ':' or '-'");
        for (size_t j = 0; j < i; j++)
            if (strcmp(json_string_value(item), json_string_value(json_array_get(v, j))) == 0)
                return bad(param, err, ip, "\"%s\" given twice", json_string_value(item));
    }
    return 0;
}

static int check_target_modules(const json_t *v, const char *p, char param[JOB_PARAM_MAX], struct whet_err *err) {
    static const char *const modules[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", NULL};
    if (json_is_string(v) && strcmp(json_string_value(v), "all-linear") == 0) return 0;
    if (!json_is_array(v) || json_array_size(v) == 0)
        return bad(param, err, p, "expected \"all-linear\" or a non-empty array of module names");
    for (size_t i = 0; i < json_array_size(v); i++) {
        char ip[JOB_PARAM_MAX], names[256];
        join_index(ip, p, i);
        list_names(names, sizeof names, modules);
        const json_t *m = json_array_get(v, i);
        if (!json_is_string(m) || !one_of(json_string_value(m), modules))
            return bad(param, err, ip, "expected one of %s", names);
        for (size_t j = 0; j < i; j++)
            if (strcmp(json_string_value(m), json_string_value(json_array_get(v, j))) == 0)
                return bad(param, err, ip, "\"%s\" given twice", json_string_value(m));
    }
    return 0;
}

/* The API's method types, in the order of the job specification's method bits (JOB_SPEC_SFT = 1 << 0, ...). */
static const char *const method_types[] = {"supervised", "dpo", "reinforcement", NULL};

/* "supervised or dpo" for messages. */
static void method_names(char *out, size_t size, unsigned methods) {
    size_t n = 0;
    out[0] = 0;
    for (unsigned i = 0; method_types[i]; i++) {
        if (!(methods & (1u << i))) continue;
        int w = snprintf(out + n, size - n, "%s%s", n ? " or " : "", method_types[i]);
        if (w < 0 || (size_t)w >= size - n) break;
        n += (size_t)w;
    }
}

/* Every key of `obj` is a job_spec field at `place` for `method`, and the typed ones are in their API
 * range. */
static int check_spec_object(const json_t *obj, enum job_spec_place place, unsigned method, const char *path,
                             char param[JOB_PARAM_MAX], struct whet_err *err) {
    const char *key;
    json_t *v;
    char p[JOB_PARAM_MAX], names[64];
    if (!json_is_object(obj)) return bad(param, err, path, "expected an object, found %s", whet_json_kind(obj));
    json_object_foreach((json_t *)obj, key, v) {
        join(p, path, key);
        const struct job_spec_field *f = job_spec_find(place, key);
        if (!f) return bad(param, err, p, "unknown field");
        method_names(names, sizeof names, f->methods);
        if (!(f->methods & method)) return bad(param, err, p, "only for %s jobs", names);
    }
    for (size_t i = 0; i < job_spec_count; i++) {
        const struct job_spec_field *f = &job_spec_fields[i];
        if (f->place != place || f->type == JOB_SPEC_OTHER || !(v = json_object_get(obj, f->name))) continue;
        join(p, path, f->name);
        if (check_field(v, f, p, param, err)) return -1;
    }
    return 0;
}

/* whet.stop: one string, as OpenAI takes it, or at most 4. */
static int check_stop(const json_t *v, char param[JOB_PARAM_MAX], struct whet_err *err) {
    char p[JOB_PARAM_MAX];
    if (json_is_string(v)) return want_string(v, 256, "whet.stop", param, err);
    if (!json_is_array(v) || json_array_size(v) > 4)
        return bad(param, err, "whet.stop", "expected a string or an array of at most 4 strings");
    for (size_t i = 0; i < json_array_size(v); i++) {
        join_index(p, "whet.stop", i);
        if (want_string(json_array_get(v, i), 256, p, param, err)) return -1;
    }
    return 0;
}

/* The extension object: the fields of the job specification at JOB_SPEC_WHET, each only for its methods. */
static int check_whet(const json_t *w, const char *method_type, int *priority, char param[JOB_PARAM_MAX],
                      struct whet_err *err) {
    unsigned method = job_spec_method_bit(method_type);
    if (check_spec_object(w, JOB_SPEC_WHET, method, "whet", param, err)) return -1;
    json_t *v;
    if ((v = json_object_get(w, "priority"))) *priority = (int)json_integer_value(v);
    if ((v = json_object_get(w, "lora"))) {
        if (json_is_true(json_object_get(w, "full_finetune")))
            return bad(param, err, "whet.lora", "a full fine-tune has no LoRA settings");
        if (check_spec_object(v, JOB_SPEC_WHET_LORA, method, "whet.lora", param, err)) return -1;
        json_t *modules = json_object_get(v, "target_modules");
        if (modules && check_target_modules(modules, "whet.lora.target_modules", param, err)) return -1;
    }
    if ((v = json_object_get(w, "gpu_types")) && check_name_list(v, "whet.gpu_types", param, err)) return -1;
    if ((v = json_object_get(w, "regions")) && check_name_list(v, "whet.regions", param, err)) return -1;
    json_t *seq = json_object_get(w, "max_seq_len");
    if ((v = json_object_get(w, "max_tokens")) && seq && json_integer_value(v) >= json_integer_value(seq))
        return bad(param, err, "whet.max_tokens", "%lld leaves no room for the prompt in whet.max_seq_len %lld",
                   (long long)json_integer_value(v), (long long)json_integer_value(seq));
    if ((v = json_object_get(w, "stop"))) return check_stop(v, param, err);
    return 0;
}

/* ---------------------------------------------------------------- the body */

/* Builds req->method from `method` (the body's, or NULL) and the deprecated top-level `legacy_hp`. */
static int check_method(const json_t *method, const json_t *legacy_hp, struct job_request *req,
                        char param[JOB_PARAM_MAX], struct whet_err *err) {
    const json_t *settings = NULL;
    const char *type = "supervised";
    if (method) {
        static const char *const keys[] = {"type", "supervised", "dpo", "reinforcement", NULL};
        if (!json_is_object(method)) return bad(param, err, "method", "expected an object, found %s", whet_json_kind(method));
        if (known_keys(method, keys, "method", 0, param, err)) return -1;
        json_t *t = json_object_get(method, "type");
        if (!t) return bad(param, err, "method.type", "missing");
        if (want_enum(t, method_types, "method.type", param, err)) return -1;
        type = json_string_value(t);
        for (const char *const *other = method_types; *other; other++) {
            char p[JOB_PARAM_MAX];
            join(p, "method", *other);
            json_t *v = json_object_get(method, *other);
            if (v && !json_is_null(v) && strcmp(*other, type) != 0)
                return bad(param, err, p, "does not match method.type \"%s\"", type);
        }
        settings = json_object_get(method, type);
        if (settings && json_is_null(settings)) settings = NULL;
    }
    char path[JOB_PARAM_MAX];
    join(path, "method", type);
    if (settings) {
        static const char *const plain_keys[] = {"hyperparameters", NULL};
        static const char *const rl_keys[] = {"hyperparameters", "grader", NULL};
        if (!json_is_object(settings)) return bad(param, err, path, "expected an object, found %s", whet_json_kind(settings));
        if (known_keys(settings, strcmp(type, "reinforcement") == 0 ? rl_keys : plain_keys, path, 0, param, err))
            return -1;
    }
    const json_t *hp = settings ? json_object_get(settings, "hyperparameters") : NULL;
    if (hp && json_is_null(hp)) hp = NULL;
    char hp_path[JOB_PARAM_MAX];
    join(hp_path, path, "hyperparameters");
    if (legacy_hp) {
        if (strcmp(type, "supervised") != 0)
            return bad(param, err, "hyperparameters", "deprecated top-level hyperparameters are for supervised jobs; "
                                                      "use %s", hp_path);
        if (hp) return bad(param, err, "hyperparameters", "give either hyperparameters (deprecated) or %s, not both", hp_path);
        hp = legacy_hp;
        snprintf(hp_path, sizeof hp_path, "hyperparameters");
    }
    json_t *resolved = check_hyperparameters(hp, type, hp_path, param, err);
    if (!resolved) return -1;
    json_t *inner = json_object();
    json_object_set_new(inner, "hyperparameters", resolved);
    if (strcmp(type, "reinforcement") == 0) {
        char gp[JOB_PARAM_MAX];
        join(gp, path, "grader");
        json_t *grader = settings ? json_object_get(settings, "grader") : NULL;
        if (!grader) {
            json_decref(inner);
            return bad(param, err, gp, "missing: a reinforcement job needs a grader");
        }
        if (grader_validate(grader, gp, NULL, param, JOB_PARAM_MAX, err)) {
            json_decref(inner);
            return -1;
        }
        json_object_set_new(inner, "grader", json_deep_copy(grader));
    }
    req->method = json_pack("{s:s, s:o}", "type", type, type, inner);
    snprintf(req->method_type, sizeof req->method_type, "%s", type);
    return 0;
}

static int parse_body(const json_t *body, struct job_request *req, char param[JOB_PARAM_MAX], struct whet_err *err) {
    static const char *const keys[] = {"model", "training_file", "validation_file", "suffix", "seed", "metadata",
                                       "hyperparameters", "method", "integrations", "whet", NULL};
    if (!json_is_object(body)) return bad(param, err, "", "expected a JSON object, found %s", whet_json_kind(body));
    if (known_keys(body, keys, "", 1, param, err)) return -1;

    json_t *v = json_object_get(body, "model");
    if (!v) return bad(param, err, "model", "missing");
    if (want_string(v, 256, "model", param, err)) return -1;
    req->model = xstrdup(json_string_value(v));

    v = json_object_get(body, "training_file");
    if (!v) return bad(param, err, "training_file", "missing");
    if (want_string(v, 128, "training_file", param, err)) return -1;
    req->training_file = xstrdup(json_string_value(v));

    v = json_object_get(body, "validation_file");
    if (v && !json_is_null(v)) {
        if (want_string(v, 128, "validation_file", param, err)) return -1;
        req->validation_file = xstrdup(json_string_value(v));
    }

    v = json_object_get(body, "suffix");
    if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0)) {
        if (want_string(v, JOB_SUFFIX_MAX, "suffix", param, err)) return -1;
        if (!name_chars_ok(json_string_value(v), "._-"))
            return bad(param, err, "suffix", "expected letters, digits, '.', '_' or '-'");
        req->suffix = xstrdup(json_string_value(v));
    }

    v = json_object_get(body, "seed");
    if (v && !json_is_null(v)) {
        if (check_int(v, 0, 2147483647, "seed", param, err)) return -1;
        req->has_seed = 1;
        req->seed = json_integer_value(v);
    }

    v = json_object_get(body, "metadata");
    if (v && !json_is_null(v)) {
        if (!json_is_object(v)) return bad(param, err, "metadata", "expected an object, found %s", whet_json_kind(v));
        if (json_object_size(v) > JOB_METADATA_PAIRS_MAX)
            return bad(param, err, "metadata", "at most %d key-value pairs", JOB_METADATA_PAIRS_MAX);
        const char *key;
        json_t *value;
        json_object_foreach(v, key, value) {
            char p[JOB_PARAM_MAX];
            join(p, "metadata", key);
            if (key[0] == 0) return bad(param, err, "metadata", "keys must not be empty");
            if (strlen(key) > JOB_METADATA_KEY_MAX)
                return bad(param, err, p, "key longer than %d characters", JOB_METADATA_KEY_MAX);
            if (!json_is_string(value)) return bad(param, err, p, "expected a string, found %s", whet_json_kind(value));
            if (json_string_length(value) > JOB_METADATA_VALUE_MAX)
                return bad(param, err, p, "value longer than %d characters", JOB_METADATA_VALUE_MAX);
        }
        req->metadata = json_deep_copy(v);
    }

    v = json_object_get(body, "integrations");
    if (v && !json_is_null(v)) {
        if (!json_is_array(v)) return bad(param, err, "integrations", "expected an array, found %s", whet_json_kind(v));
        if (json_array_size(v) > 0)
            return bad(param, err, "integrations", "integrations (Weights & Biases) are not supported by this server; "
                                                   "read metrics from the job's events instead");
    }

    json_t *legacy = json_object_get(body, "hyperparameters");
    if (legacy && json_is_null(legacy)) legacy = NULL;
    json_t *method = json_object_get(body, "method");
    if (method && json_is_null(method)) method = NULL;
    if (check_method(method, legacy, req, param, err)) return -1;

    v = json_object_get(body, "whet");
    if (v && !json_is_null(v)) {
        if (check_whet(v, req->method_type, &req->priority, param, err)) return -1;
        req->whet = json_deep_copy(v);
    } else {
        req->whet = json_object();
    }
    return 0;
}

int job_request_parse(const json_t *body, struct job_request *out, char param[JOB_PARAM_MAX], struct whet_err *err) {
    memset(out, 0, sizeof *out);
    param[0] = 0;
    if (parse_body(body, out, param, err) == 0) return 0;
    job_request_free(out);
    return -1;
}

void job_request_free(struct job_request *req) {
    free(req->model);
    free(req->training_file);
    free(req->validation_file);
    free(req->suffix);
    json_decref(req->metadata);
    json_decref(req->method);
    json_decref(req->whet);
    memset(req, 0, sizeof *req);
}

json_t *job_request_hyperparameters(const struct job_request *req) {
    return json_object_get(json_object_get(req->method, req->method_type), "hyperparameters");
}

/* ---------------------------------------------------------------- "auto" */

static int is_auto(const json_t *v) { return json_is_string(v) && strcmp(json_string_value(v), "auto") == 0; }

void job_request_resolve_auto(struct job_request *req, size_t examples) {
    json_t *hp = job_request_hyperparameters(req);
    if (!hp) return;
    if (examples == 0) examples = 1;
    if (is_auto(json_object_get(hp, "n_epochs"))) {
        /* OpenAI's rule (its fine-tuning cookbook's estimate): three passes, unless that shows fewer
         * than 100 examples (then 100 / examples passes, at most 25) or more than 25,000 (then
         * 25,000 / examples, at least 1), divisions rounded down. */
        size_t epochs = 3;
        if (examples * epochs < 100) epochs = 100 / examples < 25 ? 100 / examples : 25;
        else if (examples * epochs > 25000) epochs = 25000 / examples > 1 ? 25000 / examples : 1;
        json_object_set_new(hp, "n_epochs", json_integer((json_int_t)epochs));
    }
    if (is_auto(json_object_get(hp, "batch_size"))) {
        /* OpenAI: about 0.2% of the training examples (DPO: pairs, reinforcement: prompts), at least 1,
         * at most 256. The job keeps and reports the number. */
        const struct job_spec_range *r = &job_spec_find(JOB_SPEC_HYPERPARAMETERS, "batch_size")->api;
        size_t batch = (size_t)lround((double)examples * 0.002);
        if (batch < (size_t)r->min) batch = (size_t)r->min;
        if (batch > (size_t)r->max) batch = (size_t)r->max;
        json_object_set_new(hp, "batch_size", json_integer((json_int_t)batch));
    }
    /* The other "auto"s take the service default of the job specification, except eval_samples, which
     * stays "auto": every prompt of the validation file, a number only known when the trainer reads it. */
    for (size_t i = 0; i < job_spec_count; i++) {
        const struct job_spec_field *f = &job_spec_fields[i];
        if (f->place != JOB_SPEC_HYPERPARAMETERS || !is_auto(json_object_get(hp, f->name))) continue;
        if (!strcmp(f->name, "eval_samples")) continue;
        json_object_set_new(hp, f->name, f->type == JOB_SPEC_INT ? json_integer((json_int_t)f->service_default)
                                                                 : json_real(f->service_default));
    }
}
