/* datakey.h - the keys of encryption at rest: per-tenant data keys that seal objects in the store
 * (objstore_encrypted), and the operator's keys that wrap them for storage in PostgreSQL.
 *
 * The operator keyring is a file named by $WHET_DATA_KEY_FILE, one key a line:
 *     ID HEX          ID: 1-32 of [A-Za-z0-9_.-]; HEX: 64 hex digits (32 random bytes)
 * ('#' starts a comment). The LAST line is the current key: it wraps new data keys and rewraps old
 * ones as they are used. The others only unwrap, so rotating is: append a new line, restart the
 * control plane (or run `whet migrate`, which rewraps every data key), then drop the old line once no
 * data key is wrapped under it (README: encryption at rest). Without the variable, encryption at rest
 * is off and objects are stored as they are.
 *
 * A wrapped data key is AES-256-GCM of the 32 key bytes under an operator key, with the tenant id
 * and the data key's id as additional data (a wrapped key moved to another tenant's row does not
 * unwrap): nonce (12) | ciphertext (32) | tag (16). Pure: no I/O but reading the keyring file. */
#ifndef WHET_DATAKEY_H
#define WHET_DATAKEY_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define WHET_DATA_KEY_BYTES 32
#define WHET_WRAPPED_KEY_BYTES (12 + WHET_DATA_KEY_BYTES + 16)
#define WHET_OPERATOR_KEY_ID_MAX 32

/* A tenant's data key and its id (its generation: recorded in every object it seals). */
struct whet_data_key {
    uint32_t id;
    uint8_t key[WHET_DATA_KEY_BYTES];
};

struct whet_keyring;

/* Reads the operator keyring at `path` (format above). */
int whet_keyring_load(const char *path, struct whet_keyring **out, struct whet_err *err);
/* The keyring of $WHET_DATA_KEY_FILE; *out NULL (and 0) when the variable is unset or empty:
 * encryption at rest is off. */
int whet_keyring_from_env(struct whet_keyring **out, struct whet_err *err);
/* Frees and wipes the keyring; NULL allowed. */
void whet_keyring_free(struct whet_keyring *kr);
/* The id of the current (last) operator key. */
const char *whet_keyring_current(const struct whet_keyring *kr);

/* Wraps `dk` for `tenant_id` under the current operator key. */
void whet_data_key_wrap(const struct whet_keyring *kr, const char *tenant_id, const struct whet_data_key *dk,
                        uint8_t out[WHET_WRAPPED_KEY_BYTES]);
/* Unwraps a data key wrapped under the operator key `operator_key_id`; fails when the keyring no
 * longer has that key, or the wrapped bytes were not made for this tenant and key id. */
int whet_data_key_unwrap(const struct whet_keyring *kr, const char *operator_key_id, const char *tenant_id,
                         uint32_t key_id, const uint8_t *wrapped, size_t len, struct whet_data_key *out,
                         struct whet_err *err);

/* A data key wrapped under the current operator key as one line of text, for a process that holds the
 * same keyring but not the database (a model worker: the gateway's header x-whet-data-key):
 *     TENANT KEY_ID OPERATOR_KEY_ID HEX        HEX: the wrapped bytes (WHET_WRAPPED_KEY_BYTES)
 * Useless without the operator key, and bound to the tenant and key id like a stored wrapped key.
 * Returns a fresh string. */
char *whet_data_key_wrap_text(const struct whet_keyring *kr, const char *tenant_id, const struct whet_data_key *dk);
/* Its inverse: the data key, and the tenant it is for (a NUL-terminated id into tenant_id, of
 * tenant_len bytes at most); fails saying which part is wrong, or why it does not unwrap. */
int whet_data_key_unwrap_text(const struct whet_keyring *kr, const char *text, char *tenant_id, size_t tenant_len,
                              struct whet_data_key *out, struct whet_err *err);

/* The data key as 64 hex digits + NUL (for a job manifest), and back. */
void whet_data_key_hex(const struct whet_data_key *dk, char out[2 * WHET_DATA_KEY_BYTES + 1]);
int whet_data_key_from_hex(uint32_t id, const char *hex, struct whet_data_key *out, struct whet_err *err);

#endif
