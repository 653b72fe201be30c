/* serve_store.h - adapters the model worker takes from the object store: a checkpoint prefix (what the
 * gateway names for a tenant's fine-tuned model) becomes a local directory under the worker's cache dir,
 * fetched once through objstore_get_dir (every file checked against the manifest written last), then
 * loaded by the engine like any adapter dir. Blocking: the worker calls it from its fetch thread.
 *
 * Encryption at rest (README): a tenant's objects are sealed with its data key. The gateway hands the
 * worker that key wrapped under the operator key (header x-whet-data-key, whet_data_key_wrap_text), never
 * in the clear; the worker unwraps it with its own copy of the operator keyring ($WHET_DATA_KEY_FILE,
 * read at open) and reads and writes that tenant's objects through a sealed view (objstore_encrypted),
 * one per tenant and data key, kept while the store is open. A serve_store is used by one thread at a
 * time (the fetch thread; the sessions' engine thread has its own). */
#ifndef WHET_SERVE_STORE_H
#define WHET_SERVE_STORE_H

#include "util.h"

struct serve_store;
struct objstore;

/* Opens the object store at url (file:// or s3://, as objstore_open) with cache_dir (created), and the
 * operator keyring of $WHET_DATA_KEY_FILE when it is set (a keyring that does not load fails the open). */
int serve_store_open(struct serve_store **out, const char *url, const char *cache_dir, struct whet_err *err);
void serve_store_close(struct serve_store *s);
/* The store as the tenant of `data_key` (a wrapped key's text, NULL for plain objects) reads and writes
 * it: the sealed view, or the store itself. NULL with err when the key does not unwrap, or this worker
 * has no keyring to unwrap it with. The view belongs to s. */
struct objstore *serve_store_objects(struct serve_store *s, const char *data_key, struct whet_err *err);
/* The local dir of the adapter at `prefix` (a fresh string), fetched now through
 * serve_store_objects(s, data_key) unless an earlier call did; NULL with err when there is no complete
 * checkpoint there, it cannot be read, or the data key is unusable. */
char *serve_store_fetch(struct serve_store *s, const char *prefix, const char *data_key, struct whet_err *err);

#endif
