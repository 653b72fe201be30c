/* safetensors.h - reading and writing Hugging Face safetensors files, the format of model weights,
 * LoRA adapters and whet's checkpoints.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 * (`{"name": {"dtype": "BF16", "shape": [r, c], "data_offsets": [begin, end]}, "__metadata__": {…}}`),
 * then the tensor bytes; offsets are relative to the end of the header. Reading maps the file (mmap),
 * validates everything before any tensor is used (header length inside the file and at most 100 MB,
 * JSON well formed, known dtype, shape × element size = byte count, offsets inside the data area and
 * not overlapping) and reports problems naming the file; it never crashes on a bad file. Tensors are
 * read as f32 whatever their stored dtype (F32, F16, BF16).
 *
 * A model dir holds either `model.safetensors` or shards named by `model.safetensors.index.json`
 * (`{"weight_map": {"tensor name": "model-00001-of-00002.safetensors", …}}`); st_open_dir opens
 * either into one set of tensors.
 *
 * The writer collects named f32 tensors and writes one file atomically, as F32 or BF16
 * (round to nearest even). Names are written in the order added. */
#ifndef WHET_SAFETENSORS_H
#define WHET_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER (100u * 1024 * 1024)

enum st_dtype { ST_F32, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL };

struct st_tensor {
    char *name;
    enum st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    const uint8_t *data; /* inside the mapping; not aligned */
    size_t nbytes;
    const char *file;    /* the file it came from, for messages */
};

/* A set of tensors from one file or several shards. Owns the mappings. */
struct st_set {
    int n_tensors;
    struct st_tensor *tensors; /* sorted by name */
    int n_files;
    struct st_mapping {
        char *path;
        void *addr;
        size_t len;
    } *files;
    int n_metadata;
    char **metadata; /* key, value, key, value, … from the "__metadata__" objects */
};

/* Parses a header from a whole file in memory (buf, len); `file` names it in messages. On success
 * the tensors of `set` point into buf (set->files stays empty; buf must outlive the set). This is
 * the entry point the fuzzer drives. */
int st_parse(struct st_set *set, const uint8_t *buf, size_t len, const char *file, struct whet_err *err);
/* Opens one .safetensors file. */
int st_open_file(struct st_set *set, const char *path, struct whet_err *err);
/* Opens `dir/model.safetensors`, or the shards listed in `dir/model.safetensors.index.json`. */
int st_open_dir(struct st_set *set, const char *dir, struct whet_err *err);
void st_close(struct st_set *set);

const struct st_tensor *st_find(const struct st_set *set, const char *name);
/* A metadata value, or NULL. */
const char *st_metadata(const struct st_set *set, const char *key);
/* Converts a tensor to f32 into out[numel]; fails (naming file and tensor) for non-float dtypes
 * and when `expect_numel` (if >= 0) differs. */
int st_read_f32(const struct st_tensor *t, float *out, int64_t expect_numel, struct whet_err *err);
/* Checks that a tensor exists with exactly this shape (ndim dims); describes the mismatch. */
int st_expect(const struct st_set *set, const char *name, int ndim, const int64_t *shape,
              const struct st_tensor **out, struct whet_err *err);

const char *st_dtype_name(enum st_dtype d);
size_t st_dtype_size(enum st_dtype d);

/* ---- writing ---- */
struct st_writer {
    int n, cap;
    struct st_wtensor {
        char *name;
        int ndim;
        int64_t shape[ST_MAX_DIMS];
        const float *data; /* borrowed until st_writer_write returns */
    } *items;
    int n_metadata;
    char **metadata; /* owned copies: key, value, … */
};

void st_writer_init(struct st_writer *w);
void st_writer_add(struct st_writer *w, const char *name, int ndim, const int64_t *shape, const float *data);
void st_writer_metadata(struct st_writer *w, const char *key, const char *value);
/* Writes the file atomically with every tensor stored as `dtype` (ST_F32 or ST_BF16). */
int st_writer_write(struct st_writer *w, const char *path, enum st_dtype dtype, struct whet_err *err);
void st_writer_free(struct st_writer *w);

float st_bf16_to_f32(uint16_t h);
uint16_t st_f32_to_bf16(float f);
float st_f16_to_f32(uint16_t h);

#endif
