/* objstore_s3.c - the s3:// object store: S3's REST API over libcurl, signed with SigV4.
 *
 * URLs are path-style ($WHET_S3_ENDPOINT/bucket/key), which every S3-compatible server accepts.
 * libcurl signs each request (CURLOPT_AWS_SIGV4), and three of its habits shape the code below
 * (DESIGN.md, "Pitfalls"): it signs the path and query string verbatim, so keys are percent-encoded
 * here and query strings are written already sorted and RFC 3986-encoded ("uploads=", "%2F"); it takes
 * the payload hash from our x-amz-content-sha256 header, so that header always carries the body's real
 * SHA-256; and it signs every header we set, so we set none that curl might drop (such as an empty
 * "Expect:").
 *
 * Requests go through s3_perform, which retries connection failures, timeouts, 429 and 5xx with
 * exponential backoff and jitter. Each call takes an easy handle from a small pool, so threads never
 * share one and connections are reused across calls. Files larger than the part size are uploaded as
 * a multipart upload: create, parts sent by a few threads (each part read into memory, so a retry can
 * resend it), complete; on failure the upload is aborted so S3 keeps no orphan parts. A journal
 * beside the file, rewritten after each part, lets the next upload of the same file continue after a
 * crash, or after a failure whose abort the server did not confirm (see "Multipart upload" below). */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "crypto.h"
#include "log.h"
#include "objstore_impl.h"

#define POOL_MAX 16
#define MAX_ATTEMPTS 6
#define BACKOFF_BASE_MS 100
#define BACKOFF_CAP_MS 3000
#define UPLOAD_BUFFER (1L << 20)
#define ERROR_BODY_MAX (64u << 10)
#define XML_BODY_MAX (16u << 20)
/* SHA-256 of the empty string: the payload hash of bodiless requests. */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct s3_store {
    struct objstore base;
    char *endpoint; /* scheme://host[:port], no trailing '/' */
    char *bucket;
    char *prefix;   /* "" or "a/b": every key is stored as prefix/key */
    char *userpwd;  /* "ACCESS_KEY:SECRET" for CURLOPT_USERPWD */
    char *sigv4;    /* "aws:amz:REGION:s3" for CURLOPT_AWS_SIGV4 */
    char *session_token;
    struct curl_slist *resolve; /* WHET_S3_RESOLVE as CURLOPT_RESOLVE, or NULL */
    pthread_mutex_t pool_lock;
    CURL *pool[POOL_MAX];
    int pool_len;
};

/* ---------------------------------------------------------------------------------------------- */
/* Encoding                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

/* RFC 3986 percent-encoding with upper-case hex, as SigV4 canonicalises; '/' kept when `keep_slash`
 * (object paths) and encoded otherwise (query values). */
static char *uri_encode(const char *s, int keep_slash) {
    static const char hex[] = "0123456789ABCDEF";
    char *out = xmalloc(strlen(s) * 3 + 1), *o = out;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
            c == '.' || c == '~' || (c == '/' && keep_slash)) {
            *o++ = (char)c;
        } else {
            *o++ = '%';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    *o = 0;
    return out;
}

/* The key as stored in the bucket. */
static char *full_key(struct s3_store *s3, const char *key) {
    return s3->prefix[0] ? xasprintf("%s/%s", s3->prefix, key) : xstrdup(key);
}

/* The request URL for an object (`key` relative to the store's prefix) or, with key NULL, the bucket;
 * `query` must already be canonical (sorted, encoded) because curl signs it as written. */
static char *request_url(struct s3_store *s3, const char *key, const char *query) {
    char *path = NULL;
    if (key) {
        char *full = full_key(s3, key);
        path = uri_encode(full, 1);
        free(full);
    }
    char *url = xasprintf("%s/%s%s%s%s%s", s3->endpoint, s3->bucket, path ? "/" : "", path ? path : "",
                          query ? "?" : "", query ? query : "");
    free(path);
    return url;
}

/* Decodes the five XML entities and numeric references in place. */
static void xml_unescape(char *s) {
    static const struct {
        const char *name;
        char c;
    } entities[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    char *out = s;
    while (*s) {
        if (*s == '&') {
            size_t i;
            for (i = 0; i < WHET_ARRAY_LEN(entities); i++) {
                size_t n = strlen(entities[i].name);
                if (strncmp(s, entities[i].name, n) == 0) {
                    *out++ = entities[i].c;
                    s += n;
                    break;
                }
            }
            if (i < WHET_ARRAY_LEN(entities)) continue;
            if (s[1] == '#') {
                char *end;
                long code = s[2] == 'x' ? strtol(s + 3, &end, 16) : strtol(s + 2, &end, 10);
                if (*end == ';' && code > 0 && code < 0x80) {
                    *out++ = (char)code;
                    s = end + 1;
                    continue;
                }
            }
        }
        *out++ = *s++;
    }
    *out = 0;
}

/* The text of the first <tag>…</tag> in [xml, end), unescaped, or NULL; `after` (may be NULL) is
 * set past the closing tag. The caller frees the result. S3's responses are flat enough that this
 * is all the XML reading needed. */
static char *xml_tag(const char *xml, const char *end, const char *tag, const char **after) {
    char open[64], close[64];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *start = memmem(xml, (size_t)(end - xml), open, strlen(open));
    if (!start) return NULL;
    start += strlen(open);
    const char *stop = memmem(start, (size_t)(end - start), close, strlen(close));
    if (!stop) return NULL;
    char *text = xmalloc((size_t)(stop - start) + 1);
    memcpy(text, start, (size_t)(stop - start));
    text[stop - start] = 0;
    xml_unescape(text);
    if (after) *after = stop + strlen(close);
    return text;
}

/* ---------------------------------------------------------------------------------------------- */
/* Requests                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

struct s3_request {
    const char *method;       /* GET, HEAD, PUT, POST, DELETE */
    const char *key;          /* relative to the store's prefix; NULL for the bucket itself */
    const char *query;        /* canonical query string or NULL */
    const char *body;         /* request body (PUT, POST) or NULL */
    size_t body_len;
    const char *body_sha256;  /* hex SHA-256 of the body; NULL means the empty body */
    const char *meta_sha256;  /* sent as x-amz-meta-sha256 when set */
    const char *range;        /* "bytes=A-B" or NULL */
    objstore_sink_fn sink;    /* receives a 2xx response body; NULL keeps it in the response */
    void *sink_ctx;
};

