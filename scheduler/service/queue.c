/* queue.c - what sizing and placement read of each queued job, kept between cycles.
 *
 * Every cycle sizes the head of the queue (up to 10,000 jobs). Reading each one's whet and method
 * objects and its base model's config.json again each cycle, and parsing them into the trainer's
 * settings, was most of the snapshot in tests/bench/scale: ~105-170 ms of PostgreSQL and a fifth of
 * the scheduler's CPU at 10,000 queued. A job's whet and method never change once it is created, so the
 * leader parses them once: each cycle reads only the queue's order (ids and the few columns that may
 * change) and asks for the specifications of the jobs it has not seen; jobs that left the head of the
 * queue are dropped. */
#include <stdlib.h>
#include <string.h>

#include "pg.h"
#include "service_internal.h"

static int cmp_spec(const void *a, const void *b) {
    return strcmp(((const struct queued_spec *)a)->id, ((const struct queued_spec *)b)->id);
}

static void spec_free(struct queued_spec *q) {
    free(q->id);
    json_decref(q->whet);
}

const struct queued_spec *queue_cache_find(const struct queue_cache *c, const char *id) {
    struct queued_spec key = {.id = (char *)id};
    return c->n ? bsearch(&key, c->a, (size_t)c->n, sizeof *c->a, cmp_spec) : NULL;
}

/* Adds the specifications of the jobs in the JSON array `ids` to next[*n..]. */
static int fetch(PGconn *conn, json_t *ids, struct queued_spec *next, int *n, struct whet_err *err) {
    char *list = json_dumps(ids, JSON_COMPACT);
    const char *params[] = {list};
    PGresult *res = whet_pg_query(conn,
                                  "SELECT id, whet::text, method::text FROM jobs"
                                  " WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))",
                                  1, params, err);
    free(list);
    if (!res) return -1;
    for (int r = 0; r < PQntuples(res); r++) {
        json_t *whet = json_loads(PQgetvalue(res, r, 1), 0, NULL), *method = json_loads(PQgetvalue(res, r, 2), 0, NULL);
        struct queued_spec *q = &next[(*n)++];
        q->id = xstrdup(PQgetvalue(res, r, 0));
        q->whet = whet ? whet : json_object();
        job_sizing_spec(&q->sizing, method, q->whet);
        json_decref(method);
    }
    PQclear(res);
    return 0;
}

int queue_cache_update(struct queue_cache *c, PGconn *conn, char *const *ids, int n, struct whet_err *err) {
    char **sorted = xcalloc((size_t)n + 1, sizeof *sorted);
    memcpy(sorted, ids, (size_t)n * sizeof *ids);
    qsort(sorted, (size_t)n, sizeof *sorted, whet_cmp_strp);
    struct queued_spec *next = xcalloc((size_t)n + 1, sizeof *next);
    json_t *missing = json_array();
    int m = 0, i = 0, k = 0;
    /* Both sorted: keep what the queue still holds, free the rest, note what is new. */
    while (i < n || k < c->n) {
        int cmp = i == n ? 1 : k == c->n ? -1 : strcmp(sorted[i], c->a[k].id);
        if (cmp == 0) {
            next[m++] = c->a[k++];
            i++;
        } else if (cmp < 0) {
            if (!i || strcmp(sorted[i], sorted[i - 1])) json_array_append_new(missing, json_string(sorted[i]));
            i++;
        } else {
            spec_free(&c->a[k++]);
        }
    }
    free(c->a);
    c->a = next;
    c->n = m;
    int rc = json_array_size(missing) ? fetch(conn, missing, c->a, &c->n, err) : 0;
    qsort(c->a, (size_t)c->n, sizeof *c->a, cmp_spec);
    json_decref(missing);
    free(sorted);
    return rc;
}

void queue_cache_reset(struct queue_cache *c) {
    for (int i = 0; i < c->n; i++) spec_free(&c->a[i]);
    free(c->a);
    c->a = NULL;
    c->n = 0;
}
