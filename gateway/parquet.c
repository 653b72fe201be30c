/* parquet.c - the Parquet writer (see parquet.h). The Thrift structures and field ids are those of
 * parquet-format's parquet.thrift; only the fields written are named here. */
#include "parquet.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- Thrift's compact protocol */

enum { T_TRUE = 1, T_FALSE = 2, T_I32 = 5, T_I64 = 6, T_BINARY = 8, T_LIST = 9, T_STRUCT = 12 };

static void varint(struct whet_buf *b, uint64_t v) {
    unsigned char byte;
    do {
        byte = v & 0x7f;
        v >>= 7;
        whet_buf_append(b, &(unsigned char){byte | (v ? 0x80 : 0)}, 1);
    } while (v);
}

static uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

/* A struct being written: the last field id, from which the next field's header is a delta. */
struct tstruct {
    struct whet_buf *b;
    int16_t last;
};

static void field(struct tstruct *s, int16_t id, int type) {
    if (id > s->last && id - s->last <= 15) {
        whet_buf_append(s->b, &(unsigned char){(unsigned char)((id - s->last) << 4 | type)}, 1);
    } else {
        whet_buf_append(s->b, &(unsigned char){(unsigned char)type}, 1);
        varint(s->b, zigzag(id));
    }
    s->last = id;
}

static void f_i32(struct tstruct *s, int16_t id, int32_t v) {
    field(s, id, T_I32);
    varint(s->b, zigzag(v));
}

static void f_i64(struct tstruct *s, int16_t id, int64_t v) {
    field(s, id, T_I64);
    varint(s->b, zigzag(v));
}

static void f_bool(struct tstruct *s, int16_t id, int v) { field(s, id, v ? T_TRUE : T_FALSE); }

static void binary(struct whet_buf *b, const char *p, size_t n) {
    varint(b, n);
    whet_buf_append(b, p, n);
}

static void f_string(struct tstruct *s, int16_t id, const char *v) {
    field(s, id, T_BINARY);
    binary(s->b, v, strlen(v));
}

static void list_header(struct whet_buf *b, size_t n, int elem_type) {
    if (n < 15) {
        whet_buf_append(b, &(unsigned char){(unsigned char)(n << 4 | elem_type)}, 1);
    } else {
        whet_buf_append(b, &(unsigned char){(unsigned char)(0xf0 | elem_type)}, 1);
        varint(b, n);
    }
}

static void f_list(struct tstruct *s, int16_t id, size_t n, int elem_type) {
    field(s, id, T_LIST);
    list_header(s->b, n, elem_type);
}

/* Opens the struct-typed field `id` of s: the nested struct starts its own field ids. */
static struct tstruct f_struct(struct tstruct *s, int16_t id) {
    field(s, id, T_STRUCT);
    return (struct tstruct){s->b, 0};
}

static void end(struct tstruct *s) { whet_buf_append(s->b, "", 1); }

/* ---------------------------------------------------------------- parquet.thrift's numbers */

enum { TYPE_INT64 = 2, TYPE_DOUBLE = 5, TYPE_BYTE_ARRAY = 6 };
enum { REP_REQUIRED = 0, REP_OPTIONAL = 1 };
enum { CONVERTED_UTF8 = 0, CONVERTED_TIMESTAMP_MILLIS = 9 };
enum { ENC_PLAIN = 0, ENC_RLE = 3 };
enum { PAGE_DATA = 0 };

static int physical(enum parquet_type t) {
    return t == PARQUET_STRING ? TYPE_BYTE_ARRAY : t == PARQUET_DOUBLE ? TYPE_DOUBLE : TYPE_INT64;
}

static void put_le(struct whet_buf *b, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) whet_buf_append(b, &(unsigned char){(unsigned char)(v >> 8 * i)}, 1);
}

