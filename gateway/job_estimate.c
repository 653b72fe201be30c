/* job_estimate.c - the estimate's arithmetic (see job_estimate.h). Each figure names the SQL of
 * whet_job_estimate (migration 0054) it stands for. */
#include "job_estimate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "json_text.h"
#include "util.h"

/* No fused multiply-adds (job_estimate.h): GCC contracts only in its GNU modes, and the project builds as ISO
 * C17; clang contracts within an expression unless told not to. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

void job_estimate_round(double x, int scale, char buf[JOB_ESTIMATE_NUMERIC_MAX]) {
    /* float8_numeric: snprintf("%.*g", DBL_DIG): 15 significant digits, the same as %.14e's */
    char sci[32];
    snprintf(sci, sizeof sci, "%.14e", x);
    const char *p = sci;
    int negative = *p == '-';
    if (negative) p++;
    char digits[15];
    int nd = 0;
    for (; *p && *p != 'e' && nd < 15; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp10 = atoi(strchr(sci, 'e') + 1); /* digits[i] is worth 10^(exp10 - i) */
    /* the kept digits, down to 10^-scale, then numeric's rounding: up when the next digit is 5 or more */
    int keep = exp10 + scale + 1;
    char r[JOB_ESTIMATE_NUMERIC_MAX];
    int rn = 0;
    r[rn++] = '0'; /* room for a carry */
    for (int i = 0; i < keep; i++) r[rn++] = i < nd ? digits[i] : '0';
    if (keep >= 0 && keep < nd && digits[keep] >= '5') {
        int i = rn - 1;
        while (r[i] == '9') r[i--] = '0';
        r[i]++;
    }
    /* at least one digit before the point */
    while (rn < scale + 1) {
        memmove(r + 1, r, (size_t)rn);
        r[0] = '0';
        rn++;
    }
    int start = 0;
    while (start < rn - scale - 1 && r[start] == '0') start++;
    int zero = 1;
    for (int i = start; i < rn; i++)
        if (r[i] != '0') zero = 0;
    char *o = buf;
    if (negative && !zero) *o++ = '-';
    for (int i = start; i < rn; i++) {
        if (i == rn - scale) *o++ = '.';
        *o++ = r[i];
    }
    *o = 0;
}

/* Appends "key":value for the JSON text `json` (NULL: null). */
static void put_raw(struct whet_buf *b, const char *key, const char *json) {
    whet_buf_printf(b, ",\"%s\":%s", key, json ? json : "null");
}

static void put_string(struct whet_buf *b, const char *key, const char *s) {
    whet_buf_printf(b, ",\"%s\":", key);
    if (s) whet_json_put_string(b, s, strlen(s));
    else whet_buf_puts(b, "null");
}

static void put_round(struct whet_buf *b, const char *key, double x, int scale) {
    char text[JOB_ESTIMATE_NUMERIC_MAX];
    job_estimate_round(x, scale, text);
    put_raw(b, key, text);
}

/* A numeric price cast to float8 (numeric_float8: its text read by strtod); coalesce(price, 0). */
static double price(const char *numeric) { return numeric ? strtod(numeric, NULL) : 0; }

