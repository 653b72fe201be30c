/* zstd_file.c - see zstd_file.h. */
#include "zstd_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

/* Reads up to cap bytes, retrying EINTR: >0 bytes, 0 at the end, -1 on error. */
static ssize_t read_some(int fd, char *buf, size_t cap) {
    for (;;) {
        ssize_t n = read(fd, buf, cap);
        if (n >= 0 || errno != EINTR) return n;
    }
}

/* One step of a coder: the `n` bytes just read from `src` (n == 0: the input ended) through zstd, what
 * comes out written to dst_fd. Returns 0 or -1 with err set. */
typedef int (*zstd_step_fn)(void *coder, const char *src, const char *in_buf, size_t n, char *out_buf,
                            size_t out_cap, int dst_fd, struct whet_err *err);

/* Reads `src` a buffer at a time through step(), then once more with n == 0 at its end. */
static int stream_file(const char *src, int dst_fd, size_t in_cap, size_t out_cap, zstd_step_fn step, void *coder,
                       struct whet_err *err) {
    int in_fd = open(src, O_RDONLY | O_CLOEXEC);
    if (in_fd < 0) return whet_errf(err, "%s: %s", src, strerror(errno));
    char *in_buf = xmalloc(in_cap), *out_buf = xmalloc(out_cap);
    int rc = 0;
    for (;;) {
        ssize_t n = read_some(in_fd, in_buf, in_cap);
        if (n < 0) {
            rc = whet_errf(err, "%s: %s", src, strerror(errno));
            break;
        }
        rc = step(coder, src, in_buf, (size_t)n, out_buf, out_cap, dst_fd, err);
        if (rc != 0 || n == 0) break;
    }
    free(in_buf);
    free(out_buf);
    close(in_fd);
    return rc;
}

static int compress_step(void *coder, const char *src, const char *in_buf, size_t n, char *out_buf, size_t out_cap,
                         int dst_fd, struct whet_err *err) {
    ZSTD_CCtx *cctx = coder;
    ZSTD_EndDirective mode = n == 0 ? ZSTD_e_end : ZSTD_e_continue;
    ZSTD_inBuffer in = {in_buf, n, 0};
    size_t left;
    do {
        ZSTD_outBuffer out = {out_buf, out_cap, 0};
        left = ZSTD_compressStream2(cctx, &out, &in, mode);
        if (ZSTD_isError(left)) return whet_errf(err, "%s: zstd: %s", src, ZSTD_getErrorName(left));
        if (whet_write_all(dst_fd, out_buf, out.pos) != 0)
            return whet_errf(err, "compressing %s: %s", src, strerror(errno));
    } while (mode == ZSTD_e_end ? left != 0 : in.pos < in.size);
    return 0;
}

int whet_zstd_compress_fd(const char *src, int dst_fd, int level, struct whet_err *err) {
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    if (!cctx) return whet_errf(err, "zstd: cannot create a compression context");
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    int rc = stream_file(src, dst_fd, ZSTD_CStreamInSize(), ZSTD_CStreamOutSize(), compress_step, cctx, err);
    ZSTD_freeCCtx(cctx);
    return rc;
}

struct decoder {
    ZSTD_DStream *ds;
    size_t last; /* 0 once a frame is complete: the input must end there */
};

static int decompress_step(void *coder, const char *src, const char *in_buf, size_t n, char *out_buf,
                           size_t out_cap, int dst_fd, struct whet_err *err) {
    struct decoder *d = coder;
    if (n == 0) return d->last != 0 ? whet_errf(err, "%s: zstd: truncated frame", src) : 0;
    ZSTD_inBuffer in = {in_buf, n, 0};
    int full = 0; /* a full output buffer may leave decompressed bytes inside zstd */
    while (in.pos < in.size || full) {
        ZSTD_outBuffer out = {out_buf, out_cap, 0};
        d->last = ZSTD_decompressStream(d->ds, &out, &in);
        if (ZSTD_isError(d->last)) return whet_errf(err, "%s: zstd: %s", src, ZSTD_getErrorName(d->last));
        if (whet_write_all(dst_fd, out_buf, out.pos) != 0)
            return whet_errf(err, "decompressing %s: %s", src, strerror(errno));
        full = out.pos == out_cap;
    }
    return 0;
}

int whet_zstd_decompress_fd(const char *src, int dst_fd, struct whet_err *err) {
    struct decoder d = {ZSTD_createDStream(), 1};
    if (!d.ds) return whet_errf(err, "zstd: cannot create a decompression context");
    int rc = stream_file(src, dst_fd, ZSTD_DStreamInSize(), ZSTD_DStreamOutSize(), decompress_step, &d, err);
    ZSTD_freeDStream(d.ds);
    return rc;
}
