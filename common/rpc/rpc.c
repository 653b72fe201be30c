/* rpc.c - see rpc.h. Written against gRPC C core 1.51: deadlines are built from gpr_now (the
 * grpc_timeout_* helpers are test-only), a client batch can succeed while the RPC failed (the status
 * says), and a completion queue has no file descriptor, so server threads block on their lane's. */
#include "rpc.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crypto.h"
#include "env.h"
#include "log.h"

#define RPC_MAX_MESSAGE (64 * 1024 * 1024)

static pthread_once_t grpc_once = PTHREAD_ONCE_INIT;
/* gRPC 1.51 drives a client channel's reconnection only while some thread polls for it: between our
 * calls (which fail at once while the channel is in TRANSIENT_FAILURE) that is the backup poller, every
 * 5 s by default. An executor then found a scheduler that came back (a restart, a database failover)
 * up to 5-10 s late, past a 5 s lease, and its jobs were requeued while they ran. Polled every 100 ms,
 * it reconnects within its backoff (at most 2 s, channel_args_get). An operator's setting wins. */
static void rpc_init_library(void) {
    setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100", 0);
    grpc_init();
}

static gpr_timespec deadline_in(int ms) {
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

static grpc_byte_buffer *pack_message(const ProtobufCMessage *msg) {
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = xmalloc(len);
    protobuf_c_message_pack(msg, buf);
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)buf, len);
    free(buf);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

static ProtobufCMessage *unpack_message(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc) {
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb)) return NULL;
    grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    ProtobufCMessage *msg = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
    grpc_slice_unref(all);
    return msg;
}

/* Message size limits both ways, a reconnect backoff short enough that an executor started before its
 * scheduler (or across a failover) gets through within a second or two, and a connection of each client's
 * own (gRPC otherwise shares one among a process's channels to the same target: scale_fleet's clients
 * stand for many executors, each with its own). */
static grpc_channel_args *channel_args_get(void) {
    static grpc_arg args[5];
    static grpc_channel_args channel_args = {5, args};
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = RPC_MAX_MESSAGE;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = RPC_MAX_MESSAGE;
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS;
    args[2].value.integer = 100;
    args[3].type = GRPC_ARG_INTEGER;
    args[3].key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;
    args[3].value.integer = 2000;
    args[4].type = GRPC_ARG_INTEGER;
    args[4].key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
    args[4].value.integer = 1;
    return &channel_args;
}

/* ------------------------------------------------------------------------------------------------
 * TLS material. gRPC only reports bad PEM files as failed handshakes (or a port it cannot add), so
 * they are read and checked with OpenSSL first, for errors that name the variable and the file.
 * ---------------------------------------------------------------------------------------------- */

static int pem_read(const char *path, char **out, struct whet_err *err) {
    return whet_read_file(path, 1 << 20, out, NULL, err) < 0 ? -1 : 0;
}

/* Checks that `pem` (read from `path`) holds a certificate and, when `key_pem` (from `key_path`) is
 * given, that it holds that certificate's private key. */
static int pem_check_certificate(const char *path, const char *pem, const char *key_path, const char *key_pem,
                                 struct whet_err *err) {
    BIO *bio = BIO_new_mem_buf(pem, -1);
    X509 *cert = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    int rc = 0;
    if (!cert) {
        rc = whet_errf(err, "%s: no PEM certificate in the file", path);
    } else if (key_pem) {
        bio = BIO_new_mem_buf(key_pem, -1);
        EVP_PKEY *key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
        BIO_free(bio);
        if (!key)
            rc = whet_errf(err, "WHET_GRPC_TLS_KEY %s: no unencrypted PEM private key in the file", key_path);
        else if (X509_check_private_key(cert, key) != 1)
            rc = whet_errf(err, "WHET_GRPC_TLS_KEY %s is not the private key of WHET_GRPC_TLS_CERT %s", key_path,
                           path);
        EVP_PKEY_free(key);
    }
    X509_free(cert);
    ERR_clear_error();
    return rc;
}

