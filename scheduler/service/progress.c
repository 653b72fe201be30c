/* progress.c - which of a heartbeat's progress reports are written to job_progress.
 *
 * Every heartbeat carries the step and token count of each attempt its node runs: at 2,000 nodes × 8
 * attempts and a 2 s interval that is 8,000 reports a second, and writing them (two joins and an upsert
 * per report) was most of the heartbeat statement's cost in tests/bench/scale (3.8 ms a statement of
 * 4.8 heartbeats, 54% of a core of PostgreSQL). What reads them tolerates a few seconds of staleness:
 * a running job's trained_tokens and estimated_finish in the API, and budgets; a job's final figures
 * come with its FinishJob. So each scheduler process remembers, per attempt, what it last wrote and
 * when, and a report is written when it is news: the attempt's first, a changed total, or a grown step
 * or token count once progress_ms have passed since that attempt's last write. progress_ms 0 writes
 * every report (the database still skips a row that would not change).
 *
 * A heartbeat that goes to the database anyway (its node's lease falls due, a command waits, one of its
 * jobs' reports is due) takes every job's news with it (every_news), and its reports with none count as
 * written then too (scheduler_progress_seen: the rows hold them): a node's jobs then fall due together,
 * and its heartbeats in between are answered from memory (heartbeat_quiet.c). A step grown just after
 * such a heartbeat is written up to progress_ms later.
 *
 * What is remembered is only what this process wrote and saw committed; another scheduler (after a
 * failover) starts empty and writes each attempt's next report. Attempts not written for a minute
 * (ended, or their job's steps stalled) are forgotten in a sweep; a stalled one's next report is
 * written again, which the database skips when nothing changed. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "service_internal.h"
#include "utf8.h"

#define FORGET_AFTER_S 60.0

struct seen {
    char *job_id;
    uint32_t attempt;
    int64_t step, total, tokens;
    double written; /* monotonic seconds */
    struct seen *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct seen **buckets;
static size_t n_buckets, n_seen;
static double progress_s, last_sweep;

void scheduler_progress_init(int progress_ms) { progress_s = progress_ms / 1000.0; }

static size_t bucket_of(const char *job_id, uint32_t attempt) {
    uint64_t h = 1469598103934665603ull ^ attempt; /* FNV-1a */
    for (const unsigned char *c = (const unsigned char *)job_id; *c; c++) h = (h ^ *c) * 1099511628211ull;
    return (size_t)h & (n_buckets - 1);
}

static struct seen **find(const char *job_id, uint32_t attempt) {
    struct seen **link = &buckets[bucket_of(job_id, attempt)];
    while (*link && ((*link)->attempt != attempt || strcmp((*link)->job_id, job_id))) link = &(*link)->next;
    return link;
}

static void grow(void) {
    size_t old_n = n_buckets;
    struct seen **old = buckets;
    n_buckets = old_n ? 2 * old_n : 1024;
    buckets = xcalloc(n_buckets, sizeof *buckets);
    for (size_t b = 0; b < old_n; b++)
        for (struct seen *e = old[b], *next; e; e = next) {
            next = e->next;
            struct seen **head = &buckets[bucket_of(e->job_id, e->attempt)];
            e->next = *head;
            *head = e;
        }
    free(old);
}

static void sweep(double now) {
    for (size_t b = 0; b < n_buckets; b++)
        for (struct seen **link = &buckets[b]; *link;) {
            struct seen *e = *link;
            if (now - e->written < FORGET_AFTER_S) {
                link = &e->next;
                continue;
            }
            *link = e->next;
            free(e->job_id);
            free(e);
            n_seen--;
        }
    last_sweep = now;
}

size_t scheduler_progress_due(const Whet__V1__HeartbeatRequest *req, double now, int every_news,
                              const Whet__V1__JobProgress **due) {
    size_t n = 0;
    if (progress_s > 0) pthread_mutex_lock(&lock);
    for (size_t i = 0; i < req->n_jobs; i++) {
        const Whet__V1__JobProgress *p = req->jobs[i];
        if (!utf8_valid(p->job_id, strlen(p->job_id))) continue; /* names no job; would spoil the batch's JSON */
        if (progress_s > 0 && n_buckets) {
            const struct seen *e = *find(p->job_id, p->attempt);
            if (e && e->total == (int64_t)p->total_steps &&
                ((e->step >= (int64_t)p->step && e->tokens >= (int64_t)p->trained_tokens) ||
                 (!every_news && now - e->written < progress_s)))
                continue;
        }
        due[n++] = p;
    }
    if (progress_s > 0) pthread_mutex_unlock(&lock);
    return n;
}

void scheduler_progress_written(const Whet__V1__JobProgress *const *written, size_t n, double now) {
    if (progress_s <= 0 || !n) return;
    pthread_mutex_lock(&lock);
    if (n_seen >= n_buckets) grow();
    for (size_t i = 0; i < n; i++) {
        const Whet__V1__JobProgress *r = written[i];
        struct seen **link = find(r->job_id, r->attempt), *e = *link;
        if (!e) {
            e = *link = xcalloc(1, sizeof *e);
            e->job_id = xstrdup(r->job_id);
            e->attempt = r->attempt;
            n_seen++;
        }
        e->step = r->step;
        e->total = r->total_steps;
        e->tokens = (int64_t)r->trained_tokens;
        e->written = now;
    }
    if (now - last_sweep >= FORGET_AFTER_S) sweep(now);
    pthread_mutex_unlock(&lock);
}

void scheduler_progress_seen(const Whet__V1__HeartbeatRequest *req, double now) {
    if (progress_s <= 0) return;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < req->n_jobs && n_buckets; i++) {
        struct seen *e = *find(req->jobs[i]->job_id, req->jobs[i]->attempt);
        if (e) e->written = now;
    }
    pthread_mutex_unlock(&lock);
}

void scheduler_progress_free(void) {
    pthread_mutex_lock(&lock);
    sweep(1e300); /* everything is older than that */
    free(buckets);
    buckets = NULL;
    n_buckets = 0;
    last_sweep = 0;
    pthread_mutex_unlock(&lock);
}
