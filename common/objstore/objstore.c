/* objstore.c - the object store's front end: opening by URL, key rules, checksum-verified reads,
 * zstd-compressed objects and checkpoint directories with a manifest written last.
 *
 * The backends (objstore_file.c, objstore_s3.c) only move bytes; everything that must behave the same
 * whichever store is configured lives here, so the file:// store used in development and tests is a
 * faithful stand-in for S3. */
#include "objstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "crypto.h"
#include "json.h"
#include "log.h"
#include "objstore_impl.h"
#include "zstd_file.h"

#define DEFAULT_PART_SIZE (16u << 20)
#define DEFAULT_THREADS 4
#define MANIFEST_MAX (16u << 20)

/* ---------------------------------------------------------------------------------------------- */
/* Opening and closing                                                                            */
/* ---------------------------------------------------------------------------------------------- */

int objstore_open(const char *url, struct objstore **out, struct whet_err *err) {
    struct objstore *store = NULL;
    int rc;
    if (strncmp(url, "file://", 7) == 0) {
        const char *root = url + 7;
        if (root[0] != '/')
            return whet_errf(err, "object store URL \"%s\": file:// needs an absolute path (file:///abs/path)", url);
        rc = objstore_file_open(root, &store, err);
    } else if (strncmp(url, "s3://", 5) == 0) {
        const char *bucket = url + 5;
        const char *slash = strchr(bucket, '/');
        size_t bucket_len = slash ? (size_t)(slash - bucket) : strlen(bucket);
        if (bucket_len == 0) return whet_errf(err, "object store URL \"%s\": no bucket name", url);
        char *bucket_name = xmalloc(bucket_len + 1);
        memcpy(bucket_name, bucket, bucket_len);
        bucket_name[bucket_len] = 0;
        /* The prefix is stored without slashes at either end; "" means the whole bucket. */
        const char *prefix = slash ? slash + 1 : "";
        size_t prefix_len = strlen(prefix);
        while (prefix_len && prefix[prefix_len - 1] == '/') prefix_len--;
        char *prefix_copy = xmalloc(prefix_len + 1);
        memcpy(prefix_copy, prefix, prefix_len);
        prefix_copy[prefix_len] = 0;
        if (prefix_len && !objstore_key_valid(prefix_copy, err)) {
            whet_err_prefix(err, "object store URL \"%s\": prefix", url);
            rc = -1;
        } else {
            rc = objstore_s3_open(bucket_name, prefix_copy, &store, err);
        }
        free(bucket_name);
        free(prefix_copy);
    } else {
        return whet_errf(err, "object store URL \"%s\": unknown scheme (expected file:///abs/path or s3://bucket/prefix)",
                         url);
    }
    if (rc != 0) return -1;
    store->url = xstrdup(url);
    store->part_size = DEFAULT_PART_SIZE;
    store->threads = DEFAULT_THREADS;
    *out = store;
    return 0;
}

int objstore_open_env(struct objstore **out, struct whet_err *err) {
    const char *url = getenv("WHET_OBJECT_STORE");
    if (!url || !*url)
        return whet_errf(err, "WHET_OBJECT_STORE is not set (expected file:///abs/path or s3://bucket/prefix)");
    return objstore_open(url, out, err);
}

void objstore_close(struct objstore *store) {
    if (!store) return;
    free(store->url);
    store->ops->close(store);
}

const char *objstore_url(const struct objstore *store) { return store->url; }

void objstore_set_multipart(struct objstore *store, size_t part_size, int threads) {
    if (part_size) store->part_size = part_size;
    if (threads > 0) store->threads = threads;
}

void objstore_set_progress(struct objstore *store, objstore_progress_fn fn, void *ctx) {
    store->progress = fn;
    store->progress_ctx = ctx;
}

uint64_t objstore_bytes_sent(const struct objstore *store) { return store->bytes_sent; }

char *objstore_upload_journal_path(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return xasprintf(".%s%s", path, OBJSTORE_UPLOAD_JOURNAL_SUFFIX);
    return xasprintf("%.*s/.%s%s", (int)(slash - path), path, slash + 1, OBJSTORE_UPLOAD_JOURNAL_SUFFIX);
}

