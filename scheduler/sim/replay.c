/* replay.c - `whet sim replay`: a job trace (Philly) replayed in simulated time through the
 * placement library, with queueing, preemption, grace periods and checkpoints.
 *
 * Events: arrivals (the trace), completions, and the stop of a preempted job at the end of its
 * grace period. After the events of an instant, one scheduling cycle runs over the queue; while
 * jobs wait, a tick every TICK_S also runs one, because least-attained-service levels change with
 * time alone. The library only sees what a real scheduler knows: sizes, tenants, arrival times,
 * attained service and checkpoint times, never durations.
 *
 * Work model: a job needs `duration` seconds on its GPUs. Running jobs checkpoint every
 * checkpoint_every_s of progress; a stopped job keeps only the progress of its last checkpoint and,
 * when placed again, spends checkpoint_cost_s restoring before it progresses. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define TICK_S 300.0
#define SLOWDOWN_FLOOR_S 60.0 /* bounded slowdown: JCT / max(duration, 60 s) */

enum { EV_DONE, EV_STOP };

struct event {
    double t;
    int32_t job, kind;
    uint32_t version;
};

struct rjob {
    struct pl_job pl;
    double duration_s, remaining_s;
    double run_start, restore_s; /* current run: placed at run_start, progress after restore_s */
    double attained_before;      /* GPU-seconds of earlier runs */
    double first_start, finish;
    double held_gpu_s;           /* GPU-seconds held, useful or not */
    uint32_t version;            /* bumps invalidate queued events of this job */
    int started, done;
    int unplaceable;             /* wider than the largest pool: it can never run */
};

struct heap {
    struct event *ev;
    int32_t n, cap;
};

static int ev_less(const struct event *a, const struct event *b) {
    if (a->t != b->t) return a->t < b->t;
    if (a->kind != b->kind) return a->kind < b->kind;
    return a->job < b->job;
}

