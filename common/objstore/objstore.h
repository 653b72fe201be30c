/* objstore.h - the object store: where datasets, base models and checkpoints live (DESIGN.md).
 *
 * One blocking API over two backends, chosen by URL:
 *   file:///abs/path      a directory; every write is atomic (temp file, fsync, rename), so a reader
 *                         sees the old object or the new one, never half of one.
 *   s3://bucket/prefix    an S3-compatible service at $WHET_S3_ENDPOINT (path-style URLs), signed with
 *                         SigV4 by libcurl from $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY, $AWS_REGION
 *                         (and $AWS_SESSION_TOKEN when set). Large files go up as multipart uploads
 *                         with parts sent in parallel; failed requests are retried with backoff.
 *
 * Keys are relative paths ("ckpt/step-10/adapter.safetensors"): no leading '/', no empty, "." or ".."
 * segments, no control characters, at most 1024 bytes. Every object carries the SHA-256 of its bytes
 * (S3: the `x-amz-meta-sha256` header; file://: the `user.whet.sha256` extended attribute where the
 * file system has them), and whole-object reads check it.
 *
 * Return values: 0 on success, -1 on error with `err` filled, and OBJSTORE_NOT_FOUND (1) from the reads
 * when the key does not exist, so callers can tell a 404 from a failure without parsing messages.
 *
 * Thread safety: a `struct objstore` may be shared by any number of threads once opened; each call
 * uses its own connection. Only objstore_close() must not race with other calls.
 *
 * Checkpoints use a "manifest written last" convention (objstore_put_dir/objstore_get_dir): every file
 * of a directory is uploaded, then PREFIX/MANIFEST.json listing names, sizes and SHA-256s. A prefix
 * without a manifest is an incomplete upload and is never read. */
#ifndef WHET_OBJSTORE_H
#define WHET_OBJSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "datakey.h"
#include "util.h"

#define OBJSTORE_NOT_FOUND 1
#define OBJSTORE_KEY_MAX 1024
#define OBJSTORE_MANIFEST "MANIFEST.json"

struct objstore;

/* What a stat or a read learns about an object. */
struct objstore_info {
    uint64_t size;     /* bytes */
    char sha256[65];   /* lower-case hex of the object's SHA-256, "" when the store holds none */
};

/* Opens a store by URL (see above). s3:// needs $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY;
 * $WHET_S3_ENDPOINT defaults to https://s3.$AWS_REGION.amazonaws.com and $AWS_REGION to us-east-1.
 * Nothing is contacted yet: a wrong endpoint shows up on the first call. */
int objstore_open(const char *url, struct objstore **out, struct whet_err *err);
/* objstore_open($WHET_OBJECT_STORE); an error when the variable is unset. */
int objstore_open_env(struct objstore **out, struct whet_err *err);
/* Frees the store. NULL is allowed. */
void objstore_close(struct objstore *store);
/* The URL the store was opened with. */
const char *objstore_url(const struct objstore *store);

/* Multipart tuning for s3:// (file:// ignores it): files larger than `part_size` bytes are uploaded in
 * parts of that size (S3 wants at least 5 MiB except for the last) by `threads` threads. Defaults:
 * 16 MiB, 4 threads. Call before sharing the store between threads. */
void objstore_set_multipart(struct objstore *store, size_t part_size, int threads);

/* Called during an s3:// multipart upload once the parts taken over from an interrupted upload are
 * known and after each part is stored: `done` of the file's `total` bytes are in the store, `reused`
 * of them stored by the interrupted upload and not sent again. Calls come from the upload's threads
 * one at a time. */
typedef void (*objstore_progress_fn)(void *ctx, const char *key, uint64_t done, uint64_t reused, uint64_t total);
/* Sets (fn NULL: clears) the progress callback. Call before sharing the store between threads. */
void objstore_set_progress(struct objstore *store, objstore_progress_fn fn, void *ctx);
/* Request body bytes an s3:// store has sent since it was opened, as libcurl counts them (retries
 * included); 0 for file://. */
uint64_t objstore_bytes_sent(const struct objstore *store);

/* 1 when `key` is acceptable (see above); otherwise 0 with the reason in `err`. */
int objstore_key_valid(const char *key, struct whet_err *err);

/* Stores `len` bytes under `key` with their SHA-256, replacing any object there. */
int objstore_put(struct objstore *store, const char *key, const void *data, size_t len, struct whet_err *err);
/* Stores the contents of the local file `path` under `key`; on s3:// files larger than the part size
 * go up as a multipart upload with parallel parts.
 *
 * Multipart uploads survive a crash: after each part, a journal beside the file
 * (DIR/.NAME.whet-upload: upload id, part size, each stored part's number, ETag and SHA-256) is
 * replaced atomically. A later upload of the same file to the same key (same size, SHA-256 and part
 * size) continues that upload, sending only the parts that are not in the journal or whose bytes no
 * longer match it. When the server says the upload is gone (NoSuchUpload, missing parts at
 * completion), it starts over once with a new upload. The journal is removed when the upload
 * completes, or when a failed one is aborted; a file whose directory is not writable is uploaded
 * without one. One process at a time may upload a given file. */
