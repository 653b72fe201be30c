/* pygrader.h - OpenAI's `python` grader: tenant code `grade(sample, item) -> float`, run sandboxed.
 *
 * The tenant's `source` runs under Debian's /usr/bin/python3 (-I -S -B: no environment, no user
 * site, no bytecode writes; /usr/lib/python3/dist-packages is on the path so numpy and friends
 * import when installed) inside the sandbox (sandbox.h): no network, a read-only system, a tmpfs
 * /tmp as the only writable place, memory, CPU, process and wall-clock limits.
 *
 * A batch of (sample, item) pairs goes to one python process over stdin as JSON lines; a small
 * harness (embedded in pygrader.c) loads the source once, calls grade() for each pair under a
 * per-sample alarm, and answers one JSON line per pair on a private copy of stdout (the tenant's
 * print() goes to stderr). Batches run in parallel. Every failure becomes score 0 with an error
 * text, never a failed call: an exception or a non-numeric result fails that sample only; a sandbox
 * killed mid-batch (memory, process limit, a C-level loop, os._exit) fails the sample it was on,
 * and the rest of that batch is retried in a fresh sandbox; a grader that cannot load fails all. */
#ifndef WHET_PYGRADER_H
#define WHET_PYGRADER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct pygrader_opts {
    int parallel;             /* sandboxes at once (default 4) */
    size_t batch_size;        /* pairs per sandbox (default: n spread over `parallel`) */
    double sample_timeout_s;  /* per grade() call (default 5) */
    double startup_timeout_s; /* python start plus loading the source (default 10) */
    uint64_t mem_bytes;       /* per sandbox (default 512 MiB) */
    int max_procs;            /* per sandbox (default 16) */
    const char *python;       /* default /usr/bin/python3 */
};

/* Fills the defaults above. */
void pygrader_opts_init(struct pygrader_opts *opts);

struct pygrader_score {
    double score;             /* 0 when error is set */
    char *error;              /* NULL when graded; else why not (owned, freed by pygrader_scores_free) */
    double seconds;           /* wall time of the sandbox that answered, divided by its batch size */
};

/* Grades pairs (samples[i], items[i]), i < n, into scores[i]. `samples[i]` is OpenAI's sample object
 * ({"output_text": …, "output_json": …, …}), `items[i]` the dataset row. Returns -1 (err) only when
 * nothing could be run at all (bad options, the runner failed); tenant-code failures are per-sample
 * errors. */
int pygrader_run(const struct pygrader_opts *opts, const char *source, json_t *const *samples,
                 json_t *const *items, size_t n, struct pygrader_score *scores, struct whet_err *err);
void pygrader_scores_free(struct pygrader_score *scores, size_t n);

#endif
