/* rpc.h - unary gRPC over the gRPC C core, with protobuf-c messages.
 *
 * whet's scheduler <-> executor protocol (proto/whet.proto) is unary calls only, initiated by the
 * executor. This file hides the C core's batches and completion queues behind two small interfaces:
 *
 *   client:  rpc_call(client, "/whet.v1.Scheduler/Heartbeat", &req.base, &whet__v1__heartbeat_response__descriptor,
 *                     &resp, timeout_ms, &err)   — deadline on every call, retries with backoff and jitter
 *                     on UNAVAILABLE and DEADLINE_EXCEEDED, the shared token sent as `authorization`;
 *            or many calls in flight on one queue (rpc_start, collected with rpc_next), one attempt each.
 *   server:  a table of {path, request descriptor, handler[, threads]}; handlers run on the server's own
 *            threads (shared, or a method's own), may block (they talk to PostgreSQL), and return a gRPC
 *            status, or leave the reply to another thread (rpc_defer, rpc_reply_send).
 *
 * TLS: when WHET_GRPC_TLS_CERT and WHET_GRPC_TLS_KEY name a PEM certificate and its private key, the
 * server accepts only TLS (one of the two without the other is an error); when WHET_GRPC_TLS_CA names
 * a PEM CA certificate, the client uses TLS and verifies the server's certificate against that CA and
 * the host name in its target. Unset, both sides are plaintext (loopback and private networks). Bad
 * PEM files fail rpc_server_start/rpc_client_open with an error naming the variable; a transport
 * mismatch (TLS against plaintext, a certificate from another CA) fails calls as UNAVAILABLE with a
 * hint saying which transport the client used. */
#ifndef WHET_RPC_H
#define WHET_RPC_H

#include <protobuf-c/protobuf-c.h>

#include "util.h"

/* gRPC status codes the code uses (grpc_status_code values). */
enum {
    RPC_OK = 0,
    RPC_CANCELLED = 1,
    RPC_INVALID_ARGUMENT = 3,
    RPC_DEADLINE_EXCEEDED = 4,
    RPC_NOT_FOUND = 5,
    RPC_FAILED_PRECONDITION = 9,
    RPC_INTERNAL = 13,
    RPC_UNAVAILABLE = 14,
    RPC_UNAUTHENTICATED = 16,
};

/* ---- client ---- */

struct rpc_client;

/* `target` is HOST:PORT; `token` is sent with every call. */
int rpc_client_open(const char *target, const char *token, struct rpc_client **out, struct whet_err *err);
void rpc_client_close(struct rpc_client *client);

/* Calls `method` with `req`, decoding the reply with `resp_desc` into *resp (free it with
 * protobuf_c_message_free_unpacked). Retries transient failures (UNAVAILABLE, DEADLINE_EXCEEDED) with
 * exponential backoff and jitter until `budget_ms` has passed; each attempt has `timeout_ms`.
 * Returns the final gRPC status (RPC_OK on success) and describes failures in err. */
int rpc_call(struct rpc_client *client, const char *method, const ProtobufCMessage *req,
             const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, int timeout_ms, int budget_ms,
             struct whet_err *err);

/* Many calls in flight from one thread, each one attempt (no retries), collected as they end: a process
 * speaking for many nodes at once (tests/bench/scale/fleet.c) keeps them in flight without a thread
 * each, over as many clients (connections) as it likes. A queue belongs to one thread; `method` must
 * outlive its call (a string literal). */
struct rpc_queue;

struct rpc_queue *rpc_queue_open(void);
/* Starts a call on client whose end rpc_next returns with `tag`; RPC_OK, or RPC_INTERNAL with err when
 * it could not be started. */
int rpc_start(struct rpc_queue *q, struct rpc_client *client, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *resp_desc, int timeout_ms, void *tag, struct whet_err *err);
/* Waits up to wait_ms for a call to end: -1 when none did, else its gRPC status, its tag in *tag and,
 * on RPC_OK, its reply in *resp (free it with protobuf_c_message_free_unpacked). */
int rpc_next(struct rpc_queue *q, int wait_ms, void **tag, ProtobufCMessage **resp, struct whet_err *err);
/* Cancels every call in flight: each still ends through rpc_next, as RPC_CANCELLED. */
void rpc_queue_cancel(struct rpc_queue *q);
/* Cancels the calls still in flight, waits for their ends (their tags are dropped: a caller whose tags
 * own memory cancels and collects them first) and frees q. */
void rpc_queue_close(struct rpc_queue *q);

/* ---- server ---- */

/* A handler fills *resp (allocated with malloc/protobuf-c; the server packs then frees it with
 * `free_resp`) and returns RPC_OK, or returns another status with a message in err. */
typedef int (*rpc_handler)(void *ctx, const ProtobufCMessage *req, ProtobufCMessage **resp, struct whet_err *err);

/* A reply left for later: a handler that would wait (on a batch another thread writes) calls rpc_defer and
 * returns at once, its status and *resp ignored; its thread takes the next call. The request stays valid
 * until rpc_reply_send, which any thread calls once: it sends resp (freed with the method's free_resp) or
 * the status with err's message, and frees the request. rpc_server_stop waits for deferred calls too. */
struct rpc_reply;
/* The running handler's call, now deferred; NULL when the handler was not called by a server (tests call
 * handlers directly): it answers as usual. */
struct rpc_reply *rpc_defer(void);
void rpc_reply_send(struct rpc_reply *reply, int status, ProtobufCMessage *resp, const struct whet_err *err);
/* 1 when a deferred call's deadline has passed: its client has stopped waiting, and its work would be lost
 * with its answer. Answered RPC_DEADLINE_EXCEEDED instead, it is counted in rpc_server_calls_expired. */
int rpc_reply_expired(const struct rpc_reply *reply);

struct rpc_method {
    const char *path;                            /* "/whet.v1.Scheduler/Heartbeat" */
    const ProtobufCMessageDescriptor *request;   /* to unpack the request */
    rpc_handler handler;
    void (*free_resp)(ProtobufCMessage *resp);   /* frees what the handler built */
    int threads; /* > 0: threads of the method's own, which no other method's calls can keep busy */
};

struct rpc_server;

/* Binds `addr` (HOST:PORT; port 0 picks one, see rpc_server_port) and starts `threads` threads shared by the
 * methods without threads of their own, and each other method's threads.
 * Calls without `authorization: <token>` are refused with UNAUTHENTICATED. `methods` and `ctx` must
 * outlive the server. */
int rpc_server_start(const char *addr, const char *token, const struct rpc_method *methods, int nmethods, void *ctx,
                     int threads, struct rpc_server **out, struct whet_err *err);
int rpc_server_port(const struct rpc_server *server);
/* Stops accepting, lets calls in flight finish, joins the threads and frees everything. */
void rpc_server_stop(struct rpc_server *server);
/* Calls that every server of this process answered DEADLINE_EXCEEDED without running their handler: they
 * waited for a free thread past their deadline; and deferred calls so answered (a counter for metrics). */
unsigned long rpc_server_calls_expired(void);

#endif
