/* objstore_crypt.c - encryption at rest: a view of a store that seals every object it writes with a
 * data key (AES-256-GCM, OpenSSL) and opens every object it reads with it (see objstore_encrypted in
 * objstore.h).
 *
 * The view is one more backend: its ops wrap the inner store's, so every front-end operation (whole
 * reads, the sequential reader, ranges, read-ahead, zstd objects, checkpoint directories) works on it
 * unchanged and sees plaintext. An object is framed so that it streams and any range can be opened
 * without reading the rest:
 *
 *   header   32 bytes: "WHETSEAL" | version 1 | 3 zero bytes | data key id (u32 BE) | nonce (12 bytes)
 *            | chunk size (u32 BE, 65536 in version 1)
 *   chunks   ceil(plaintext / 64 KiB) of them, at least one (an empty object is one empty chunk):
 *            ciphertext | 16-byte GCM tag
 *
 * Chunk i is sealed with the nonce whose last 8 bytes are XORed with i (big endian), and its
 * additional data is the header, the object's key, i and a "last chunk" flag. So a flipped byte, a
 * chunk moved or dropped, an object cut short at a chunk boundary, extended, or copied under another
 * key all fail the tag check, and the error names the object and the chunk. The nonce is random per
 * object (96 bits: no repeat in any realistic number of objects per key).
 *
 * The plaintext size follows from the stored size (the chunk size is fixed per version), so stat
 * costs the inner stat alone. The SHA-256 the inner store keeps is the ciphertext's; the view reports
 * none ("") and the front end checks what it reads against the caller's checksum (a manifest's), on
 * top of the tags. A file upload up to the multipart part size is sealed in memory and stored in one
 * request; a larger one is sealed into a temp file under $TMPDIR first (the inner store then uploads
 * that file, multipart on S3): a new nonce each time means an interrupted multipart upload of a sealed
 * file starts over instead of resuming. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crypto.h"
#include "objstore_impl.h"

#define SEAL_MAGIC "WHETSEAL"
#define SEAL_VERSION 1
#define SEAL_HEADER 32
#define SEAL_CHUNK 65536u
#define SEAL_TAG 16
#define SEAL_FRAME (SEAL_CHUNK + SEAL_TAG)

struct crypt_store {
    struct objstore base;
    struct objstore *inner;
    struct whet_data_key key;
};

static const struct objstore_ops crypt_ops;

/* ---------------------------------------------------------------------------------------------- */
/* Framing                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

static uint64_t sealed_size(uint64_t plain) {
    uint64_t chunks = plain ? (plain + SEAL_CHUNK - 1) / SEAL_CHUNK : 1;
    return SEAL_HEADER + plain + chunks * SEAL_TAG;
}

/* The plaintext size of a sealed object of `stored` bytes; -1 when no sealed object has that size
 * (a plain object, or one cut off inside a tag). */
static int plain_size(uint64_t stored, uint64_t *plain) {
    if (stored < SEAL_HEADER + SEAL_TAG) return -1;
    uint64_t body = stored - SEAL_HEADER, full = body / SEAL_FRAME, rem = body % SEAL_FRAME;
    if (rem != 0 && rem < SEAL_TAG) return -1;
    *plain = full * SEAL_CHUNK + (rem ? rem - SEAL_TAG : 0);
    return 0;
}

static uint64_t chunk_count(uint64_t plain) { return plain ? (plain + SEAL_CHUNK - 1) / SEAL_CHUNK : 1; }

static void put_u32(uint8_t *p, uint32_t v) {
    uint32_t be = htonl(v);
    memcpy(p, &be, 4);
}

static uint32_t get_u32(const uint8_t *p) {
    uint32_t be;
    memcpy(&be, p, 4);
    return ntohl(be);
}

