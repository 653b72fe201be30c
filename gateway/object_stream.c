/* object_stream.c - an object of the store as a streamed reply (see object_stream.h): the source that
 * http_reply_stream reads from, over objstore's sequential verified reader. */
#include "object_stream.h"

#include <stdio.h>
#include <stdlib.h>

#include "files_common.h"

/* What http_reply_stream's reads need; touched only by the worker reading the current chunk, and
 * freed on the loop when the stream ends. */
struct object_source {
    char *key;
    uint64_t size;
    char sha256[65];
    struct objstore_reader *reader; /* opened by the first read */
};

static int object_read(void *source, void *buf, size_t cap, size_t *len, struct whet_err *err) {
    struct object_source *o = source;
    if (!o->reader) {
        struct objstore *store = files_store(err);
        if (!store) return -1;
        struct objstore_info info;
        int rc = objstore_reader_open(store, o->key, o->sha256, &o->reader, &info, err);
        if (rc == OBJSTORE_NOT_FOUND) return whet_errf(err, "object \"%s\" is missing from the store", o->key);
        if (rc != 0) return -1;
        if (info.size != o->size)
            return whet_errf(err, "object \"%s\" holds %llu bytes where %llu were recorded", o->key,
                             (unsigned long long)info.size, (unsigned long long)o->size);
    }
    return objstore_reader_next(o->reader, buf, cap, len, err);
}

static void object_release(void *source) {
    struct object_source *o = source;
    objstore_reader_close(o->reader);
    free(o->key);
    free(o);
}

void object_stream_reply(struct gw_req *r, const char *key, uint64_t size, const char *sha256,
                         const char *content_type, const char *what) {
    struct object_source *o = xcalloc(1, sizeof *o);
    o->key = xstrdup(key);
    o->size = size;
    snprintf(o->sha256, sizeof o->sha256, "%s", sha256 ? sha256 : "");
    struct http_stream s = {.content_type = content_type, .size = size, .read = object_read,
                            .release = object_release, .source = o, .what = what};
    http_reply_stream(r, 200, &s);
}
