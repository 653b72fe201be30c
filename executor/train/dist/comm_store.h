/* comm_store.h - the rendezvous of a distributed training run: a small key-value store that rank 0
 * serves over TCP while the ranks find each other. The collective library's own bootstrap goes through
 * it (Gloo's full mesh exchanges each rank's listening address; NCCL's unique id would be one key).
 *
 * Every client first says its rank and the gang's generation (how many times the gang was started);
 * the server refuses another generation, so a rank left over from an earlier start of the gang can
 * never join the current one. `get` waits for the key: a rank asks for a peer's address before the
 * peer has published it. Frames in both directions: op (1 byte), key length and value length (4 bytes
 * each, big-endian), key, value. */
#ifndef WHET_COMM_STORE_H
#define WHET_COMM_STORE_H

#include <stddef.h>

#include "util.h"

struct comm_store_server;
/* Listens on HOST:PORT (port 0: the kernel picks one) and serves from a thread of its own; the bound
 * address goes to bound[bound_len], for the other ranks. */
int comm_store_serve(struct comm_store_server **out, const char *hostport, unsigned generation, char *bound,
                     size_t bound_len, struct whet_err *err);
void comm_store_server_stop(struct comm_store_server *s);

struct comm_store;
/* Connects to the server at HOST:PORT (retried until deadline, a whet_now_mono time: rank 0 may not be
 * listening yet) and introduces this rank. */
int comm_store_connect(struct comm_store **out, const char *hostport, unsigned generation, int rank, double deadline,
                       struct whet_err *err);
int comm_store_set(struct comm_store *s, const char *key, const void *value, size_t len, struct whet_err *err);
/* Waits until `key` is set (or the deadline passes), then returns a copy of its value in *value
 * (malloc'd; the caller frees it) and its length. */
int comm_store_get(struct comm_store *s, const char *key, void **value, size_t *len, double deadline,
                   struct whet_err *err);
void comm_store_close(struct comm_store *s);

#endif
