/* metrics.c - the gateway's Prometheus counters: requests by route and status code, a request
 * duration histogram by route, error answers by their `code` (storage_error, rate_limit_exceeded, ...:
 * what alerts tell apart within one status), and database pool gauges. Every event loop updates the same atomics
 * (relaxed: these are statistics), so /metrics sees the whole process whichever thread serves it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "server.h"
#include "util.h"

static const double bucket_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define NBUCKETS ((int)WHET_ARRAY_LEN(bucket_bounds))
#define STATUS_MIN 100
#define STATUS_COUNT 500 /* 100..599 */

struct route_metrics {
    atomic_ulong by_status[STATUS_COUNT];
    atomic_ulong buckets[NBUCKETS]; /* non-cumulative; summed when rendered */
    atomic_ulong count;
    atomic_ulong sum_ns;
};

static struct route_metrics *routes; /* nroutes + 1: the last one counts unmatched paths */
static int nroutes;
static atomic_long db_gauges[2][4];
static atomic_ulong db_errors;

/* Error codes are the gateway's own literals, a few dozen; once the table is one slot short of full,
 * new ones count as "other". */
#define ERROR_CODES_MAX 64
struct error_code_count {
    char code[48];
    atomic_ulong n;
};
static struct error_code_count error_codes[ERROR_CODES_MAX];
static int nerror_codes;
static pthread_mutex_t error_codes_lock = PTHREAD_MUTEX_INITIALIZER;

void metrics_init(int n) {
    nroutes = n;
    routes = xcalloc((size_t)n + 1, sizeof(*routes));
}

void metrics_free(void) {
    free(routes);
    routes = NULL;
    nroutes = 0;
}

void metrics_observe(int route_index, int status, double seconds) {
    if (!routes) return;
    struct route_metrics *m = &routes[route_index < 0 || route_index >= nroutes ? nroutes : route_index];
    if (status >= STATUS_MIN && status < STATUS_MIN + STATUS_COUNT)
        atomic_fetch_add_explicit(&m->by_status[status - STATUS_MIN], 1, memory_order_relaxed);
    int b = 0;
    while (b < NBUCKETS && seconds > bucket_bounds[b]) b++;
    if (b < NBUCKETS) atomic_fetch_add_explicit(&m->buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->sum_ns, (unsigned long)(seconds * 1e9), memory_order_relaxed);
}

void metrics_db_add(int admin_pool, enum metrics_db_gauge g, long delta) {
    atomic_fetch_add_explicit(&db_gauges[admin_pool ? 1 : 0][g], delta, memory_order_relaxed);
}

void metrics_db_error(void) { atomic_fetch_add_explicit(&db_errors, 1, memory_order_relaxed); }

/* The slot of `code`, added when new (under error_codes_lock). */
static int error_code_slot(const char *code) {
    for (int i = 0; i < nerror_codes; i++)
        if (!strcmp(error_codes[i].code, code)) return i;
    if (nerror_codes >= ERROR_CODES_MAX - 1 && strcmp(code, "other")) return error_code_slot("other");
    snprintf(error_codes[nerror_codes].code, sizeof(error_codes[nerror_codes].code), "%s", code);
    return nerror_codes++;
}

void metrics_error_code(const char *code) {
    if (!code || strlen(code) >= sizeof(error_codes[0].code)) code = "other";
    pthread_mutex_lock(&error_codes_lock);
    int i = error_code_slot(code);
    pthread_mutex_unlock(&error_codes_lock);
    atomic_fetch_add_explicit(&error_codes[i].n, 1, memory_order_relaxed);
}

/* Route names are our own patterns, but escape the label syntax anyway. */
static void label_value(char *out, size_t size, const char *s) {
    size_t o = 0;
    for (; *s && o + 3 < size; s++) {
        if (*s == '"' || *s == '\\') out[o++] = '\\';
        out[o++] = *s == '\n' ? ' ' : *s;
    }
    out[o] = 0;
}

char *metrics_render(const struct http_router *rt, size_t *len) {
    struct whet_buf t = {0};
    char name[256];
    whet_buf_printf(&t, "# HELP whet_http_requests_total HTTP requests answered, by route and status code.\n"
                    "# TYPE whet_http_requests_total counter\n");
    for (int i = 0; i <= nroutes; i++) {
        label_value(name, sizeof(name), i < nroutes ? router_at(rt, i)->name : "unmatched");
        for (int s = 0; s < STATUS_COUNT; s++) {
            unsigned long v = atomic_load_explicit(&routes[i].by_status[s], memory_order_relaxed);
            if (v)
                whet_buf_printf(&t, "whet_http_requests_total{route=\"%s\",code=\"%d\"} %lu\n", name, s + STATUS_MIN, v);
        }
    }
    whet_buf_printf(&t, "# HELP whet_http_request_duration_seconds Time from request arrival to the response, by route.\n"
                    "# TYPE whet_http_request_duration_seconds histogram\n");
    for (int i = 0; i <= nroutes; i++) {
        unsigned long count = atomic_load_explicit(&routes[i].count, memory_order_relaxed);
        if (!count) continue;
        label_value(name, sizeof(name), i < nroutes ? router_at(rt, i)->name : "unmatched");
        unsigned long cumulative = 0;
        for (int b = 0; b < NBUCKETS; b++) {
            cumulative += atomic_load_explicit(&routes[i].buckets[b], memory_order_relaxed);
            whet_buf_printf(&t, "whet_http_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %lu\n", name,
                        bucket_bounds[b], cumulative);
        }
        whet_buf_printf(&t, "whet_http_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %lu\n", name, count);
        whet_buf_printf(&t, "whet_http_request_duration_seconds_sum{route=\"%s\"} %.9f\n", name,
                    (double)atomic_load_explicit(&routes[i].sum_ns, memory_order_relaxed) / 1e9);
        whet_buf_printf(&t, "whet_http_request_duration_seconds_count{route=\"%s\"} %lu\n", name, count);
    }
    whet_buf_printf(&t, "# HELP whet_http_errors_total Error answers by their error code (the body's error.code).\n"
                    "# TYPE whet_http_errors_total counter\n");
    pthread_mutex_lock(&error_codes_lock);
    for (int i = 0; i < nerror_codes; i++) {
        label_value(name, sizeof(name), error_codes[i].code);
        whet_buf_printf(&t, "whet_http_errors_total{code=\"%s\"} %lu\n", name,
                        atomic_load_explicit(&error_codes[i].n, memory_order_relaxed));
    }
    pthread_mutex_unlock(&error_codes_lock);
    static const char *gauges[][2] = {
        {"whet_db_connections_up", "Database connections open and ready."},
        {"whet_db_connections", "Database connections configured."},
        {"whet_db_queries_queued", "Queries waiting for a database connection."},
        {"whet_db_queries_in_flight", "Queries sent and not yet answered."},
    };
    for (int g = 0; g < 4; g++) {
        whet_buf_printf(&t, "# HELP %s %s\n# TYPE %s gauge\n", gauges[g][0], gauges[g][1], gauges[g][0]);
        for (int p = 0; p < 2; p++)
            whet_buf_printf(&t, "%s{pool=\"%s\"} %ld\n", gauges[g][0], p ? "admin" : "tenant",
                        atomic_load_explicit(&db_gauges[p][g], memory_order_relaxed));
    }
    whet_buf_printf(&t, "# HELP whet_db_query_failures_total Queries that found the database unavailable.\n"
                    "# TYPE whet_db_query_failures_total counter\nwhet_db_query_failures_total %lu\n",
                atomic_load_explicit(&db_errors, memory_order_relaxed));
    *len = t.len;
    return t.data;
}
