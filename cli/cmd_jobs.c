/* cmd_jobs.c - `whet jobs follow ID`: a tenant at a terminal watches a fine-tuning job through the REST
 * API (its key, api_client.h): a progress bar with the step, the loss, an ETA and the cost so far, its
 * place in the queue while it waits, and at the end the fine-tuned model's name alone on stdout
 * (`MODEL=$(whet jobs follow ID)`), so scripts and the quickstart can use it. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api_client.h"
#include "buf.h"
#include "commands.h"

static void jobs_usage(FILE *out) {
    fprintf(out, "usage: whet jobs follow JOB_ID [--interval SECONDS] [--url URL] [--data-dir DIR]\n\n"
                 "Follows a fine-tuning job until it ends: a progress bar on stderr with the step, the loss, the ETA\n"
                 "and the cost so far; when it succeeds, the fine-tuned model's name on stdout. Exits 0 when the\n"
                 "job succeeded, 1 when it failed or was cancelled.\n\n"
                 "  --interval SECONDS  how often to ask the gateway (default 2)\n"
                 "  --url URL           the gateway (default $WHET_API_BASE, else http://$WHET_HTTP)\n"
                 "  --data-dir DIR      read DIR/whet.env (written by `whet up`) for WHET_HTTP\n\n"
                 "The key comes from WHET_API_KEY (or OPENAI_API_KEY).\n");
}

/* What the bar shows, kept between polls. */
struct follow {
    long step;         /* the last step reported, -1 before the first */
    double loss;       /* its loss, NAN when none */
    double first_seen; /* whet_now_mono() when a step was first seen, and which */
    long first_step;
};

/* Reads the steps after the last one seen; returns -1 with `err` on failure. */
static int read_steps(struct api_client *c, const char *id, struct follow *f, long *total, struct whet_err *err) {
    for (;;) {
        char path[256];
        int n = snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/metrics?metrics=loss&limit=10000", id);
        if (f->step >= 0) snprintf(path + n, sizeof path - (size_t)n, "&after_step=%ld", f->step);
        json_t *m = api_call(c, "GET", path, NULL, NULL, NULL, NULL, err);
        if (!m) return -1;
        json_t *t = json_object_get(m, "total_steps");
        if (json_is_integer(t)) *total = (long)json_integer_value(t);
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(m, "data"), i, p) {
            f->step = (long)json_integer_value(json_object_get(p, "step"));
            json_t *loss = json_object_get(json_object_get(p, "metrics"), "loss");
            f->loss = json_is_number(loss) ? json_number_value(loss) : NAN;
            if (f->first_step < 0) {
                f->first_step = f->step;
                f->first_seen = whet_now_mono();
            }
        }
        int more = json_is_true(json_object_get(m, "has_more"));
        json_decref(m);
        if (!more) return 0;
    }
}

