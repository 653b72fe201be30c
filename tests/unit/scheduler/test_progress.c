/* test_progress.c - which heartbeat progress reports the scheduler writes (scheduler/service/progress.c):
 * an attempt's first report, a changed total, and a grown step at most every progress_ms; nothing it has
 * not seen committed is taken as written, and attempts silent for a minute are forgotten. */
#include <stdlib.h>

#include "service_internal.h"
#include "test.h"

/* A heartbeat of one node reporting jobs[0..n). */
struct beat {
    Whet__V1__HeartbeatRequest req;
    Whet__V1__JobProgress jobs[4], *ptrs[4];
};

/* A scheduler that writes a grown step at most every progress_ms, and a heartbeat of n jobs. */
static void start(int progress_ms, struct beat *b, int n) {
    scheduler_progress_init(progress_ms);
    whet__v1__heartbeat_request__init(&b->req);
    for (int i = 0; i < n; i++) {
        whet__v1__job_progress__init(&b->jobs[i]);
        b->ptrs[i] = &b->jobs[i];
    }
    b->req.n_jobs = (size_t)n;
    b->req.jobs = b->ptrs;
}

static void report(struct beat *b, int i, char *job, uint32_t attempt, uint32_t step, uint32_t total, uint64_t tokens) {
    b->jobs[i].job_id = job;
    b->jobs[i].attempt = attempt;
    b->jobs[i].step = step;
    b->jobs[i].total_steps = total;
    b->jobs[i].trained_tokens = tokens;
}

/* How many of b's reports are due at `now`; when `commit`, they are then noted as written. */
static size_t due(struct beat *b, double now, int commit) {
    const Whet__V1__JobProgress *d[4];
    size_t n = scheduler_progress_due(&b->req, now, 0, d);
    for (size_t i = 0; i < n; i++) CHECK(d[i] >= b->jobs && d[i] < b->jobs + b->req.n_jobs); /* pointers into req */
    if (commit) scheduler_progress_written(d, n, now);
    return n;
}

TEST(a_grown_step_waits_for_the_interval) {
    struct beat b;
    start(5000, &b, 1);
    report(&b, 0, "ftjob-a", 1, 1, 10, 100);
    CHECK(due(&b, 1000.0, 1) == 1); /* the attempt's first report */
    CHECK(due(&b, 1001.0, 1) == 0); /* the same again */
    report(&b, 0, "ftjob-a", 1, 2, 10, 200);
    CHECK(due(&b, 1002.0, 1) == 0); /* grown, but 2 s after the last write */
    CHECK(due(&b, 1005.0, 1) == 1); /* grown, 5 s after */
    CHECK(due(&b, 1006.0, 1) == 0); /* ... and written then */
    report(&b, 0, "ftjob-a", 1, 2, 12, 200);
    CHECK(due(&b, 1006.5, 1) == 1); /* a changed total is news at once */
    report(&b, 0, "ftjob-a", 2, 0, 12, 0);
    CHECK(due(&b, 1007.0, 1) == 1); /* a new attempt's first report */
    scheduler_progress_free();
}

/* A heartbeat that goes to the database anyway writes every job's news, the interval not yet passed; what
 * did not change is still left out, and counts as written with it: the node's jobs fall due together. */
TEST(every_news_when_written_anyway) {
    struct beat b;
    start(5000, &b, 2);
    report(&b, 0, "ftjob-f", 1, 1, 10, 100);
    report(&b, 1, "ftjob-g", 1, 1, 10, 100);
    CHECK(due(&b, 4000.0, 1) == 2);
    report(&b, 0, "ftjob-f", 1, 2, 10, 200);
    const Whet__V1__JobProgress *d[4];
    CHECK(scheduler_progress_due(&b.req, 4002.0, 0, d) == 0); /* grown, 2 s after the last write */
    CHECK(scheduler_progress_due(&b.req, 4002.0, 1, d) == 1 && d[0] == &b.jobs[0]); /* news, unchanged left out */
    scheduler_progress_written(d, 1, 4002.0);
    scheduler_progress_seen(&b.req, 4002.0); /* the unchanged one counts as written then too */
    report(&b, 1, "ftjob-g", 1, 2, 10, 200);
    CHECK(due(&b, 4006.0, 0) == 0); /* both due together again, 5 s after that heartbeat */
    report(&b, 0, "ftjob-f", 1, 3, 10, 300);
    CHECK(due(&b, 4007.0, 0) == 2);
    scheduler_progress_free();
}

TEST(only_what_was_committed_counts_as_written) {
    struct beat b;
    start(5000, &b, 2);
    report(&b, 0, "ftjob-b", 1, 1, 10, 100);
    report(&b, 1, "ftjob-c", 3, 7, 10, 700);
    CHECK(due(&b, 2000.0, 0) == 2); /* the batch failed: nothing noted */
    CHECK(due(&b, 2000.5, 1) == 2);
    CHECK(due(&b, 2001.0, 0) == 0);
    /* the same job from two ranks of a gang: one memory per attempt */
    report(&b, 1, "ftjob-b", 1, 1, 10, 100);
    CHECK(due(&b, 2001.0, 0) == 0);
    scheduler_progress_free();
    CHECK(due(&b, 2001.0, 0) == 2); /* a new leader remembers nothing */
    scheduler_progress_free();
}

TEST(zero_writes_every_report) {
    struct beat b;
    start(0, &b, 1);
    report(&b, 0, "ftjob-d", 1, 1, 10, 100);
    for (int i = 0; i < 3; i++) CHECK(due(&b, 3000.0 + i, 1) == 1);
    scheduler_progress_free();
}

/* A job id that is not UTF-8 names no job, and its JSON would spoil the batch of heartbeats it is written in. */
TEST(a_job_id_not_utf8_is_never_due) {
    struct beat b;
    start(0, &b, 2);
    report(&b, 0, "ftjob-\xff", 1, 1, 10, 100);
    report(&b, 1, "ftjob-e", 1, 1, 10, 100);
    const Whet__V1__JobProgress *d[4];
    CHECK(scheduler_progress_due(&b.req, 3500.0, 0, d) == 1 && d[0] == &b.jobs[1]);
    scheduler_progress_free();
}

TEST(silent_attempts_are_forgotten_and_many_are_held) {
    struct beat b;
    start(5000, &b, 1);
    char ids[3000][16];
    for (int i = 0; i < 3000; i++) { /* past the table's first size: it grows */
        snprintf(ids[i], sizeof ids[i], "ftjob-%d", i);
        report(&b, 0, ids[i], 1, 5, 10, 50);
        CHECK(due(&b, 4000.0, 1) == 1);
    }
    int repeated = 0;
    for (int i = 0; i < 3000; i++) {
        report(&b, 0, ids[i], 1, 5, 10, 50);
        repeated += (int)due(&b, 4001.0, 0);
    }
    CHECK(repeated == 0);
    report(&b, 0, "ftjob-other", 1, 1, 10, 10);
    CHECK(due(&b, 4100.0, 1) == 1); /* a write a minute later sweeps the silent ones */
    report(&b, 0, ids[17], 1, 5, 10, 50);
    CHECK(due(&b, 4100.5, 0) == 1); /* forgotten: written again (the database skips an unchanged row) */
    scheduler_progress_free();
}

int main(void) {
    RUN(a_grown_step_waits_for_the_interval);
    RUN(every_news_when_written_anyway);
    RUN(only_what_was_committed_counts_as_written);
    RUN(zero_writes_every_report);
    RUN(a_job_id_not_utf8_is_never_due);
    RUN(silent_attempts_are_forgotten_and_many_are_held);
    return test_summary();
}
