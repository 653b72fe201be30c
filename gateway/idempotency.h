/* idempotency.h - the Idempotency-Key header for every state-changing POST of the tenant API.
 *
 * A client that retries a POST (the OpenAI SDKs do, on timeouts, 409, 429 and 5xx) sends the same
 * `Idempotency-Key`; the retry must not create a second object or apply a change twice, and gets the
 * first answer back. Keys live in the `idempotency_keys` table, scoped per tenant and route (method +
 * path: "POST /v1/uploads/upload_abc/parts"), with a fingerprint of the request:
 *
 * - same key, same request, first answer stored: that answer, same status and body, with the header
 *   `idempotent-replayed: true`;
 * - same key, another request: 422 `idempotency_key_reused` (the IETF httpapi draft's status; the
 *   message names the header);
 * - same key while the first request is still being processed: 409 `idempotency_key_in_use`.
 *
 * Races: the key's row is inserted (status 0, "in progress") inside the very transaction that
 * creates the object or applies the change, so the primary key decides between two concurrent
 * duplicates: the loser's transaction fails with a unique violation and rolls back whole, and the
 * loser answers as the winner did (idem_lost_race). Only 2xx answers are remembered: an answer that
 * refuses the request after the transaction committed (a 404, 409 or 429 decided inside it) releases
 * the key, so a retry runs again; a failed transaction leaves no key at all. Keys do not expire.
 *
 * A handler using it:
 *
 *     static void thing_create(struct gw_req *r) {
 *         ... validate the body (a bad request never touches the key) ...
 *         idem_begin(r, thing_create_start, ctx);          // may answer a replay instead
 *     }
 *     static void thing_create_start(struct gw_req *r, void *arg) {
 *         struct db_stmt stmts[3] = {{"things_insert", ...}, {"things_get", ...}};
 *         int n = idem_reserve(r, stmts, 2);                // appends the key's row, if any
 *         db_transaction(r, stmts, n, thing_created, ctx);
 *     }
 *     static void thing_created(struct gw_req *r, const struct db_result *res, void *arg) {
 *         if (idem_reply_failed(r, res)) return;            // a lost race or a failed transaction
 *         idem_reply_json(r, 200, thing_to_json(res->res[1], 0));   // stored under the key, then sent
 *     }
 *
 * The state lives in r->handler_data: a handler that uses idem_begin leaves that field alone. */
#ifndef WHET_GATEWAY_IDEMPOTENCY_H
#define WHET_GATEWAY_IDEMPOTENCY_H

#include <jansson.h>

#include "db.h"
#include "http.h"
#include "multipart.h"

#define IDEMPOTENCY_HEADER "Idempotency-Key"
#define IDEMPOTENCY_KEY_MAX 255

/* Declares the statements (once, however many resources call it); call from a `<resource>_routes()`. */
void idem_prepare(void);

typedef void (*idem_proceed_fn)(struct gw_req *r, void *arg);

/* Without an Idempotency-Key header calls proceed(r, arg) at once. With one, answers 400 when it is
 * malformed (1..255 printable ASCII characters), else looks the key up and answers as above, or calls
 * proceed(r, arg) (later, from the event loop) when the key is new. The request's fingerprint is the
 * SHA-256 of its raw body (bounded by the JSON body limit, so hashed on the event loop). */
void idem_begin(struct gw_req *r, idem_proceed_fn proceed, void *arg);

/* The same for a multipart/form-data request: the fingerprint covers the parsed form (each part's
 * name, filename, content type and bytes), not the raw body, whose boundary a client may draw anew
 * for each attempt (fetch's FormData does). The parts can be large: they are hashed on a worker
 * thread, and only when a key was given. `form` must live as long as the request. */
void idem_begin_form(struct gw_req *r, const struct multipart_form *form, idem_proceed_fn proceed, void *arg);

/* Appends the statement that reserves the key to a transaction's `n` statements (`stmts` has room
 * for one more) and returns the new count; returns `n` unchanged without a key. Append it after the
 * statements that change things, so their indices in the result stay the same. */
int idem_reserve(struct gw_req *r, struct db_stmt *stmts, int n);

/* Call first in the callback of a transaction that idem_reserve joined. Returns 1 when it failed
 * because a concurrent request with the same key committed first: this request is then answered like
 * that one (or run again, through proceed, when that one was refused and released the key); the
 * caller frees its own things and returns without answering. Returns 0 otherwise. */
int idem_lost_race(struct gw_req *r, const struct db_result *res);
/* The usual start of such a callback: idem_lost_race, then a failed result is answered
 * (db_reply_failed). Returns 1 when the request was answered (or runs again), 0 when res->ok. */
int idem_reply_failed(struct gw_req *r, const struct db_result *res);
/* idem_reply_failed, then 404 "no such WHAT: ID" (idem_reply_error, ID the path parameter "id") when
 * statement `stmt` returned no row. Returns 1 when it answered. */
int idem_reply_unless_found(struct gw_req *r, const struct db_result *res, int stmt, const char *what);

/* Answers like http_reply_json. After a reservation, a 2xx answer is stored under the key first;
 * any other status releases the key. With a key but no reservation (an answer decided from state
 * read before the transaction, which a concurrent request with the same key may have changed) the
 * key is looked up once more and an answer stored meanwhile is replayed instead. */
void idem_reply_json(struct gw_req *r, int status, json_t *body);
/* Answers like http_reply_error, and handles the key as idem_reply_json does for a non-2xx status. */
void idem_reply_error(struct gw_req *r, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Releases the key (after a reservation), then calls answer(r, arg), which answers the request;
 * without a reservation calls it at once. For answers idem_reply_error cannot give (a 429 with
 * retry-after). */
void idem_release_then(struct gw_req *r, idem_proceed_fn answer, void *arg);

#endif
