/* metrics_series.c - GET /v1/fine_tuning/jobs/{id}/metrics (see metrics_series.h).
 *
 * The points are the job's events of type 'metrics' (one per step, written by the scheduler from the
 * executor's reports), read through the index job_events_metric_step (migration 0005) on (job, step):
 * a poll with after_step set to the last step it has reads only the new steps, however many are
 * stored. A step that ran twice (its attempt was lost and the next one resumed from an earlier
 * checkpoint) answers its latest report. */
#include "metrics_series.h"

#include <string.h>

#include "buf.h"
#include "db.h"
#include "query_params.h"

#define SERIES_LIMIT_DEFAULT 1000
#define SERIES_LIMIT_MAX 10000
#define SERIES_SAMPLED_LIMIT_MAX 10000000 /* steps a downsampled answer may cover */
#define SERIES_POINTS_MAX 10000
#define SERIES_NAMES_MAX 32 /* figures named in `metrics` */
#define SERIES_NAME_LEN 64

/* The steps after $3, the latest report of each: step, created_at, the data. */
#define SERIES_STEPS                                                                                                   \
    "SELECT DISTINCT ON (metric_step) metric_step AS step, created_at, data AS m FROM job_events "                     \
    "WHERE tenant_id = $1 AND job_id = $2 AND metric_step > $3::int ORDER BY metric_step, seq DESC "
/* A point's figures: the data without "step", only those named in $4 when given. */
#define SERIES_FIGURES(m)                                                                                              \
    "CASE WHEN $4::text[] IS NULL THEN " m " - 'step' ELSE coalesce((SELECT jsonb_object_agg(k, " m " -> k) "          \
    "FROM unnest($4::text[]) k WHERE " m " ? k), '{}') END"

struct series_ctx {
    int sampled;
    long long limit; /* steps covered; -1: all (sampled only) */
};

static json_t *point_json(const PGresult *res, int row, int sampled) {
    json_t *p =
        json_pack("{s:s, s:o, s:o, s:o}", "object", "fine_tuning.job.metrics", "step", db_json_integer(res, row, 0),
                  "created_at", db_json_integer(res, row, 1), "metrics", db_json_value(res, row, 2));
    if (sampled) {
        json_object_set_new(p, "first_step", db_json_integer(res, row, 3));
        json_object_set_new(p, "steps", db_json_integer(res, row, 4));
        json_object_set_new(p, "min", db_json_value(res, row, 5));
        json_object_set_new(p, "max", db_json_value(res, row, 6));
    }
    return p;
}

static void series_done(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct series_ctx *c = arg;
    if (db_reply_unless_found(r, res, "fine-tuning job", "id")) return;
    const PGresult *job = res->res[0], *rows = res->res[1];
    int n = PQntuples(rows), has_more, downsampled = 0;
    if (c->sampled) {
        has_more = n > 0 && !strcmp(PQgetvalue(rows, 0, 7), "t");
        for (int i = 0; i < n && !downsampled; i++) downsampled = strcmp(PQgetvalue(rows, i, 4), "1") != 0;
    } else {
        has_more = n > c->limit;
        if (has_more) n = (int)c->limit;
    }
    json_t *data = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(data, point_json(rows, i, c->sampled));
    json_t *last = n ? db_json_integer(rows, n - 1, 0) : json_null();
    http_reply_json(r, 200,
                    json_pack("{s:s, s:o, s:b, s:o, s:b, s:o, s:o}", "object", "list", "data", data, "has_more",
                              has_more, "last_step", last, "downsampled", downsampled, "job_status",
                              db_json_string(job, 0, 0), "total_steps", db_json_integer(job, 0, 1)));
}

/* `metrics=loss,valid_loss`: the figures to answer, as a PostgreSQL text[] literal; NULL when absent.
 * Names are [A-Za-z0-9_.]; anything else is a 400 (sets *bad). */