struct s3_response {
    long status;
    char *body; /* response body kept when there is no sink or the status is not 2xx */
    size_t body_len;
    char etag[256];
    char meta_sha256[65];
    int64_t content_length; /* -1 when unknown */
    uint64_t sunk;          /* bytes handed to the sink */
    int sink_stopped;
};

/* The state one transfer's callbacks share. */
struct transfer {
    struct s3_request *req;
    struct s3_response *resp;
    CURL *curl;
    size_t body_pos; /* upload position */
};

static size_t on_upload(char *buf, size_t size, size_t nmemb, void *userdata) {
    struct transfer *t = userdata;
    size_t n = t->req->body_len - t->body_pos;
    if (n > size * nmemb) n = size * nmemb;
    memcpy(buf, t->req->body + t->body_pos, n);
    t->body_pos += n;
    return n;
}

/* curl rewinds the body when it must resend it (a redirect, a 100-continue refused). */
static int on_seek(void *userdata, curl_off_t offset, int origin) {
    struct transfer *t = userdata;
    if (origin != SEEK_SET || offset < 0 || (size_t)offset > t->req->body_len) return CURL_SEEKFUNC_FAIL;
    t->body_pos = (size_t)offset;
    return CURL_SEEKFUNC_OK;
}

static size_t on_download(char *data, size_t size, size_t nmemb, void *userdata) {
    struct transfer *t = userdata;
    size_t n = size * nmemb;
    long status = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200 && status < 300 && t->req->sink) {
        if (t->req->sink(t->req->sink_ctx, data, n) != 0) {
            t->resp->sink_stopped = 1;
            return 0; /* curl ends the transfer with CURLE_WRITE_ERROR */
        }
        t->resp->sunk += n;
        return n;
    }
    size_t max = status >= 200 && status < 300 ? XML_BODY_MAX : ERROR_BODY_MAX;
    if (t->resp->body_len + n > max) return 0;
    t->resp->body = xrealloc(t->resp->body, t->resp->body_len + n + 1);
    memcpy(t->resp->body + t->resp->body_len, data, n);
    t->resp->body_len += n;
    t->resp->body[t->resp->body_len] = 0;
    return n;
}

/* Copies a header's value (trimmed) into `out` when the line is `name: value`. */
static void header_value(const char *line, size_t len, const char *name, char *out, size_t out_size) {
    size_t name_len = strlen(name);
    if (len <= name_len || strncasecmp(line, name, name_len) != 0 || line[name_len] != ':') return;
    const char *v = line + name_len + 1, *end = line + len;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ')) end--;
    size_t n = (size_t)(end - v) < out_size - 1 ? (size_t)(end - v) : out_size - 1;
    memcpy(out, v, n);
    out[n] = 0;
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *userdata) {
    struct transfer *t = userdata;
    size_t len = size * nmemb;
    /* A new status line (after "100 Continue") starts a new set of headers. */
    if (len > 5 && strncmp(line, "HTTP/", 5) == 0) {
        t->resp->etag[0] = 0;
        t->resp->meta_sha256[0] = 0;
    }
    header_value(line, len, "ETag", t->resp->etag, sizeof t->resp->etag);
    header_value(line, len, "x-amz-meta-sha256", t->resp->meta_sha256, sizeof t->resp->meta_sha256);
    return len;
}

static CURL *handle_take(struct s3_store *s3) {
    pthread_mutex_lock(&s3->pool_lock);
    CURL *curl = s3->pool_len ? s3->pool[--s3->pool_len] : NULL;
    pthread_mutex_unlock(&s3->pool_lock);
    if (!curl) curl = curl_easy_init();
    if (!curl) {
        fprintf(stderr, "whet: curl_easy_init failed\n");
        abort();
    }
    return curl;
}

/* Returns a handle to the pool; curl_easy_reset clears its options but keeps its live connection. */
static void handle_give(struct s3_store *s3, CURL *curl) {
    curl_easy_reset(curl);
    pthread_mutex_lock(&s3->pool_lock);
    if (s3->pool_len < POOL_MAX) {
        s3->pool[s3->pool_len++] = curl;
        curl = NULL;
    }
    pthread_mutex_unlock(&s3->pool_lock);
    if (curl) curl_easy_cleanup(curl);
}

static void backoff_sleep(int attempt) {
    uint64_t cap = (uint64_t)BACKOFF_BASE_MS << attempt;
    if (cap > BACKOFF_CAP_MS) cap = BACKOFF_CAP_MS;
    uint32_t r;
    whet_random_bytes(&r, sizeof r);
    /* "Equal jitter": half the delay fixed, half random, so retrying clients spread out. */
    uint64_t ms = cap / 2 + r % (cap / 2 + 1);
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int transient_curl_error(CURLcode rc) {
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0;
    }
}

