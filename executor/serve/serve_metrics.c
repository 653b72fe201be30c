/* serve_metrics.c - the model worker's Prometheus metrics (see serve_metrics.h). */
#include "serve_metrics.h"

#include <stdatomic.h>

#include "metrics_http.h"

static const double ttft_bounds[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
#define NBUCKETS ((int)WHET_ARRAY_LEN(ttft_bounds))

static struct {
    atomic_long running, waiting, adapters_loaded;
    atomic_ulong steps, decoded_tokens, prefill_tokens, adapter_loads, adapter_evictions;
    atomic_ulong answers, errors, ttft_buckets[NBUCKETS], ttft_count, ttft_sum_us;
} m;

#define STORE(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)
#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

void serve_metrics_engine(const struct serve_stats *s) {
    STORE(m.running, s->running);
    STORE(m.waiting, s->waiting);
    STORE(m.adapters_loaded, s->adapters_loaded);
    STORE(m.steps, (unsigned long)s->steps);
    STORE(m.decoded_tokens, (unsigned long)s->decoded_tokens);
    STORE(m.prefill_tokens, (unsigned long)s->prefill_tokens);
    STORE(m.adapter_loads, (unsigned long)s->adapter_loads);
    STORE(m.adapter_evictions, (unsigned long)s->adapter_evictions);
}

void serve_metrics_answer(int status) {
    atomic_fetch_add_explicit(&m.answers, 1, memory_order_relaxed);
    if (status >= 400) atomic_fetch_add_explicit(&m.errors, 1, memory_order_relaxed);
}

void serve_metrics_first_token(double seconds) {
    int b = 0;
    while (b < NBUCKETS && seconds > ttft_bounds[b]) b++;
    if (b < NBUCKETS) atomic_fetch_add_explicit(&m.ttft_buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m.ttft_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m.ttft_sum_us, (unsigned long)(seconds * 1e6), memory_order_relaxed);
}

void serve_metrics_render(struct whet_buf *t) {
    metrics_http_sample(t, "whet_serve_requests_running", "gauge", "Requests whose sequences are decoding.",
                        (double)LOAD(m.running));
    metrics_http_sample(t, "whet_serve_requests_waiting", "gauge", "Requests waiting for free sequence slots.",
                        (double)LOAD(m.waiting));
    metrics_http_sample(t, "whet_serve_steps_total", "counter", "Engine steps (one decode pass each).",
                        (double)LOAD(m.steps));
    metrics_http_sample(t, "whet_serve_generated_tokens_total", "counter", "Tokens generated (decoded).",
                        (double)LOAD(m.decoded_tokens));
    metrics_http_sample(t, "whet_serve_prompt_tokens_total", "counter", "Prompt tokens prefilled.",
                        (double)LOAD(m.prefill_tokens));
    metrics_http_sample(t, "whet_serve_adapters_loaded", "gauge", "Adapters in the worker's cache.",
                        (double)LOAD(m.adapters_loaded));
    metrics_http_sample(t, "whet_serve_adapter_loads_total", "counter", "Adapters loaded into the cache.",
                        (double)LOAD(m.adapter_loads));
    metrics_http_sample(t, "whet_serve_adapter_evictions_total", "counter",
                        "Adapters evicted from the cache to make room.", (double)LOAD(m.adapter_evictions));
    metrics_http_sample(t, "whet_serve_answers_total", "counter", "Answers sent (completions and errors).",
                        (double)LOAD(m.answers));
    metrics_http_sample(t, "whet_serve_errors_total", "counter", "Answers with a 4xx or 5xx status.",
                        (double)LOAD(m.errors));
    unsigned long buckets[NBUCKETS];
    for (int b = 0; b < NBUCKETS; b++) buckets[b] = LOAD(m.ttft_buckets[b]);
    metrics_http_histogram(t, "whet_serve_time_to_first_token_seconds",
                           "From a request's arrival to its first token reaching the client.", ttft_bounds, NBUCKETS,
                           buckets, LOAD(m.ttft_count), (double)LOAD(m.ttft_sum_us) / 1e6);
}