static void heap_push(struct heap *h, struct event e) {
    if (h->n == h->cap) h->ev = xrealloc(h->ev, (size_t)(h->cap = h->cap ? h->cap * 2 : 1024) * sizeof *h->ev);
    int32_t i = h->n++;
    while (i > 0 && ev_less(&e, &h->ev[(i - 1) / 2])) {
        h->ev[i] = h->ev[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->ev[i] = e;
}

static struct event heap_pop(struct heap *h) {
    struct event top = h->ev[0], last = h->ev[--h->n];
    int32_t i = 0;
    for (;;) {
        int32_t l = 2 * i + 1, m = i;
        if (l < h->n && ev_less(&h->ev[l], &last)) m = l;
        if (l + 1 < h->n && ev_less(&h->ev[l + 1], m == i ? &last : &h->ev[l])) m = l + 1;
        if (m == i) break;
        h->ev[i] = h->ev[m];
        i = m;
    }
    if (h->n) h->ev[i] = last;
    return top;
}

static double progress_at(const struct rjob *j, double t) {
    double p = t - j->run_start - j->restore_s;
    return p > 0 ? p : 0;
}

/* Brings what the library reads about a running job up to `now`. */
static void refresh_running(struct rjob *j, const struct sim_replay_opts *o, double now) {
    double p = progress_at(j, now);
    double saved = o->checkpoint_every_s > 0 ? floor(p / o->checkpoint_every_s) * o->checkpoint_every_s : 0;
    j->pl.last_checkpoint_time = saved > 0 ? j->run_start + j->restore_s + saved : j->run_start;
    j->pl.attained_gpu_s = j->attained_before + (now - j->run_start) * j->pl.gpus;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(double *v, int32_t n, double q) {
    if (n == 0) return 0;
    int32_t i = (int32_t)ceil(q * n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static int32_t largest_pool_gpus(const struct sim_fleet *f) {
    int32_t best = 0;
    for (int32_t i = 0; i < f->n_nodes; i++) {
        int32_t sum = 0;
        for (int32_t k = 0; k < f->n_nodes; k++)
            if (f->nodes[k].dc == f->nodes[i].dc && f->nodes[k].gpu_type == f->nodes[i].gpu_type) sum += f->nodes[k].gpus;
        if (sum > best) best = sum;
        if (best >= PL_MAX_GPUS_PER_NODE * PL_MAX_NODES_PER_JOB) break;
    }
    return best;
}

int sim_replay(FILE *out, const struct sim_fleet *fleet, const struct sim_trace *trace, const struct sim_replay_opts *o,
               const char *policy, struct whet_err *err) {
    struct pl_config cfg;
    if (pl_config_for_policy(&cfg, policy)) return whet_errf(err, "unknown policy \"%s\"", policy);
    int32_t n = o->max_jobs > 0 && o->max_jobs < trace->n ? o->max_jobs : trace->n;
    int32_t n_tenants = trace->tenants.n;
    struct pl_tenant *tenants = xcalloc((size_t)n_tenants, sizeof *tenants);
    for (int32_t t = 0; t < n_tenants; t++) {
        tenants[t].weight = 1;
        tenants[t].may_borrow = 1;
    }
    char msg[256];
    struct pl_cluster *c = pl_cluster_new(fleet->nodes, fleet->n_nodes, tenants, n_tenants, &cfg, msg, sizeof msg);
    if (!c) {
        free(tenants);
        return whet_errf(err, "fleet: %s", msg);
    }
    /* The FGD profile: the trace's job sizes seen so far would do; the mix of sizes is what matters,
     * so use the sizes of the replayed jobs (no durations). */
    struct pl_shape shapes[8] = {{0}};
    int32_t n_shapes = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t g = trace->jobs[i].gpus, k = 0;
        if (g > 8) continue;
        while (k < n_shapes && shapes[k].gpus != g) k++;
        if (k == n_shapes && n_shapes < 8) shapes[n_shapes++] = (struct pl_shape){g, PL_MILLI, 0, 0, 0, 0};
        if (k < n_shapes) shapes[k].weight += 1;
    }
    pl_cluster_set_profile(c, shapes, n_shapes);

    int32_t max_gang = largest_pool_gpus(fleet);
    struct rjob *jobs = xcalloc((size_t)n, sizeof *jobs);
    struct pl_job **queue = xmalloc((size_t)n * sizeof *queue);
    int32_t n_queue = 0, next_arrival = 0, finished = 0, unplaceable = 0, preemptions = 0;
    struct heap h = {0};
    double now = 0, last_cycle = -INFINITY, cap_gpus = (double)pl_cluster_gpu_milli_capacity(c) / PL_MILLI;
    double t0 = whet_now_mono();
    int64_t cycles = 0, decisions = 0;
    for (int32_t i = 0; i < n; i++) {
        struct rjob *j = &jobs[i];
        j->pl.id = (uint64_t)i + 1;
        j->pl.tenant = trace->jobs[i].tenant;
        j->pl.gpus = trace->jobs[i].gpus;
        j->pl.gpu_milli = PL_MILLI;
        j->pl.preemptible = 1;
        j->pl.grace_s = o->grace_s;
        j->pl.submit_time = trace->jobs[i].submit_s;
        j->duration_s = trace->jobs[i].duration_s;
        j->remaining_s = j->duration_s;
        j->first_start = -1;
        if (j->pl.gpus > max_gang) {
            unplaceable++;
            j->unplaceable = 1;
        }
    }

    while (finished + unplaceable < n) {
        double t_arrival = next_arrival < n ? jobs[next_arrival].pl.submit_time : INFINITY;
        double t_event = h.n ? h.ev[0].t : INFINITY;
        double t_tick = n_queue ? last_cycle + TICK_S : INFINITY;
        now = fmin(t_arrival, fmin(t_event, t_tick));
        if (now == INFINITY) break; /* nothing can ever run again: report what finished */
        int changed = now == t_tick;
        while (next_arrival < n && jobs[next_arrival].pl.submit_time <= now) {
            struct rjob *j = &jobs[next_arrival++];
            if (j->unplaceable) continue;
            queue[n_queue++] = &j->pl;
            changed = 1;
        }
        while (h.n && h.ev[0].t <= now) {
            struct event e = heap_pop(&h);
            struct rjob *j = &jobs[e.job];
            if (e.version != j->version) continue;
            j->version++;
            j->held_gpu_s += (now - j->run_start) * j->pl.gpus;
            if (e.kind == EV_DONE) {
                j->finish = now;
                j->remaining_s = 0;
                j->done = 1;
                finished++;
            } else {
                double p = progress_at(j, now);
                double saved = o->checkpoint_every_s > 0 ? floor(p / o->checkpoint_every_s) * o->checkpoint_every_s : 0;
                if (saved > j->remaining_s) saved = j->remaining_s;
                j->remaining_s -= saved;
                j->attained_before += (now - j->run_start) * j->pl.gpus;
            }
            pl_cluster_release(c, &j->pl);
            if (e.kind == EV_STOP) queue[n_queue++] = &j->pl;
            changed = 1;
        }
        if (!changed) continue;

        for (int32_t r = 0; r < pl_cluster_n_running(c); r++)
            refresh_running((struct rjob *)pl_cluster_running(c, r), o, now);
        for (int32_t q = 0; q < n_queue; q++) queue[q]->attained_gpu_s = ((struct rjob *)queue[q])->attained_before;
        const struct pl_result *res = pl_schedule(c, queue, n_queue, now);
        cycles++;
        decisions += res->n;
        last_cycle = now;
        for (int32_t d = 0; d < res->n; d++) {
            const struct pl_decision *dec = &res->decisions[d];
            struct rjob *j = (struct rjob *)dec->job;
            int32_t idx = (int32_t)(j - jobs);
            if (dec->action == PL_PLACE) {
                j->run_start = now;
                j->restore_s = j->started ? o->checkpoint_cost_s : 0;
                if (!j->started) j->first_start = now;
                j->started = 1;
                j->version++;
                heap_push(&h, (struct event){now + j->restore_s + j->remaining_s, idx, EV_DONE, j->version});
            } else if (dec->action == PL_PREEMPT) {
                preemptions++;
                /* It runs on through its grace period, then stops (unless it finishes first). */
                double done_at = j->run_start + j->restore_s + j->remaining_s;
                if (done_at > dec->not_before) {
                    j->version++;
                    heap_push(&h, (struct event){dec->not_before, idx, EV_STOP, j->version});
                }
            }
        }
        int32_t w = 0;
        for (int32_t q = 0; q < n_queue; q++)
            if (queue[q]->state == PL_JOB_QUEUED) queue[w++] = queue[q];
        n_queue = w;
    }
    double elapsed = whet_now_mono() - t0;

    /* Report. */
    double *jct = xmalloc((size_t)(n ? n : 1) * sizeof *jct), *wait = xmalloc((size_t)(n ? n : 1) * sizeof *wait);
    double sum_jct = 0, sum_wait = 0, held = 0, first_submit = n ? jobs[0].pl.submit_time : 0, last_finish = 0;
    int32_t m = 0;
    struct tstat {
        int32_t jobs;
        double jct, gpu_s, slowdown;
    } *ts = xcalloc((size_t)n_tenants, sizeof *ts);
    for (int32_t i = 0; i < n; i++) {
        struct rjob *j = &jobs[i];
        held += j->held_gpu_s;
        if (!j->done) continue;
        double x = j->finish - j->pl.submit_time;
        jct[m] = x;
        wait[m] = j->first_start - j->pl.submit_time;
        sum_jct += x;
        sum_wait += wait[m];
        m++;
        if (j->finish > last_finish) last_finish = j->finish;
        struct tstat *t = &ts[j->pl.tenant];
        t->jobs++;
        t->jct += x;
        t->gpu_s += j->duration_s * j->pl.gpus;
        t->slowdown += x / fmax(j->duration_s, SLOWDOWN_FLOOR_S);
    }
    qsort(jct, (size_t)m, sizeof *jct, cmp_double);
    qsort(wait, (size_t)m, sizeof *wait, cmp_double);
    double makespan = last_finish - first_submit;
    double ftf_sum = 0, ftf_sq = 0, ftf_max = 0;
    int32_t active = 0;
    for (int32_t t = 0; t < n_tenants; t++) {
        if (!ts[t].jobs) continue;
        double f = ts[t].slowdown / ts[t].jobs;
        ftf_sum += f;
        ftf_sq += f * f;
        if (f > ftf_max) ftf_max = f;
        active++;
    }
    fprintf(out,
            "{\"mode\":\"replay\",\"policy\":\"%s\",\"jobs\":%d,\"finished\":%d,\"unplaceable\":%d,\"gpus\":%.0f,"
            "\"avg_jct_s\":%.1f,\"p50_jct_s\":%.1f,\"p99_jct_s\":%.1f,\"avg_queue_s\":%.1f,\"p99_queue_s\":%.1f,"
            "\"makespan_s\":%.0f,\"gpu_utilization\":%.4f,\"preemptions\":%d,\"ftf_max\":%.3f,\"ftf_jain\":%.4f,"
            "\"cycles\":%lld,\"decisions\":%lld,\"wall_s\":%.2f,\"tenants\":{",
            policy, n, m, unplaceable, cap_gpus, m ? sum_jct / m : 0, percentile(jct, m, 0.5), percentile(jct, m, 0.99),
            m ? sum_wait / m : 0, percentile(wait, m, 0.99), makespan,
            makespan > 0 ? held / (cap_gpus * makespan) : 0, preemptions, ftf_max,
            active ? ftf_sum * ftf_sum / (active * ftf_sq) : 0, (long long)cycles, (long long)decisions, elapsed);
    int first = 1;
    for (int32_t t = 0; t < n_tenants; t++) {
        if (!ts[t].jobs) continue;
        fprintf(out, "%s\"%s\":{\"jobs\":%d,\"avg_jct_s\":%.1f,\"gpu_hours\":%.1f,\"ftf\":%.3f}", first ? "" : ",",
                trace->tenants.names[t], ts[t].jobs, ts[t].jct / ts[t].jobs, ts[t].gpu_s / 3600,
                ts[t].slowdown / ts[t].jobs);
        first = 0;
    }
    fprintf(out, "}}\n");
    free(ts);
    free(jct);
    free(wait);
    free(h.ev);
    free(queue);
    free(jobs);
    free(tenants);
    pl_cluster_free(c);
    return 0;
}