/* One attempt of a request on `curl`. */
static CURLcode perform_once(struct s3_store *s3, CURL *curl, struct s3_request *req, struct s3_response *resp,
                             char *errbuf) {
    struct transfer t = {req, resp, curl, 0};
    char *url = request_url(s3, req->key, req->query);
    struct curl_slist *headers = NULL;
    char line[512];
    snprintf(line, sizeof line, "x-amz-content-sha256: %s", req->body_sha256 ? req->body_sha256 : EMPTY_SHA256);
    headers = curl_slist_append(headers, line);
    if (req->meta_sha256) {
        snprintf(line, sizeof line, "x-amz-meta-sha256: %s", req->meta_sha256);
        headers = curl_slist_append(headers, line);
    }
    if (req->range) {
        snprintf(line, sizeof line, "Range: %s", req->range);
        headers = curl_slist_append(headers, line);
    }
    if (s3->session_token) {
        char *token = xasprintf("x-amz-security-token: %s", s3->session_token);
        headers = curl_slist_append(headers, token);
        free(token);
    }

    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, s3->sigv4);
    curl_easy_setopt(curl, CURLOPT_USERPWD, s3->userpwd);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_RESOLVE, s3->resolve);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 10L);
    /* No overall timeout (parts and downloads can be large), but a stalled transfer is a failure. */
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_download);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
    if (strcmp(req->method, "HEAD") == 0) {
        curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    } else if (strcmp(req->method, "PUT") == 0 || strcmp(req->method, "POST") == 0) {
        /* Both as uploads from the read callback: a POST through CURLOPT_POSTFIELDS would get a
         * form Content-Type that curl adds unsigned. */
        curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(curl, CURLOPT_READFUNCTION, on_upload);
        curl_easy_setopt(curl, CURLOPT_READDATA, &t);
        curl_easy_setopt(curl, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(curl, CURLOPT_SEEKDATA, &t);
        curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->body_len);
        /* Bodies are in memory: larger reads mean fewer callbacks and larger writes to the socket. */
        curl_easy_setopt(curl, CURLOPT_UPLOAD_BUFFERSIZE, (long)UPLOAD_BUFFER);
        if (strcmp(req->method, "POST") == 0) curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "POST");
    } else if (strcmp(req->method, "GET") != 0) {
        curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, req->method);
    }

    errbuf[0] = 0;
    CURLcode rc = curl_easy_perform(curl);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp->status);
    curl_off_t sent = 0;
    if (curl_easy_getinfo(curl, CURLINFO_SIZE_UPLOAD_T, &sent) == CURLE_OK && sent > 0)
        s3->base.bytes_sent += (uint64_t)sent;
    curl_off_t length = -1;
    curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    resp->content_length = length;
    curl_slist_free_all(headers);
    free(url);
    return rc;
}

/* Describes a failed response: "s3 PUT bucket/key: HTTP 403: SignatureDoesNotMatch: …". */
static int response_error(struct s3_store *s3, struct s3_request *req, struct s3_response *resp,
                          struct whet_err *err) {
    char *full = req->key ? full_key(s3, req->key) : xstrdup("");
    const char *end = resp->body ? resp->body + resp->body_len : NULL;
    char *code = resp->body ? xml_tag(resp->body, end, "Code", NULL) : NULL;
    char *message = resp->body ? xml_tag(resp->body, end, "Message", NULL) : NULL;
    whet_errf(err, "s3 %s %s/%s: HTTP %ld%s%s%s%s", req->method, s3->bucket, full, resp->status, code ? ": " : "",
              code ? code : "", message ? ": " : "", message ? message : "");
    free(code);
    free(message);
    free(full);
    return -1;
}

static void response_reset(struct s3_response *resp) {
    free(resp->body);
    memset(resp, 0, sizeof *resp);
    resp->content_length = -1;
}

static void response_free(struct s3_response *resp) { free(resp->body); }

/* Performs a request with retries. Returns 0 when a response arrived that is not worth retrying (the
 * caller judges its status), -1 with `err` when none did. */
