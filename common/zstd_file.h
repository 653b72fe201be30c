/* zstd_file.h - whole files through zstd with the streaming API, so memory stays bounded whatever
 * their size: the object store's compressed objects and the trainer's optimizer state. Frames carry
 * zstd's content checksum, so a damaged file fails to decompress instead of giving other bytes. */
#ifndef WHET_ZSTD_FILE_H
#define WHET_ZSTD_FILE_H

#include "util.h"

/* Compresses the file at `src` into the open file `dst_fd` at `level` (1..19). */
int whet_zstd_compress_fd(const char *src, int dst_fd, int level, struct whet_err *err);
/* Decompresses the file at `src` (one or more zstd frames) into the open file `dst_fd`; a truncated
 * or corrupt input is an error naming `src`. */
int whet_zstd_decompress_fd(const char *src, int dst_fd, struct whet_err *err);

#endif
