/* uploads.h - the Uploads resource, for files too large for one request (OpenAI's Uploads API):
 *   POST /v1/uploads                    create {filename, purpose, bytes, mime_type}: a pending upload
 *   POST /v1/uploads/{id}/parts         add a part (multipart field `data`, at most 64 MiB)
 *   POST /v1/uploads/{id}/complete      {part_ids, md5?}: assemble the parts in that order, check them
 *                                       (size, MD5, the JSONL rules for fine-tune), store the file and
 *                                       create its row; the answer embeds the file object
 *   POST /v1/uploads/{id}/cancel        no more parts; the parts' objects are removed
 *
 * Parts live in the object store under uploads/<tenant>/<upload>/<part>; completing streams them
 * through the validator into a temporary file on a worker thread, so an upload of gigabytes is never
 * held in memory, and stores the result as files/<tenant>/<file>. An upload expires an hour after
 * it was created (or after `expires_after.seconds`). */
#ifndef WHET_GATEWAY_UPLOADS_H
#define WHET_GATEWAY_UPLOADS_H

struct http_router;

void uploads_routes(struct http_router *rt);

#endif
