/* gRPC over TLS (WHET_GRPC_TLS_CERT/KEY on the server, WHET_GRPC_TLS_CA on the client): a CA and a
 * server certificate for localhost/127.0.0.1 are made with the openssl command in a temp dir, then a
 * TLS call succeeds, and a plaintext client, a client trusting another CA, a server whose certificate
 * names another host, a TLS client to a plaintext server and a half-configured server all fail with
 * errors that say why. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/whet.pb-c.h"
#include "rpc.h"
#include "test.h"

#define HEARTBEAT "/whet.v1.Scheduler/Heartbeat"

/* Under ASan: Debian 12's c-ares (1.18.1) leaks the name when gRPC resolves "localhost" through
 * ares_getaddrinfo, once per resolution; the leak is in c-ares, not in whet. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libcares.so\n"; }

static char dir[] = "/tmp/whet-rpc-tls.XXXXXX";
static int calls;

/* Replies with no commands; counts the calls that got through to a handler. */
static int handle_heartbeat(void *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out, struct whet_err *err) {
    (void)ctx;
    (void)msg;
    (void)err;
    __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
    Whet__V1__HeartbeatResponse *resp = malloc(sizeof *resp);
    whet__v1__heartbeat_response__init(resp);
    *out = &resp->base;
    return RPC_OK;
}

static void free_heartbeat_response(ProtobufCMessage *msg) { free(msg); }

static const struct rpc_method methods[] = {
    {HEARTBEAT, &whet__v1__heartbeat_request__descriptor, handle_heartbeat, free_heartbeat_response, 0},
};

/* Runs a shell command in `dir`; 0 on success. */
static int sh(const char *cmd) {
    char *full = xasprintf("cd '%s' && { %s; } >openssl.log 2>&1", dir, cmd);
    int rc = system(full);
    free(full);
    return rc;
}

/* Two CAs (the second trusted by nobody), a server certificate signed by the first, valid for the
 * names a client may dial (localhost and 127.0.0.1), and one from the same CA for another host. */
static int make_certificates(void) {
    const char *ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    char *cmd = xasprintf(
        "openssl req -x509 %s -keyout ca.key -out ca.pem -days 2 -subj /CN=whet-test-ca && "
        "openssl req -x509 %s -keyout other-ca.key -out other-ca.pem -days 2 -subj /CN=whet-test-ca && "
        "openssl req %s -keyout server.key -out server.csr -subj /CN=localhost && "
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' >server.ext && "
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext "
        "-out server.pem && "
        "openssl req %s -keyout elsewhere.key -out elsewhere.csr -subj /CN=elsewhere.example && "
        "printf 'subjectAltName=DNS:elsewhere.example\\n' >elsewhere.ext && "
        "openssl x509 -req -in elsewhere.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile elsewhere.ext "
        "-out elsewhere.pem",
        ec, ec, ec, ec);
    int rc = sh(cmd);
    free(cmd);
    return rc;
}

static void set_path(const char *var, const char *file) {
    if (!file) {
        unsetenv(var);
        return;
    }
    char *path = xasprintf("%s/%s", dir, file);
    setenv(var, path, 1);
    free(path);
}

/* Starts a server with the given certificate and key files (NULL: that variable unset). */
static int start_server(const char *cert, const char *key, struct rpc_server **out, struct whet_err *err) {
    set_path("WHET_GRPC_TLS_CERT", cert);
    set_path("WHET_GRPC_TLS_KEY", key);
    int rc = rpc_server_start("127.0.0.1:0", "secret", methods, 1, NULL, 2, out, err);
    unsetenv("WHET_GRPC_TLS_CERT");
    unsetenv("WHET_GRPC_TLS_KEY");
    return rc;
}

/* One heartbeat from a client trusting `ca` (NULL: a plaintext client) to HOST:port. */
static int heartbeat(const char *host, int port, const char *ca, struct whet_err *err) {
    set_path("WHET_GRPC_TLS_CA", ca);
    char target[128];
    snprintf(target, sizeof target, "%s:%d", host, port);
    struct rpc_client *client;
    int rc = rpc_client_open(target, "secret", &client, err);
    unsetenv("WHET_GRPC_TLS_CA");
    if (rc != 0) return -1;
    Whet__V1__HeartbeatRequest req = WHET__V1__HEARTBEAT_REQUEST__INIT;
    req.node_id = "node-a";
    ProtobufCMessage *resp = NULL;
    rc = rpc_call(client, HEARTBEAT, &req.base, &whet__v1__heartbeat_response__descriptor, &resp, 1000, 1500, err);
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
    rpc_client_close(client);
    return rc;
}

static struct rpc_server *tls_server, *plain_server;

