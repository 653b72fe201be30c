/* api_client.c - the REST client of the tenant-facing commands (api_client.h): one libcurl handle per
 * command, the tenant's key in the Authorization header, errors in the API's own words. */
#include "api_client.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "env.h"

struct api_client *api_client_open(const char *who, const char *url, const char *data_dir) {
    struct whet_err err;
    if (whet_env_load_data_dir(data_dir, &err) < 0) {
        whet_err_report(who, &err);
        return NULL;
    }
    const char *key = whet_env("WHET_API_KEY", whet_env("OPENAI_API_KEY", NULL));
    if (!key) {
        whet_errf(&err, "no API key: WHET_API_KEY (or OPENAI_API_KEY) is not set");
        whet_err_hint(&err, "export WHET_API_KEY=$(whet tenant create NAME), or a key from your operator");
        whet_err_report(who, &err);
        return NULL;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *curl = curl_easy_init();
    if (!curl) {
        fprintf(stderr, "%s: libcurl could not start a handle\n", who);
        return NULL;
    }
    struct api_client *c = xcalloc(1, sizeof *c);
    c->curl = curl;
    struct whet_buf base = {0}, auth = {0};
    if (!url) url = whet_env("WHET_API_BASE", NULL);
    if (url) whet_buf_puts(&base, url);
    else whet_buf_printf(&base, "http://%s", whet_env("WHET_HTTP", "127.0.0.1:8080"));
    while (base.len && base.data[base.len - 1] == '/') base.data[--base.len] = '\0';
    c->base = base.data;
    whet_buf_printf(&auth, "Authorization: Bearer %s", key);
    c->auth = auth.data;
    return c;
}

void api_client_close(struct api_client *c) {
    if (!c) return;
    curl_easy_cleanup(c->curl);
    free(c->base);
    free(c->auth);
    free(c);
}

static size_t collect(char *p, size_t size, size_t n, void *arg) {
    whet_buf_append(arg, p, size * n);
    return size * n;
}

struct progress_arg {
    api_progress_fn fn;
    void *arg;
};

static int xfer_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)dltotal;
    (void)dlnow;
    struct progress_arg *p = arg;
    if (ultotal > 0) p->fn(p->arg, (double)ulnow, (double)ultotal);
    return 0;
}

json_t *api_call(struct api_client *c, const char *method, const char *path, const json_t *body, curl_mime *mime,
                 api_progress_fn progress, void *progress_arg, struct whet_err *err) {
    CURL *h = c->curl;
    curl_easy_reset(h);
    struct whet_buf url = {0}, answer = {0};
    whet_buf_printf(&url, "%s%s", c->base, path);
    struct curl_slist *headers = curl_slist_append(NULL, c->auth);
    char *text = NULL;
    if (body) {
        text = json_dumps(body, JSON_COMPACT);
        headers = curl_slist_append(headers, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
    }
    if (mime) curl_easy_setopt(h, CURLOPT_MIMEPOST, mime);
    struct progress_arg parg = {progress, progress_arg};
    if (progress) {
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, xfer_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, &parg);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    }
    curl_easy_setopt(h, CURLOPT_URL, url.data);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &answer);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(headers);
    free(text);
    json_t *json = NULL;
    if (rc != CURLE_OK) {
        whet_errf(err, "%s %s: %s", method, url.data, curl_easy_strerror(rc));
        whet_err_hint(err, "is the gateway running there? set WHET_API_BASE or pass --url");
    } else {
        json = answer.data ? json_loads(answer.data, 0, NULL) : NULL;
        if (status < 200 || status > 299) {
            json_t *e = json_object_get(json_object_get(json, "error"), "message");
            whet_errf(err, "%s %s: %ld %s", method, path, status,
                      json_is_string(e) ? json_string_value(e)
                      : answer.data     ? answer.data
                                        : "(no body)");
            json_decref(json);
            json = NULL;
        } else if (!json) {
            whet_errf(err, "%s %s: the answer is not JSON", method, path);
        }
    }
    whet_buf_free(&url);
    whet_buf_free(&answer);
    return json;
}

void progress_bar_init(struct progress_bar *p, FILE *out) {
    p->out = out;
    p->tty = isatty(fileno(out));
    p->last_line = -1e9;
}

void progress_bar_draw(struct progress_bar *p, double fraction, const char *text, int final) {
    enum { WIDTH = 24 };
    if (!p->tty && !final && whet_now_mono() - p->last_line < 10) return;
    if (fraction < 0) fraction = 0;
    if (fraction > 1) fraction = 1;
    char bar[WIDTH + 1];
    int full = (int)(fraction * WIDTH + 0.5);
    for (int i = 0; i < WIDTH; i++) bar[i] = i < full ? '#' : '.';
    bar[WIDTH] = '\0';
    /* \033[K clears what a longer previous line left behind. */
    fprintf(p->out, p->tty ? "\r[%s] %3.0f%% %s\033[K%s" : "[%s] %3.0f%% %s%s", bar, fraction * 100, text,
            p->tty && !final ? "" : "\n");
    fflush(p->out);
    p->last_line = whet_now_mono();
}