static void header_make(uint8_t h[SEAL_HEADER], uint32_t key_id) {
    memset(h, 0, SEAL_HEADER);
    memcpy(h, SEAL_MAGIC, 8);
    h[8] = SEAL_VERSION;
    put_u32(h + 12, key_id);
    whet_random_bytes(h + 16, 12);
    put_u32(h + 28, SEAL_CHUNK);
}

static int header_check(const uint8_t h[SEAL_HEADER], const struct crypt_store *cs, const char *key,
                        struct whet_err *err) {
    if (memcmp(h, SEAL_MAGIC, 8) != 0) {
        whet_errf(err, "object \"%s\" is not encrypted: refusing it where tenant data must be sealed", key);
        return whet_err_hint(err, "objects written before encryption at rest was turned on must be rewritten "
                                  "(README: encryption at rest)");
    }
    if (h[8] != SEAL_VERSION || get_u32(h + 28) != SEAL_CHUNK)
        return whet_errf(err, "object \"%s\": unknown sealed format (version %u, chunk size %u)", key, h[8],
                         get_u32(h + 28));
    if (get_u32(h + 12) != cs->key.id)
        return whet_errf(err, "object \"%s\" is sealed with data key %u, not with data key %u", key, get_u32(h + 12),
                         cs->key.id);
    return 0;
}

/* Seals or opens one chunk in place (`len` bytes before the tag at data+len). Returns 0, or -1 when
 * an opened chunk's tag does not match. */
static int chunk_crypt(EVP_CIPHER_CTX *c, int seal, const struct crypt_store *cs, const uint8_t header[SEAL_HEADER],
                       const char *key, uint64_t index, int last, uint8_t *data, size_t len) {
    uint8_t nonce[12];
    memcpy(nonce, header + 16, 12);
    for (int i = 0; i < 8; i++) nonce[4 + i] ^= (uint8_t)(index >> (56 - 8 * i));
    uint8_t tail[9];
    for (int i = 0; i < 8; i++) tail[i] = (uint8_t)(index >> (56 - 8 * i));
    tail[8] = (uint8_t)last;
    int n = 0, ok = EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL, seal) == 1 &&
                    EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, 12, NULL) == 1 &&
                    EVP_CipherInit_ex(c, NULL, NULL, cs->key.key, nonce, seal) == 1 &&
                    EVP_CipherUpdate(c, NULL, &n, header, SEAL_HEADER) == 1 &&
                    EVP_CipherUpdate(c, NULL, &n, (const uint8_t *)key, (int)strlen(key)) == 1 &&
                    EVP_CipherUpdate(c, NULL, &n, tail, sizeof tail) == 1 &&
                    (len == 0 || EVP_CipherUpdate(c, data, &n, data, (int)len) == 1);
    if (ok && !seal) ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, SEAL_TAG, data + len) == 1;
    if (ok) ok = EVP_CipherFinal_ex(c, data + len, &n) == 1;
    if (ok && seal) ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, SEAL_TAG, data + len) == 1;
    return ok ? 0 : -1;
}

static EVP_CIPHER_CTX *cipher_new(void) {
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    if (!c) {
        fprintf(stderr, "whet: OpenSSL cannot allocate a cipher context\n");
        abort();
    }
    return c;
}

/* ---------------------------------------------------------------------------------------------- */
/* Writes                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

static int crypt_put(struct objstore *store, const char *key, const void *data, size_t len, const char *sha256,
                     struct whet_err *err) {
    (void)sha256; /* the plaintext's; the inner store keeps the ciphertext's */
    struct crypt_store *cs = (struct crypt_store *)store;
    uint64_t total = sealed_size(len), chunks = chunk_count(len);
    uint8_t *out = xmalloc(total);
    header_make(out, cs->key.id);
    EVP_CIPHER_CTX *c = cipher_new();
    const uint8_t *in = data;
    uint8_t *p = out + SEAL_HEADER;
    for (uint64_t i = 0; i < chunks; i++) {
        size_t n = len - i * SEAL_CHUNK < SEAL_CHUNK ? len - i * SEAL_CHUNK : SEAL_CHUNK;
        if (n) memcpy(p, in + i * SEAL_CHUNK, n);
        if (chunk_crypt(c, 1, cs, out, key, i, i + 1 == chunks, p, n) != 0) {
            EVP_CIPHER_CTX_free(c);
            free(out);
            return whet_errf(err, "object \"%s\": OpenSSL failed to seal it", key);
        }
        p += n + SEAL_TAG;
    }
    EVP_CIPHER_CTX_free(c);
    char sha[65];
    whet_sha256_hex(out, total, sha);
    int rc = cs->inner->ops->put(cs->inner, key, out, total, sha, err);
    free(out);
    return rc;
}

