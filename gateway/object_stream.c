/* object_stream.c - an object of the store as a streamed reply (see object_stream.h): the source that
 * http_reply_stream reads from, over objstore's sequential verified reader. */
#include "object_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files_common.h"

/* What http_reply_stream's reads need; touched only by the worker reading the current chunk, and
 * freed on the loop when the stream ends. */
struct object_source {
    char *key;
    char *tenant_id;   /* whose data it is: the store view it is read through */
    uint64_t size;     /* the whole object's, as recorded */
    uint64_t offset, length; /* what is sent: a Range, or all of it */
    char sha256[65];
    struct objstore_reader *reader; /* opened by the first read */
};

static int object_read(void *source, void *buf, size_t cap, size_t *len, struct whet_err *err) {
    struct object_source *o = source;
    if (!o->reader) {
        struct objstore *store = files_tenant_store(o->tenant_id, err);
        if (!store) return -1;
        struct objstore_info info;
        int rc = objstore_reader_open(store, o->key, o->sha256, &o->reader, &info, err);
        if (rc == OBJSTORE_NOT_FOUND) return whet_errf(err, "object \"%s\" is missing from the store", o->key);
        if (rc != 0) return -1;
        if (info.size != o->size)
            return whet_errf(err, "object \"%s\" holds %llu bytes where %llu were recorded", o->key,
                             (unsigned long long)info.size, (unsigned long long)o->size);
        if (objstore_reader_range(o->reader, o->offset, o->length, err) != 0) return -1;
        /* On S3 one request per chunk costs a round trip and the server's per-request work each time;
         * one streaming request read a chunk ahead saves that (a local file gains nothing from it). */
        if (strncmp(objstore_url(store), "s3://", 5) == 0) objstore_reader_read_ahead(o->reader, HTTP_STREAM_CHUNK);
    }
    return objstore_reader_next(o->reader, buf, cap, len, err);
}

static void object_release(void *source) {
    struct object_source *o = source;
    objstore_reader_close(o->reader);
    free(o->key);
    free(o->tenant_id);
    free(o);
}

void object_stream_reply(struct gw_req *r, const char *key, uint64_t size, const char *sha256,
                         const char *content_type, const char *what) {
    uint64_t offset = 0, length = size;
    int ranged = http_range(r, size, &offset, &length);
    if (ranged < 0) {
        http_add_header(r, "content-range", http_printf(r, "bytes */%llu", (unsigned long long)size));
        http_reply_error(r, 416, NULL, "range_not_satisfiable", "the requested range is not satisfiable: %s has %llu bytes",
                         what, (unsigned long long)size);
        return;
    }
    http_add_header(r, "accept-ranges", "bytes");
    if (ranged)
        http_add_header(r, "content-range",
                        http_printf(r, "bytes %llu-%llu/%llu", (unsigned long long)offset,
                                    (unsigned long long)(offset + length - 1), (unsigned long long)size));
    struct object_source *o = xcalloc(1, sizeof *o);
    o->key = xstrdup(key);
    o->tenant_id = xstrdup(http_tenant_id(r));
    o->size = size;
    o->offset = offset;
    o->length = length;
    snprintf(o->sha256, sizeof o->sha256, "%s", sha256 ? sha256 : "");
    struct http_stream s = {.content_type = content_type, .size = length, .read = object_read,
                            .release = object_release, .source = o, .what = what};
    http_reply_stream(r, ranged ? 206 : 200, &s);
}
