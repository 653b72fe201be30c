/* prices.c - the price book routes (see prices.h). A version is written in one statement (the book row
 * and its prices), numbered one more than the newest, and keeps the currency of the versions before it:
 * costs are summed across versions, so they must be in one currency. */
#include "prices.h"

#include <math.h>
#include <string.h>

#include "buf.h"
#include "db.h"
#include "files_common.h"
#include "json_text.h"
#include "query_params.h"

#define PRICE_MAX 1e12
#define PRICE_TIME_MAX 253402300799LL /* 9999-12-31T23:59:59Z */

static const char *const skus[] = {"device_hour",
                                   "trained_tokens_1m",
                                   "rollout_prompt_tokens_1m",
                                   "rollout_completion_tokens_1m",
                                   "inference_prompt_tokens_1m",
                                   "inference_completion_tokens_1m",
                                   "storage_gb_month",
                                   NULL};

/* Columns: version, effective_from, effective_until, currency, note, created_at, prices (jsonb). */
#define BOOK_SELECT                                                                                                    \
    "SELECT b.version, b.effective_from, lead(b.effective_from) OVER (ORDER BY b.effective_from), b.currency, "        \
    "b.note, b.created_at, coalesce((SELECT jsonb_object_agg(sku, v) FROM (SELECT sku, CASE WHEN sku = "               \
    "'device_hour' THEN jsonb_object_agg(CASE WHEN device_type = '' THEN '*' ELSE device_type END, unit_price) "       \
    "ELSE to_jsonb(min(unit_price)) END AS v FROM prices p WHERE p.version = b.version GROUP BY sku) x), '{}') "       \
    "FROM price_books b"

static json_t *book_json(const PGresult *res, int row) {
    return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "object", "price_book", "version",
                     db_json_integer(res, row, 0), "effective_from", db_json_integer(res, row, 1), "effective_until",
                     db_json_integer(res, row, 2), "currency", db_json_string(res, row, 3), "note",
                     db_json_string(res, row, 4), "created_at", db_json_integer(res, row, 5), "prices",
                     db_json_value(res, row, 6));
}

/* Appends {"sku","device_type","unit_price"} to `rows` for a price; answers 400 naming `param` and returns
 * -1 when it is not a finite number in 0..PRICE_MAX. */
static int price_add(struct gw_req *r, json_t *rows, const char *sku, const char *device_type, const json_t *v,
                     const char *param) {
    char text[WHET_JSON_REAL_MAX];
    double x = json_number_value(v);
    if (!json_is_number(v) || !(x >= 0 && x <= PRICE_MAX) || whet_json_real(x, text) < 0) {
        http_reply_error(r, 400, param, "invalid_value", "%s: expected a price of 0 to %g", param, PRICE_MAX);
        return -1;
    }
    json_array_append_new(rows,
                          json_pack("{s:s, s:s, s:s}", "sku", sku, "device_type", device_type, "unit_price", text));
    return 0;
}

static int device_type_valid(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return 0;
    }
    return 1;
}

/* The body's "prices" as rows for jsonb_to_recordset; NULL having answered 400 on a bad one. */
static json_t *prices_rows(struct gw_req *r, const json_t *prices) {
    if (!json_is_object(prices) || json_object_size(prices) == 0) {
        http_reply_error(
            r, 400, "prices", "invalid_value",
            "prices: expected an object of SKU to price, such as {\"device_hour\": {\"H100\": 2.5, \"*\": 1}, "
            "\"trained_tokens_1m\": 0.5}");
        return NULL;
    }
    json_t *rows = json_array();
    const char *sku;
    json_t *v;
    json_object_foreach((json_t *)prices, sku, v) {
        int known = 0;
        for (const char *const *s = skus; *s; s++) known |= !strcmp(*s, sku);
        const char *param = http_printf(r, "prices.%s", sku);
        if (!known) {
            http_reply_error(
                r, 400, param, "invalid_value",
                "%s: unknown SKU (known: device_hour, trained_tokens_1m, rollout_prompt_tokens_1m, "
                "rollout_completion_tokens_1m, inference_prompt_tokens_1m, inference_completion_tokens_1m, "
                "storage_gb_month)",
                param);
            goto bad;
        }
        if (!strcmp(sku, "device_hour") && json_is_object(v)) {
            const char *type;
            json_t *p;
            json_object_foreach(v, type, p) {
                const char *tparam = http_printf(r, "%s.%s", param, type);
                if (strcmp(type, "*") && !device_type_valid(type)) {
                    http_reply_error(r, 400, tparam, "invalid_value",
                                     "%s: a device type is 1-64 characters of [A-Za-z0-9_.-], or \"*\" for the types "
                                     "not listed",
                                     tparam);
                    goto bad;
                }
                if (price_add(r, rows, sku, strcmp(type, "*") ? type : "", p, tparam)) goto bad;
            }
        } else if (price_add(r, rows, sku, "", v, param)) {
            goto bad;
        }
    }
    return rows;
bad:
    json_decref(rows);
    return NULL;
}

static void book_create_done(struct gw_req *r, const struct db_result *res, void *arg) {
    (void)arg;
    if (!res->ok) {
        if (res->failed == 0 && !strcmp(res->sqlstate, "23505") && strstr(res->message, "effective_from"))
            http_reply_error(r, 409, "effective_from", "price_book_exists",
                             "a price book version already takes effect at this time; choose another effective_from");
        else if (res->failed == 0 && !strcmp(res->sqlstate, "23505"))
            http_reply_error(r, 409, NULL, "conflict",
                             "another price book version was created at the same time; retry");
        else http_reply_db_error(r, res);
        return;
    }
    if (PQntuples(res->res[0]) == 0) {
        http_reply_error(r, 400, "currency", "invalid_value",
                         "currency: every price book version must use the currency of the existing ones");
        return;
    }
    const PGresult *books = res->res[1];
    for (int i = 0; i < PQntuples(books); i++)
        if (!strcmp(PQgetvalue(books, i, 0), PQgetvalue(res->res[0], 0, 0))) {
            http_reply_json(r, 200, book_json(books, i));
            return;
        }
    http_reply_error(r, 500, NULL, "internal_error", "the new price book version was not read back (request %s)",
                     r->request_id);
}

