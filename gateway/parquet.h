/* parquet.h - a small Apache Parquet writer for the gateway's exports (the FOCUS billing export, focus.h):
 * Debian packages no Parquet library for C (Apache Arrow is not in Debian 12), and an export of a few
 * thousand rows needs little of the format.
 *
 * What it writes: "PAR1", one row group holding one uncompressed v1 data page per column, the footer
 * (FileMetaData in Thrift's compact protocol), its length and "PAR1". Every column is OPTIONAL: its
 * definition levels (1 bit each, RLE runs) tell a null from a value, and the values are PLAIN encoded:
 *   PARQUET_STRING        BYTE_ARRAY, logical type STRING (converted type UTF8)
 *   PARQUET_DOUBLE        DOUBLE
 *   PARQUET_TIMESTAMP_MS  INT64, logical type TIMESTAMP(isAdjustedToUTC, MILLIS) (converted TIMESTAMP_MILLIS)
 * The cells come as text, as the CSV export has them: a double as strtod reads it, a timestamp as ISO 8601
 * UTC "YYYY-MM-DDTHH:MM:SSZ"; NULL is a null. tests/integration/api/billing.mjs reads the output back with
 * hyparquet, an independent reader. */
#ifndef WHET_GATEWAY_PARQUET_H
#define WHET_GATEWAY_PARQUET_H

#include "buf.h"
#include "util.h"

enum parquet_type { PARQUET_STRING, PARQUET_DOUBLE, PARQUET_TIMESTAMP_MS };

struct parquet_column {
    const char *name;
    enum parquet_type type;
};

/* Appends the file to `out`: n_rows rows of n_cols columns, cells[row * n_cols + col]. Returns 0, or -1
 * with the reason in err when a cell is not of its column's type. */
int parquet_write(struct whet_buf *out, const struct parquet_column *cols, int n_cols, const char *const *cells,
                  int n_rows, struct whet_err *err);

#endif