static void format_eta(struct whet_buf *b, double seconds) {
    long s = lround(seconds);
    if (s >= 3600) whet_buf_printf(b, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else whet_buf_printf(b, "%ld:%02ld", s / 60, s % 60);
}

/* The bar's text for the job as it stands; *fraction gets the share of steps done. */
static char *status_text(const json_t *job, const struct follow *f, long total, double *fraction) {
    struct whet_buf b = {0};
    const char *status = json_string_value(json_object_get(job, "status"));
    const json_t *w = json_object_get(job, "whet");
    *fraction = total > 0 && f->step >= 0 ? (double)f->step / (double)total : 0;
    if (!strcmp(status, "queued") || !strcmp(status, "validating_files")) {
        whet_buf_puts(&b, status);
        json_t *pos = json_object_get(w, "queue_position"), *why = json_object_get(w, "wait_reason");
        if (json_is_integer(pos)) whet_buf_printf(&b, "  #%lld in the queue", (long long)json_integer_value(pos));
        if (json_is_string(why)) whet_buf_printf(&b, "  %s", json_string_value(why));
        return b.data;
    }
    if (f->step >= 0) whet_buf_printf(&b, "step %ld", f->step);
    else whet_buf_puts(&b, "step -");
    if (total > 0) whet_buf_printf(&b, "/%ld", total);
    if (!isnan(f->loss)) whet_buf_printf(&b, "  loss %.4f", f->loss);
    if (!strcmp(status, "running") && total > 0 && f->step > f->first_step) {
        /* The steps' own pace since this command began watching; the job's estimated_finish otherwise. */
        double per_step = (whet_now_mono() - f->first_seen) / (double)(f->step - f->first_step);
        whet_buf_puts(&b, "  ETA ");
        format_eta(&b, per_step * (double)(total - f->step));
    } else if (!strcmp(status, "running") && json_is_integer(json_object_get(job, "estimated_finish"))) {
        double left = (double)(json_integer_value(json_object_get(job, "estimated_finish")) - whet_now_unix());
        whet_buf_puts(&b, "  ETA ");
        format_eta(&b, left > 0 ? left : 0);
    }
    const json_t *cost = json_object_get(w, "cost");
    if (cost) {
        double amount = json_number_value(json_object_get(cost, "amount")) +
                        json_number_value(json_object_get(cost, "running_amount"));
        whet_buf_printf(&b, "  cost %.4f %s", amount, json_string_value(json_object_get(cost, "currency")));
    }
    whet_buf_printf(&b, "  %s", status);
    return b.data;
}

static int jobs_follow(struct api_client *c, const char *id, double interval) {
    struct whet_err err;
    struct follow f = {.step = -1, .loss = NAN, .first_step = -1};
    struct progress_bar bar;
    progress_bar_init(&bar, stderr);
    char path[256];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s", id);
    long total = 0;
    for (;;) {
        json_t *job = api_call(c, "GET", path, NULL, NULL, NULL, NULL, &err);
        if (!job || read_steps(c, id, &f, &total, &err) < 0) {
            if (job) fputc('\n', stderr);
            json_decref(job);
            whet_err_report("whet jobs follow", &err);
            return 1;
        }
        const char *status = json_string_value(json_object_get(job, "status"));
        int done = !strcmp(status, "succeeded") || !strcmp(status, "failed") || !strcmp(status, "cancelled");
        double fraction;
        char *text = status_text(job, &f, total, &fraction);
        progress_bar_draw(&bar, !strcmp(status, "succeeded") ? 1 : fraction, text, done);
        free(text);
        if (done) {
            int ok = !strcmp(status, "succeeded");
            json_t *model = json_object_get(job, "fine_tuned_model");
            json_t *why = json_object_get(json_object_get(job, "error"), "message");
            if (ok && json_is_string(model)) puts(json_string_value(model));
            else if (json_is_string(why))
                fprintf(stderr, "whet jobs follow: %s %s: %s\n", id, status, json_string_value(why));
            else if (!ok) fprintf(stderr, "whet jobs follow: %s %s\n", id, status);
            json_decref(job);
            return ok ? 0 : 1;
        }
        json_decref(job);
        usleep((useconds_t)(interval * 1e6));
    }
}

static int cmd_jobs(int argc, char **argv) {
    static const struct option opts[] = {{"interval", required_argument, 0, 'i'},
                                         {"url", required_argument, 0, 'u'},
                                         {"data-dir", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},
                                         {0}};
    const char *url = NULL, *data_dir = NULL;
    double interval = 2;
    char *end;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'i':
            interval = strtod(optarg, &end);
            if (*end || !(interval >= 0.1 && interval <= 600)) {
                fprintf(stderr, "whet jobs: --interval must be 0.1 to 600 seconds\n");
                return 2;
            }
            break;
        case 'u': url = optarg; break;
        case 'd': data_dir = optarg; break;
        case 'h': jobs_usage(stdout); return 0;
        default: jobs_usage(stderr); return 2;
        }
    }
    if (argc - optind != 2 || strcmp(argv[optind], "follow") != 0 || strlen(argv[optind + 1]) > 128) {
        jobs_usage(stderr);
        return 2;
    }
    struct api_client *client = api_client_open("whet jobs", url, data_dir);
    int rc = client ? jobs_follow(client, argv[optind + 1], interval) : 1;
    api_client_close(client);
    return rc;
}
WHET_COMMAND("jobs", cmd_jobs, "follow a fine-tuning job at a terminal (tenants, through the API)")