int job_estimate_json(const struct job_estimate_in *in, struct whet_buf *out) {
    /* v_examples: the count's, else the file's lines; v_per_epoch: ceil(v_examples::numeric / v_batch) */
    long long examples = in->count_source && in->count_examples >= 0 ? in->count_examples
                         : in->file_lines > 0                        ? in->file_lines
                                                                     : 0;
    long long per_epoch = examples > 0 ? (examples + in->batch - 1) / in->batch : 0;
    long long steps = in->has_max_steps ? in->max_steps : in->epochs * per_epoch;
    double per_epoch_at_least_1 = (double)(per_epoch > 1 ? per_epoch : 1);
    /* v_tokens: from the count, else a quarter of the file's bytes (bytes / 4.0, a numeric cast to float8:
     * exact), else the previous job's tokens a step */
    double quarter_bytes = (double)in->file_bytes / 4.0, tokens;
    if (in->count_source || in->per_step == JOB_ESTIMATE_NULL) {
        double epoch;
        if (in->reinforcement)
            epoch = in->n * (in->ppo_epochs == JOB_ESTIMATE_NULL ? 1 : in->ppo_epochs) *
                    ((in->count_prompt_tokens == JOB_ESTIMATE_NULL ? quarter_bytes : in->count_prompt_tokens) +
                     (double)examples * in->max_tokens);
        else epoch = in->count_tokens == JOB_ESTIMATE_NULL ? quarter_bytes : in->count_tokens;
        tokens = epoch * (double)steps / per_epoch_at_least_1;
    } else {
        tokens = in->per_step * (double)steps;
    }
    double rollout =
        in->reinforcement ? (double)examples * in->n * in->max_tokens * (double)steps / per_epoch_at_least_1 : 0;
    /* the cost's lines: v_tokens / v_rate / 3600 * hour, v_tokens / 1e6 * tokens_1m, v_rollout / 1e6 * rollout_1m */
    double device_hours = tokens / in->rate / 3600 * price(in->device_hour);
    double trained = tokens / 1e6 * price(in->tokens_1m);
    double rollout_cost = rollout / 1e6 * price(in->rollout_1m);
    double amount = device_hours + trained + rollout_cost;
    double duration = ceil(tokens / in->rate / (double)in->devices);
    if (!isfinite(tokens) || !isfinite(rollout) || !isfinite(amount) || !isfinite(duration) || !isfinite(in->rate) ||
        fabs(tokens) >= 9e18 || fabs(rollout) >= 9e18 || fabs(duration) >= 9e18 || fabs(amount) >= 1e300)
        return -1;

    whet_buf_puts(out, "{\"object\":\"fine_tuning.job.estimate\"");
    put_string(out, "method", in->method);
    whet_buf_printf(out, ",\"training_examples\":%lld,\"n_epochs\":%lld,\"batch_size\":%lld,\"steps\":%lld", examples,
                    in->epochs, in->batch, steps);
    whet_buf_printf(out, ",\"trained_tokens\":%lld", (long long)rint(tokens)); /* round(float8): rint */
    put_string(out, "trained_tokens_source",
               in->count_source                    ? in->count_source
               : in->per_step != JOB_ESTIMATE_NULL ? "previous_job"
                                                   : "file_bytes");
    put_raw(out, "tokenization", in->tokenization);
    put_string(out, "device_type", in->device);
    put_string(out, "device_type_source", in->device_source);
    whet_buf_printf(out, ",\"device_count\":%lld", in->devices);
    put_raw(out, "sizing", in->sizing);
    put_round(out, "tokens_per_device_s", in->rate, 3);
    put_string(out, "throughput_source", in->rate_source);
    whet_buf_printf(out, ",\"expected_duration_s\":%lld", (long long)duration);
    char amount_text[JOB_ESTIMATE_NUMERIC_MAX];
    job_estimate_round(amount, 6, amount_text);
    whet_buf_printf(out, ",\"cost\":{\"amount\":%s", amount_text);
    put_string(out, "currency", in->currency);
    whet_buf_puts(out, ",\"line_items\":{");
    char *key = xasprintf("device_hours:%s", in->device);
    whet_json_put_string(out, key, strlen(key));
    free(key);
    char line[JOB_ESTIMATE_NUMERIC_MAX];
    job_estimate_round(device_hours, 6, line);
    whet_buf_printf(out, ":%s", line);
    put_round(out, "trained_tokens", trained, 6);
    if (in->reinforcement) put_round(out, "rollout_tokens", rollout_cost, 6);
    whet_buf_puts(out, "}}");
    if (in->reinforcement) {
        whet_buf_printf(out, ",\"rollout_tokens\":%lld", (long long)rint(rollout));
        whet_buf_puts(out, ",\"rollout_tokens_upper_bound\":true,\"trained_tokens_upper_bound\":true");
        put_raw(out, "rollout", in->rollout);
    }
    whet_buf_puts(out, "}");
    return 0;
}