/* Server credentials from WHET_GRPC_TLS_CERT and WHET_GRPC_TLS_KEY (both or neither). */
static int server_credentials(grpc_server_credentials **out, struct whet_err *err) {
    const char *cert_path = whet_env("WHET_GRPC_TLS_CERT", NULL), *key_path = whet_env("WHET_GRPC_TLS_KEY", NULL);
    if (!cert_path && !key_path) {
        *out = grpc_insecure_server_credentials_create();
        return 0;
    }
    if (!cert_path || !key_path)
        return whet_errf(err, "gRPC TLS: %s is set but %s is not (set both for TLS, neither for plaintext)",
                         cert_path ? "WHET_GRPC_TLS_CERT" : "WHET_GRPC_TLS_KEY",
                         cert_path ? "WHET_GRPC_TLS_KEY" : "WHET_GRPC_TLS_CERT");
    char *cert = NULL, *key = NULL;
    int rc = pem_read(cert_path, &cert, err);
    if (rc != 0) whet_err_prefix(err, "WHET_GRPC_TLS_CERT");
    if (rc == 0 && (rc = pem_read(key_path, &key, err)) != 0) whet_err_prefix(err, "WHET_GRPC_TLS_KEY");
    if (rc == 0 && (rc = pem_check_certificate(cert_path, cert, key_path, key, err)) != 0)
        whet_err_prefix(err, "gRPC TLS");
    if (rc == 0) {
        /* Executors authenticate with the shared token, not with client certificates. */
        grpc_ssl_pem_key_cert_pair pair = {key, cert};
        *out = grpc_ssl_server_credentials_create_ex(NULL, &pair, 1, GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE, NULL);
    }
    if (key) OPENSSL_cleanse(key, strlen(key));
    free(cert);
    free(key);
    return rc;
}

/* ------------------------------------------------------------------------------------------------
 * Client
 * ---------------------------------------------------------------------------------------------- */

struct rpc_client {
    grpc_channel *channel;
    char *token;
    char *tls_ca; /* the CA file the server is verified against; NULL for a plaintext channel */
};

int rpc_client_open(const char *target, const char *token, struct rpc_client **out, struct whet_err *err) {
    pthread_once(&grpc_once, rpc_init_library);
    grpc_channel_credentials *creds;
    const char *ca_path = whet_env("WHET_GRPC_TLS_CA", NULL);
    if (ca_path) {
        /* Checked here because gRPC would only say "handshake failed" on every call. */
        char *ca = NULL;
        if (pem_read(ca_path, &ca, err) != 0 || pem_check_certificate(ca_path, ca, NULL, NULL, err) != 0) {
            free(ca);
            return whet_err_prefix(err, "WHET_GRPC_TLS_CA");
        }
        creds = grpc_ssl_credentials_create(ca, NULL, NULL, NULL);
        free(ca);
    } else {
        creds = grpc_insecure_credentials_create();
    }
    grpc_channel *channel = grpc_channel_create(target, creds, channel_args_get());
    grpc_channel_credentials_release(creds);
    if (!channel) return whet_errf(err, "cannot create a gRPC channel to %s", target);
    struct rpc_client *c = xcalloc(1, sizeof *c);
    c->channel = channel;
    c->token = xstrdup(token ? token : "");
    c->tls_ca = ca_path ? xstrdup(ca_path) : NULL;
    *out = c;
    return 0;
}

void rpc_client_close(struct rpc_client *client) {
    if (!client) return;
    grpc_channel_destroy(client->channel);
    free(client->token);
    free(client->tls_ca);
    free(client);
}

/* A call in flight: what its batch writes into, freed by call_end. */
struct rpc_pending {
    grpc_call *call;
    const char *method;
    const ProtobufCMessageDescriptor *resp_desc;
    void *tag;
    grpc_slice token;
    grpc_byte_buffer *send_bb, *recv_bb;
    grpc_metadata_array initial_md, trailing_md;
    grpc_status_code status;
    grpc_slice details;
    struct rpc_pending *prev, *next; /* a queue's calls in flight (rpc_queue_close cancels them) */
};

static void pending_free(struct rpc_pending *p) {
    grpc_slice_unref(p->token);
    grpc_slice_unref(p->details);
    grpc_metadata_array_destroy(&p->initial_md);
    grpc_metadata_array_destroy(&p->trailing_md);
    grpc_byte_buffer_destroy(p->send_bb);
    if (p->recv_bb) grpc_byte_buffer_destroy(p->recv_bb);
    grpc_call_unref(p->call);
    free(p);
}

/* Starts one attempt on `cq`, its completion tagged with the returned record; NULL (err set) when the
 * call could not be started. */
