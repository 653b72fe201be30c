/* object_stream.h - answering with an object of the gateway's store (files_store()) streamed a chunk
 * at a time (http_reply_stream), for downloads too large to hold in memory: a file's content, a
 * checkpoint's weights. */
#ifndef WHET_GATEWAY_OBJECT_STREAM_H
#define WHET_GATEWAY_OBJECT_STREAM_H

#include <stdint.h>

#include "http.h"

/* Answers 200 with the object at `key`. `size` and `sha256` (NULL or "" when unknown) are what the
 * caller's records say the object holds: the body is announced as `size` bytes before the object is
 * opened (on the worker that reads the first chunk), and an object that is missing or holds another
 * size or checksum is a 500 before any byte, or a closed connection when it changes mid-way (the
 * checksum is checked before the last chunk goes out). `what` names the object in log lines.
 * A request with one `Range` gets 206 and those bytes (unchecked: a part has no checksum), one that
 * cannot be satisfied 416; every full answer says `accept-ranges: bytes`. */
void object_stream_reply(struct gw_req *r, const char *key, uint64_t size, const char *sha256,
                         const char *content_type, const char *what);

#endif
