/* graders.c - POST /v1/fine_tuning/alpha/graders/run: one grader on one model sample.
 *
 * The body is OpenAI's {"grader": {…}, "model_sample": "text", "item": {…}}: the grader is parsed and
 * validated in full (executor/grader: a bad field is a 400 whose `param` is its path, as
 * "grader.graders.accuracy.operation"), `model_sample` becomes the `sample` namespace (output_text,
 * and output_json when the text is JSON) and `item` the `item` namespace. The grader runs on the
 * gateway's worker threads, never on the event loop: a python grader starts a sandboxed python and
 * may take seconds. The answer has OpenAI's shape (grader_result_openai_json); failures of the
 * sample or of the tenant's code are reward 0 with metadata.errors set, never an HTTP error. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "grader.h"
#include "graders.h"
#include "http.h"

struct grader_job {
    struct grader *grader;
    json_t *sample, *item;
    json_t *answer; /* filled by the worker */
    struct whet_err err;
};

static void run_work(void *arg) {
    struct grader_job *job = arg;
    struct grader_result res;
    if (grader_run(job->grader, NULL, job->sample, job->item, &res, &job->err) == 0) {
        job->answer = grader_result_openai_json(job->grader, &res);
        grader_result_free(&res);
    }
}

static void job_free(struct grader_job *job) {
    grader_free(job->grader);
    json_decref(job->sample);
    json_decref(job->item);
    json_decref(job->answer);
    free(job);
}

static void run_done(struct gw_req *r, void *arg) {
    struct grader_job *job = arg;
    if (!http_gone(r)) {
        if (job->answer) http_reply_json(r, 200, json_incref(job->answer));
        else http_reply_error(r, 500, NULL, NULL, "grader could not run: %s", job->err.msg);
    }
    job_free(job);
}

/* The field path a validation message starts with ("grader.graders.a.operation: …"), for `param`. */
static const char *error_param(struct gw_req *r, const char *message) {
    const char *colon = strstr(message, ": ");
    return colon ? http_strndup(r, message, (size_t)(colon - message)) : "grader";
}

static void graders_run(struct gw_req *r) {
    json_t *body = http_body_json(r);
    if (!body) return;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        if (strcmp(key, "grader") != 0 && strcmp(key, "model_sample") != 0 && strcmp(key, "item") != 0) {
            http_reply_error(r, 400, key, "invalid_request", "%s: unrecognized request argument supplied", key);
            json_decref(body);
            return;
        }
    }
    json_t *grader = json_object_get(body, "grader"), *sample = json_object_get(body, "model_sample"),
           *item = json_object_get(body, "item");
    struct grader *g = NULL;
    struct whet_err err;
    if (!grader) {
        http_reply_error(r, 400, "grader", "invalid_request", "grader: missing");
    } else if (!json_is_string(sample)) {
        http_reply_error(r, 400, "model_sample", "invalid_request", "model_sample: %s",
                         sample ? "expected a string" : "missing");
    } else if (item && !json_is_object(item) && !json_is_null(item)) {
        http_reply_error(r, 400, "item", "invalid_request", "item: expected an object");
    } else if (grader_parse(grader, "grader", &g, &err) < 0) {
        http_reply_error(r, 400, error_param(r, err.msg), "invalid_grader", "%s", err.msg);
    } else {
        struct grader_job *job = xcalloc(1, sizeof *job);
        job->grader = g;
        job->sample = grader_sample_from_text(json_string_value(sample));
        job->item = json_is_object(item) ? json_incref(item) : json_object();
        if (http_run_blocking(r, run_work, run_done, job)) {
            job_free(job);
            http_reply_unavailable(r, 1, "the gateway's workers are busy");
        }
    }
    json_decref(body);
}

void graders_routes(struct http_router *rt) {
    http_route(rt, "POST", "/v1/fine_tuning/alpha/graders/run", graders_run, 0, "graders.run");
}
