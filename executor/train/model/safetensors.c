/* safetensors.c - the safetensors reader (mmap, strict validation, f32 conversion) and writer.
 *
 * Reading is in two layers: st_parse validates a whole file held in memory and builds the tensor
 * table; st_open_file and st_open_dir map files and call it, merging shards. Nothing touches tensor
 * bytes until every offset has been checked, so a hostile file can only produce an error. */
#include "safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "json.h"

/* ---------------------------------------------------------------- dtypes ---- */

static const struct {
    const char *name;
    enum st_dtype dtype;
    size_t size;
} dtypes[] = {
    {"F32", ST_F32, 4}, {"F16", ST_F16, 2}, {"BF16", ST_BF16, 2}, {"F64", ST_F64, 8}, {"I64", ST_I64, 8},
    {"I32", ST_I32, 4}, {"I16", ST_I16, 2}, {"I8", ST_I8, 1},     {"U8", ST_U8, 1},   {"BOOL", ST_BOOL, 1},
};

const char *st_dtype_name(enum st_dtype d) {
    for (size_t i = 0; i < WHET_ARRAY_LEN(dtypes); i++)
        if (dtypes[i].dtype == d) return dtypes[i].name;
    return "?";
}

size_t st_dtype_size(enum st_dtype d) {
    for (size_t i = 0; i < WHET_ARRAY_LEN(dtypes); i++)
        if (dtypes[i].dtype == d) return dtypes[i].size;
    return 0;
}

float st_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t st_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* keep NaN a NaN */
    u += 0x7fffu + ((u >> 16) & 1);                                           /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
    if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) {
                mant <<= 1;
                exp--;
            }
            u = sign | (exp << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---------------------------------------------------------------- parsing ---- */

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

static int cmp_tensor_offset(const void *a, const void *b) {
    const struct st_tensor *x = *(const struct st_tensor *const *)a, *y = *(const struct st_tensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

static void set_free_tables(struct st_set *set) {
    for (int i = 0; i < set->n_tensors; i++) free(set->tensors[i].name);
    free(set->tensors);
    for (int i = 0; i < set->n_metadata; i++) free(set->metadata[i]);
    free(set->metadata);
    set->tensors = NULL;
    set->metadata = NULL;
    set->n_tensors = set->n_metadata = 0;
}

/* Parses one tensor entry; `data`/`data_len` is the byte area after the header. */
static int parse_entry(struct st_tensor *t, const char *name, json_t *v, const uint8_t *data, uint64_t data_len,
                       const char *file, struct whet_err *err) {
    if (!json_is_object(v)) return whet_errf(err, "%s: tensor \"%s\": expected an object", file, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd)) return whet_errf(err, "%s: tensor \"%s\": dtype: expected a string", file, name);
    size_t k;
    for (k = 0; k < WHET_ARRAY_LEN(dtypes); k++)
        if (!strcmp(json_string_value(jd), dtypes[k].name)) break;
    if (k == WHET_ARRAY_LEN(dtypes))
        return whet_errf(err, "%s: tensor \"%s\": unknown dtype \"%s\"", file, name, json_string_value(jd));
    t->dtype = dtypes[k].dtype;
    if (!json_is_array(js) || json_array_size(js) > ST_MAX_DIMS)
        return whet_errf(err, "%s: tensor \"%s\": shape: expected an array of at most %d sizes", file, name,
                         ST_MAX_DIMS);
    t->ndim = (int)json_array_size(js);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_t *e = json_array_get(js, (size_t)d);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return whet_errf(err, "%s: tensor \"%s\": shape[%d]: expected a non-negative integer", file, name, d);
        t->shape[d] = json_integer_value(e);
        if (t->shape[d] && numel > UINT64_MAX / 16 / (uint64_t)t->shape[d])
            return whet_errf(err, "%s: tensor \"%s\": shape is absurdly large", file, name);
        numel *= (uint64_t)t->shape[d];
    }
    t->numel = (int64_t)numel;
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return whet_errf(err, "%s: tensor \"%s\": data_offsets: expected [begin, end]", file, name);
    json_int_t b = json_integer_value(json_array_get(jo, 0)), e = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || e < b)
        return whet_errf(err, "%s: tensor \"%s\": data_offsets [%" JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT
                         "] are not an ordered pair of non-negative offsets", file, name, b, e);
    if ((uint64_t)e > data_len)
        return whet_errf(err, "%s: tensor \"%s\": data_offsets end %" JSON_INTEGER_FORMAT
                         " is past the end of the data (%" PRIu64 " bytes)", file, name, e, data_len);
    uint64_t want = numel * dtypes[k].size;
    if ((uint64_t)(e - b) != want)
        return whet_errf(err, "%s: tensor \"%s\": %s shape holds %" PRIu64 " bytes but data_offsets span %" PRIu64,
                         file, name, dtypes[k].name, want, (uint64_t)(e - b));
    t->data = data + b;
    t->nbytes = (size_t)(e - b);
    t->file = file;
    return 0;
}