static void book_create(struct gw_req *r) {
    json_t *body = http_body_json(r);
    if (!body) return;
    static const char *const keys[] = {"effective_from", "currency", "note", "prices", NULL};
    json_t *from = json_object_get(body, "effective_from"), *currency = json_object_get(body, "currency"),
           *note = json_object_get(body, "note"), *rows = NULL;
    if (http_body_keys_known(r, body, keys)) goto done;
    if (from && (!json_is_integer(from) || json_integer_value(from) < 0 || json_integer_value(from) > PRICE_TIME_MAX)) {
        http_reply_error(r, 400, "effective_from", "invalid_value",
                         "effective_from: expected a Unix time in seconds (0 to %lld)", PRICE_TIME_MAX);
        goto done;
    }
    const char *cur = json_string_value(currency);
    if (currency && (!cur || strlen(cur) != 3 || strspn(cur, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != 3)) {
        http_reply_error(r, 400, "currency", "invalid_value", "currency: expected an ISO 4217 code such as \"USD\"");
        goto done;
    }
    if (note && (!json_is_string(note) || json_string_length(note) > 1000 ||
                 !files_text_ok(json_string_value(note), json_string_length(note)))) {
        http_reply_error(r, 400, "note", "invalid_value", "note: expected text of at most 1000 characters");
        goto done;
    }
    if (!(rows = prices_rows(r, json_object_get(body, "prices")))) goto done;
    char *rows_text = whet_json_compact(rows, NULL);
    http_free_later(r, rows_text);
    const char *insert[] = {from ? http_printf(r, "%lld", (long long)json_integer_value(from)) : NULL, cur,
                            note ? http_strdup(r, json_string_value(note)) : NULL, rows_text};
    struct db_stmt stmts[] = {{"prices_insert", NULL, 4, insert}, {"prices_list", NULL, 0, NULL}};
    db_transaction(r, stmts, 2, book_create_done, NULL);
done:
    json_decref(rows);
    json_decref(body);
}

static void book_list_done(struct gw_req *r, const struct db_result *res, void *arg) {
    (void)arg;
    if (db_reply_failed(r, res)) return;
    http_reply_json(r, 200,
                    json_pack("{s:s, s:o, s:b}", "object", "list", "data", db_rows_json(res->res[0], -1, book_json),
                              "has_more", 0));
}

static void book_list(struct gw_req *r) { db_query(r, "prices_list", 0, NULL, book_list_done, NULL); }

static void book_current_done(struct gw_req *r, const struct db_result *res, void *arg) {
    (void)arg;
    if (db_reply_failed(r, res)) return;
    if (PQntuples(res->res[0]) == 0) {
        http_reply_error(r, 404, "at", "price_book_not_found", "no price book is in effect at that time");
        return;
    }
    http_reply_json(r, 200, book_json(res->res[0], 0));
}

static void book_current(struct gw_req *r) {
    long long at;
    int has_at = query_int(r, "at", 0, PRICE_TIME_MAX, 0, &at);
    if (has_at < 0) return;
    const char *p[] = {query_int_text(r, has_at, at)};
    db_query(r, "prices_at", 1, p, book_current_done, NULL);
}

void prices_routes(struct http_router *rt) {
    /* $1 effective_from (NULL: now), $2 currency (NULL: the existing one's), $3 note, $4 the prices as
     * [{"sku","device_type","unit_price"}]. No row when the currency differs from the existing one's. */
    db_prepare("prices_insert",
               "WITH cur AS (SELECT (SELECT currency FROM price_books ORDER BY effective_from DESC LIMIT 1) AS c), "
               "b AS (INSERT INTO price_books (version, effective_from, currency, note) "
               "  SELECT coalesce((SELECT max(version) FROM price_books), 0) + 1, coalesce($1::bigint, whet_now()), "
               "  coalesce($2, cur.c, 'USD'), $3 FROM cur WHERE cur.c IS NULL OR $2 IS NULL OR $2 = cur.c "
               "  RETURNING version), "
               "p AS (INSERT INTO prices (version, sku, device_type, unit_price) "
               "  SELECT b.version, x.sku, x.device_type, x.unit_price FROM b, "
               "  jsonb_to_recordset($4::jsonb) x(sku text, device_type text, unit_price numeric)) "
               "SELECT version FROM b");
    db_prepare("prices_list", "SELECT * FROM (" BOOK_SELECT ") s ORDER BY effective_from DESC");
    db_prepare("prices_at",
               "SELECT * FROM (" BOOK_SELECT ") s WHERE effective_from <= coalesce($1::bigint, whet_now()) "
               "ORDER BY effective_from DESC LIMIT 1");
    http_route(rt, "POST", "/admin/v1/prices", book_create, HTTP_ROUTE_ADMIN, "admin_prices.create");
    http_route(rt, "GET", "/admin/v1/prices", book_list, HTTP_ROUTE_ADMIN, "admin_prices.list");
    http_route(rt, "GET", "/v1/prices", book_current, HTTP_ROUTE_TENANT, "prices.current");
}