/* Reads up to `cap` bytes, fewer only at the end of the file. */
static ssize_t read_full(int fd, uint8_t *buf, size_t cap) {
    size_t got = 0;
    while (got < cap) {
        ssize_t n = read(fd, buf + got, cap - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        if (n == 0) break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

/* Seals the local file `path` into `out_fd`. */
static int seal_file(struct crypt_store *cs, const char *key, const char *path, int out_fd, struct whet_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return whet_errf(err, "%s: %s", path, strerror(errno));
    uint8_t header[SEAL_HEADER];
    header_make(header, cs->key.id);
    int rc = whet_write_all(out_fd, header, SEAL_HEADER) ? whet_errf(err, "sealing %s: %s", path, strerror(errno)) : 0;
    uint8_t *buf = xmalloc(2 * SEAL_FRAME); /* this chunk and a look at the next: is this one the last? */
    EVP_CIPHER_CTX *c = cipher_new();
    ssize_t have = rc ? -1 : read_full(fd, buf, SEAL_CHUNK);
    for (uint64_t i = 0; rc == 0; i++) {
        if (have < 0) {
            rc = whet_errf(err, "%s: %s", path, strerror(errno));
            break;
        }
        ssize_t next = have == SEAL_CHUNK ? read_full(fd, buf + SEAL_FRAME, SEAL_CHUNK) : 0;
        if (next < 0) {
            rc = whet_errf(err, "%s: %s", path, strerror(errno));
            break;
        }
        int last = next == 0;
        if (chunk_crypt(c, 1, cs, header, key, i, last, buf, (size_t)have) != 0)
            rc = whet_errf(err, "%s: OpenSSL failed to seal it", path);
        else if (whet_write_all(out_fd, buf, (size_t)have + SEAL_TAG) != 0)
            rc = whet_errf(err, "sealing %s: %s", path, strerror(errno));
        if (last) break;
        memmove(buf, buf + SEAL_FRAME, (size_t)next);
        have = next;
    }
    EVP_CIPHER_CTX_free(c);
    free(buf);
    close(fd);
    return rc;
}

static int crypt_put_file(struct objstore *store, const char *key, const char *path, const char *sha256,
                          struct whet_err *err) {
    struct crypt_store *cs = (struct crypt_store *)store;
    struct stat st;
    if (stat(path, &st) != 0) return whet_errf(err, "%s: %s", path, strerror(errno));
    if ((uint64_t)st.st_size <= cs->inner->part_size) { /* one request anyway: sealed in memory, no temp file */
        char *data;
        size_t len;
        if (whet_read_file(path, cs->inner->part_size, &data, &len, err) != 0) return -1;
        int rc = crypt_put(store, key, data, len, sha256, err);
        free(data);
        return rc;
    }
    const char *dir = getenv("TMPDIR");
    char *tmp = xasprintf("%s/whet-seal.XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        whet_errf(err, "%s: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    int rc = seal_file(cs, key, path, fd, err);
    close(fd);
    if (rc == 0) rc = cs->inner->ops->put_file(cs->inner, key, tmp, NULL, err);
    unlink(tmp);
    free(tmp);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* Reads                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

/* The inner read's sink: collects the header (when the read starts at 0), then whole frames, opens
 * each and passes on the part of it inside the wanted plaintext range. */
struct open_sink {
    struct crypt_store *cs;
    const char *key;
    EVP_CIPHER_CTX *c;
    uint8_t header[SEAL_HEADER];
    size_t header_len;      /* bytes of the header collected: SEAL_HEADER once it is checked */
    uint8_t *frame;
    size_t frame_len;
    uint64_t index, chunks; /* the frame being collected, and how many the object has */
    uint64_t plain;         /* the object's plaintext size */
    uint64_t from, to;      /* the plaintext range wanted */
    objstore_sink_fn sink;
    void *ctx;
    int failed;             /* err holds why */
    struct whet_err err;
};

static int open_frame(struct open_sink *o) {
    size_t n = o->frame_len - SEAL_TAG;
    if (chunk_crypt(o->c, 0, o->cs, o->header, o->key, o->index, o->index + 1 == o->chunks, o->frame, n) != 0) {
        o->failed = 1;
        whet_errf(&o->err, "object \"%s\": chunk %llu fails authentication (tampered with, truncated, "
                           "or not this object)", o->key, (unsigned long long)o->index);
        return 1;
    }
    uint64_t start = o->index * SEAL_CHUNK, lo = o->from > start ? o->from - start : 0;
    uint64_t hi = o->to - start < n ? o->to - start : n;
    o->index++;
    o->frame_len = 0;
    return hi > lo ? o->sink(o->ctx, o->frame + lo, (size_t)(hi - lo)) : 0;
}

static int open_sink_write(void *ctx, const void *chunk, size_t len) {
    struct open_sink *o = ctx;
    const uint8_t *p = chunk;
    while (len) {
        if (o->header_len < SEAL_HEADER) {
            size_t n = SEAL_HEADER - o->header_len < len ? SEAL_HEADER - o->header_len : len;
            memcpy(o->header + o->header_len, p, n);
            o->header_len += n;
            p += n;
            len -= n;
            if (o->header_len == SEAL_HEADER && header_check(o->header, o->cs, o->key, &o->err) != 0) {
                o->failed = 1;
                return 1;
            }
            continue;
        }
        size_t frame_size = o->index + 1 == o->chunks ? o->plain - o->index * SEAL_CHUNK + SEAL_TAG : SEAL_FRAME;
        size_t n = frame_size - o->frame_len < len ? frame_size - o->frame_len : len;
        memcpy(o->frame + o->frame_len, p, n);
        o->frame_len += n;
        p += n;
        len -= n;
        if (o->frame_len == frame_size && open_frame(o) != 0) return 1;
    }
    return 0;
}

static int crypt_read(struct objstore *store, const char *key, uint64_t offset, uint64_t length,
                      objstore_sink_fn sink, void *ctx, struct objstore_info *info, struct whet_err *err) {
    struct crypt_store *cs = (struct crypt_store *)store;
    struct objstore_info st;
    int rc = cs->inner->ops->stat(cs->inner, key, &st, err);
    if (rc != 0) return rc;
    struct open_sink o = {.cs = cs, .key = key, .sink = sink, .ctx = ctx};
    if (plain_size(st.size, &o.plain) != 0)
        return whet_errf(err, "object \"%s\" is not a sealed object (%llu bytes: truncated or never encrypted)", key,
                         (unsigned long long)st.size);
    if ((offset >= o.plain && !(offset == 0 && o.plain == 0)) || (length && length > o.plain - offset))
        return whet_errf(err, "object \"%s\": range %llu+%llu is past its end (%llu bytes)", key,
                         (unsigned long long)offset, (unsigned long long)length, (unsigned long long)o.plain);
    o.from = offset;
    o.to = length ? offset + length : o.plain;
    o.chunks = chunk_count(o.plain);
    o.index = o.plain ? offset / SEAL_CHUNK : 0;
    uint64_t last = o.plain ? (o.to - 1) / SEAL_CHUNK : 0;
    o.c = cipher_new();
    o.frame = xmalloc(SEAL_FRAME);
    if (o.index > 0) { /* the header first, on its own, then only the frames in the range */
        rc = cs->inner->ops->read(cs->inner, key, 0, SEAL_HEADER, open_sink_write, &o, info, err);
        if (rc == 0 && o.header_len != SEAL_HEADER) rc = whet_errf(err, "object \"%s\": short header", key);
    }
    uint64_t start = o.index ? SEAL_HEADER + o.index * SEAL_FRAME : 0;
    uint64_t end = last + 1 == o.chunks ? st.size : SEAL_HEADER + (last + 1) * SEAL_FRAME;
    if (rc == 0) rc = cs->inner->ops->read(cs->inner, key, start, end - start, open_sink_write, &o, info, err);
    if (o.failed && rc != OBJSTORE_NOT_FOUND) {
        *err = o.err;
        rc = -1;
    } else if (rc == 0 && o.index != last + 1) {
        rc = whet_errf(err, "object \"%s\": the read ended inside chunk %llu (changed while being read?)", key,
                       (unsigned long long)o.index);
    }
    EVP_CIPHER_CTX_free(o.c);
    free(o.frame);
    if (rc == 0) {
        info->size = o.plain;
        info->sha256[0] = 0;
    }
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* Everything else passes through, with sizes as the plaintext's                                  */
/* ---------------------------------------------------------------------------------------------- */

static int crypt_stat(struct objstore *store, const char *key, struct objstore_info *info, struct whet_err *err) {
    struct crypt_store *cs = (struct crypt_store *)store;
    int rc = cs->inner->ops->stat(cs->inner, key, info, err);
    if (rc != 0) return rc;
    uint64_t plain;
    if (plain_size(info->size, &plain) != 0)
        return whet_errf(err, "object \"%s\" is not a sealed object (%llu bytes: truncated or never encrypted)", key,
                         (unsigned long long)info->size);
    info->size = plain;
    info->sha256[0] = 0;
    return 0;
}

static int crypt_delete(struct objstore *store, const char *key, struct whet_err *err) {
    struct crypt_store *cs = (struct crypt_store *)store;
    return cs->inner->ops->delete(cs->inner, key, err);
}

struct list_map {
    objstore_list_fn fn;
    void *ctx;
};

static int list_map_one(void *ctx, const char *key, uint64_t size) {
    struct list_map *m = ctx;
    uint64_t plain;
    return m->fn(m->ctx, key, plain_size(size, &plain) == 0 ? plain : size);
}

static int crypt_list(struct objstore *store, const char *prefix, objstore_list_fn fn, void *ctx,
                      struct whet_err *err) {
    struct crypt_store *cs = (struct crypt_store *)store;
    struct list_map m = {fn, ctx};
    return cs->inner->ops->list(cs->inner, prefix, list_map_one, &m, err);
}

static void crypt_close(struct objstore *store) {
    struct crypt_store *cs = (struct crypt_store *)store;
    OPENSSL_cleanse(&cs->key, sizeof cs->key);
    free(cs);
}

static const struct objstore_ops crypt_ops = {
    .put = crypt_put, .put_file = crypt_put_file, .read = crypt_read, .stat = crypt_stat,
    .delete = crypt_delete, .list = crypt_list, .close = crypt_close,
};

struct objstore *objstore_encrypted(struct objstore *inner, const struct whet_data_key *key) {
    struct crypt_store *cs = xcalloc(1, sizeof *cs);
    cs->base.ops = &crypt_ops;
    cs->base.url = xstrdup(inner->url);
    cs->base.part_size = inner->part_size;
    cs->base.threads = inner->threads;
    cs->inner = inner;
    cs->key = *key;
    return &cs->base;
}