int st_parse(struct st_set *set, const uint8_t *buf, size_t len, const char *file, struct whet_err *err) {
    memset(set, 0, sizeof *set);
    if (len < 8) return whet_errf(err, "%s: file of %zu bytes is too short to hold a safetensors header", file, len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > ST_MAX_HEADER)
        return whet_errf(err, "%s: header length %" PRIu64 " is over the 100 MB limit", file, hlen);
    if (hlen > len - 8)
        return whet_errf(err, "%s: header length %" PRIu64 " runs past the end of the file (%zu bytes)", file, hlen,
                         len);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return whet_errf(err, "%s: header is not valid JSON: %s (at byte %d)", file, jerr.text, jerr.position);
    if (!json_is_object(root)) {
        json_decref(root);
        return whet_errf(err, "%s: header: expected a JSON object", file);
    }
    const uint8_t *data = buf + 8 + hlen;
    uint64_t data_len = len - 8 - hlen;
    size_t n = json_object_size(root);
    set->tensors = xcalloc(n ? n : 1, sizeof *set->tensors);
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(v)) {
                rc = whet_errf(err, "%s: __metadata__: expected an object of strings", file);
                break;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    rc = whet_errf(err, "%s: __metadata__.%s: expected a string", file, mk);
                    break;
                }
                set->metadata = xrealloc(set->metadata, sizeof(char *) * (size_t)(set->n_metadata + 2));
                set->metadata[set->n_metadata++] = xstrdup(mk);
                set->metadata[set->n_metadata++] = xstrdup(json_string_value(mv));
            }
            if (rc) break;
            continue;
        }
        struct st_tensor *t = &set->tensors[set->n_tensors];
        memset(t, 0, sizeof *t);
        if ((rc = parse_entry(t, key, v, data, data_len, file, err))) break;
        t->name = xstrdup(key);
        set->n_tensors++;
    }
    json_decref(root);
    if (!rc && set->n_tensors > 1) {
        /* Overlap check: sorted by start, each tensor must begin at or after the previous end. */
        struct st_tensor **by_off = xmalloc(sizeof *by_off * (size_t)set->n_tensors);
        for (int i = 0; i < set->n_tensors; i++) by_off[i] = &set->tensors[i];
        qsort(by_off, (size_t)set->n_tensors, sizeof *by_off, cmp_tensor_offset);
        for (int i = 1; i < set->n_tensors && !rc; i++)
            if (by_off[i]->data < by_off[i - 1]->data + by_off[i - 1]->nbytes)
                rc = whet_errf(err, "%s: tensors \"%s\" and \"%s\" overlap in the data area", file,
                               by_off[i - 1]->name, by_off[i]->name);
        free(by_off);
    }
    if (rc) {
        set_free_tables(set);
        return -1;
    }
    qsort(set->tensors, (size_t)set->n_tensors, sizeof *set->tensors, cmp_tensor_name);
    return 0;
}