int objstore_put_file(struct objstore *store, const char *key, const char *path, struct whet_err *err);

/* Reads a whole object into a NUL-terminated buffer the caller frees (the NUL is not counted in
 * `*len`). Fails when the object is larger than `max` or its SHA-256 does not match the stored one.
 * OBJSTORE_NOT_FOUND when there is no such key. */
int objstore_get(struct objstore *store, const char *key, char **data, size_t *len, size_t max,
                 struct whet_err *err);
/* Downloads an object to the local file `path` (parent directories created) through a temp file in
 * the same directory that is renamed into place only once the SHA-256 matches. `info` (may be NULL)
 * receives the size and SHA-256 of the bytes written. OBJSTORE_NOT_FOUND when there is no such key (and `path` is left untouched). */
int objstore_get_file(struct objstore *store, const char *key, const char *path, struct objstore_info *info,
                      struct whet_err *err);

/* Receives the bytes of a streamed read in order; returns 0 to go on, non-zero to stop the read
 * (objstore_read then fails with "read stopped by the receiver"). */
typedef int (*objstore_sink_fn)(void *ctx, const void *chunk, size_t len);

/* Streams `length` bytes of an object starting at `offset` to `sink` in chunks (length 0: to the end),
 * for serving downloads without holding whole objects in memory. A range that starts at or past the
 * end (except offset 0 of an empty object) or runs past it is an error, on both backends. The
 * bytes are not checked against the SHA-256 (a range cannot be, and a sink may already have sent
 * them on); use objstore_stat first for the size and checksum to send along. OBJSTORE_NOT_FOUND when
 * there is no such key, before any call to `sink`. */
int objstore_read(struct objstore *store, const char *key, uint64_t offset, uint64_t length,
                  objstore_sink_fn sink, void *ctx, struct whet_err *err);

/* A sequential, checksum-verified reader of a whole object, one bounded chunk per call, for serving a
 * download a piece at a time (the gateway reads each chunk on a worker thread and sends it from its
 * event loop, so no request holds more than a chunk or two). Each chunk is one ranged read (S3: a
 * GET with a Range header), so nothing stays open between calls and the calls may come from
 * different threads, one at a time.
 *
 * The bytes pass through a SHA-256; the call that would return the object's last bytes first compares
 * the digest with the stored checksum (and with `expect_sha256` when given) and fails instead of
 * returning them on a mismatch, so a reader that forwards chunks as they come never completes a
 * corrupted or replaced object. */
struct objstore_reader;

/* Looks the object up (its size and checksum in `info`, may be NULL) and prepares to read it from the
 * start. `expect_sha256` (NULL or "" for none) is a checksum the caller holds from elsewhere (a
 * checkpoint's manifest); a stored checksum that differs from it fails here. OBJSTORE_NOT_FOUND when
 * there is no such key. */
int objstore_reader_open(struct objstore *store, const char *key, const char *expect_sha256,
                         struct objstore_reader **out, struct objstore_info *info, struct whet_err *err);
/* Reads the next min(cap, bytes left) bytes into `buf`; `*len` 0 once the whole object was read. A
 * read that comes up short (the object shrank or grew) or a checksum mismatch is an error. */
int objstore_reader_next(struct objstore_reader *rd, void *buf, size_t cap, size_t *len, struct whet_err *err);
/* Restricts the reader to `length` bytes from `offset` (a download's Range), before the first read.
 * Only the whole object can be checked against its checksum: a smaller range is read unchecked. */
int objstore_reader_range(struct objstore_reader *rd, uint64_t offset, uint64_t length, struct whet_err *err);
/* Reads the rest of the object (or range) through one streaming request on a thread of its own, at
 * most `window` bytes ahead of the calls to objstore_reader_next, instead of one ranged request per
 * call: worth it where every request costs a round trip and the server's per-request work (s3://),
 * not on file://. A transfer that breaks off (a dropped connection, or a caller so slow that the
 * store's stall timeout fires) continues from the first byte not yet returned, three times at most
 * without progress. Call before the first read. */
void objstore_reader_read_ahead(struct objstore_reader *rd, size_t window);
/* Where the next read starts (bytes read so far, plus a range's offset) and the object's size. */
uint64_t objstore_reader_offset(const struct objstore_reader *rd);
uint64_t objstore_reader_size(const struct objstore_reader *rd);
/* Frees the reader (NULL allowed); closing one before the end is how a read is abandoned. */
void objstore_reader_close(struct objstore_reader *rd);

