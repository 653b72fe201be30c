/* job_estimate.h - the arithmetic of a job's estimate (estimate.h says where its inputs come from and what it
 * is for), as whet_job_estimate computes it in SQL (migration 0054): expression for expression and type for
 * type, so that the JSON is the one the function answers, number for number. float8 there is double here, with
 * the same operations in the same order and none fused into a multiply-add (PostgreSQL's float8 operators are a
 * function each, and never fuse); PostgreSQL's numeric appears where the SQL rounds:
 * round(x::numeric, s) keeps the double's 15 significant digits (float8_numeric's DBL_DIG), then rounds half
 * away from zero (job_estimate_round). Pure: no I/O. */
#ifndef WHET_GATEWAY_JOB_ESTIMATE_H
#define WHET_GATEWAY_JOB_ESTIMATE_H

#include <stddef.h>

struct whet_buf;

/* An SQL NULL among the doubles below (coalesce'd as the SQL does). */
#define JOB_ESTIMATE_NULL (-1.0)

/* The estimate's inputs, each as whet_job_estimate reads it. Text is JSON where it says so; NULL is SQL NULL. */
struct job_estimate_in {
    const char *method;      /* the method's type */
    long long epochs, batch; /* its n_epochs and batch_size (absent: 1), at least 1 */
    int has_max_steps;
    long long max_steps;                      /* whet.max_steps */
    int reinforcement;                        /* then the rollout's settings: */
    double n, max_tokens, ppo_epochs;         /* ppo_epochs JOB_ESTIMATE_NULL when absent (1) */
    const char *tokenization;                 /* JSON: the count as given (a dry run's) or kept, else NULL */
    const char *count_source;                 /* the count's source, when it has one; then these are the count's: */
    long long count_examples;                 /* -1 when absent */
    double count_tokens, count_prompt_tokens; /* JOB_ESTIMATE_NULL when absent */
    long long file_bytes, file_lines;         /* lines -1 when NULL */
    double per_step;                    /* the previous job's trained tokens a step, JOB_ESTIMATE_NULL when none */
    const char *sizing;                 /* JSON, or NULL */
    const char *device, *device_source; /* the device type and why (estimate.c chooses, as the SQL) */
    long long devices;                  /* the sizing's device_count, at least 1 */
    double rate;                        /* tokens a device-second, and why */
    const char *rate_source;
    const char *currency; /* the price book's in effect, else the newest's, else USD */
    /* unit prices of the book in effect as numeric text (NULL: none), read as PostgreSQL casts numeric to
     * float8 */
    const char *device_hour, *tokens_1m, *rollout_1m;
    const char *rollout; /* JSON: the rollout settings as given, or NULL */
};

/* Appends the estimate as a JSON object to `out`. Returns 0, or -1 when a figure is not finite (where the SQL
 * raised an error: a number out of range), having appended nothing. */
int job_estimate_json(const struct job_estimate_in *in, struct whet_buf *out);

/* PostgreSQL's round(x::numeric, scale) as numeric_out writes it ("1500.000", "0.018419", "-0.5"; a rounded
 * zero has no sign): x to 15 significant digits, then to `scale` decimals, half away from zero. `buf` holds
 * JOB_ESTIMATE_NUMERIC_MAX bytes; x is finite and |x| < 1e300. */
#define JOB_ESTIMATE_NUMERIC_MAX 340
void job_estimate_round(double x, int scale, char buf[JOB_ESTIMATE_NUMERIC_MAX]);

#endif