/* ---------------------------------------------------------------- files ---- */

static int map_file(const char *path, void **addr, size_t *len, struct whet_err *err) {
    uint64_t size;
    int fd = whet_open_regular(path, &size, err);
    if (fd < 0) return -1;
    *len = (size_t)size;
    *addr = NULL;
    if (*len) {
        *addr = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (*addr == MAP_FAILED) {
            close(fd);
            return whet_errf(err, "%s: mmap: %s", path, strerror(errno));
        }
    }
    close(fd);
    return 0;
}

/* Maps `path` and appends its tensors to `set`. */
static int set_add_file(struct st_set *set, const char *path, struct whet_err *err) {
    void *addr = NULL;
    size_t len = 0;
    if (map_file(path, &addr, &len, err)) return -1;
    set->files = xrealloc(set->files, sizeof *set->files * (size_t)(set->n_files + 1));
    struct st_mapping *mp = &set->files[set->n_files++];
    mp->path = xstrdup(path);
    mp->addr = addr;
    mp->len = len;
    struct st_set one;
    if (st_parse(&one, addr ? addr : (const uint8_t *)"", len, mp->path, err)) return -1;
    set->tensors = xrealloc(set->tensors, sizeof *set->tensors * (size_t)(set->n_tensors + one.n_tensors + 1));
    if (one.n_tensors) memcpy(set->tensors + set->n_tensors, one.tensors, sizeof *one.tensors * (size_t)one.n_tensors);
    set->n_tensors += one.n_tensors;
    set->metadata = xrealloc(set->metadata, sizeof(char *) * (size_t)(set->n_metadata + one.n_metadata + 1));
    if (one.n_metadata) memcpy(set->metadata + set->n_metadata, one.metadata, sizeof(char *) * (size_t)one.n_metadata);
    set->n_metadata += one.n_metadata;
    free(one.tensors);
    free(one.metadata);
    return 0;
}

int st_open_file(struct st_set *set, const char *path, struct whet_err *err) {
    memset(set, 0, sizeof *set);
    if (set_add_file(set, path, err)) {
        st_close(set);
        return -1;
    }
    return 0;
}

int st_open_dir(struct st_set *set, const char *dir, struct whet_err *err) {
    memset(set, 0, sizeof *set);
    char *single = xasprintf("%s/model.safetensors", dir);
    char *index = xasprintf("%s/model.safetensors.index.json", dir);
    int rc = -1;
    json_t *root = NULL;
    if (access(index, F_OK) != 0) {
        if (access(single, F_OK) != 0) {
            whet_errf(err, "%s: no model.safetensors or model.safetensors.index.json", dir);
            goto out;
        }
        rc = st_open_file(set, single, err);
        goto out;
    }
    root = whet_json_load_file(index, JSON_REJECT_DUPLICATES, err);
    if (!root) goto out;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map) || json_object_size(map) == 0) {
        whet_errf(err, "%s: weight_map: expected a non-empty object of tensor name to file", index);
        goto out;
    }
    const char *name;
    json_t *v;
    /* Open each distinct shard once, in first-mention order. */
    json_object_foreach(map, name, v) {
        const char *shard = json_string_value(v);
        if (!shard || !*shard || strchr(shard, '/') || !strcmp(shard, "..")) {
            whet_errf(err, "%s: weight_map.%s: expected a file name in the same directory", index, name);
            goto fail;
        }
        char *path = xasprintf("%s/%s", dir, shard);
        int seen = 0;
        for (int i = 0; i < set->n_files && !seen; i++) seen = !strcmp(set->files[i].path, path);
        int bad = !seen && set_add_file(set, path, err);
        free(path);
        if (bad) goto fail;
    }
    qsort(set->tensors, (size_t)set->n_tensors, sizeof *set->tensors, cmp_tensor_name);
    for (int i = 1; i < set->n_tensors; i++)
        if (!strcmp(set->tensors[i].name, set->tensors[i - 1].name)) {
            whet_errf(err, "%s: tensor \"%s\" is in both %s and %s", index, set->tensors[i].name,
                      set->tensors[i - 1].file, set->tensors[i].file);
            goto fail;
        }
    json_object_foreach(map, name, v) {
        const struct st_tensor *t = st_find(set, name);
        const char *base = t ? strrchr(t->file, '/') : NULL;
        if (!t || strcmp(base ? base + 1 : t->file, json_string_value(v))) {
            whet_errf(err, "%s: weight_map names \"%s\" in %s, which does not hold it", index, name,
                      json_string_value(v));
            goto fail;
        }
    }
    rc = 0;
    goto out;
