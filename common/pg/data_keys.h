/* data_keys.h - tenants' data keys in PostgreSQL (migration 0019, table tenant_data_keys), wrapped under
 * the operator keyring of datakey.h. Only the control plane reads them (the scheduler, the gateway,
 * `whet migrate`), through the database owner's connection: the application role has no grant on the
 * table. Blocking, like the rest of pg.h. */
#ifndef WHET_DATA_KEYS_H
#define WHET_DATA_KEYS_H

#include <libpq-fe.h>

#include "datakey.h"

/* The tenant's current data key: made and stored, wrapped under the current operator key, on first
 * use (two processes racing keep one); unwrapped from its row otherwise. A row wrapped under an older
 * operator key is rewrapped under the current one on the way, so a rotation completes as tenants are
 * served. */
int whet_tenant_data_key(PGconn *conn, const struct whet_keyring *kr, const char *tenant_id, struct whet_data_key *out,
                         struct whet_err *err);
/* Rewraps every data key that is not wrapped under the current operator key; `*count` says how many
 * were. A key the keyring cannot unwrap stops it with that key's error. */
int whet_data_keys_rewrap(PGconn *conn, const struct whet_keyring *kr, int *count, struct whet_err *err);

#endif