static struct rpc_pending *call_begin(struct rpc_client *client, grpc_completion_queue *cq, const char *method,
                                      const ProtobufCMessage *req, const ProtobufCMessageDescriptor *resp_desc,
                                      int timeout_ms, struct whet_err *err) {
    struct rpc_pending *p = xcalloc(1, sizeof *p);
    p->method = method;
    p->resp_desc = resp_desc;
    p->status = GRPC_STATUS_UNKNOWN;
    p->details = grpc_empty_slice();
    p->token = grpc_slice_from_copied_string(client->token);
    grpc_metadata_array_init(&p->initial_md);
    grpc_metadata_array_init(&p->trailing_md);
    p->call = grpc_channel_create_call(client->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                       grpc_slice_from_static_string(method), NULL, deadline_in(timeout_ms), NULL);
    p->send_bb = pack_message(req);
    grpc_metadata md = {.key = grpc_slice_from_static_string("authorization"), .value = p->token};

    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = p->send_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &p->initial_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &p->recv_bb;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &p->trailing_md;
    ops[5].data.recv_status_on_client.status = &p->status;
    ops[5].data.recv_status_on_client.status_details = &p->details;
    if (grpc_call_start_batch(p->call, ops, 6, p, NULL) != GRPC_CALL_OK) {
        whet_errf(err, "%s: could not start the call", method);
        pending_free(p);
        return NULL;
    }
    return p;
}

/* The attempt's gRPC status once its batch completed, with *resp decoded on RPC_OK; frees p. */
static int call_end(struct rpc_pending *p, ProtobufCMessage **resp, struct whet_err *err) {
    int rc;
    if (p->status != GRPC_STATUS_OK) {
        char *d = grpc_slice_to_c_string(p->details);
        whet_errf(err, "%s: status %d: %s", p->method, (int)p->status, d);
        gpr_free(d);
        rc = (int)p->status;
    } else if (!p->recv_bb || !(*resp = unpack_message(p->recv_bb, p->resp_desc))) {
        whet_errf(err, "%s: the reply is not a %s", p->method, p->resp_desc->name);
        rc = RPC_INTERNAL;
    } else {
        rc = RPC_OK;
    }
    pending_free(p);
    return rc;
}

