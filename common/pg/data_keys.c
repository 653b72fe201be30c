/* data_keys.c - tenants' data keys in PostgreSQL (see data_keys.h). */
#include "data_keys.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crypto.h"
#include "pg.h"

/* Unwraps the row (key_id, operator_key_id, wrapped as hex) of `res` at `row`. */
static int unwrap_row(const struct whet_keyring *kr, const char *tenant_id, PGresult *res, int row,
                      struct whet_data_key *out, struct whet_err *err) {
    size_t len = 0;
    unsigned char *wrapped = PQunescapeBytea((const unsigned char *)PQgetvalue(res, row, 2), &len);
    if (!wrapped) return whet_errf(err, "tenant %s: cannot decode a wrapped data key", tenant_id);
    int rc = whet_data_key_unwrap(kr, PQgetvalue(res, row, 1), tenant_id, (uint32_t)strtoul(PQgetvalue(res, row, 0), NULL, 10),
                                  wrapped, len, out, err);
    PQfreemem(wrapped);
    return rc;
}

/* Writes `dk` wrapped under the current operator key: a new row (INSERT, a racing one wins) or,
 * when `old_operator` is given, over the row still wrapped under that key. */
static int store_wrapped(PGconn *conn, const struct whet_keyring *kr, const char *tenant_id,
                         const struct whet_data_key *dk, const char *old_operator, struct whet_err *err) {
    uint8_t wrapped[WHET_WRAPPED_KEY_BYTES];
    whet_data_key_wrap(kr, tenant_id, dk, wrapped);
    char hex[2 * WHET_WRAPPED_KEY_BYTES + 1], id[16];
    whet_hex_encode(wrapped, sizeof wrapped, hex);
    snprintf(id, sizeof id, "%u", dk->id);
    const char *params[] = {tenant_id, id, whet_keyring_current(kr), hex, old_operator};
    if (old_operator)
        return whet_pg_exec(conn,
                            "UPDATE tenant_data_keys SET operator_key_id = $3, wrapped = decode($4, 'hex'),"
                            " rewrapped_at = whet_now() WHERE tenant_id = $1 AND key_id = $2 AND operator_key_id = $5",
                            5, params, err);
    return whet_pg_exec(conn,
                        "INSERT INTO tenant_data_keys (tenant_id, key_id, operator_key_id, wrapped)"
                        " VALUES ($1, $2, $3, decode($4, 'hex')) ON CONFLICT DO NOTHING",
                        4, params, err);
}

#define SELECT_KEY "SELECT key_id, operator_key_id, wrapped FROM tenant_data_keys"

int whet_tenant_data_key(PGconn *conn, const struct whet_keyring *kr, const char *tenant_id, struct whet_data_key *out,
                         struct whet_err *err) {
    const char *params[] = {tenant_id};
    for (int attempt = 0; attempt < 2; attempt++) {
        PGresult *res = whet_pg_query(conn, SELECT_KEY " WHERE tenant_id = $1 ORDER BY key_id DESC LIMIT 1", 1, params,
                                      err);
        if (!res) return -1;
        if (PQntuples(res) == 1) {
            int rc = unwrap_row(kr, tenant_id, res, 0, out, err);
            const char *op = PQgetvalue(res, 0, 1);
            if (rc == 0 && strcmp(op, whet_keyring_current(kr)) != 0)
                rc = store_wrapped(conn, kr, tenant_id, out, op, err);
            PQclear(res);
            return rc;
        }
        PQclear(res);
        if (attempt) break;
        struct whet_data_key dk = {.id = 1};
        whet_random_bytes(dk.key, sizeof dk.key);
        int rc = store_wrapped(conn, kr, tenant_id, &dk, NULL, err);
        OPENSSL_cleanse(&dk, sizeof dk);
        if (rc != 0) return whet_err_prefix(err, "tenant %s: storing a new data key", tenant_id);
    }
    return whet_errf(err, "tenant %s: no data key after creating one", tenant_id);
}

int whet_data_keys_rewrap(PGconn *conn, const struct whet_keyring *kr, int *count, struct whet_err *err) {
    *count = 0;
    const char *params[] = {whet_keyring_current(kr)};
    PGresult *res = whet_pg_query(conn, "SELECT key_id, operator_key_id, wrapped, tenant_id FROM tenant_data_keys"
                                        " WHERE operator_key_id <> $1 ORDER BY tenant_id, key_id", 1, params, err);
    if (!res) return -1;
    int rc = 0;
    for (int i = 0; i < PQntuples(res) && rc == 0; i++) {
        struct whet_data_key dk;
        const char *tenant_id = PQgetvalue(res, i, 3);
        rc = unwrap_row(kr, tenant_id, res, i, &dk, err);
        if (rc == 0) rc = store_wrapped(conn, kr, tenant_id, &dk, PQgetvalue(res, i, 1), err);
        OPENSSL_cleanse(&dk, sizeof dk);
        if (rc == 0) (*count)++;
    }
    PQclear(res);
    return rc;
}
