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

int whet_zstd_compress_fd(const char *src, int dst_fd, int level, struct whet_err *err) {
    int in_fd = open(src, O_RDONLY | O_CLOEXEC);
    if (in_fd < 0) return whet_errf(err, "%s: %s", src, strerror(errno));
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    if (!cctx) {
        close(in_fd);
        return whet_errf(err, "zstd: cannot create a compression context");
    }
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    size_t in_cap = ZSTD_CStreamInSize(), out_cap = ZSTD_CStreamOutSize();
    char *in_buf = xmalloc(in_cap), *out_buf = xmalloc(out_cap);
    int rc = 0;
    for (;;) {
        ssize_t n = read_some(in_fd, in_buf, in_cap);
        if (n < 0) {
            rc = whet_errf(err, "%s: %s", src, strerror(errno));
            break;
        }
        ZSTD_EndDirective mode = n == 0 ? ZSTD_e_end : ZSTD_e_continue;
        ZSTD_inBuffer in = {in_buf, (size_t)n, 0};
        size_t left;
        do {
            ZSTD_outBuffer out = {out_buf, out_cap, 0};
            left = ZSTD_compressStream2(cctx, &out, &in, mode);
            if (ZSTD_isError(left)) {
                rc = whet_errf(err, "%s: zstd: %s", src, ZSTD_getErrorName(left));
                break;
            }
            if (whet_write_all(dst_fd, out_buf, out.pos) != 0) {
                rc = whet_errf(err, "compressing %s: %s", src, strerror(errno));
                break;
            }
        } while (rc == 0 && (mode == ZSTD_e_end ? left != 0 : in.pos < in.size));
        if (rc != 0 || n == 0) break;
    }
    free(in_buf);
    free(out_buf);
    ZSTD_freeCCtx(cctx);
    close(in_fd);
    return rc;
}

int whet_zstd_decompress_fd(const char *src, int dst_fd, struct whet_err *err) {
    int in_fd = open(src, O_RDONLY | O_CLOEXEC);
    if (in_fd < 0) return whet_errf(err, "%s: %s", src, strerror(errno));
    ZSTD_DStream *ds = ZSTD_createDStream();
    if (!ds) {
        close(in_fd);
        return whet_errf(err, "zstd: cannot create a decompression context");
    }
    size_t in_cap = ZSTD_DStreamInSize(), out_cap = ZSTD_DStreamOutSize();
    char *in_buf = xmalloc(in_cap), *out_buf = xmalloc(out_cap);
    size_t last = 1; /* 0 once a frame is complete: the input must end there */
    int rc = 0;
    for (;;) {
        ssize_t n = read_some(in_fd, in_buf, in_cap);
        if (n < 0) {
            rc = whet_errf(err, "%s: %s", src, strerror(errno));
            break;
        }
        if (n == 0) {
            if (last != 0) rc = whet_errf(err, "%s: zstd: truncated frame", src);
            break;
        }
        ZSTD_inBuffer in = {in_buf, (size_t)n, 0};
        int full = 0; /* a full output buffer may leave decompressed bytes inside zstd */
        while (rc == 0 && (in.pos < in.size || full)) {
            ZSTD_outBuffer out = {out_buf, out_cap, 0};
            last = ZSTD_decompressStream(ds, &out, &in);
            if (ZSTD_isError(last))
                rc = whet_errf(err, "%s: zstd: %s", src, ZSTD_getErrorName(last));
            else if (whet_write_all(dst_fd, out_buf, out.pos) != 0)
                rc = whet_errf(err, "decompressing %s: %s", src, strerror(errno));
            full = out.pos == out_cap;
        }
        if (rc != 0) break;
    }
    free(in_buf);
    free(out_buf);
    ZSTD_freeDStream(ds);
    close(in_fd);
    return rc;
}