/* One attempt, waited for on a queue of its own; returns the gRPC status. */
static int call_once(struct rpc_client *client, const char *method, const ProtobufCMessage *req,
                     const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, int timeout_ms,
                     struct whet_err *err) {
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    struct rpc_pending *p = call_begin(client, cq, method, req, resp_desc, timeout_ms, err);
    int rc = RPC_INTERNAL;
    if (p) {
        grpc_completion_queue_pluck(cq, p, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        rc = call_end(p, resp, err);
    }
    grpc_completion_queue_shutdown(cq);
    grpc_completion_queue_destroy(cq);
    return rc;
}

/* gRPC reports a TLS mismatch as an unreachable server ("failed to connect to all addresses"), the
 * same as a server that is down; the hint says which transport the client used and what to check. */
static void add_transport_hint(const struct rpc_client *client, struct whet_err *err) {
    char hint[WHET_ERR_MAX / 2], grpc_message[WHET_ERR_MAX];
    if (client->tls_ca)
        snprintf(hint, sizeof hint, "this client uses TLS with WHET_GRPC_TLS_CA %s: is the server down, plaintext, "
                                    "or its certificate not from that CA or not for this host?", client->tls_ca);
    else
        snprintf(hint, sizeof hint, "this client uses plaintext: is the server down, or does it use TLS "
                                    "(then set WHET_GRPC_TLS_CA)?");
    memcpy(grpc_message, err->msg, sizeof grpc_message);
    /* The hint is kept whole; gRPC's own message is what gets cut when both do not fit. */
    int room = (int)(sizeof err->msg - strlen(hint) - 4);
    whet_errf(err, "%.*s (%s)", room > 0 ? room : 0, grpc_message, hint);
}

int rpc_call(struct rpc_client *client, const char *method, const ProtobufCMessage *req,
             const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, int timeout_ms, int budget_ms,
             struct whet_err *err) {
    double give_up = whet_now_mono() + budget_ms / 1000.0;
    int backoff_ms = 50;
    for (;;) {
        int rc = call_once(client, method, req, resp_desc, resp, timeout_ms, err);
        if (rc != RPC_UNAVAILABLE && rc != RPC_DEADLINE_EXCEEDED) return rc;
        /* Full jitter: a fleet of executors that lost the scheduler at once does not come back at once. */
        uint32_t r;
        whet_random_bytes(&r, sizeof r);
        int sleep_ms = (int)(r % (uint32_t)backoff_ms) + 1;
        if (whet_now_mono() + sleep_ms / 1000.0 >= give_up) {
            if (rc == RPC_UNAVAILABLE) add_transport_hint(client, err);
            return rc;
        }
        usleep((useconds_t)sleep_ms * 1000);
        if (backoff_ms < 5000) backoff_ms *= 2;
    }
}

struct rpc_queue {
    grpc_completion_queue *cq;
    struct rpc_pending *calls; /* in flight */
};

struct rpc_queue *rpc_queue_open(void) {
    pthread_once(&grpc_once, rpc_init_library);
    struct rpc_queue *q = xcalloc(1, sizeof *q);
    q->cq = grpc_completion_queue_create_for_next(NULL);
    return q;
}

int rpc_start(struct rpc_queue *q, struct rpc_client *client, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *resp_desc, int timeout_ms, void *tag, struct whet_err *err) {
    struct rpc_pending *p = call_begin(client, q->cq, method, req, resp_desc, timeout_ms, err);
    if (!p) return RPC_INTERNAL;
    p->tag = tag;
    p->next = q->calls;
    if (q->calls) q->calls->prev = p;
    q->calls = p;
    return RPC_OK;
}

int rpc_next(struct rpc_queue *q, int wait_ms, void **tag, ProtobufCMessage **resp, struct whet_err *err) {
    grpc_event ev = grpc_completion_queue_next(q->cq, deadline_in(wait_ms), NULL);
    if (ev.type != GRPC_OP_COMPLETE) return -1;
    struct rpc_pending *p = ev.tag;
    if (p->prev) p->prev->next = p->next;
    else q->calls = p->next;
    if (p->next) p->next->prev = p->prev;
    *tag = p->tag;
    return call_end(p, resp, err);
}

void rpc_queue_cancel(struct rpc_queue *q) {
    for (struct rpc_pending *p = q->calls; p; p = p->next) grpc_call_cancel(p->call, NULL);
}

void rpc_queue_close(struct rpc_queue *q) {
    if (!q) return;
    rpc_queue_cancel(q);
    while (q->calls) {
        void *tag;
        ProtobufCMessage *resp = NULL;
        struct whet_err err;
        if (rpc_next(q, 1000, &tag, &resp, &err) == RPC_OK) protobuf_c_message_free_unpacked(resp, NULL);
    }
    grpc_completion_queue_shutdown(q->cq);
    while (grpc_completion_queue_next(q->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN) {}
    grpc_completion_queue_destroy(q->cq);
    free(q);
}

/* ------------------------------------------------------------------------------------------------
 * Server: lanes, each a completion queue that its threads take events from. Every method is registered
 * with gRPC, which reads a call's request before it hands the call over, so a call is one event: its
 * handler runs and its reply is sent (REQUESTED -> SENT). Each method has as many calls requested as its
 * lane has threads (a call's next is requested when it arrives, so the next call's arrival overlaps this
 * one's handler); calls beyond those wait in gRPC, which drops them when their deadline passes. A queue per
 * thread, as before, matched a call to a busy thread's queue, where it waited behind that thread's handler
 * (a heartbeat behind a FinishJob waiting on a lock) however many threads stood idle. Lane 0 takes every
 * method that has no threads of its own, and unknown paths (answered UNIMPLEMENTED); a method with threads
 * of its own has a lane of its own, so that no pile of other calls delays it: under a scheduler's
 * overload, FinishJob and checkpoint reports queued past their deadline, and the heartbeats queued behind
 * them made nodes miss their lease.
 * ---------------------------------------------------------------------------------------------- */

enum call_stage { STAGE_REQUESTED, STAGE_SENT };

struct rpc_server;

struct server_call {
    enum call_stage stage;
    struct rpc_server *server;
    int method; /* index in rpc_server.methods; -1: an unknown path */
    grpc_call *call;
    grpc_call_details details; /* an unknown path's, for the log */
    gpr_timespec deadline;     /* a known method's */
    grpc_metadata_array request_md;
    grpc_byte_buffer *recv_bb, *send_bb;
    grpc_slice status_details;
    int cancelled;
    int active;            /* counted in rpc_server.active_calls */
    ProtobufCMessage *req; /* a deferred call's request, freed with its reply */
};

/* A completion queue and its threads: lane 0's for the methods without threads of their own, or one
 * method's. */
struct lane {
    struct rpc_server *server;
    grpc_completion_queue *cq;
    int nthreads;
    pthread_t *threads;
};

struct rpc_server {
    grpc_server *server;
    int port;
    char *token;
    const struct rpc_method *methods;
    void **registered; /* grpc_server_register_method's handle, per method */
    int *method_lane;  /* per method */
    int nmethods;
    void *ctx;
    struct lane *lanes; /* lane 0 first */
    int nlanes;
    pthread_mutex_t lock;
    pthread_cond_t shut_down;
    int shutdown_done;
    /* Calls received and not yet finished. The shutdown notification can arrive while a handler still
     * runs for a call whose client went away; the queues must outlive those calls. */
    int active_calls;
};

#define SHUTDOWN_TAG ((void *)&shutdown_tag_storage)
static char shutdown_tag_storage;

static atomic_ulong calls_expired;

unsigned long rpc_server_calls_expired(void) { return atomic_load(&calls_expired); }

/* Asks gRPC for the next call of `method` (-1: of any unknown path) on its lane. */
static void request_next_call(struct rpc_server *srv, int method) {
    struct lane *lane = &srv->lanes[method >= 0 ? srv->method_lane[method] : 0];
    struct server_call *c = xcalloc(1, sizeof *c);
    c->server = srv;
    c->method = method;
    c->stage = STAGE_REQUESTED;
    c->status_details = grpc_empty_slice();
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->request_md);
    grpc_call_error e =
        method >= 0
            ? grpc_server_request_registered_call(srv->server, srv->registered[method], &c->call, &c->deadline,
                                                  &c->request_md, &c->recv_bb, lane->cq, lane->cq, c)
            : grpc_server_request_call(srv->server, &c->call, &c->details, &c->request_md, lane->cq, lane->cq, c);
    if (e != GRPC_CALL_OK) {
        grpc_call_details_destroy(&c->details);
        grpc_metadata_array_destroy(&c->request_md);
        free(c);
    }
}

static void server_call_free(struct server_call *c) {
    if (c->active) {
        pthread_mutex_lock(&c->server->lock);
        if (--c->server->active_calls == 0) pthread_cond_broadcast(&c->server->shut_down);
        pthread_mutex_unlock(&c->server->lock);
    }
    if (c->call) grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->request_md);
    if (c->recv_bb) grpc_byte_buffer_destroy(c->recv_bb);
    if (c->send_bb) grpc_byte_buffer_destroy(c->send_bb);
    grpc_slice_unref(c->status_details);
    free(c);
}

