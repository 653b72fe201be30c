/* put_dir.c - a test helper that stores a local directory as a checkpoint the way an executor does
 * (objstore_put_dir: every file, then MANIFEST.json last) in the store $WHET_OBJECT_STORE names, so
 * the download tests serve checkpoints written by the real code on file:// and s3:// alike.
 *
 *   api_put_dir PREFIX DIR */
#include <stdio.h>

#include "objstore.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s PREFIX DIR  (store from $WHET_OBJECT_STORE)\n", argv[0]);
        return 2;
    }
    struct objstore *store = NULL;
    struct whet_err err;
    if (objstore_open_env(&store, &err) != 0 || objstore_put_dir(store, argv[1], argv[2], &err) != 0) {
        fprintf(stderr, "api_put_dir: %s\n", err.msg);
        objstore_close(store);
        return 1;
    }
    objstore_close(store);
    return 0;
}