/* One cell's PLAIN value. */
static int plain_value(struct whet_buf *b, enum parquet_type t, const char *cell, struct whet_err *err) {
    if (t == PARQUET_STRING) {
        put_le(b, strlen(cell), 4);
        whet_buf_puts(b, cell);
        return 0;
    }
    if (t == PARQUET_DOUBLE) {
        char *end_ptr;
        errno = 0;
        double x = strtod(cell, &end_ptr);
        if (end_ptr == cell || *end_ptr || errno) return whet_errf(err, "\"%s\" is not a number", cell);
        uint64_t bits;
        memcpy(&bits, &x, sizeof bits);
        put_le(b, bits, 8);
        return 0;
    }
    struct tm tm = {0};
    const char *rest = strptime(cell, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (!rest || *rest) return whet_errf(err, "\"%s\" is not a UTC time as YYYY-MM-DDTHH:MM:SSZ", cell);
    put_le(b, (uint64_t)((int64_t)timegm(&tm) * 1000), 8);
    return 0;
}

/* The definition levels of a column (1: a value, 0: null) as RLE runs of the hybrid encoding, bit width 1
 * (a run: its length << 1, then the level in one byte), after their byte length. */
static void def_levels(struct whet_buf *page, const char *const *cells, int n_cols, int col, int n_rows) {
    struct whet_buf runs = {0};
    for (int row = 0; row < n_rows;) {
        int defined = cells[(size_t)row * n_cols + col] != NULL, len = 1;
        while (row + len < n_rows && (cells[(size_t)(row + len) * n_cols + col] != NULL) == defined) len++;
        varint(&runs, (uint64_t)len << 1);
        whet_buf_append(&runs, &(unsigned char){(unsigned char)defined}, 1);
        row += len;
    }
    put_le(page, runs.len, 4);
    whet_buf_append(page, runs.data, runs.len);
    whet_buf_free(&runs);
}

/* Where a column chunk went, for the footer. */
struct chunk {
    int64_t offset, size;
};

static int write_column(struct whet_buf *out, const struct parquet_column *c, const char *const *cells, int n_cols,
                        int col, int n_rows, struct chunk *where, struct whet_err *err) {
    struct whet_buf page = {0}, header = {0};
    def_levels(&page, cells, n_cols, col, n_rows);
    for (int row = 0; row < n_rows; row++) {
        const char *cell = cells[(size_t)row * n_cols + col];
        if (cell && plain_value(&page, c->type, cell, err)) {
            whet_buf_free(&page);
            return whet_err_prefix(err, "%s, row %d", c->name, row + 1);
        }
    }
    struct tstruct h = {&header, 0};
    f_i32(&h, 1, PAGE_DATA);
    f_i32(&h, 2, (int32_t)page.len);
    f_i32(&h, 3, (int32_t)page.len);
    struct tstruct d = f_struct(&h, 5);
    f_i32(&d, 1, n_rows);
    f_i32(&d, 2, ENC_PLAIN);
    f_i32(&d, 3, ENC_RLE);
    f_i32(&d, 4, ENC_RLE);
    end(&d);
    end(&h);
    where->offset = (int64_t)out->len;
    where->size = (int64_t)(header.len + page.len);
    whet_buf_append(out, header.data, header.len);
    whet_buf_append(out, page.data, page.len);
    whet_buf_free(&header);
    whet_buf_free(&page);
    return 0;
}

static void schema_element(struct whet_buf *b, const struct parquet_column *c) {
    struct tstruct s = {b, 0};
    f_i32(&s, 1, physical(c->type));
    f_i32(&s, 3, REP_OPTIONAL);
    f_string(&s, 4, c->name);
    if (c->type != PARQUET_DOUBLE) {
        f_i32(&s, 6, c->type == PARQUET_STRING ? CONVERTED_UTF8 : CONVERTED_TIMESTAMP_MILLIS);
        struct tstruct logical = f_struct(&s, 10);
        if (c->type == PARQUET_STRING) {
            struct tstruct string = f_struct(&logical, 1); /* StringType: no fields */
            end(&string);
        } else {
            struct tstruct ts = f_struct(&logical, 8); /* TimestampType */
            f_bool(&ts, 1, 1);
            struct tstruct unit = f_struct(&ts, 2);
            struct tstruct millis = f_struct(&unit, 1);
            end(&millis);
            end(&unit);
            end(&ts);
        }
        end(&logical);
    }
    end(&s);
}

static void footer(struct whet_buf *b, const struct parquet_column *cols, int n_cols, int n_rows,
                   const struct chunk *chunks) {
    struct tstruct m = {b, 0};
    f_i32(&m, 1, 1);
    f_list(&m, 2, (size_t)n_cols + 1, T_STRUCT);
    struct tstruct root = {b, 0};
    f_i32(&root, 3, REP_REQUIRED);
    f_string(&root, 4, "schema");
    f_i32(&root, 5, n_cols);
    end(&root);
    for (int c = 0; c < n_cols; c++) schema_element(b, &cols[c]);
    f_i64(&m, 3, n_rows);
    f_list(&m, 4, 1, T_STRUCT);
    struct tstruct group = {b, 0};
    f_list(&group, 1, (size_t)n_cols, T_STRUCT);
    int64_t total = 0;
    for (int c = 0; c < n_cols; c++) {
        struct tstruct chunk = {b, 0};
        f_i64(&chunk, 2, chunks[c].offset);
        struct tstruct meta = f_struct(&chunk, 3);
        f_i32(&meta, 1, physical(cols[c].type));
        f_list(&meta, 2, 2, T_I32);
        varint(b, zigzag(ENC_PLAIN));
        varint(b, zigzag(ENC_RLE));
        f_list(&meta, 3, 1, T_BINARY);
        binary(b, cols[c].name, strlen(cols[c].name));
        f_i32(&meta, 4, 0); /* UNCOMPRESSED */
        f_i64(&meta, 5, n_rows);
        f_i64(&meta, 6, chunks[c].size);
        f_i64(&meta, 7, chunks[c].size);
        f_i64(&meta, 9, chunks[c].offset);
        end(&meta);
        end(&chunk);
        total += chunks[c].size;
    }
    f_i64(&group, 2, total);
    f_i64(&group, 3, n_rows);
    end(&group);
    f_string(&m, 6, "whet");
    end(&m);
}

int parquet_write(struct whet_buf *out, const struct parquet_column *cols, int n_cols, const char *const *cells,
                  int n_rows, struct whet_err *err) {
    size_t start = out->len;
    whet_buf_puts(out, "PAR1");
    struct chunk *chunks = xcalloc((size_t)n_cols + 1, sizeof *chunks);
    for (int c = 0; c < n_cols; c++) {
        if (write_column(out, &cols[c], cells, n_cols, c, n_rows, &chunks[c], err)) {
            free(chunks);
            out->len = start;
            return -1;
        }
    }
    size_t meta = out->len;
    footer(out, cols, n_cols, n_rows, chunks);
    put_le(out, out->len - meta, 4);
    whet_buf_puts(out, "PAR1");
    free(chunks);
    return 0;
}