fail:
    st_close(set);
out:
    json_decref(root);
    free(single);
    free(index);
    return rc;
}

void st_close(struct st_set *set) {
    set_free_tables(set);
    for (int i = 0; i < set->n_files; i++) {
        if (set->files[i].addr) munmap(set->files[i].addr, set->files[i].len);
        free(set->files[i].path);
    }
    free(set->files);
    set->files = NULL;
    set->n_files = 0;
}

const struct st_tensor *st_find(const struct st_set *set, const char *name) {
    struct st_tensor key = {.name = (char *)name};
    return set->n_tensors ? bsearch(&key, set->tensors, (size_t)set->n_tensors, sizeof key, cmp_tensor_name) : NULL;
}

const char *st_metadata(const struct st_set *set, const char *key) {
    for (int i = 0; i + 1 < set->n_metadata; i += 2)
        if (!strcmp(set->metadata[i], key)) return set->metadata[i + 1];
    return NULL;
}

int st_read_f32(const struct st_tensor *t, float *out, int64_t expect_numel, struct whet_err *err) {
    if (expect_numel >= 0 && t->numel != expect_numel)
        return whet_errf(err, "%s: tensor \"%s\": %" PRId64 " elements, expected %" PRId64, t->file, t->name,
                         t->numel, expect_numel);
    const uint8_t *p = t->data;
    int64_t n = t->numel;
    switch (t->dtype) {
    case ST_F32: { /* a copy out of the mapped file, its page faults split across the threads as the others' */
        const int64_t block = 1 << 16;
#pragma omp parallel for schedule(static) if (n >= 4 * block)
        for (int64_t i = 0; i < n; i += block) memcpy(out + i, p + 4 * i, (size_t)(n - i < block ? n - i : block) * 4);
        return 0;
    }
    case ST_BF16:
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) out[i] = st_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    case ST_F16:
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) out[i] = st_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    case ST_F64:
        for (int64_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            out[i] = (float)d;
        }
        return 0;
    default:
        return whet_errf(err, "%s: tensor \"%s\": dtype %s is not a floating-point type", t->file, t->name,
                         st_dtype_name(t->dtype));
    }
}

int st_expect(const struct st_set *set, const char *name, int ndim, const int64_t *shape,
              const struct st_tensor **out, struct whet_err *err) {
    const struct st_tensor *t = st_find(set, name);
    const char *where = set->n_files ? set->files[0].path : "safetensors";
    if (!t) return whet_errf(err, "%s: tensor \"%s\" is missing", set->n_files > 1 ? "model shards" : where, name);
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        char got[128] = "", want[128] = "";
        for (int d = 0; d < t->ndim; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%" PRId64, d ? ", " : "", t->shape[d]);
        for (int d = 0; d < ndim; d++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%" PRId64, d ? ", " : "", shape[d]);
        return whet_errf(err, "%s: tensor \"%s\": shape [%s], the config implies [%s]", t->file, name, got, want);
    }
    *out = t;
    return 0;
}

/* ---------------------------------------------------------------- writing ---- */

void st_writer_init(struct st_writer *w) { memset(w, 0, sizeof *w); }

void st_writer_add(struct st_writer *w, const char *name, int ndim, const int64_t *shape, const float *data) {
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->items = xrealloc(w->items, sizeof *w->items * (size_t)w->cap);
    }
    struct st_wtensor *t = &w->items[w->n++];
    t->name = xstrdup(name);
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    t->data = data;
}

