/* objstore_impl.h - what the object store's backends (objstore_file.c, objstore_s3.c) share with the
 * front end (objstore.c); not for use outside common/objstore/.
 *
 * The front end checks keys, verifies checksums on whole-object reads and builds the composite
 * operations (zstd objects, directories with manifests) out of the few primitives below, which each
 * backend implements over its own storage. */
#ifndef WHET_OBJSTORE_IMPL_H
#define WHET_OBJSTORE_IMPL_H

#include <openssl/evp.h>

#include "objstore.h"

struct objstore_ops {
    /* Stores bytes whose SHA-256 the front end already computed (`sha256` is 64 hex chars). */
    int (*put)(struct objstore *store, const char *key, const void *data, size_t len, const char *sha256,
               struct whet_err *err);
    /* Stores a local file whose SHA-256 the caller may know already (`sha256` NULL: the backend
     * computes it as it sees fit). */
    int (*put_file)(struct objstore *store, const char *key, const char *path, const char *sha256,
                    struct whet_err *err);
    /* Streams a range to `sink` (length 0: to the end) and fills `info` with the object's size and
     * stored checksum; OBJSTORE_NOT_FOUND before any byte when the key does not exist. */
    int (*read)(struct objstore *store, const char *key, uint64_t offset, uint64_t length, objstore_sink_fn sink,
                void *ctx, struct objstore_info *info, struct whet_err *err);
    int (*stat)(struct objstore *store, const char *key, struct objstore_info *info, struct whet_err *err);
    int (*delete)(struct objstore *store, const char *key, struct whet_err *err);
    int (*list)(struct objstore *store, const char *prefix, objstore_list_fn fn, void *ctx, struct whet_err *err);
    /* Frees the backend's part of the store (not `url`, which the front end owns). */
    void (*close)(struct objstore *store);
};

/* The common head of every backend's store struct (each backend's struct starts with this). */
struct objstore {
    const struct objstore_ops *ops;
    char *url;
    size_t part_size; /* s3 multipart: bytes per part, and the size above which a file goes multipart */
    int threads;      /* s3 multipart: parts in flight */
    objstore_progress_fn progress; /* s3 multipart: NULL or called as parts are stored */
    void *progress_ctx;
    _Atomic uint64_t bytes_sent;   /* s3: request body bytes sent */
};

int objstore_file_open(const char *root, struct objstore **out, struct whet_err *err);
int objstore_s3_open(const char *bucket, const char *prefix, struct objstore **out, struct whet_err *err);

/* The upload journal of the local file DIR/NAME: DIR/.NAME.whet-upload (caller frees). */
char *objstore_upload_journal_path(const char *path);
/* 1 when the file name `name` (no directory) is an upload journal or a journal's temp file. */
int objstore_is_upload_journal(const char *name);

/* Incremental SHA-256 (OpenSSL EVP). */
EVP_MD_CTX *objstore_sha_begin(void);
void objstore_sha_update(EVP_MD_CTX *sha, const void *data, size_t len);
/* Writes 64 hex chars + NUL and frees the context. */
void objstore_sha_end(EVP_MD_CTX *sha, char hex[65]);
/* SHA-256 and size of a local file, read in large blocks. */
int objstore_sha256_file(const char *path, char hex[65], uint64_t *size, struct whet_err *err);

#endif
