/* serve_store.h - adapters the model worker takes from the object store: a checkpoint prefix (what the
 * gateway names for a tenant's fine-tuned model) becomes a local directory under the worker's cache dir,
 * fetched once through objstore_get_dir (every file checked against the manifest written last), then
 * loaded by the engine like any adapter dir. Blocking: the worker calls it from its fetch thread. */
#ifndef WHET_SERVE_STORE_H
#define WHET_SERVE_STORE_H

#include "util.h"

struct serve_store;

/* Opens the object store at url (file:// or s3://, as objstore_open) with cache_dir (created). */
int serve_store_open(struct serve_store **out, const char *url, const char *cache_dir, struct whet_err *err);
void serve_store_close(struct serve_store *s);
/* The local dir of the adapter at `prefix` (a fresh string), fetched now unless an earlier call did;
 * NULL with err when there is no complete checkpoint there or it cannot be read. */
char *serve_store_fetch(struct serve_store *s, const char *prefix, struct whet_err *err);

#endif