void st_writer_metadata(struct st_writer *w, const char *key, const char *value) {
    w->metadata = xrealloc(w->metadata, sizeof(char *) * (size_t)(w->n_metadata + 2));
    w->metadata[w->n_metadata++] = xstrdup(key);
    w->metadata[w->n_metadata++] = xstrdup(value);
}

void st_writer_free(struct st_writer *w) {
    for (int i = 0; i < w->n; i++) free(w->items[i].name);
    for (int i = 0; i < w->n_metadata; i++) free(w->metadata[i]);
    free(w->items);
    free(w->metadata);
    memset(w, 0, sizeof *w);
}

static int64_t wt_numel(const struct st_wtensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

int st_writer_write(struct st_writer *w, const char *path, enum st_dtype dtype, struct whet_err *err) {
    if (dtype != ST_F32 && dtype != ST_BF16) return whet_errf(err, "%s: can only write F32 or BF16", path);
    size_t esize = st_dtype_size(dtype);
    /* The header: jansson escapes names; keys are written in the order added. */
    json_t *root = json_object();
    if (w->n_metadata) {
        json_t *meta = json_object();
        for (int i = 0; i + 1 < w->n_metadata; i += 2) json_object_set_new(meta, w->metadata[i], json_string(w->metadata[i + 1]));
        json_object_set_new(root, "__metadata__", meta);
    }
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        struct st_wtensor *t = &w->items[i];
        json_t *shape = json_array();
        for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        uint64_t nb = (uint64_t)wt_numel(t) * esize;
        json_t *e = json_pack("{s:s, s:o, s:[I,I]}", "dtype", st_dtype_name(dtype), "shape", shape, "data_offsets",
                              (json_int_t)off, (json_int_t)(off + nb));
        json_object_set_new(root, t->name, e);
        off += nb;
    }
    char *header = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    size_t hlen = strlen(header), padded = (hlen + 7) / 8 * 8; /* data starts 8-aligned */
    char *tmp = xasprintf("%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    int rc = -1;
    if (!f) {
        whet_errf(err, "%s: %s", tmp, strerror(errno));
        goto out;
    }
    uint8_t lenbytes[8];
    for (int i = 0; i < 8; i++) lenbytes[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int bad = write_all(f, lenbytes, 8) || write_all(f, header, hlen);
    for (size_t i = hlen; i < padded && !bad; i++) bad = fputc(' ', f) == EOF;
    enum { CHUNK = 1 << 16 };
    uint16_t *conv = dtype == ST_BF16 ? xmalloc(CHUNK * sizeof *conv) : NULL;
    for (int i = 0; i < w->n && !bad; i++) {
        int64_t n = wt_numel(&w->items[i]);
        const float *src = w->items[i].data;
        if (dtype == ST_F32) {
            bad = write_all(f, src, (size_t)n * 4);
            continue;
        }
        for (int64_t s = 0; s < n && !bad; s += CHUNK) {
            int64_t m = n - s < CHUNK ? n - s : CHUNK;
            for (int64_t j = 0; j < m; j++) conv[j] = st_f32_to_bf16(src[s + j]);
            bad = write_all(f, conv, (size_t)m * 2);
        }
    }
    free(conv);
    if (!bad) bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    if (fclose(f) != 0) bad = 1;
    if (bad) {
        whet_errf(err, "%s: write: %s", tmp, strerror(errno));
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        whet_errf(err, "%s: rename: %s", path, strerror(errno));
        unlink(tmp);
        goto out;
    }
    rc = 0;
out:
    free(tmp);
    free(header);
    return rc;
}