static int token_ok(const struct rpc_server *srv, const grpc_metadata_array *md) {
    size_t want = strlen(srv->token);
    for (size_t i = 0; i < md->count; i++) {
        if (grpc_slice_str_cmp(md->metadata[i].key, "authorization")) continue;
        const grpc_slice v = md->metadata[i].value;
        return GRPC_SLICE_LENGTH(v) == want && whet_ct_equal(GRPC_SLICE_START_PTR(v), srv->token, want);
    }
    return 0;
}

/* The call whose handler runs on this thread, for rpc_defer, and whether the handler deferred it (kept here:
 * once deferred, the call may be answered and freed by another thread before its handler returns). */
static __thread struct server_call *handling;
static __thread int handling_deferred;

struct rpc_reply *rpc_defer(void) {
    if (!handling) return NULL;
    handling_deferred = 1;
    return (struct rpc_reply *)handling;
}

/* Sends the reply with the status (resp, when there is one, freed with its method's free_resp). */
static void send_reply(struct server_call *c, int status, ProtobufCMessage *resp, const char *message) {
    const struct rpc_method *m = c->method >= 0 ? &c->server->methods[c->method] : NULL;
    if (status != RPC_OK && status != RPC_DEADLINE_EXCEEDED) { /* expired calls are counted, not logged */
        char *path = m ? NULL : grpc_slice_to_c_string(c->details.method);
        log_warn("msg=\"rpc failed\" method=%s status=%d error=\"%s\"", m ? m->path : path, status, message);
        gpr_free(path);
    }

    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    int n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (status == RPC_OK && resp) {
        c->send_bb = pack_message(resp);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->send_bb;
    }
    if (resp) m->free_resp(resp);
    c->status_details = grpc_slice_from_copied_string(status == RPC_OK ? "" : message);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)status;
    ops[n++].data.send_status_from_server.status_details = &c->status_details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    c->stage = STAGE_SENT;
    if (grpc_call_start_batch(c->call, ops, (size_t)n, c, NULL) != GRPC_CALL_OK) server_call_free(c);
}

