/* traces.c - parsers for the node lists, pod lists and job traces `whet sim` replays.
 *
 * The files are plain CSV with a header line and no quoting (the public traces have none); a quote,
 * a missing column, a non-number or a value out of range is rejected with the file, the line number
 * and the column, PostgreSQL style: "nodes.csv: line 12: gpu: expected an integer 0..16, got "x"". */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

#define MAX_COLUMNS 32

/* ---------------------------------------------------------------------------------------------- */
/* Names                                                                                           */

int32_t sim_names_intern(struct sim_names *t, const char *name, int32_t max) {
    for (int32_t i = 0; i < t->n; i++)
        if (!strcmp(t->names[i], name)) return i;
    if (t->n >= max) return -1;
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 8;
        t->names = xrealloc(t->names, (size_t)t->cap * sizeof *t->names);
    }
    t->names[t->n] = xstrdup(name);
    return t->n++;
}

void sim_names_free(struct sim_names *t) {
    for (int32_t i = 0; i < t->n; i++) free(t->names[i]);
    free(t->names);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------------------------------------- */
/* CSV lines                                                                                       */

struct csv {
    const char *path;
    char *buf;          /* a writable copy of the text, split in place */
    char *next;         /* start of the next line */
    int32_t line;       /* number of the line last read (1-based) */
    char *field[MAX_COLUMNS];
    int32_t n_fields;
    char *header[MAX_COLUMNS];
    int32_t n_header;
};

/* Reads the next non-empty line into fields. Returns 1, 0 at the end, -1 on a malformed line. */
static int csv_next(struct csv *c, struct whet_err *err) {
    while (c->next && *c->next) {
        char *line = c->next;
        char *nl = strchr(line, '\n');
        if (nl) {
            *nl = 0;
            c->next = nl + 1;
        } else {
            c->next = NULL;
        }
        c->line++;
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r') line[--len] = 0;
        if (!len) continue;
        if (strchr(line, '"')) return whet_errf(err, "%s: line %d: quoted fields are not supported", c->path, c->line);
        c->n_fields = 0;
        for (char *p = line;;) {
            if (c->n_fields == MAX_COLUMNS)
                return whet_errf(err, "%s: line %d: more than %d columns", c->path, c->line, MAX_COLUMNS);
            c->field[c->n_fields++] = p;
            char *comma = strchr(p, ',');
            if (!comma) break;
            *comma = 0;
            p = comma + 1;
        }
        return 1;
    }
    return 0;
}

static int csv_open(struct csv *c, const char *path, const char *text, struct whet_err *err) {
    memset(c, 0, sizeof *c);
    c->path = path;
    c->buf = xstrdup(text);
    c->next = c->buf;
    int r = csv_next(c, err);
    if (r <= 0) {
        free(c->buf);
        return r < 0 ? -1 : whet_errf(err, "%s: line 1: missing header line", path);
    }
    memcpy(c->header, c->field, sizeof c->header);
    c->n_header = c->n_fields;
    return 0;
}

static void csv_close(struct csv *c) { free(c->buf); }

/* Column index of name, or -1 (required: an error names the header line). */
static int csv_col(struct csv *c, const char *name, int required, struct whet_err *err) {
    for (int i = 0; i < c->n_header; i++)
        if (!strcmp(c->header[i], name)) return i;
    if (required) whet_errf(err, "%s: line 1: header: missing column \"%s\"", c->path, name);
    return -1;
}

static const char *csv_get(struct csv *c, int col, struct whet_err *err) {
    if (c->n_fields != c->n_header) {
        whet_errf(err, "%s: line %d: expected %d columns, found %d", c->path, c->line, c->n_header, c->n_fields);
        return NULL;
    }
    return c->field[col];
}

static int csv_int(struct csv *c, int col, const char *name, int64_t lo, int64_t hi, int64_t *out,
                   struct whet_err *err) {
    const char *s = csv_get(c, col, err);
    if (!s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return whet_errf(err, "%s: line %d: %s: expected an integer %lld..%lld, got \"%s\"", c->path, c->line, name,
                         (long long)lo, (long long)hi, s);
    *out = v;
    return 0;
}

static int csv_num(struct csv *c, int col, const char *name, double lo, double hi, double *out, struct whet_err *err) {
    const char *s = csv_get(c, col, err);
    if (!s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !(v >= lo && v <= hi))
        return whet_errf(err, "%s: line %d: %s: expected a number %g..%g, got \"%s\"", c->path, c->line, name, lo, hi,
                         s);
    *out = v;
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Fleet                                                                                           */

int sim_fleet_parse(struct sim_fleet *out, const char *path, const char *text, struct whet_err *err) {
    memset(out, 0, sizeof *out);
    struct csv c;
    if (csv_open(&c, path, text, err)) return -1;
    int c_cpu = csv_col(&c, "cpu_milli", 1, err), c_mem, c_gpu, c_model, c_dc;
    if (c_cpu < 0 || (c_mem = csv_col(&c, "memory_mib", 1, err)) < 0 || (c_gpu = csv_col(&c, "gpu", 1, err)) < 0 ||
        (c_model = csv_col(&c, "model", 1, err)) < 0) {
        csv_close(&c);
        return -1;
    }
    c_dc = csv_col(&c, "dc", 0, err);
    int32_t cap = 0;
    int r;
    while ((r = csv_next(&c, err)) > 0) {
        int64_t cpu, mem, gpus;
        if (csv_int(&c, c_cpu, "cpu_milli", 0, INT64_C(1) << 40, &cpu, err) ||
            csv_int(&c, c_mem, "memory_mib", 0, INT64_C(1) << 40, &mem, err) ||
            csv_int(&c, c_gpu, "gpu", 0, PL_MAX_GPUS_PER_NODE, &gpus, err))
            goto fail;
        const char *model = c.field[c_model];
        const char *dc = c_dc >= 0 ? c.field[c_dc] : "dc0";
        if (gpus > 0 && !*model) {
            whet_errf(err, "%s: line %d: model: empty for a node with %d GPUs", path, c.line, (int)gpus);
            goto fail;
        }
        if (!*dc) {
            whet_errf(err, "%s: line %d: dc: empty", path, c.line);
            goto fail;
        }
        if (out->n_nodes == cap) {
            cap = cap ? cap * 2 : 256;
            out->nodes = xrealloc(out->nodes, (size_t)cap * sizeof *out->nodes);
        }
        struct pl_node *n = &out->nodes[out->n_nodes];
        memset(n, 0, sizeof *n);
        n->gpus = (int32_t)gpus;
        n->gpu_type = gpus > 0 ? sim_names_intern(&out->types, model, PL_MAX_TYPES) : -1;
        n->dc = sim_names_intern(&out->dcs, dc, PL_MAX_DCS);
        if ((gpus > 0 && n->gpu_type < 0) || n->dc < 0) {
            whet_errf(err, "%s: line %d: more than %d GPU types or data centers", path, c.line, PL_MAX_TYPES);
            goto fail;
        }
        n->cpu_milli = cpu;
        n->mem_mib = mem;
        n->schedulable = 1;
        pl_node_reset_free(n);
        out->n_nodes++;
    }
    if (r < 0) goto fail;
    csv_close(&c);
    if (out->n_nodes == 0) {
        whet_errf(err, "%s: no nodes", path);
        sim_fleet_free(out);
        return -1;
    }
    return 0;
fail:
    csv_close(&c);
    sim_fleet_free(out);
    return -1;
}

void sim_fleet_free(struct sim_fleet *f) {
    free(f->nodes);
    sim_names_free(&f->types);
    sim_names_free(&f->dcs);
    memset(f, 0, sizeof *f);
}

/* ---------------------------------------------------------------------------------------------- */
/* Pods                                                                                            */

int sim_pods_parse(struct sim_pods *out, struct sim_fleet *fleet, const char *path, const char *text,
                   struct whet_err *err) {
    memset(out, 0, sizeof *out);
    struct csv c;
    if (csv_open(&c, path, text, err)) return -1;
    int c_cpu = csv_col(&c, "cpu_milli", 1, err), c_mem, c_gpu, c_milli;
    if (c_cpu < 0 || (c_mem = csv_col(&c, "memory_mib", 1, err)) < 0 ||
        (c_gpu = csv_col(&c, "num_gpu", 1, err)) < 0 || (c_milli = csv_col(&c, "gpu_milli", 1, err)) < 0) {
        csv_close(&c);
        return -1;
    }
    int c_spec = csv_col(&c, "gpu_spec", 0, err);
    int32_t cap = 0;
    int r;
    while ((r = csv_next(&c, err)) > 0) {
        int64_t cpu, mem, gpus, milli;
        if (csv_int(&c, c_cpu, "cpu_milli", 0, INT64_C(1) << 40, &cpu, err) ||
            csv_int(&c, c_mem, "memory_mib", 0, INT64_C(1) << 40, &mem, err) ||
            csv_int(&c, c_gpu, "num_gpu", 0, PL_MAX_GPUS_PER_NODE * PL_MAX_NODES_PER_JOB, &gpus, err) ||
            csv_int(&c, c_milli, "gpu_milli", 0, PL_MILLI, &milli, err))
            goto fail;
        if (gpus > 0 && milli == 0) {
            whet_errf(err, "%s: line %d: gpu_milli: 0 for a task with %d GPUs", path, c.line, (int)gpus);
            goto fail;
        }
        if (gpus > 1 && milli != PL_MILLI) {
            whet_errf(err, "%s: line %d: gpu_milli: a share (%d) of more than one GPU", path, c.line, (int)milli);
            goto fail;
        }
        uint64_t types = 0;
        if (c_spec >= 0 && *c.field[c_spec]) {
            char spec[256];
            snprintf(spec, sizeof spec, "%s", c.field[c_spec]);
            for (char *save = NULL, *tok = strtok_r(spec, "|", &save); tok; tok = strtok_r(NULL, "|", &save)) {
                int32_t t = sim_names_intern(&fleet->types, tok, PL_MAX_TYPES);
                if (t < 0) {
                    whet_errf(err, "%s: line %d: gpu_spec: more than %d GPU types", path, c.line, PL_MAX_TYPES);
                    goto fail;
                }
                types |= 1ull << t;
            }
        }
        if (out->n == cap) {
            cap = cap ? cap * 2 : 1024;
            out->pods = xrealloc(out->pods, (size_t)cap * sizeof *out->pods);
        }
        struct sim_pod *p = &out->pods[out->n++];
        p->cpu_milli = cpu;
        p->mem_mib = mem;
        p->gpus = (int32_t)gpus;
        p->gpu_milli = gpus ? (int32_t)milli : 0;
        p->allowed_types = types;
    }
    if (r < 0) goto fail;
    csv_close(&c);
    if (out->n == 0) {
        whet_errf(err, "%s: no tasks", path);
        return -1;
    }
    return 0;
fail:
    csv_close(&c);
    sim_pods_free(out);
    return -1;
}

void sim_pods_free(struct sim_pods *p) {
    free(p->pods);
    memset(p, 0, sizeof *p);
}

/* ---------------------------------------------------------------------------------------------- */
/* Job traces                                                                                      */

/* Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm): no time zone involved. */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int parse_timestamp(const char *s, double *out) {
    int y, mo, d, h, mi, se, n = 0;
    if (sscanf(s, "%4d-%2d-%2d %2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &se, &n) != 6 || s[n]) return -1;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60 || h < 0 || mi < 0 || se < 0) return -1;
    *out = (double)(days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se);
    return 0;
}

static int cmp_submit(const void *a, const void *b) {
    const struct sim_trace_job *x = a, *y = b;
    if (x->submit_s != y->submit_s) return x->submit_s < y->submit_s ? -1 : 1;
    return x->line - y->line;
}

int sim_trace_parse(struct sim_trace *out, const char *path, const char *text, struct whet_err *err) {
    memset(out, 0, sizeof *out);
    struct csv c;
    if (csv_open(&c, path, text, err)) return -1;
    int c_ts = csv_col(&c, "timestamp", 1, err), c_dur, c_gpus, c_cluster;
    if (c_ts < 0 || (c_dur = csv_col(&c, "duration", 1, err)) < 0 || (c_gpus = csv_col(&c, "num_gpus", 1, err)) < 0 ||
        (c_cluster = csv_col(&c, "cluster", 1, err)) < 0) {
        csv_close(&c);
        return -1;
    }
    int32_t cap = 0;
    int r;
    while ((r = csv_next(&c, err)) > 0) {
        const char *ts = csv_get(&c, c_ts, err);
        if (!ts) goto fail;
        double submit = 0, duration = 0;
        int64_t gpus = 0;
        if (parse_timestamp(ts, &submit)) {
            whet_errf(err, "%s: line %d: timestamp: expected YYYY-MM-DD HH:MM:SS, got \"%s\"", path, c.line, ts);
            goto fail;
        }
        if (csv_num(&c, c_dur, "duration", 0, 1e9, &duration, err) ||
            csv_int(&c, c_gpus, "num_gpus", 1, PL_MAX_GPUS_PER_NODE * PL_MAX_NODES_PER_JOB, &gpus, err))
            goto fail;
        if (!*c.field[c_cluster]) {
            whet_errf(err, "%s: line %d: cluster: empty", path, c.line);
            goto fail;
        }
        int32_t tenant = sim_names_intern(&out->tenants, c.field[c_cluster], 1 << 20);
        if (out->n == cap) {
            cap = cap ? cap * 2 : 4096;
            out->jobs = xrealloc(out->jobs, (size_t)cap * sizeof *out->jobs);
        }
        out->jobs[out->n++] = (struct sim_trace_job){submit, duration, (int32_t)gpus, tenant, c.line};
    }
    if (r < 0) goto fail;
    csv_close(&c);
    if (out->n == 0) {
        whet_errf(err, "%s: no jobs", path);
        return -1;
    }
    qsort(out->jobs, (size_t)out->n, sizeof *out->jobs, cmp_submit);
    double t0 = out->jobs[0].submit_s;
    for (int32_t i = 0; i < out->n; i++) out->jobs[i].submit_s -= t0;
    return 0;
fail:
    csv_close(&c);
    sim_trace_free(out);
    return -1;
}

void sim_trace_free(struct sim_trace *t) {
    free(t->jobs);
    sim_names_free(&t->tenants);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------------------------------------- */
/* Policies and random numbers                                                                     */

int sim_policies(const char *list, char names[][16], int max, struct whet_err *err) {
    int n = 0;
    const char *p = list;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (n == max) return whet_errf(err, "--policy: more than %d policies", max);
        if (len == 0 || len >= 16) return whet_errf(err, "--policy: empty or overlong name in \"%s\"", list);
        memcpy(names[n], p, len);
        names[n][len] = 0;
        struct pl_config cfg;
        if (pl_config_for_policy(&cfg, names[n]))
            return whet_errf(err, "--policy: unknown policy \"%s\" (fifo, bestfit, las, whet)", names[n]);
        n++;
        p += len + (comma ? 1 : 0);
        if (comma && !*p) return whet_errf(err, "--policy: trailing comma in \"%s\"", list);
    }
    if (!n) return whet_errf(err, "--policy: empty");
    return n;
}
