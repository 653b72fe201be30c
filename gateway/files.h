/* files.h - the Files resource: `POST /v1/files` (multipart upload), `GET /v1/files` (list with purpose,
 * order, after, limit), `GET /v1/files/{id}`, `DELETE /v1/files/{id}`, `GET /v1/files/{id}/content`.
 *
 * A `fine-tune` file is checked line by line (validate.h) before anything is stored; the bytes go to the
 * object store under files/<tenant>/<file id> (on a worker thread), then the row is written. A refused
 * upload leaves neither row nor object. */
#ifndef WHET_GATEWAY_FILES_H
#define WHET_GATEWAY_FILES_H

#include <jansson.h>
#include <libpq-fe.h>

struct http_router;

void files_routes(struct http_router *rt);

/* The columns every file query returns first, in this order (files_row_to_json reads them). */
#define FILES_COLUMNS "id, purpose, filename, bytes, created_at, expires_at, status"
#define FILES_NCOLUMNS 7
/* OpenAI's file object from a row whose first columns are FILES_COLUMNS. */
json_t *files_row_to_json(const PGresult *res, int row);
/* The same from FILES_COLUMNS starting at column `col` (a query that joins a file to another row). */
json_t *files_row_to_json_at(const PGresult *res, int row, int col);

/* Purposes a tenant may upload for, NULL-terminated. */
extern const char *const files_purposes[];
int files_purpose_ok(const char *purpose);

#endif
