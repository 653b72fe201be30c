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

#include "crypto.h"
#include "objstore.h"

struct serve_store {
    struct objstore *store;
    char *cache_dir;
};

int serve_store_open(struct serve_store **out, const char *url, const char *cache_dir, struct whet_err *err) {
    *out = NULL;
    struct objstore *store;
    if (whet_mkdir_p(cache_dir, err)) return whet_err_prefix(err, "--cache-dir");
    if (objstore_open(url, &store, err)) return whet_err_prefix(err, "--object-store");
    struct serve_store *s = xcalloc(1, sizeof *s);
    s->store = store;
    s->cache_dir = xstrdup(cache_dir);
    *out = s;
    return 0;
}

void serve_store_close(struct serve_store *s) {
    if (!s) return;
    objstore_close(s->store);
    free(s->cache_dir);
    free(s);
}

char *serve_store_fetch(struct serve_store *s, const char *prefix, struct whet_err *err) {
    char hash[65];
    whet_sha256_hex(prefix, strlen(prefix), hash);
    char *dir = xasprintf("%s/%s", s->cache_dir, hash);
    struct stat st;
    if (stat(dir, &st) == 0) return dir;
    char *tmp = xasprintf("%s/.fetch-%s-%d", s->cache_dir, hash, (int)getpid());
    whet_rm_rf(tmp);
    int rc = objstore_get_dir(s->store, prefix, tmp, err);
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