int rpc_reply_expired(const struct rpc_reply *reply) {
    const struct server_call *c = (const struct server_call *)reply;
    return gpr_time_cmp(gpr_now(c->deadline.clock_type), c->deadline) >= 0;
}

void rpc_reply_send(struct rpc_reply *reply, int status, ProtobufCMessage *resp, const struct whet_err *err) {
    struct server_call *c = (struct server_call *)reply;
    if (status == RPC_DEADLINE_EXCEEDED) atomic_fetch_add(&calls_expired, 1);
    protobuf_c_message_free_unpacked(c->req, NULL);
    c->req = NULL;
    send_reply(c, status, resp, status == RPC_OK ? "" : err->msg);
}

/* Runs the handler, unless the client has given up on the call already, and sends the reply with the
 * status, unless the handler deferred it. A call that waited for a free thread past its deadline is answered
 * DEADLINE_EXCEEDED unrun: its client has stopped waiting and will retry, so under overload a handler's time
 * goes to calls someone still waits for, not to a backlog of abandoned ones (each a FinishJob's transaction). */
static void respond(struct server_call *c) {
    struct rpc_server *srv = c->server;
    struct whet_err err = {0};
    int status = RPC_OK;
    ProtobufCMessage *resp = NULL;
    const struct rpc_method *m = c->method >= 0 ? &srv->methods[c->method] : NULL;

    if (!token_ok(srv, &c->request_md)) {
        status = RPC_UNAUTHENTICATED;
        whet_errf(&err, "missing or wrong executor token");
    } else if (!m) {
        status = 12; /* UNIMPLEMENTED */
        whet_errf(&err, "no such method");
    } else if (gpr_time_cmp(gpr_now(c->deadline.clock_type), c->deadline) >= 0) {
        status = RPC_DEADLINE_EXCEEDED;
        atomic_fetch_add(&calls_expired, 1);
    } else if (!c->recv_bb) {
        status = RPC_INVALID_ARGUMENT;
        whet_errf(&err, "no request message");
    } else {
        ProtobufCMessage *req = unpack_message(c->recv_bb, m->request);
        if (!req) {
            status = RPC_INVALID_ARGUMENT;
            whet_errf(&err, "request is not a valid %s", m->request->name);
        } else {
            c->req = req;
            handling = c;
            handling_deferred = 0;
            status = m->handler(srv->ctx, req, &resp, &err);
            handling = NULL;
            /* Deferred: the request is the handler's until rpc_reply_send, which may have run already on
             * another thread: c is not touched again here. */
            if (handling_deferred) return;
            protobuf_c_message_free_unpacked(req, NULL);
            c->req = NULL;
        }
    }
    send_reply(c, status, resp, err.msg);
}

/* Requests the first calls of the lane's methods: as many of each as the lane has threads. */
static void request_first_calls(struct rpc_server *srv, int lane) {
    for (int t = 0; t < srv->lanes[lane].nthreads; t++) {
        if (lane == 0) request_next_call(srv, -1);
        for (int i = 0; i < srv->nmethods; i++)
            if (srv->method_lane[i] == lane) request_next_call(srv, i);
    }
}

static void *server_thread_main(void *arg) {
    struct lane *lane = arg;
    struct rpc_server *srv = lane->server;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(lane->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type != GRPC_OP_COMPLETE) continue;
        if (ev.tag == SHUTDOWN_TAG) {
            pthread_mutex_lock(&srv->lock);
            srv->shutdown_done = 1;
            pthread_cond_broadcast(&srv->shut_down);
            pthread_mutex_unlock(&srv->lock);
            continue;
        }
        struct server_call *c = ev.tag;
        if (c->stage == STAGE_SENT) {
            server_call_free(c);
        } else if (!ev.success) { /* the server is shutting down */
            server_call_free(c);
        } else {
            pthread_mutex_lock(&srv->lock);
            srv->active_calls++;
            pthread_mutex_unlock(&srv->lock);
            c->active = 1;
            request_next_call(srv, c->method);
            respond(c);
        }
    }
    return NULL;
}