/* Size and stored checksum of an object; OBJSTORE_NOT_FOUND when there is no such key. */
int objstore_stat(struct objstore *store, const char *key, struct objstore_info *info, struct whet_err *err);

/* Removes an object. Removing a key that does not exist succeeds (as on S3). */
int objstore_delete(struct objstore *store, const char *key, struct whet_err *err);

/* Called once per key by objstore_list, in byte order of the keys; returns 0 to go on, non-zero to
 * stop the listing (objstore_list then returns 0). */
typedef int (*objstore_list_fn)(void *ctx, const char *key, uint64_t size);

/* Lists the keys that start with `prefix` (a plain string prefix, "" for all), in byte order. */
int objstore_list(struct objstore *store, const char *prefix, objstore_list_fn fn, void *ctx,
                  struct whet_err *err);

/* zstd-compressed objects (trainer state, optimizer moments). The stored object is a zstd frame; its
 * SHA-256 is that of the compressed bytes. `level` is a zstd level (1..19; 3 is a good default). */
int objstore_put_zstd(struct objstore *store, const char *key, const void *data, size_t len, int level,
                      struct whet_err *err);
/* Reads and decompresses; fails when the result would exceed `max` bytes. NUL-terminated like
 * objstore_get. OBJSTORE_NOT_FOUND when there is no such key. */
int objstore_get_zstd(struct objstore *store, const char *key, char **data, size_t *len, size_t max,
                      struct whet_err *err);
/* The same for files, streaming through libzstd without holding the file in memory: the local file
 * `path` is compressed into a temp file next to it and uploaded; get decompresses into a temp file
 * renamed to `path`. */
int objstore_put_file_zstd(struct objstore *store, const char *key, const char *path, int level,
                           struct whet_err *err);
int objstore_get_file_zstd(struct objstore *store, const char *key, const char *path, struct whet_err *err);

/* Encryption at rest (objstore_crypt.c): a view of `inner` that seals every object written through
 * it with a tenant's data key (datakey.h): AES-256-GCM in 64 KiB chunks behind a header with a
 * version, the key id and a random nonce, each chunk authenticated with the object's key, its index
 * and whether it is the last. It opens every object read through it, so every call above works on it
 * and sees plaintext: ranges, the sequential reader, directories.
 * A tampered, truncated, extended or moved object, one sealed with another key, and a plain object
 * are refused with an error that says which. Sizes (stat, list, info) are the plaintext's; the
 * stored SHA-256 is the ciphertext's, so the view reports none and whole reads check what they
 * read against the caller's checksum (a manifest's) on top of the tags. `inner` must outlive the
 * view; objstore_close(view) frees the view only. */
struct objstore *objstore_encrypted(struct objstore *inner, const struct whet_data_key *key);

/* Name part of the upload journals (see objstore_put_file) that objstore_put_dir leaves out. */
#define OBJSTORE_UPLOAD_JOURNAL_SUFFIX ".whet-upload"

/* Uploads every regular file under the local directory `dir` (recursively; names relative to `dir`)
 * to PREFIX/NAME, then PREFIX/MANIFEST.json last:
 *   {"files":[{"name":"adapter.safetensors","size":123,"sha256":"…"}, …]}
 * so a crash mid-upload leaves a prefix without a manifest, which objstore_get_dir refuses. `prefix`
 * is a key (no trailing '/'). Files named MANIFEST.json at the top of `dir` are refused. Running it
 * again after a crash resumes: a file whose object is already there with the same size and SHA-256
 * is not sent again, and a large file cut off half-way continues from its journal (objstore_put_file).
 * Upload journals (names that start with '.' and contain ".whet-upload") are not part of the checkpoint. */
int objstore_put_dir(struct objstore *store, const char *prefix, const char *dir, struct whet_err *err);
/* objstore_put_dir that also says how many files it actually sent (the others were already stored). */
int objstore_put_dir_counted(struct objstore *store, const char *prefix, const char *dir, int *uploaded,
                             struct whet_err *err);
/* Downloads the checkpoint at `prefix` into the local directory `dir` (created): reads the manifest
 * (OBJSTORE_NOT_FOUND when there is none: the checkpoint is incomplete), fetches every file it names
 * and checks each size and SHA-256 against it; a mismatch is an error naming the file. MANIFEST.json
 * itself is written to `dir` last. */
int objstore_get_dir(struct objstore *store, const char *prefix, const char *dir, struct whet_err *err);
/* Deletes a checkpoint: PREFIX/MANIFEST.json first, so readers see it incomplete from that moment,
 * then every other key under PREFIX/ (including the leftovers of an upload that never finished). */
int objstore_delete_dir(struct objstore *store, const char *prefix, struct whet_err *err);

#endif