static int s3_perform(struct s3_store *s3, struct s3_request *req, struct s3_response *resp, struct whet_err *err) {
    char errbuf[CURL_ERROR_SIZE];
    memset(resp, 0, sizeof *resp);
    for (int attempt = 0;; attempt++) {
        response_reset(resp);
        CURL *curl = handle_take(s3);
        CURLcode rc = perform_once(s3, curl, req, resp, errbuf);
        handle_give(s3, curl);
        int last = attempt + 1 >= MAX_ATTEMPTS;
        /* Bytes a sink has taken cannot be taken back: a streamed read is not retried past them. */
        int replayable = resp->sunk == 0;
        if (rc == CURLE_OK) {
            int retry = resp->status >= 500 || resp->status == 429;
            if (!retry || last || !replayable) return 0;
        } else {
            char *full = req->key ? full_key(s3, req->key) : xstrdup("");
            if (resp->sink_stopped)
                whet_errf(err, "s3 %s %s/%s: read stopped by the receiver", req->method, s3->bucket, full);
            else
                whet_errf(err, "s3 %s %s/%s: %s", req->method, s3->bucket, full,
                          errbuf[0] ? errbuf : curl_easy_strerror(rc));
            free(full);
            if (resp->sink_stopped || !transient_curl_error(rc) || last || !replayable) return -1;
        }
        backoff_sleep(attempt);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Objects                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

static int s3_put(struct objstore *store, const char *key, const void *data, size_t len, const char *sha256,
                  struct whet_err *err) {
    struct s3_store *s3 = (struct s3_store *)store;
    struct s3_request req = {.method = "PUT", .key = key, .body = data, .body_len = len, .body_sha256 = sha256,
                             .meta_sha256 = sha256};
    struct s3_response resp;
    int rc = s3_perform(s3, &req, &resp, err);
    if (rc == 0 && resp.status != 200) rc = response_error(s3, &req, &resp, err);
    response_free(&resp);
    return rc;
}

static int s3_read(struct objstore *store, const char *key, uint64_t offset, uint64_t length,
                   objstore_sink_fn sink, void *ctx, struct objstore_info *info, struct whet_err *err) {
    struct s3_store *s3 = (struct s3_store *)store;
    char range[64];
    struct s3_request req = {.method = "GET", .key = key, .sink = sink, .sink_ctx = ctx};
    if (offset || length) {
        if (length)
            snprintf(range, sizeof range, "bytes=%llu-%llu", (unsigned long long)offset,
                     (unsigned long long)(offset + length - 1));
        else
            snprintf(range, sizeof range, "bytes=%llu-", (unsigned long long)offset);
        req.range = range;
    }
    struct s3_response resp;
    int rc = s3_perform(s3, &req, &resp, err);
    if (rc == 0) {
        if (resp.status == 404) {
            rc = OBJSTORE_NOT_FOUND;
        } else if (resp.status == 416) {
            rc = whet_errf(err, "object \"%s\": range %llu+%llu is past its end", key, (unsigned long long)offset,
                           (unsigned long long)length);
        } else if (resp.status != 200 && resp.status != 206) {
            rc = response_error(s3, &req, &resp, err);
        } else if (length && resp.sunk != length) {
            rc = whet_errf(err, "object \"%s\": range %llu+%llu is past its end (got %llu bytes)", key,
                           (unsigned long long)offset, (unsigned long long)length, (unsigned long long)resp.sunk);
        } else {
            info->size = resp.sunk;
            memcpy(info->sha256, resp.meta_sha256, sizeof info->sha256);
            if (strlen(info->sha256) != 64) info->sha256[0] = 0;
        }
    }
    response_free(&resp);
    return rc;
}

static int s3_stat(struct objstore *store, const char *key, struct objstore_info *info, struct whet_err *err) {
    struct s3_store *s3 = (struct s3_store *)store;
    struct s3_request req = {.method = "HEAD", .key = key};
    struct s3_response resp;
    int rc = s3_perform(s3, &req, &resp, err);
    if (rc == 0) {
        if (resp.status == 404) {
            rc = OBJSTORE_NOT_FOUND;
        } else if (resp.status != 200 || resp.content_length < 0) {
            rc = response_error(s3, &req, &resp, err);
        } else {
            info->size = (uint64_t)resp.content_length;
            memcpy(info->sha256, resp.meta_sha256, sizeof info->sha256);
            if (strlen(info->sha256) != 64) info->sha256[0] = 0;
        }
    }
    response_free(&resp);
    return rc;
}

static int s3_delete(struct objstore *store, const char *key, struct whet_err *err) {
    struct s3_store *s3 = (struct s3_store *)store;
    struct s3_request req = {.method = "DELETE", .key = key};
    struct s3_response resp;
    int rc = s3_perform(s3, &req, &resp, err);
    if (rc == 0 && resp.status != 204 && resp.status != 200 && resp.status != 404)
        rc = response_error(s3, &req, &resp, err);
    response_free(&resp);
    return rc;
}

struct listed {
    char *key;
    uint64_t size;
};

static int listed_cmp(const void *a, const void *b) {
    return strcmp(((const struct listed *)a)->key, ((const struct listed *)b)->key);
}

/* ListObjectsV2, a page at a time (continuation-token, list-type, prefix: the sorted order). The keys
 * are gathered and sorted before the callback sees them: S3 lists in byte order, but not every
 * S3-compatible server does (s3rver does not), and callers rely on the order. */
static int s3_list(struct objstore *store, const char *prefix, objstore_list_fn fn, void *ctx,
                   struct whet_err *err) {
    struct s3_store *s3 = (struct s3_store *)store;
    char *wanted = s3->prefix[0] ? xasprintf("%s/%s", s3->prefix, prefix) : xstrdup(prefix);
    char *wanted_enc = uri_encode(wanted, 0);
    size_t strip = s3->prefix[0] ? strlen(s3->prefix) + 1 : 0;
    struct listed *items = NULL;
    size_t n_items = 0, cap = 0;
    char *token = NULL;
    int rc = 0, more = 1;
    while (rc == 0 && more) {
        char *token_enc = token ? uri_encode(token, 0) : NULL;
        char *query = token_enc ? xasprintf("continuation-token=%s&list-type=2&prefix=%s", token_enc, wanted_enc)
                                : xasprintf("list-type=2&prefix=%s", wanted_enc);
        struct s3_request req = {.method = "GET", .query = query};
        struct s3_response resp;
        rc = s3_perform(s3, &req, &resp, err);
        if (rc == 0 && resp.status != 200) rc = response_error(s3, &req, &resp, err);
        free(token);
        token = NULL;
        more = 0;
        if (rc == 0 && resp.body) {
            const char *p = resp.body, *end = resp.body + resp.body_len, *after;
            char *contents;
            while ((contents = xml_tag(p, end, "Contents", &after)) != NULL) {
                char *key = xml_tag(contents, contents + strlen(contents), "Key", NULL);
                char *size = xml_tag(contents, contents + strlen(contents), "Size", NULL);
                if (key && strlen(key) >= strip) {
                    if (n_items == cap) {
                        cap = cap ? cap * 2 : 64;
                        items = xrealloc(items, cap * sizeof *items);
                    }
                    items[n_items++] = (struct listed){xstrdup(key + strip), size ? strtoull(size, NULL, 10) : 0};
                }
                free(key);
                free(size);
                free(contents);
                p = after;
            }
            char *truncated = xml_tag(resp.body, end, "IsTruncated", NULL);
            if (truncated && strcmp(truncated, "true") == 0) {
                token = xml_tag(resp.body, end, "NextContinuationToken", NULL);
                if (!token)
                    rc = whet_errf(err, "s3 list %s/%s: truncated page without a continuation token", s3->bucket,
                                   wanted);
                more = token != NULL;
            }
            free(truncated);
        }
        response_free(&resp);
        free(query);
        free(token_enc);
    }
    if (rc == 0) {
        if (n_items) qsort(items, n_items, sizeof *items, listed_cmp);
        for (size_t i = 0; i < n_items; i++)
            if (fn(ctx, items[i].key, items[i].size) != 0) break;
    }
    for (size_t i = 0; i < n_items; i++) free(items[i].key);
    free(items);
    free(token);
    free(wanted);
    free(wanted_enc);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* Multipart upload                                                                               */
/* ---------------------------------------------------------------------------------------------- */

/* A multipart upload resumes after a crash from a journal beside the local file (objstore.h): JSON
 *   {"bucket":…, "key":…, "size":…, "sha256":…, "part_size":…, "upload_id":…,
 *    "parts":[{"part":1, "etag":"\"…\"", "sha256":…}, …]}
 * replaced atomically after each part. The journal, not ListParts, is the record of what was sent:
 * s3rver does not implement ListParts. ListParts is only asked whether the upload still exists (S3
 * answers 404 NoSuchUpload once it was aborted or expired); the completion confirms the parts. Each
 * journaled part's bytes are read and hashed again before the part is reused, and the whole file's
 * SHA-256 must be the journal's (it is the object's x-amz-meta-sha256, fixed when the upload was
 * created), so a file rewritten in place is never completed from another version's parts. */

struct multipart {
    struct s3_store *s3;
    const char *key;
    const char *path;
    int fd;
    uint64_t size;
    const char *sha256;  /* of the whole file, stored as x-amz-meta-sha256 when the upload is created */
    size_t part_size;
    int parts;
    char *upload_id;
    char *upload_id_enc; /* URL-encoded UploadId */
    char **etags;        /* per part, owned; set once the part is in the store */
    char (*part_sha)[65];/* per part: SHA-256 of the bytes sent */
    pthread_mutex_t lock;
    int next_part;       /* 1-based part number the next free thread considers */
    int failed;
    long fail_status;    /* HTTP status of the first failure; 0 for a local or transport failure */
    struct whet_err err; /* the first failure */
    /* Journal and progress, under journal_lock. */
    pthread_mutex_t journal_lock;
    char *journal;       /* the journal's path; NULL once it cannot be written */
    uint64_t done_bytes, reused_bytes;
};

static size_t part_length(const struct multipart *mp, int part) {
    uint64_t offset = (uint64_t)(part - 1) * mp->part_size;
    return (size_t)(mp->size - offset < mp->part_size ? mp->size - offset : mp->part_size);
}

/* Reads part `part` of the file into `buf` (part_size bytes). */
static int read_part(struct multipart *mp, int part, char *buf, struct whet_err *err) {
    uint64_t offset = (uint64_t)(part - 1) * mp->part_size;
    size_t len = part_length(mp, part), got = 0;
    while (got < len) {
        ssize_t n = pread(mp->fd, buf + got, len - got, (off_t)(offset + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return whet_errf(err, "%s: %s", mp->path, n < 0 ? strerror(errno) : "file shrank during upload");
        got += (size_t)n;
    }
    return 0;
}

/* Writes the journal; called with journal_lock held. A journal that cannot be written only costs the
 * ability to resume, so the upload goes on without one. */
static void journal_save(struct multipart *mp) {
    if (!mp->journal) return;
    json_t *parts = json_array();
    for (int i = 0; i < mp->parts; i++)
        if (mp->etags[i])
            json_array_append_new(parts, json_pack("{s:i, s:s, s:s}", "part", i + 1, "etag", mp->etags[i], "sha256",
                                                   mp->part_sha[i]));
    char *full = full_key(mp->s3, mp->key);
    json_t *doc = json_pack("{s:s, s:s, s:I, s:s, s:I, s:s, s:o}", "bucket", mp->s3->bucket, "key", full, "size",
                            (json_int_t)mp->size, "sha256", mp->sha256, "part_size", (json_int_t)mp->part_size,
                            "upload_id", mp->upload_id, "parts", parts);
    char *text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    struct whet_err err;
    if (whet_write_file_atomic(mp->journal, text, strlen(text), &err) != 0) {
        log_warn("msg=\"s3 upload journal not written; this upload cannot resume after a crash\" error=\"%s\"",
                 err.msg);
        free(mp->journal);
        mp->journal = NULL;
    }
    free(text);
    json_decref(doc);
    free(full);
}

static void journal_remove(struct multipart *mp) {
    if (mp->journal) unlink(mp->journal);
}

/* An ETag from the journal goes into the completion's XML verbatim: S3's are quoted hex. */
static int etag_plain(const char *etag) {
    size_t n = strlen(etag);
    if (n == 0 || n > 200) return 0;
    for (const char *p = etag; *p; p++)
        if (*p < 0x20 || *p > 0x7e || *p == '<' || *p == '>' || *p == '&') return 0;
    return 1;
}

static void abort_upload(struct s3_store *s3, const char *key, const char *upload_id, long *status);

/* Takes over the upload an interrupted run recorded in the journal when it was of this file to this
 * key with this part size: its upload id and the parts whose bytes still hash as journaled (others
 * are sent again). Returns 1 when taken over. A journal for another version of the file names an
 * upload nobody will finish: it is aborted. */
static int journal_resume(struct multipart *mp) {
    json_error_t jerr;
    json_t *doc = mp->journal ? json_load_file(mp->journal, 0, &jerr) : NULL;
    if (!doc) return 0;
    const char *bucket = json_string_value(json_object_get(doc, "bucket"));
    const char *key = json_string_value(json_object_get(doc, "key"));
    const char *sha = json_string_value(json_object_get(doc, "sha256"));
    const char *upload_id = json_string_value(json_object_get(doc, "upload_id"));
    json_t *size = json_object_get(doc, "size"), *part_size = json_object_get(doc, "part_size");
    json_t *parts = json_object_get(doc, "parts");
    char *full = full_key(mp->s3, mp->key);
    int same_object = bucket && key && upload_id && upload_id[0] && strcmp(bucket, mp->s3->bucket) == 0 &&
                      strcmp(key, full) == 0;
    int same_file = same_object && sha && strcmp(sha, mp->sha256) == 0 && json_is_integer(size) &&
                    (uint64_t)json_integer_value(size) == mp->size && json_is_integer(part_size) &&
                    (uint64_t)json_integer_value(part_size) == mp->part_size && json_is_array(parts);
    free(full);
    if (!same_file) {
        if (same_object) {
            long status;
            abort_upload(mp->s3, mp->key, upload_id, &status);
        }
        json_decref(doc);
        return 0;
    }
    mp->upload_id = xstrdup(upload_id);
    char *buf = xmalloc(mp->part_size);
    size_t i;
    json_t *entry;
    json_array_foreach(parts, i, entry) {
        json_t *number = json_object_get(entry, "part");
        const char *etag = json_string_value(json_object_get(entry, "etag"));
        const char *part_sha = json_string_value(json_object_get(entry, "sha256"));
        if (!json_is_integer(number) || !etag || !part_sha || !etag_plain(etag)) continue;
        json_int_t n = json_integer_value(number);
        if (n < 1 || n > mp->parts || mp->etags[n - 1]) continue;
        struct whet_err ignored;
        char now[65];
        if (read_part(mp, (int)n, buf, &ignored) != 0) continue;
        whet_sha256_hex(buf, part_length(mp, (int)n), now);
        if (strcmp(now, part_sha) != 0) continue;
        mp->etags[n - 1] = xstrdup(etag);
        memcpy(mp->part_sha[n - 1], now, sizeof now);
        mp->reused_bytes += part_length(mp, (int)n);
    }
    free(buf);
    json_decref(doc);
    mp->done_bytes = mp->reused_bytes;
    return 1;
}

/* 0 when the server says the upload no longer exists (ListParts answers 404 NoSuchUpload: aborted,
 * or expired by a lifecycle rule), 1 otherwise: alive, or a server without ListParts (s3rver answers
 * 405), where a lost upload shows at completion instead. */
static int upload_exists(struct multipart *mp) {
    char *query = xasprintf("uploadId=%s", mp->upload_id_enc);
    struct s3_request req = {.method = "GET", .key = mp->key, .query = query};
    struct s3_response resp;
    struct whet_err ignored;
    int gone = s3_perform(mp->s3, &req, &resp, &ignored) == 0 && resp.status == 404;
    response_free(&resp);
    free(query);
    return !gone;
}

static void multipart_fail(struct multipart *mp, const struct whet_err *err, long status) {
    pthread_mutex_lock(&mp->lock);
    if (!mp->failed) {
        mp->err = *err;
        mp->fail_status = status;
    }
    mp->failed = 1;
    pthread_mutex_unlock(&mp->lock);
}

/* Sends one part; on a response that is not a success, *status is its HTTP status. */
static int upload_part(struct multipart *mp, int part, char *buf, long *status, struct whet_err *err) {
    *status = 0;
    if (read_part(mp, part, buf, err) != 0) return -1;
    size_t len = part_length(mp, part);
    char sha[65];
    whet_sha256_hex(buf, len, sha);
    char *query = xasprintf("partNumber=%d&uploadId=%s", part, mp->upload_id_enc);
    struct s3_request req = {.method = "PUT", .key = mp->key, .query = query, .body = buf, .body_len = len,
                             .body_sha256 = sha};
    struct s3_response resp;
    int rc = s3_perform(mp->s3, &req, &resp, err);
    if (rc == 0 && (resp.status != 200 || !resp.etag[0])) {
        *status = resp.status;
        rc = response_error(mp->s3, &req, &resp, err);
    }
    if (rc == 0) {
        pthread_mutex_lock(&mp->journal_lock);
        mp->etags[part - 1] = xstrdup(resp.etag);
        memcpy(mp->part_sha[part - 1], sha, sizeof sha);
        mp->done_bytes += len;
        journal_save(mp);
        if (mp->s3->base.progress)
            mp->s3->base.progress(mp->s3->base.progress_ctx, mp->key, mp->done_bytes, mp->reused_bytes, mp->size);
        pthread_mutex_unlock(&mp->journal_lock);
    }
    response_free(&resp);
    free(query);
    return rc;
}

static void *part_worker(void *arg) {
    struct multipart *mp = arg;
    char *buf = xmalloc(mp->part_size);
    for (;;) {
        /* Parts taken over from the journal were set before the threads started; a part number is
         * handed to one thread only, so no other thread writes the entries read here. */
        pthread_mutex_lock(&mp->lock);
        while (!mp->failed && mp->next_part <= mp->parts && mp->etags[mp->next_part - 1]) mp->next_part++;
        int part = mp->failed || mp->next_part > mp->parts ? 0 : mp->next_part++;
        pthread_mutex_unlock(&mp->lock);
        if (!part) break;
        struct whet_err err;
        long status;
        if (upload_part(mp, part, buf, &status, &err) != 0) multipart_fail(mp, &err, status);
    }
    free(buf);
    return NULL;
}

/* The CompleteMultipartUpload body: every part with its ETag, in order. */
static char *complete_body(struct multipart *mp) {
    size_t cap = 128 + (size_t)mp->parts * 320, len = 0;
    char *xml = xmalloc(cap);
    len += (size_t)snprintf(xml + len, cap - len, "<CompleteMultipartUpload>");
    for (int i = 0; i < mp->parts; i++) {
        /* ETags are quoted hex from S3 (checked by etag_plain when they come from the journal), so
         * they need no XML escaping beyond the quotes. */
        len += (size_t)snprintf(xml + len, cap - len, "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>", i + 1,
                                mp->etags[i]);
    }
    snprintf(xml + len, cap - len, "</CompleteMultipartUpload>");
    return xml;
}

/* AbortMultipartUpload, best effort; *status is the answer's HTTP status (0: none arrived). */
static void abort_upload(struct s3_store *s3, const char *key, const char *upload_id, long *status) {
    char *id_enc = uri_encode(upload_id, 0);
    char *query = xasprintf("uploadId=%s", id_enc);
    struct s3_request req = {.method = "DELETE", .key = key, .query = query};
    struct s3_response resp;
    struct whet_err ignored;
    *status = s3_perform(s3, &req, &resp, &ignored) == 0 ? resp.status : 0;
    response_free(&resp);
    free(query);
    free(id_enc);
}

static int create_upload(struct multipart *mp, struct whet_err *err) {
    struct s3_request create = {.method = "POST", .key = mp->key, .query = "uploads=", .meta_sha256 = mp->sha256};
    struct s3_response resp;
    int rc = s3_perform(mp->s3, &create, &resp, err);
    if (rc == 0 && resp.status != 200) rc = response_error(mp->s3, &create, &resp, err);
    if (rc == 0) {
        mp->upload_id = resp.body ? xml_tag(resp.body, resp.body + resp.body_len, "UploadId", NULL) : NULL;
        if (!mp->upload_id)
            rc = whet_errf(err, "s3 POST %s/%s?uploads: no UploadId in the response", mp->s3->bucket, mp->key);
    }
    response_free(&resp);
    return rc;
}

/* One try of a multipart upload, resuming from the journal when `may_resume`. Sets *start_over when a
 * resumed upload failed because the server no longer has it or its parts. */
static int multipart_try(struct multipart *mp, int may_resume, int *start_over, struct whet_err *err) {
    *start_over = 0;
    int resumed = may_resume && journal_resume(mp);
    if (resumed) {
        mp->upload_id_enc = uri_encode(mp->upload_id, 0);
        if (!upload_exists(mp)) {
            log_info("msg=\"s3 upload in the journal is gone; starting over\" key=%s upload_id=%s", mp->key,
                     mp->upload_id);
            *start_over = 1;
            return -1;
        }
        log_info("msg=\"s3 upload resumed\" key=%s upload_id=%s reused_bytes=%llu of=%llu", mp->key, mp->upload_id,
                 (unsigned long long)mp->reused_bytes, (unsigned long long)mp->size);
    } else {
        if (create_upload(mp, err) != 0) return -1;
        mp->upload_id_enc = uri_encode(mp->upload_id, 0);
    }
    pthread_mutex_lock(&mp->journal_lock);
    journal_save(mp);
    if (mp->s3->base.progress)
        mp->s3->base.progress(mp->s3->base.progress_ctx, mp->key, mp->done_bytes, mp->reused_bytes, mp->size);
    pthread_mutex_unlock(&mp->journal_lock);

    int threads = mp->s3->base.threads < mp->parts ? mp->s3->base.threads : mp->parts;
    pthread_t *tids = xcalloc((size_t)threads, sizeof *tids);
    int started = 0;
    for (; started < threads; started++)
        if (pthread_create(&tids[started], NULL, part_worker, mp) != 0) break;
    if (started == 0) part_worker(mp); /* no thread could start: upload on this one */
    for (int i = 0; i < started; i++) pthread_join(tids[i], NULL);
    free(tids);

    int rc = 0;
    long status = 0;
    char *query = xasprintf("uploadId=%s", mp->upload_id_enc);
    if (mp->failed) {
        *err = mp->err;
        status = mp->fail_status;
        rc = -1;
    } else {
        char *xml = complete_body(mp);
        char sha[65];
        whet_sha256_hex(xml, strlen(xml), sha);
        struct s3_request complete = {.method = "POST", .key = mp->key, .query = query, .body = xml,
                                      .body_len = strlen(xml), .body_sha256 = sha};
        struct s3_response resp;
        rc = s3_perform(mp->s3, &complete, &resp, err);
        /* S3 can answer 200 and still fail the completion in the body. */
        if (rc == 0 && (resp.status != 200 || (resp.body && strstr(resp.body, "<Error>")))) {
            status = resp.status;
            rc = response_error(mp->s3, &complete, &resp, err);
        }
        response_free(&resp);
        free(xml);
    }
    free(query);
    /* The server answered with an error about an upload this process did not create: it no longer
     * has the upload or some of its parts (S3: 404 NoSuchUpload, 400 InvalidPart; s3rver: 500). */
    if (rc != 0 && resumed && status != 0) {
        log_info("msg=\"s3 resumed upload failed; starting over\" key=%s error=\"%s\"", mp->key, err->msg);
        *start_over = 1;
    }
    return rc;
}

/* Frees what one try set up, so the next starts clean. */
static void multipart_reset(struct multipart *mp) {
    for (int i = 0; i < mp->parts; i++) {
        free(mp->etags[i]);
        mp->etags[i] = NULL;
    }
    free(mp->upload_id);
    free(mp->upload_id_enc);
    mp->upload_id = mp->upload_id_enc = NULL;
    mp->next_part = 1;
    mp->failed = 0;
    mp->fail_status = 0;
    mp->done_bytes = mp->reused_bytes = 0;
}

static int multipart_upload(struct s3_store *s3, const char *key, const char *path, int fd, uint64_t size,
                            const char *sha256, struct whet_err *err) {
    struct multipart mp = {.s3 = s3, .key = key, .path = path, .fd = fd, .size = size, .sha256 = sha256,
                           .part_size = s3->base.part_size, .next_part = 1};
    mp.parts = (int)((size + mp.part_size - 1) / mp.part_size);
    if (mp.parts > 10000)
        return whet_errf(err, "%s: %llu bytes need %d parts of %zu bytes; S3 allows 10000", path,
                         (unsigned long long)size, mp.parts, mp.part_size);
    mp.etags = xcalloc((size_t)mp.parts, sizeof *mp.etags);
    mp.part_sha = xcalloc((size_t)mp.parts, sizeof *mp.part_sha);
    mp.journal = objstore_upload_journal_path(path);
    pthread_mutex_init(&mp.lock, NULL);
    pthread_mutex_init(&mp.journal_lock, NULL);

    int start_over;
    int rc = multipart_try(&mp, 1, &start_over, err);
    if (rc != 0 && start_over) {
        long status;
        abort_upload(s3, key, mp.upload_id, &status);
        journal_remove(&mp);
        multipart_reset(&mp);
        rc = multipart_try(&mp, 0, &start_over, err);
    }
    if (rc == 0) {
        journal_remove(&mp);
    } else if (mp.upload_id) {
        /* Abort so the parts stop costing storage; the error already says what went wrong. Only an
         * abort the server confirmed ends the upload; otherwise the journal stays for a retry. */
        long status;
        abort_upload(s3, key, mp.upload_id, &status);
        if (status >= 200 && status < 300) journal_remove(&mp);
    }
    multipart_reset(&mp);
    free(mp.etags);
    free(mp.part_sha);
    free(mp.journal);
    pthread_mutex_destroy(&mp.lock);
    pthread_mutex_destroy(&mp.journal_lock);
    return rc;
}

static int s3_put_file(struct objstore *store, const char *key, const char *path, const char *sha256,
                       struct whet_err *err) {
    struct s3_store *s3 = (struct s3_store *)store;
    uint64_t size;
    int fd = whet_open_regular(path, &size, err);
    if (fd < 0) return -1;
    char computed[65];
    int rc = 0;
    if (size > store->part_size) {
        /* The checksum goes into the object's metadata, which S3 takes when the upload starts: the
         * file is hashed before any part is sent. */
        if (!sha256) {
            uint64_t hashed;
            rc = objstore_sha256_file(path, computed, &hashed, err);
            sha256 = computed;
        }
        if (rc == 0) rc = multipart_upload(s3, key, path, fd, size, sha256, err);
    } else {
        /* One PUT from memory (at most a part's size), hashed from the same buffer. */
        char *buf = xmalloc(size ? size : 1);
        size_t got = 0;
        while (got < size && rc == 0) {
            ssize_t n = read(fd, buf + got, size - got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) rc = whet_errf(err, "%s: %s", path, n < 0 ? strerror(errno) : "file shrank during upload");
            else got += (size_t)n;
        }
        if (rc == 0 && !sha256) {
            whet_sha256_hex(buf, size, computed);
            sha256 = computed;
        }
        if (rc == 0) rc = s3_put(store, key, buf, size, sha256, err);
        free(buf);
    }
    close(fd);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* Opening                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

static void s3_close(struct objstore *store) {
    struct s3_store *s3 = (struct s3_store *)store;
    for (int i = 0; i < s3->pool_len; i++) curl_easy_cleanup(s3->pool[i]);
    pthread_mutex_destroy(&s3->pool_lock);
    free(s3->endpoint);
    free(s3->bucket);
    free(s3->prefix);
    free(s3->userpwd);
    free(s3->sigv4);
    free(s3->session_token);
    curl_slist_free_all(s3->resolve);
    free(s3);
}

static const struct objstore_ops s3_ops = {
    .put = s3_put,
    .put_file = s3_put_file,
    .read = s3_read,
    .stat = s3_stat,
    .delete = s3_delete,
    .list = s3_list,
    .close = s3_close,
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

int objstore_s3_open(const char *bucket, const char *prefix, struct objstore **out, struct whet_err *err) {
    const char *access_key = getenv("AWS_ACCESS_KEY_ID");
    const char *secret_key = getenv("AWS_SECRET_ACCESS_KEY");
    if (!access_key || !*access_key || !secret_key || !*secret_key)
        return whet_errf(err, "s3://%s: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set", bucket);
    if (strchr(access_key, ':'))
        return whet_errf(err, "s3://%s: AWS_ACCESS_KEY_ID may not contain ':'", bucket);
    const char *region = getenv("AWS_REGION");
    if (!region || !*region) region = "us-east-1";
    if (strchr(region, ':')) return whet_errf(err, "s3://%s: AWS_REGION \"%s\" may not contain ':'", bucket, region);
    const char *endpoint = getenv("WHET_S3_ENDPOINT");
    char *endpoint_copy = endpoint && *endpoint ? xstrdup(endpoint) : xasprintf("https://s3.%s.amazonaws.com", region);
    size_t n = strlen(endpoint_copy);
    while (n && endpoint_copy[n - 1] == '/') endpoint_copy[--n] = 0;
    if (strncmp(endpoint_copy, "http://", 7) != 0 && strncmp(endpoint_copy, "https://", 8) != 0) {
        whet_errf(err, "WHET_S3_ENDPOINT \"%s\": expected http://host[:port] or https://host[:port]", endpoint_copy);
        free(endpoint_copy);
        return -1;
    }
    pthread_once(&curl_once, curl_init_once);

    struct s3_store *s3 = xcalloc(1, sizeof *s3);
    s3->base.ops = &s3_ops;
    s3->endpoint = endpoint_copy;
    s3->bucket = xstrdup(bucket);
    s3->prefix = xstrdup(prefix);
    s3->userpwd = xasprintf("%s:%s", access_key, secret_key);
    s3->sigv4 = xasprintf("aws:amz:%s:s3", region);
    const char *token = getenv("AWS_SESSION_TOKEN");
    s3->session_token = token && *token ? xstrdup(token) : NULL;
    /* HOST:PORT:ADDR[,ADDR…]: the endpoint's addresses, given by a caller that resolved them for a
     * process that cannot (a model worker's sandbox has no DNS; executor/agent/serve_workers.c). */
    const char *resolve = getenv("WHET_S3_RESOLVE");
    s3->resolve = resolve && *resolve ? curl_slist_append(NULL, resolve) : NULL;
    pthread_mutex_init(&s3->pool_lock, NULL);
    *out = &s3->base;
    return 0;
}
