/* serve_store.c - adapters fetched from the object store into the worker's cache dir (see serve_store.h).
 *
 * A prefix's dir is CACHE/<sha256 of the prefix>: fetched into a temporary sibling, then renamed into
 * place, so a dir that exists is whole (a worker killed mid-fetch leaves only a temporary to sweep). */
#include "serve_store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "crypto.h"
#include "datakey.h"
#include "objstore.h"

/* A tenant's sealed view of the store, for one of its data keys. */
struct sealed {
    char tenant_id[128];
    uint32_t key_id;
    struct objstore *view;
    struct sealed *next;
};

struct serve_store {
    struct objstore *store;
    char *cache_dir;
    struct whet_keyring *keyring; /* NULL: this worker cannot open sealed objects */
    struct sealed *sealed;
};

int serve_store_open(struct serve_store **out, const char *url, const char *cache_dir, struct whet_err *err) {
    *out = NULL;
    struct objstore *store;
    if (whet_mkdir_p(cache_dir, err)) return whet_err_prefix(err, "--cache-dir");
    struct whet_keyring *keyring;
    if (whet_keyring_from_env(&keyring, err)) return -1;
    if (objstore_open(url, &store, err)) {
        whet_keyring_free(keyring);
        return whet_err_prefix(err, "--object-store");
    }
    struct serve_store *s = xcalloc(1, sizeof *s);
    s->store = store;
    s->keyring = keyring;
    s->cache_dir = xstrdup(cache_dir);
    *out = s;
    return 0;
}

void serve_store_close(struct serve_store *s) {
    if (!s) return;
    for (struct sealed *v = s->sealed, *next; v; v = next) {
        next = v->next;
        objstore_close(v->view);
        free(v);
    }
    whet_keyring_free(s->keyring);
    objstore_close(s->store);
    free(s->cache_dir);
    free(s);
}

struct objstore *serve_store_objects(struct serve_store *s, const char *data_key, struct whet_err *err) {
    if (!data_key) return s->store;
    if (!s->keyring) {
        whet_errf(err, "the tenant's objects are sealed (encryption at rest) and this model worker has no operator "
                       "keyring to open them: start `whet serve` with WHET_DATA_KEY_FILE, the gateway's keyring");
        return NULL;
    }
    /* Unwrapped on every call (one AES-GCM open of 32 bytes): a cached view is only reused for a key the
     * keyring has just vouched for. */
    char tenant_id[sizeof s->sealed->tenant_id];
    struct whet_data_key dk;
    if (whet_data_key_unwrap_text(s->keyring, data_key, tenant_id, sizeof tenant_id, &dk, err)) {
        whet_err_prefix(err, "x-whet-data-key");
        return NULL;
    }
    struct sealed *v = s->sealed;
    while (v && (v->key_id != dk.id || strcmp(v->tenant_id, tenant_id))) v = v->next;
    if (!v) {
        v = xcalloc(1, sizeof *v);
        memcpy(v->tenant_id, tenant_id, sizeof tenant_id);
        v->key_id = dk.id;
        v->view = objstore_encrypted(s->store, &dk);
        v->next = s->sealed;
        s->sealed = v;
    }
    OPENSSL_cleanse(&dk, sizeof dk);
    return v->view;
}

char *serve_store_fetch(struct serve_store *s, const char *prefix, const char *data_key, struct whet_err *err) {
    struct objstore *store = serve_store_objects(s, data_key, err);
    if (!store) return NULL;
    char hash[65];
    whet_sha256_hex(prefix, strlen(prefix), hash);
    char *dir = xasprintf("%s/%s", s->cache_dir, hash);
    struct stat st;
    if (stat(dir, &st) == 0) return dir;
    char *tmp = xasprintf("%s/.fetch-%s-%d", s->cache_dir, hash, (int)getpid());
    whet_rm_rf(tmp);
    int rc = objstore_get_dir(store, prefix, tmp, err);
    if (rc == OBJSTORE_NOT_FOUND) whet_errf(err, "no complete adapter at %s in the object store", prefix);
    if (!rc && rename(tmp, dir) && errno != EEXIST && errno != ENOTEMPTY)
        rc = whet_errf(err, "%s: cannot move the fetched adapter into place: %s", dir, strerror(errno));
    whet_rm_rf(tmp);
    free(tmp);
    if (rc) {
        free(dir);
        return NULL;
    }
    return dir;
}
