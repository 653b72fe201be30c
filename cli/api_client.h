/* api_client.h - what the tenant-facing commands (`whet jobs`, `whet files`) share: the gateway's
 * address and the tenant's API key, REST calls over libcurl that answer the JSON body or the API's error
 * message, and the one-line progress bar they draw on a terminal. */
#ifndef WHET_CLI_API_CLIENT_H
#define WHET_CLI_API_CLIENT_H

#include <curl/curl.h>
#include <stdio.h>

#include "json.h"
#include "util.h"

struct api_client {
    char *base; /* "http://127.0.0.1:8080", no trailing slash */
    char *auth; /* "Authorization: Bearer KEY" */
    CURL *curl;
};

/* A client for the gateway at `url` (may be NULL), else $WHET_API_BASE, else http://$WHET_HTTP (after
 * loading `data_dir`'s whet.env, or $WHET_DATA_DIR's), with the key from $WHET_API_KEY, else
 * $OPENAI_API_KEY. NULL after reporting why on stderr, as `who`. */
struct api_client *api_client_open(const char *who, const char *url, const char *data_dir);
void api_client_close(struct api_client *c);

/* Called while a body goes up: bytes sent so far of `total`. */
typedef void (*api_progress_fn)(void *arg, double sent, double total);

/* METHOD base+path with `body` as JSON (NULL: none), or with `mime` as multipart/form-data (NULL: none),
 * reporting upload progress to `progress` (may be NULL). Returns the answer's JSON (the caller owns it)
 * on a 2xx; NULL with `err` holding the API's error message, or what failed, otherwise. */
json_t *api_call(struct api_client *c, const char *method, const char *path, const json_t *body, curl_mime *mime,
                 api_progress_fn progress, void *progress_arg, struct whet_err *err);

/* Draws "[#####.....] TEXT" on `out`: redrawn in place on a terminal, otherwise printed as a line when
 * `final` or at most every 10 s, so a log gets the story without a line per poll. */
struct progress_bar {
    FILE *out;
    int tty;
    double last_line; /* whet_now_mono() of the last line printed (not a terminal) */
};
void progress_bar_init(struct progress_bar *p, FILE *out);
void progress_bar_draw(struct progress_bar *p, double fraction, const char *text, int final);

#endif