TEST(tls_call_succeeds) {
    struct whet_err err;
    int before = calls;
    int rc = heartbeat("127.0.0.1", rpc_server_port(tls_server), "ca.pem", &err);
    CHECK_MSG(rc == RPC_OK, "%s", err.msg);
    rc = heartbeat("localhost", rpc_server_port(tls_server), "ca.pem", &err);
    CHECK_MSG(rc == RPC_OK, "%s", err.msg);
    CHECK(calls == before + 2);
}

TEST(plaintext_client_to_tls_server_fails) {
    struct whet_err err;
    int before = calls;
    int rc = heartbeat("127.0.0.1", rpc_server_port(tls_server), NULL, &err);
    CHECK(rc == RPC_UNAVAILABLE);
    CHECK_CONTAINS(err.msg, "plaintext");
    CHECK_CONTAINS(err.msg, "WHET_GRPC_TLS_CA");
    CHECK(calls == before);
    fprintf(stderr, "     (the client's error: %s)\n", err.msg);
}

TEST(client_trusting_another_ca_fails) {
    struct whet_err err;
    int before = calls;
    int rc = heartbeat("127.0.0.1", rpc_server_port(tls_server), "other-ca.pem", &err);
    CHECK(rc == RPC_UNAVAILABLE);
    CHECK_CONTAINS(err.msg, "certificate verify failed");
    CHECK_CONTAINS(err.msg, "other-ca.pem");
    CHECK(calls == before);
    fprintf(stderr, "     (the client's error: %s)\n", err.msg);
}

/* The CA is right but the certificate names another host: gRPC checks the name it dialled. */
TEST(certificate_for_another_host_fails) {
    struct whet_err err;
    struct rpc_server *elsewhere = NULL;
    int rc = start_server("elsewhere.pem", "elsewhere.key", &elsewhere, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc != 0) return;
    int before = calls;
    CHECK(heartbeat("127.0.0.1", rpc_server_port(elsewhere), "ca.pem", &err) == RPC_UNAVAILABLE);
    CHECK_CONTAINS(err.msg, "Peer name 127.0.0.1 is not in peer certificate"); /* gRPC's words */
    CHECK(calls == before);
    rpc_server_stop(elsewhere);
}

TEST(tls_client_to_plaintext_server_fails) {
    struct whet_err err;
    int before = calls;
    int rc = heartbeat("127.0.0.1", rpc_server_port(plain_server), "ca.pem", &err);
    CHECK(rc == RPC_UNAVAILABLE);
    CHECK_CONTAINS(err.msg, "TLS");
    CHECK(calls == before);
    /* and the plaintext server still serves plaintext clients */
    rc = heartbeat("127.0.0.1", rpc_server_port(plain_server), NULL, &err);
    CHECK_MSG(rc == RPC_OK, "%s", err.msg);
}

TEST(half_configured_server_refuses_to_start) {
    struct whet_err err;
    struct rpc_server *srv = NULL;
    CHECK(start_server("server.pem", NULL, &srv, &err) == -1);
    CHECK_CONTAINS(err.msg, "WHET_GRPC_TLS_KEY");
    CHECK(start_server(NULL, "server.key", &srv, &err) == -1);
    CHECK_CONTAINS(err.msg, "WHET_GRPC_TLS_CERT");
    CHECK(start_server("missing.pem", "server.key", &srv, &err) == -1);
    CHECK_CONTAINS(err.msg, "missing.pem");
    /* a key that is not the certificate's */
    CHECK(start_server("server.pem", "ca.key", &srv, &err) == -1);
    CHECK_CONTAINS(err.msg, "WHET_GRPC_TLS_CERT");
}

TEST(client_with_unreadable_ca_fails_to_open) {
    struct whet_err err;
    CHECK(heartbeat("127.0.0.1", rpc_server_port(tls_server), "missing-ca.pem", &err) == -1);
    CHECK_CONTAINS(err.msg, "WHET_GRPC_TLS_CA");
    CHECK_CONTAINS(err.msg, "missing-ca.pem");
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    if (make_certificates() != 0) {
        fprintf(stderr, "openssl failed; see %s/openssl.log\n", dir);
        return 1;
    }
    struct whet_err err;
    if (start_server("server.pem", "server.key", &tls_server, &err) != 0 ||
        start_server(NULL, NULL, &plain_server, &err) != 0) {
        fprintf(stderr, "server: %s\n", err.msg);
        return 1;
    }
    RUN(tls_call_succeeds);
    RUN(plaintext_client_to_tls_server_fails);
    RUN(client_trusting_another_ca_fails);
    RUN(certificate_for_another_host_fails);
    RUN(tls_client_to_plaintext_server_fails);
    RUN(half_configured_server_refuses_to_start);
    RUN(client_with_unreadable_ca_fails_to_open);
    rpc_server_stop(tls_server);
    rpc_server_stop(plain_server);
    char *rm = xasprintf("rm -rf '%s'", dir);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", dir);
    free(rm);
    return test_summary();
}