/* Shuts down and frees the lanes' queues (the threads joined, if any) and the methods' tables. */
static void lanes_free(struct rpc_server *srv) {
    for (int l = 0; l < srv->nlanes; l++) {
        grpc_completion_queue_shutdown(srv->lanes[l].cq);
        for (int i = 0; i < srv->lanes[l].nthreads; i++)
            if (srv->lanes[l].threads[i]) pthread_join(srv->lanes[l].threads[i], NULL);
        while (grpc_completion_queue_next(srv->lanes[l].cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN) {}
        grpc_completion_queue_destroy(srv->lanes[l].cq);
        free(srv->lanes[l].threads);
    }
    free(srv->lanes);
    free(srv->registered);
    free(srv->method_lane);
}

int rpc_server_start(const char *addr, const char *token, const struct rpc_method *methods, int nmethods, void *ctx,
                     int threads, struct rpc_server **out, struct whet_err *err) {
    pthread_once(&grpc_once, rpc_init_library);
    struct rpc_server *srv = xcalloc(1, sizeof *srv);
    srv->token = xstrdup(token ? token : "");
    srv->methods = methods;
    srv->nmethods = nmethods;
    srv->ctx = ctx;
    pthread_mutex_init(&srv->lock, NULL);
    pthread_cond_init(&srv->shut_down, NULL);
    srv->server = grpc_server_create(channel_args_get(), NULL);
    srv->registered = xcalloc((size_t)nmethods, sizeof *srv->registered);
    srv->method_lane = xcalloc((size_t)nmethods, sizeof *srv->method_lane);
    srv->lanes = xcalloc((size_t)nmethods + 1, sizeof *srv->lanes);
    srv->lanes[srv->nlanes++] = (struct lane){.nthreads = threads > 0 ? threads : 1};
    for (int i = 0; i < nmethods; i++) {
        srv->registered[i] = grpc_server_register_method(srv->server, methods[i].path, NULL,
                                                         GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
        if (methods[i].threads > 0) {
            srv->method_lane[i] = srv->nlanes;
            srv->lanes[srv->nlanes++] = (struct lane){.nthreads = methods[i].threads};
        }
    }
    for (int l = 0; l < srv->nlanes; l++) {
        struct lane *lane = &srv->lanes[l];
        lane->server = srv;
        lane->threads = xcalloc((size_t)lane->nthreads, sizeof *lane->threads);
        lane->cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(srv->server, lane->cq, NULL);
    }

    grpc_server_credentials *creds = NULL;
    if (server_credentials(&creds, err) != 0) goto fail;
    srv->port = grpc_server_add_http2_port(srv->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (srv->port <= 0) {
        whet_errf(err, "cannot listen for gRPC on %s (address in use or invalid)%s", addr,
                  whet_env("WHET_GRPC_TLS_CERT", NULL) ? " with TLS" : "");
        goto fail;
    }
    grpc_server_start(srv->server);
    for (int l = 0; l < srv->nlanes; l++) request_first_calls(srv, l);
    for (int l = 0; l < srv->nlanes; l++)
        for (int i = 0; i < srv->lanes[l].nthreads; i++)
            pthread_create(&srv->lanes[l].threads[i], NULL, server_thread_main, &srv->lanes[l]);
    *out = srv;
    return 0;
fail:
    grpc_server_destroy(srv->server);
    lanes_free(srv);
    free(srv->token);
    free(srv);
    return -1;
}

int rpc_server_port(const struct rpc_server *server) { return server->port; }

void rpc_server_stop(struct rpc_server *srv) {
    if (!srv) return;
    grpc_server_shutdown_and_notify(srv->server, srv->lanes[0].cq, SHUTDOWN_TAG);
    pthread_mutex_lock(&srv->lock);
    while (!srv->shutdown_done || srv->active_calls > 0) pthread_cond_wait(&srv->shut_down, &srv->lock);
    pthread_mutex_unlock(&srv->lock);
    grpc_server_destroy(srv->server);
    lanes_free(srv);
    pthread_mutex_destroy(&srv->lock);
    pthread_cond_destroy(&srv->shut_down);
    free(srv->token);
    free(srv);
}