int objstore_is_upload_journal(const char *name) {
    /* ".NAME.whet-upload" and the ".NAME.whet-upload.tmp.PID" a crash mid-write can leave. */
    return name[0] == '.' && strstr(name, OBJSTORE_UPLOAD_JOURNAL_SUFFIX) != NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* Keys and checksums                                                                             */
/* ---------------------------------------------------------------------------------------------- */

/* Fills `err` and returns 0, the "invalid" answer of objstore_key_valid. */
static int key_bad(struct whet_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int key_bad(struct whet_err *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    whet_verrf(err, fmt, ap);
    va_end(ap);
    return 0;
}

int objstore_key_valid(const char *key, struct whet_err *err) {
    size_t len = strlen(key);
    if (len == 0) return key_bad(err, "empty object key");
    if (len > OBJSTORE_KEY_MAX)
        return key_bad(err, "object key is %zu bytes, over the limit of %d", len, OBJSTORE_KEY_MAX);
    if (key[0] == '/') return key_bad(err, "object key \"%s\" starts with '/'", key);
    for (const char *p = key; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return key_bad(err, "object key \"%s\" has a control character", key);
    /* Segments: no empty ("a//b", trailing '/'), "." or ".." ones, which a file system would resolve
     * outside the key's place and S3 would keep as distinct keys. */
    const char *seg = key;
    for (;;) {
        const char *end = strchr(seg, '/');
        size_t n = end ? (size_t)(end - seg) : strlen(seg);
        if (n == 0) return key_bad(err, "object key \"%s\" has an empty path segment", key);
        if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
            return key_bad(err, "object key \"%s\" has a \".\" or \"..\" segment", key);
        if (!end) break;
        seg = end + 1;
    }
    return 1;
}

EVP_MD_CTX *objstore_sha_begin(void) {
    EVP_MD_CTX *sha = EVP_MD_CTX_new();
    if (!sha || EVP_DigestInit_ex(sha, EVP_sha256(), NULL) != 1) {
        fprintf(stderr, "whet: OpenSSL cannot start a SHA-256\n");
        abort();
    }
    return sha;
}

void objstore_sha_update(EVP_MD_CTX *sha, const void *data, size_t len) { EVP_DigestUpdate(sha, data, len); }

void objstore_sha_end(EVP_MD_CTX *sha, char hex[65]) {
    uint8_t digest[32];
    unsigned int n = 0;
    EVP_DigestFinal_ex(sha, digest, &n);
    EVP_MD_CTX_free(sha);
    whet_hex_encode(digest, 32, hex);
}

int objstore_sha256_file(const char *path, char hex[65], uint64_t *size, struct whet_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return whet_errf(err, "%s: %s", path, strerror(errno));
    size_t cap = 1u << 20;
    char *buf = xmalloc(cap);
    EVP_MD_CTX *sha = objstore_sha_begin();
    uint64_t total = 0;
    for (;;) {
        ssize_t n = read(fd, buf, cap);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            whet_errf(err, "%s: %s", path, strerror(errno));
            objstore_sha_end(sha, hex);
            free(buf);
            close(fd);
            return -1;
        }
        if (n == 0) break;
        objstore_sha_update(sha, buf, (size_t)n);
        total += (uint64_t)n;
    }
    objstore_sha_end(sha, hex);
    free(buf);
    close(fd);
    if (size) *size = total;
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Plain operations                                                                               */
/* ---------------------------------------------------------------------------------------------- */

#define CHECK_KEY(key)                                                     \
    do {                                                                   \
        if (!objstore_key_valid((key), err)) return -1;                    \
    } while (0)

int objstore_put(struct objstore *store, const char *key, const void *data, size_t len, struct whet_err *err) {
    CHECK_KEY(key);
    char sha[65];
    whet_sha256_hex(data, len, sha);
    return store->ops->put(store, key, data, len, sha, err);
}

int objstore_put_file(struct objstore *store, const char *key, const char *path, struct whet_err *err) {
    CHECK_KEY(key);
    return store->ops->put_file(store, key, path, NULL, err);
}

int objstore_read(struct objstore *store, const char *key, uint64_t offset, uint64_t length,
                  objstore_sink_fn sink, void *ctx, struct whet_err *err) {
    CHECK_KEY(key);
    struct objstore_info info;
    return store->ops->read(store, key, offset, length, sink, ctx, &info, err);
}

int objstore_stat(struct objstore *store, const char *key, struct objstore_info *info, struct whet_err *err) {
    CHECK_KEY(key);
    return store->ops->stat(store, key, info, err);
}

int objstore_delete(struct objstore *store, const char *key, struct whet_err *err) {
    CHECK_KEY(key);
    return store->ops->delete(store, key, err);
}

int objstore_list(struct objstore *store, const char *prefix, objstore_list_fn fn, void *ctx, struct whet_err *err) {
    if (prefix[0] == '/') return whet_errf(err, "list prefix \"%s\" starts with '/'", prefix);
    return store->ops->list(store, prefix, fn, ctx, err);
}

/* Every whole-object read goes through a verified read: the bytes pass through a SHA-256 on their
 * way to the real sink and the digest is compared with the stored one at the end. */
struct verified_read {
    EVP_MD_CTX *sha;
    objstore_sink_fn sink;
    void *ctx;
};

static int verified_sink(void *ctx, const void *chunk, size_t len) {
    struct verified_read *v = ctx;
    objstore_sha_update(v->sha, chunk, len);
    return v->sink(v->ctx, chunk, len);
}

/* Reads all of `key` into `sink`; on success `info` holds the size and the SHA-256 actually read. */
static int read_verified(struct objstore *store, const char *key, objstore_sink_fn sink, void *ctx,
                         struct objstore_info *info, struct whet_err *err) {
    struct verified_read v = {objstore_sha_begin(), sink, ctx};
    memset(info, 0, sizeof *info);
    int rc = store->ops->read(store, key, 0, 0, verified_sink, &v, info, err);
    char got[65];
    objstore_sha_end(v.sha, got);
    if (rc != 0) return rc;
    if (info->sha256[0] && strcmp(info->sha256, got) != 0)
        return whet_errf(err, "object \"%s\": checksum mismatch: stored sha256 %s, read %s", key, info->sha256, got);
    memcpy(info->sha256, got, sizeof got);
    return 0;
}

struct memory_sink {
    char *data;
    size_t len, cap, max;
    int too_big;
};

static int memory_sink_write(void *ctx, const void *chunk, size_t len) {
    struct memory_sink *m = ctx;
    if (len > m->max - m->len) {
        m->too_big = 1;
        return 1;
    }
    if (m->len + len + 1 > m->cap) {
        size_t cap = m->cap ? m->cap : 4096;
        while (cap < m->len + len + 1) cap *= 2;
        m->data = xrealloc(m->data, cap);
        m->cap = cap;
    }
    memcpy(m->data + m->len, chunk, len);
    m->len += len;
    return 0;
}

/* Hands the sink's bytes, NUL-terminated, to the caller after a read that returned rc; frees them
 * when the read failed. Returns rc. */
static int memory_sink_finish(struct memory_sink *m, int rc, char **data, size_t *len) {
    if (rc != 0) {
        free(m->data);
        return rc;
    }
    if (!m->data) m->data = xmalloc(1);
    m->data[m->len] = 0;
    *data = m->data;
    if (len) *len = m->len;
    return 0;
}

int objstore_get(struct objstore *store, const char *key, char **data, size_t *len, size_t max,
                 struct whet_err *err) {
    CHECK_KEY(key);
    struct memory_sink m = {.max = max};
    struct objstore_info info;
    int rc = read_verified(store, key, memory_sink_write, &m, &info, err);
    if (rc == -1 && m.too_big) whet_errf(err, "object \"%s\" is larger than the limit of %zu bytes", key, max);
    return memory_sink_finish(&m, rc, data, len);
}

/* ---------------------------------------------------------------------------------------------- */
/* Sequential verified reader                                                                     */
/* ---------------------------------------------------------------------------------------------- */

/* Read-ahead (objstore_reader_read_ahead): one streaming read on a thread of its own fills a ring
 * that the reader's calls drain; the thread blocks while the ring is full, which stalls the transfer
 * (the server waits on TCP flow control). Shared by the reader and the thread; the last to let go
 * frees it, so closing the reader never waits for a transfer to notice. */
struct read_ahead {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct objstore *store;
    char *key;
    uint64_t offset, length;   /* what the thread reads */
    char *ring;
    size_t cap, head, len;     /* bytes [head, head+len) mod cap are waiting */
    int done, rc;              /* the thread's read returned rc */
    struct whet_err err;
    int closing;               /* the reader let go: the thread stops at its next chunk */
    int refs;
};

struct objstore_reader {
    struct objstore *store;
    char *key;
    uint64_t size, offset, end; /* end: where reading stops (size unless a range was set) */
    char sha256[65]; /* the checksum the bytes must have, "" when there is none to check */
    EVP_MD_CTX *sha; /* NULL once the last bytes were checked, or when a range leaves nothing to check */
    int failed;      /* a checksum mismatch: no more bytes come out */
    size_t window;   /* read-ahead bytes, 0: one ranged read per call */
    struct read_ahead *ahead;
    int restarts;    /* read-aheads started again without progress in between */
};

int objstore_reader_open(struct objstore *store, const char *key, const char *expect_sha256,
                         struct objstore_reader **out, struct objstore_info *info, struct whet_err *err) {
    CHECK_KEY(key);
    struct objstore_info st;
    memset(&st, 0, sizeof st);
    int rc = store->ops->stat(store, key, &st, err);
    if (rc != 0) return rc;
    const char *want = st.sha256;
    if (expect_sha256 && *expect_sha256) {
        if (st.sha256[0] && strcmp(st.sha256, expect_sha256) != 0)
            return whet_errf(err, "object \"%s\": stored sha256 %s, expected %s", key, st.sha256, expect_sha256);
        want = expect_sha256;
    }
    struct objstore_reader *rd = xcalloc(1, sizeof *rd);
    rd->store = store;
    rd->key = xstrdup(key);
    rd->size = rd->end = st.size;
    snprintf(rd->sha256, sizeof rd->sha256, "%s", want);
    rd->sha = objstore_sha_begin();
    if (info) *info = st;
    *out = rd;
    return 0;
}

struct buffer_sink {
    char *buf;
    size_t len, cap;
};

static int buffer_sink_write(void *ctx, const void *chunk, size_t len) {
    struct buffer_sink *b = ctx;
    if (len > b->cap - b->len) return 1; /* more than was asked for */
    memcpy(b->buf + b->len, chunk, len);
    b->len += len;
    return 0;
}

/* Called once every byte went through the digest: the last chance to refuse them. */
static int reader_verify(struct objstore_reader *rd, struct whet_err *err) {
    char got[65];
    objstore_sha_end(rd->sha, got);
    rd->sha = NULL;
    if (rd->sha256[0] && strcmp(rd->sha256, got) != 0) {
        rd->failed = 1;
        return whet_errf(err, "object \"%s\": checksum mismatch: stored sha256 %s, read %s", rd->key, rd->sha256, got);
    }
    return 0;
}

static void read_ahead_unref(struct read_ahead *ra) {
    pthread_mutex_lock(&ra->mu);
    int last = --ra->refs == 0;
    pthread_mutex_unlock(&ra->mu);
    if (!last) return;
    pthread_mutex_destroy(&ra->mu);
    pthread_cond_destroy(&ra->cv);
    free(ra->ring);
    free(ra->key);
    free(ra);
}

/* The thread's sink: copies into the ring, waiting for room. */
static int read_ahead_sink(void *ctx, const void *chunk, size_t len) {
    struct read_ahead *ra = ctx;
    const char *p = chunk;
    pthread_mutex_lock(&ra->mu);
    while (len && !ra->closing) {
        if (ra->len == ra->cap) {
            pthread_cond_wait(&ra->cv, &ra->mu);
            continue;
        }
        size_t tail = (ra->head + ra->len) % ra->cap;
        size_t n = ra->cap - ra->len;
        if (n > ra->cap - tail) n = ra->cap - tail;
        if (n > len) n = len;
        memcpy(ra->ring + tail, p, n);
        ra->len += n;
        p += n;
        len -= n;
        pthread_cond_broadcast(&ra->cv);
    }
    int stop = ra->closing;
    pthread_mutex_unlock(&ra->mu);
    return stop;
}

static void *read_ahead_main(void *arg) {
    struct read_ahead *ra = arg;
    struct objstore_info info;
    struct whet_err err = {0};
    int rc = ra->store->ops->read(ra->store, ra->key, ra->offset, ra->length, read_ahead_sink, ra, &info, &err);
    pthread_mutex_lock(&ra->mu);
    ra->done = 1;
    ra->rc = rc;
    ra->err = err;
    pthread_cond_broadcast(&ra->cv);
    pthread_mutex_unlock(&ra->mu);
    read_ahead_unref(ra);
    return NULL;
}

static int read_ahead_start(struct objstore_reader *rd, uint64_t from, struct whet_err *err) {
    struct read_ahead *ra = xcalloc(1, sizeof *ra);
    pthread_mutex_init(&ra->mu, NULL);
    pthread_cond_init(&ra->cv, NULL);
    ra->store = rd->store;
    ra->key = xstrdup(rd->key);
    ra->offset = from;
    ra->length = rd->end - from;
    ra->cap = rd->window;
    ra->ring = xmalloc(ra->cap);
    ra->refs = 2;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t tid;
    int e = pthread_create(&tid, &attr, read_ahead_main, ra);
    pthread_attr_destroy(&attr);
    if (e != 0) {
        ra->refs = 1;
        read_ahead_unref(ra);
        return whet_errf(err, "object \"%s\": cannot start a read-ahead thread: %s", rd->key, strerror(e));
    }
    rd->ahead = ra;
    return 0;
}

static void read_ahead_stop(struct objstore_reader *rd) {
    struct read_ahead *ra = rd->ahead;
    if (!ra) return;
    pthread_mutex_lock(&ra->mu);
    ra->closing = 1;
    pthread_cond_broadcast(&ra->cv);
    pthread_mutex_unlock(&ra->mu);
    read_ahead_unref(ra);
    rd->ahead = NULL;
}

/* Fills buf[0..want) from the read-ahead, starting it (again) as needed: a transfer that ended early
 * (the server dropped it, or the caller was so slow that the transfer timed out) continues from the
 * first byte not yet taken, up to three times in a row without a byte of progress in between. */
static int read_ahead_take(struct objstore_reader *rd, char *buf, size_t want, struct whet_err *err) {
    size_t got = 0;
    while (got < want) {
        if (!rd->ahead && read_ahead_start(rd, rd->offset + got, err) != 0) return -1;
        struct read_ahead *ra = rd->ahead;
        pthread_mutex_lock(&ra->mu);
        while (ra->len == 0 && !ra->done) pthread_cond_wait(&ra->cv, &ra->mu);
        while (ra->len && got < want) {
            size_t n = ra->cap - ra->head;
            if (n > ra->len) n = ra->len;
            if (n > want - got) n = want - got;
            memcpy(buf + got, ra->ring + ra->head, n);
            ra->head = (ra->head + n) % ra->cap;
            ra->len -= n;
            got += n;
            rd->restarts = 0;
        }
        pthread_cond_broadcast(&ra->cv);
        int ended = ra->done && ra->len == 0, rc = ra->rc;
        struct whet_err thread_err = ra->err;
        pthread_mutex_unlock(&ra->mu);
        if (got == want || !ended) continue;
        read_ahead_stop(rd);
        if (rc == OBJSTORE_NOT_FOUND) return whet_errf(err, "object \"%s\" was deleted while being read", rd->key);
        if (rc == 0) /* every byte asked for came, yet fewer than the reader expects */
            return whet_errf(err, "object \"%s\": the read ended early at offset %llu", rd->key,
                             (unsigned long long)(rd->offset + got));
        if (++rd->restarts > 3) {
            *err = thread_err;
            return -1;
        }
        log_warn("msg=\"object read continues after a broken transfer\" key=%s offset=%llu err=\"%s\"", rd->key,
                 (unsigned long long)(rd->offset + got), thread_err.msg);
    }
    return 0;
}

int objstore_reader_next(struct objstore_reader *rd, void *buf, size_t cap, size_t *len, struct whet_err *err) {
    *len = 0;
    if (rd->failed) return whet_errf(err, "object \"%s\": checksum mismatch", rd->key);
    uint64_t left = rd->end - rd->offset;
    if (left == 0) return rd->sha ? reader_verify(rd, err) : 0; /* an empty object is checked too */
    if (cap == 0) return whet_errf(err, "object \"%s\": read into an empty buffer", rd->key);
    size_t want = left < cap ? (size_t)left : cap;
    struct buffer_sink b = {buf, 0, want};
    if (rd->window) {
        if (read_ahead_take(rd, buf, want, err) != 0) return -1;
        b.len = want;
    } else {
        struct objstore_info info;
        int rc = rd->store->ops->read(rd->store, rd->key, rd->offset, want, buffer_sink_write, &b, &info, err);
        if (rc == OBJSTORE_NOT_FOUND) return whet_errf(err, "object \"%s\" was deleted while being read", rd->key);
        if (rc != 0) return -1;
    }
    if (b.len != want)
        return whet_errf(err, "object \"%s\": read %zu bytes at offset %llu instead of %zu (changed while being read?)",
                         rd->key, b.len, (unsigned long long)rd->offset, want);
    if (rd->sha) {
        objstore_sha_update(rd->sha, buf, want);
        if (rd->offset + want == rd->size && reader_verify(rd, err) != 0) return -1;
    }
    rd->offset += want;
    *len = want;
    return 0;
}

int objstore_reader_range(struct objstore_reader *rd, uint64_t offset, uint64_t length, struct whet_err *err) {
    if (rd->offset != 0 || rd->end != rd->size || !rd->sha)
        return whet_errf(err, "object \"%s\": a range must be set before the first read", rd->key);
    if (offset > rd->size || length > rd->size - offset)
        return whet_errf(err, "object \"%s\": range %llu+%llu is past its end (%llu bytes)", rd->key,
                         (unsigned long long)offset, (unsigned long long)length, (unsigned long long)rd->size);
    if (offset == 0 && length == rd->size) return 0; /* the whole object: still checked */
    rd->offset = offset;
    rd->end = offset + length;
    EVP_MD_CTX_free(rd->sha);
    rd->sha = NULL;
    return 0;
}

void objstore_reader_read_ahead(struct objstore_reader *rd, size_t window) {
    if (!rd->ahead) rd->window = window;
}

uint64_t objstore_reader_offset(const struct objstore_reader *rd) { return rd->offset; }
uint64_t objstore_reader_size(const struct objstore_reader *rd) { return rd->size; }

void objstore_reader_close(struct objstore_reader *rd) {
    if (!rd) return;
    read_ahead_stop(rd);
    if (rd->sha) EVP_MD_CTX_free(rd->sha);
    free(rd->key);
    free(rd);
}

/* ---------------------------------------------------------------------------------------------- */
/* Local files written through a temp file                                                        */
/* ---------------------------------------------------------------------------------------------- */

/* A temp file next to `path` ("DIR/.NAME.tmp.XXXXXX"), in the same file system so rename(2) is atomic;
 * parent directories are created. The caller owns `*tmp_path`. */
static int local_temp_open(const char *path, char **tmp_path, struct whet_err *err) {
    const char *slash = strrchr(path, '/');
    if (slash && slash != path) {
        char *dir = xmalloc((size_t)(slash - path) + 1);
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = 0;
        int rc = whet_mkdir_p(dir, err);
        free(dir);
        if (rc != 0) return -1;
    }
    const char *base = slash ? slash + 1 : path;
    char *tmp = xasprintf("%.*s.%s.tmp.XXXXXX", (int)(base - path), path, base);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        whet_errf(err, "%s: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    *tmp_path = tmp;
    return fd;
}

/* fsync, close and rename the temp file into place; on failure it is removed. Always closes `fd`. */
static int local_temp_commit(int fd, char *tmp_path, const char *path, struct whet_err *err) {
    int rc = 0;
    if (fsync(fd) != 0) rc = whet_errf(err, "%s: fsync: %s", tmp_path, strerror(errno));
    if (close(fd) != 0 && rc == 0) rc = whet_errf(err, "%s: close: %s", tmp_path, strerror(errno));
    if (rc == 0 && rename(tmp_path, path) != 0) rc = whet_errf(err, "%s: rename: %s", path, strerror(errno));
    if (rc != 0) unlink(tmp_path);
    return rc;
}

struct fd_sink {
    int fd;
    int write_errno; /* set when a write failed */
};

static int fd_sink_write(void *ctx, const void *chunk, size_t len) {
    struct fd_sink *f = ctx;
    if (whet_write_all(f->fd, chunk, len) != 0) {
        f->write_errno = errno;
        return 1;
    }
    return 0;
}

int objstore_get_file(struct objstore *store, const char *key, const char *path, struct objstore_info *info,
                      struct whet_err *err) {
    CHECK_KEY(key);
    char *tmp = NULL;
    int fd = local_temp_open(path, &tmp, err);
    if (fd < 0) return -1;
    struct fd_sink f = {fd, 0};
    struct objstore_info got;
    int rc = read_verified(store, key, fd_sink_write, &f, &got, err);
    if (rc == -1 && f.write_errno) whet_errf(err, "%s: %s", tmp, strerror(f.write_errno));
    if (rc != 0) {
        close(fd);
        unlink(tmp);
        free(tmp);
        return rc;
    }
    rc = local_temp_commit(fd, tmp, path, err);
    free(tmp);
    if (rc == 0 && info) *info = got;
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* zstd objects                                                                                   */
/* ---------------------------------------------------------------------------------------------- */

/* Compresses `len` bytes with the streaming API into a buffer the caller frees. */
static int zstd_compress_buffer(const void *data, size_t len, int level, char **out, size_t *out_len,
                                struct whet_err *err) {
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    if (!cctx) return whet_errf(err, "zstd: cannot create a compression context");
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    ZSTD_CCtx_setPledgedSrcSize(cctx, len);
    size_t cap = ZSTD_compressBound(len);
    char *buf = xmalloc(cap);
    ZSTD_inBuffer in = {data, len, 0};
    ZSTD_outBuffer outb = {buf, cap, 0};
    size_t left = ZSTD_compressStream2(cctx, &outb, &in, ZSTD_e_end);
    ZSTD_freeCCtx(cctx);
    if (ZSTD_isError(left) || left != 0) {
        free(buf);
        return whet_errf(err, "zstd: %s", ZSTD_isError(left) ? ZSTD_getErrorName(left) : "output buffer too small");
    }
    *out = buf;
    *out_len = outb.pos;
    return 0;
}

int objstore_put_zstd(struct objstore *store, const char *key, const void *data, size_t len, int level,
                      struct whet_err *err) {
    CHECK_KEY(key);
    char *packed = NULL;
    size_t packed_len = 0;
    if (zstd_compress_buffer(data, len, level, &packed, &packed_len, err) != 0)
        return whet_err_prefix(err, "object \"%s\"", key);
    int rc = objstore_put(store, key, packed, packed_len, err);
    free(packed);
    return rc;
}

/* A sink that decompresses what it receives and hands the plain bytes to another sink, so compressed
 * objects are never held whole. */
struct zstd_sink {
    ZSTD_DStream *dstream;
    char *out;
    size_t out_cap;
    size_t last_ret; /* 0 once a frame has ended: anything but 0 at the end means a truncated frame */
    const char *zstd_error;
    objstore_sink_fn sink;
    void *ctx;
};

static int zstd_sink_write(void *ctx, const void *chunk, size_t len) {
    struct zstd_sink *z = ctx;
    ZSTD_inBuffer in = {chunk, len, 0};
    while (in.pos < in.size) {
        ZSTD_outBuffer out = {z->out, z->out_cap, 0};
        size_t ret = ZSTD_decompressStream(z->dstream, &out, &in);
        if (ZSTD_isError(ret)) {
            z->zstd_error = ZSTD_getErrorName(ret);
            return 1;
        }
        z->last_ret = ret;
        if (out.pos && z->sink(z->ctx, z->out, out.pos) != 0) return 1;
    }
    return 0;
}

/* Reads `key`, verifying its checksum, and sends the decompressed bytes to `sink`. */
static int read_zstd(struct objstore *store, const char *key, objstore_sink_fn sink, void *ctx,
                     struct whet_err *err) {
    struct zstd_sink z = {.dstream = ZSTD_createDStream(), .out_cap = ZSTD_DStreamOutSize(), .last_ret = 1,
                          .sink = sink, .ctx = ctx};
    if (!z.dstream) return whet_errf(err, "zstd: cannot create a decompression context");
    z.out = xmalloc(z.out_cap);
    struct objstore_info info;
    int rc = read_verified(store, key, zstd_sink_write, &z, &info, err);
    if (rc == -1 && z.zstd_error) whet_errf(err, "object \"%s\": zstd: %s", key, z.zstd_error);
    if (rc == 0 && z.last_ret != 0) rc = whet_errf(err, "object \"%s\": zstd: truncated frame", key);
    ZSTD_freeDStream(z.dstream);
    free(z.out);
    return rc;
}

int objstore_get_zstd(struct objstore *store, const char *key, char **data, size_t *len, size_t max,
                      struct whet_err *err) {
    CHECK_KEY(key);
    struct memory_sink m = {.max = max};
    int rc = read_zstd(store, key, memory_sink_write, &m, err);
    if (rc == -1 && m.too_big)
        whet_errf(err, "object \"%s\" decompresses to more than the limit of %zu bytes", key, max);
    return memory_sink_finish(&m, rc, data, len);
}

int objstore_put_file_zstd(struct objstore *store, const char *key, const char *path, int level,
                           struct whet_err *err) {
    CHECK_KEY(key);
    char *tmp = NULL;
    int fd = local_temp_open(path, &tmp, err);
    if (fd < 0) return -1;
    int rc = whet_zstd_compress_fd(path, fd, level, err);
    close(fd);
    if (rc == 0) rc = objstore_put_file(store, key, tmp, err);
    unlink(tmp);
    free(tmp);
    return rc;
}

int objstore_get_file_zstd(struct objstore *store, const char *key, const char *path, struct whet_err *err) {
    CHECK_KEY(key);
    char *tmp = NULL;
    int fd = local_temp_open(path, &tmp, err);
    if (fd < 0) return -1;
    struct fd_sink f = {fd, 0};
    int rc = read_zstd(store, key, fd_sink_write, &f, err);
    if (rc == -1 && f.write_errno) whet_errf(err, "%s: %s", tmp, strerror(f.write_errno));
    if (rc != 0) {
        close(fd);
        unlink(tmp);
    } else {
        rc = local_temp_commit(fd, tmp, path, err);
    }
    free(tmp);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* Checkpoint directories: files first, MANIFEST.json last                                        */
/* ---------------------------------------------------------------------------------------------- */

struct name_list {
    char **names;
    size_t len, cap;
};

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Collects the regular files under `root`/`rel` as relative names ("sub/file"). */
static int collect_files(const char *root, const char *rel, struct name_list *list, struct whet_err *err) {
    char *dir_path = rel[0] ? xasprintf("%s/%s", root, rel) : xstrdup(root);
    DIR *dir = opendir(dir_path);
    if (!dir) {
        whet_errf(err, "%s: %s", dir_path, strerror(errno));
        free(dir_path);
        return -1;
    }
    int rc = 0;
    struct dirent *ent;
    while (rc == 0 && (ent = readdir(dir)) != NULL) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0) continue;
        char *name = rel[0] ? xasprintf("%s/%s", rel, ent->d_name) : xstrdup(ent->d_name);
        char *full = xasprintf("%s/%s", root, name);
        struct stat st;
        if (lstat(full, &st) != 0) {
            rc = whet_errf(err, "%s: %s", full, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            rc = collect_files(root, name, list, err);
        } else if (S_ISREG(st.st_mode) && !objstore_is_upload_journal(ent->d_name)) {
            if (list->len == list->cap) {
                list->cap = list->cap ? list->cap * 2 : 16;
                list->names = xrealloc(list->names, list->cap * sizeof *list->names);
            }
            list->names[list->len++] = name;
            name = NULL;
        }
        /* Anything else (symlinks, sockets) is not part of a checkpoint: a symlink could point outside it. */
        free(name);
        free(full);
    }
    closedir(dir);
    free(dir_path);
    return rc;
}

static void name_list_free(struct name_list *list) {
    for (size_t i = 0; i < list->len; i++) free(list->names[i]);
    free(list->names);
}

/* 1 when `key` already holds `size` bytes with checksum `sha`: a file a resumed upload can skip. */
static int already_stored(struct objstore *store, const char *key, uint64_t size, const char *sha) {
    struct objstore_info info;
    struct whet_err ignored;
    return store->ops->stat(store, key, &info, &ignored) == 0 && info.size == size && strcmp(info.sha256, sha) == 0;
}

int objstore_put_dir(struct objstore *store, const char *prefix, const char *dir, struct whet_err *err) {
    int uploaded;
    return objstore_put_dir_counted(store, prefix, dir, &uploaded, err);
}

int objstore_put_dir_counted(struct objstore *store, const char *prefix, const char *dir, int *uploaded,
                             struct whet_err *err) {
    CHECK_KEY(prefix);
    *uploaded = 0;
    struct name_list files = {0};
    if (collect_files(dir, "", &files, err) != 0) {
        name_list_free(&files);
        return -1;
    }
    if (files.len) qsort(files.names, files.len, sizeof *files.names, name_cmp);
    json_t *entries = json_array();
    int rc = 0;
    for (size_t i = 0; i < files.len && rc == 0; i++) {
        const char *name = files.names[i];
        if (strcmp(name, OBJSTORE_MANIFEST) == 0) {
            rc = whet_errf(err, "%s: a checkpoint may not contain its own %s", dir, OBJSTORE_MANIFEST);
            break;
        }
        char *path = xasprintf("%s/%s", dir, name);
        char *key = xasprintf("%s/%s", prefix, name);
        char sha[65];
        uint64_t size;
        rc = objstore_sha256_file(path, sha, &size, err);
        if (rc == 0 && !already_stored(store, key, size, sha)) {
            rc = store->ops->put_file(store, key, path, sha, err);
            if (rc == 0) (*uploaded)++;
        } else if (rc == 0) {
            /* A crash between completing a multipart upload and removing its journal leaves a
             * journal for an upload that is done. */
            char *journal = objstore_upload_journal_path(path);
            unlink(journal);
            free(journal);
        }
        if (rc == 0)
            json_array_append_new(entries, json_pack("{s:s, s:I, s:s}", "name", name, "size", (json_int_t)size,
                                                     "sha256", sha));
        free(path);
        free(key);
    }
    name_list_free(&files);
    if (rc == 0) {
        json_t *manifest = json_pack("{s:o}", "files", entries);
        char *text = json_dumps(manifest, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        char *key = xasprintf("%s/%s", prefix, OBJSTORE_MANIFEST);
        rc = objstore_put(store, key, text, strlen(text), err);
        free(key);
        free(text);
        json_decref(manifest);
    } else {
        json_decref(entries);
    }
    return rc;
}

int objstore_get_dir(struct objstore *store, const char *prefix, const char *dir, struct whet_err *err) {
    CHECK_KEY(prefix);
    char *manifest_key = xasprintf("%s/%s", prefix, OBJSTORE_MANIFEST);
    char *text = NULL;
    size_t text_len = 0;
    int rc = objstore_get(store, manifest_key, &text, &text_len, MANIFEST_MAX, err);
    if (rc == OBJSTORE_NOT_FOUND)
        whet_errf(err, "checkpoint \"%s\" has no %s: its upload is incomplete", prefix, OBJSTORE_MANIFEST);
    if (rc != 0) {
        free(manifest_key);
        return rc;
    }
    json_error_t jerr;
    json_t *manifest = json_loadb(text, text_len, 0, &jerr);
    json_t *files = manifest ? json_object_get(manifest, "files") : NULL;
    if (!json_is_array(files)) {
        rc = manifest ? whet_errf(err, "%s: \"files\" must be an array", manifest_key)
                      : whet_json_errf(err, manifest_key, &jerr);
    }
    if (rc == 0) rc = whet_mkdir_p(dir, err);
    size_t i;
    json_t *entry;
    json_array_foreach(files, i, entry) {
        if (rc != 0) break;
        const char *name = json_string_value(json_object_get(entry, "name"));
        const char *sha = json_string_value(json_object_get(entry, "sha256"));
        json_t *size = json_object_get(entry, "size");
        if (!name || !sha || !json_is_integer(size)) {
            rc = whet_errf(err, "%s: files[%zu]: needs \"name\", \"size\" and \"sha256\"", manifest_key, i);
            break;
        }
        /* The name becomes a local path: the key rules keep it inside `dir`. */
        if (!objstore_key_valid(name, err) || strcmp(name, OBJSTORE_MANIFEST) == 0) {
            if (strcmp(name, OBJSTORE_MANIFEST) == 0) whet_errf(err, "the manifest lists itself");
            rc = whet_err_prefix(err, "%s: files[%zu]", manifest_key, i);
            break;
        }
        char *key = xasprintf("%s/%s", prefix, name);
        char *path = xasprintf("%s/%s", dir, name);
        struct objstore_info info;
        rc = objstore_get_file(store, key, path, &info, err);
        if (rc == OBJSTORE_NOT_FOUND)
            rc = whet_errf(err, "checkpoint \"%s\": %s is in the manifest but not in the store", prefix, name);
        else if (rc == 0 && (info.size != (uint64_t)json_integer_value(size) || strcmp(info.sha256, sha) != 0)) {
            rc = whet_errf(err, "checkpoint \"%s\": %s does not match the manifest (%llu bytes, sha256 %s; "
                                "manifest: %lld bytes, sha256 %s)", prefix, name, (unsigned long long)info.size,
                           info.sha256, (long long)json_integer_value(size), sha);
            unlink(path);
        }
        free(key);
        free(path);
    }
    if (rc == 0) rc = whet_write_file_in(dir, OBJSTORE_MANIFEST, text, text_len, err);
    json_decref(manifest);
    free(text);
    free(manifest_key);
    return rc;
}

/* objstore_list callback gathering keys into a name_list. */
static int collect_key(void *ctx, const char *key, uint64_t size) {
    struct name_list *list = ctx;
    if (list->len == list->cap) {
        list->cap = list->cap ? list->cap * 2 : 16;
        list->names = xrealloc(list->names, list->cap * sizeof *list->names);
    }
    list->names[list->len++] = xstrdup(key);
    return 0;
}

int objstore_delete_dir(struct objstore *store, const char *prefix, struct whet_err *err) {
    CHECK_KEY(prefix);
    char *manifest_key = xasprintf("%s/%s", prefix, OBJSTORE_MANIFEST);
    int rc = objstore_delete(store, manifest_key, err);
    free(manifest_key);
    if (rc != 0) return rc;
    char *under = xasprintf("%s/", prefix);
    struct name_list keys = {0};
    rc = objstore_list(store, under, collect_key, &keys, err);
    for (size_t i = 0; i < keys.len && rc == 0; i++) rc = objstore_delete(store, keys.names[i], err);
    name_list_free(&keys);
    free(under);
    return rc;
}