static const char *series_names(struct gw_req *r, int *bad) {
    const char *s = http_query_param(r, "metrics");
    *bad = 0;
    if (!s) return NULL;
    struct whet_buf a = {0};
    int names = 0;
    size_t len = 0;
    whet_buf_puts(&a, "{");
    for (const char *p = s;; p++) {
        if (*p == ',' || !*p) {
            if (len == 0 || ++names > SERIES_NAMES_MAX) break;
            len = 0;
            if (!*p) {
                whet_buf_puts(&a, "}");
                const char *text = http_strdup(r, a.data);
                whet_buf_free(&a);
                return text;
            }
            whet_buf_puts(&a, ",");
            continue;
        }
        int ok =
            (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '.';
        if (!ok || ++len > SERIES_NAME_LEN) break;
        whet_buf_append(&a, p, 1);
    }
    whet_buf_free(&a);
    *bad = 1;
    http_reply_error(r, 400, "metrics", "invalid_value",
                     "metrics: expected 1 to %d comma-separated figure names of [A-Za-z0-9_.] (at most %d characters "
                     "each), such as loss,valid_loss",
                     SERIES_NAMES_MAX, SERIES_NAME_LEN);
    return NULL;
}

static void series_get(struct gw_req *r) {
    long long after, limit, points;
    int has_after = query_int(r, "after_step", 0, 1000000000, -1, &after);
    if (has_after < 0) return;
    int has_points = query_int(r, "max_points", 1, SERIES_POINTS_MAX, 0, &points);
    if (has_points < 0) return;
    int has_limit = query_int(r, "limit", 1, has_points ? SERIES_SAMPLED_LIMIT_MAX : SERIES_LIMIT_MAX,
                              has_points ? -1 : SERIES_LIMIT_DEFAULT, &limit);
    if (has_limit < 0) return;
    int bad;
    const char *names = series_names(r, &bad);
    if (bad) return;
    struct series_ctx *c = http_alloc(r, sizeof *c);
    c->sampled = has_points > 0;
    c->limit = limit;
    const char *job[] = {http_tenant_id(r), http_path_param(r, "id")};
    const char *page[] = {http_tenant_id(r),
                          http_path_param(r, "id"),
                          http_printf(r, "%lld", after),
                          names,
                          c->sampled ? query_int_text(r, has_limit, limit) : http_printf(r, "%lld", limit + 1),
                          c->sampled ? http_printf(r, "%lld", points) : NULL};
    struct db_stmt stmts[] = {{"series_job", NULL, 2, job},
                              {c->sampled ? "series_sampled" : "series_page", NULL, c->sampled ? 6 : 5, page}};
    db_transaction(r, stmts, 2, series_done, c);
}

void metrics_series_routes(struct http_router *rt) {
    db_prepare("series_job", "SELECT j.status, p.total_steps FROM jobs j LEFT JOIN job_progress p ON p.job_id = j.id "
                             "WHERE j.tenant_id = $1 AND j.id = $2");
    db_prepare("series_page", "SELECT step, created_at, " SERIES_FIGURES("m") " FROM (" SERIES_STEPS
                                                                              "LIMIT $5::bigint) s ORDER BY step");
    /* $5: the steps covered (NULL: all), $6: the buckets. A bucket is a run of consecutive steps (by
     * rank, so buckets hold as many steps as can be); it answers its last step, the steps it holds and
     * each numeric figure's min and max. The figures' names are found first, then read with ->>:
     * jsonb_each over every step costs ten times as much (measured at 100k steps). */
    db_prepare(
        "series_sampled",
        "WITH s AS (" SERIES_STEPS "LIMIT $5::bigint + 1), "
        "n AS (SELECT s.*, row_number() OVER (ORDER BY step) AS rn, count(*) OVER () AS total FROM s), "
        "b AS MATERIALIZED (SELECT step, created_at, m, (rn - 1) * $6::bigint / "
        "  least(total, coalesce($5::bigint, total)) AS bucket FROM n WHERE rn <= coalesce($5::bigint, total)), "
        "names AS (SELECT unnest($4::text[]) AS k WHERE $4::text[] IS NOT NULL "
        "  UNION SELECT DISTINCT jsonb_object_keys(m) FROM b WHERE $4::text[] IS NULL), "
        "kv AS (SELECT b.bucket, names.k, min((b.m ->> names.k)::float8) AS lo, max((b.m ->> names.k)::float8) AS hi "
        "  FROM b, names WHERE names.k <> 'step' AND jsonb_typeof(b.m -> names.k) = 'number' "
        "  GROUP BY b.bucket, names.k), "
        "env AS (SELECT bucket, jsonb_object_agg(k, lo) AS lo, jsonb_object_agg(k, hi) AS hi FROM kv "
        "  GROUP BY bucket), "
        "agg AS (SELECT bucket, min(step) AS first_step, max(step) AS last_step, count(*) AS steps FROM b "
        "  GROUP BY bucket) "
        "SELECT b.step, b.created_at, " SERIES_FIGURES(
            "b.m") ", agg.first_step, agg.steps, "
                   "  coalesce(env.lo, '{}'), coalesce(env.hi, '{}'), "
                   "  (SELECT max(total) FROM n) > coalesce($5::bigint, 9223372036854775807) "
                   "FROM agg JOIN b ON b.bucket = agg.bucket AND b.step = agg.last_step "
                   "LEFT JOIN env ON env.bucket = agg.bucket ORDER BY agg.last_step");
    http_route(rt, "GET", "/v1/fine_tuning/jobs/{id}/metrics", series_get, 0, "jobs.metrics");
}
