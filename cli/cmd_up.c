/* cmd_up.c - `whet up`: every component on one machine, supervised.
 *
 * Prepares the data dir (a private PostgreSQL unless WHET_DATABASE_URL is set, a file:// object store
 * unless WHET_OBJECT_STORE is set, a generated HS256 secret and executor token), applies migrations,
 * writes DIR/whet.env, then runs the components as child processes of this one — the gateway, and the
 * scheduler and executors in builds that have them — restarting a child that dies. It prints
 * `whet: ready http://HOST:PORT` once the gateway answers /readyz. SIGINT/SIGTERM stops everything. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "crypto.h"
#include "env.h"
#include "local_pg.h"
#include "log.h"
#include "migrate.h"
#include "model_register.h"
#include "pg.h"

/* Variables whet.env carries; the others are the operator's own environment. */
static const char *const env_file_keys[] = {
    "WHET_DATA_DIR",     "WHET_DATABASE_URL",     "WHET_OBJECT_STORE", "WHET_S3_ENDPOINT",     "WHET_HTTP",
    "WHET_GRPC",         "WHET_JWT_ALG",          "WHET_JWT_KEY",      "WHET_JWT_ISSUER",      "WHET_JWT_AUDIENCE",
    "WHET_EXECUTOR_TOKEN",
};

#define MAX_CHILDREN 64

struct child {
    char *name;
    char **argv; /* owned, NULL-terminated */
    pid_t pid;
    int restarts;
    double started_at;
};

struct up {
    const char *data_dir;
    char serve_http[64]; /* the bundled model's worker (whet serve), "" when the operator names workers */
    int placed_workers;  /* --placed-workers: no worker of its own, the scheduler places them */
    char self[4096];
    struct child children[MAX_CHILDREN];
    int nchildren;
};

static void up_usage(FILE *out) {
    fprintf(out,
            "usage: whet up [--data-dir DIR] [--http HOST:PORT] [--grpc HOST:PORT] [--executors N]\n"
            "               [--dcs A,B,...] [--devices SPEC] [--placed-workers]\n\n"
            "Runs every component on this machine: a private PostgreSQL under DIR (unless WHET_DATABASE_URL\n"
            "is set), migrations, the gateway, a model worker for the bundled whet-tiny (unless\n"
            "WHET_SERVE_WORKERS names workers or --placed-workers is given), and the scheduler and executors\n"
            "when this build has them.\n"
            "Writes DIR/whet.env and prints `whet: ready http://HOST:PORT` when the API answers.\n"
            "SIGINT or SIGTERM stops everything.\n\n"
            "  --data-dir DIR   state directory (default $WHET_DATA_DIR, else ./whet-data)\n"
            "  --http HOST:PORT gateway address (default $WHET_HTTP, else 127.0.0.1:8080)\n"
            "  --grpc HOST:PORT scheduler address for executors (default $WHET_GRPC, else 127.0.0.1:7070)\n"
            "  --executors N    executors to start (default 1)\n"
            "  --dcs A,B,...    data centers; executors are spread over them round-robin (default dc-1)\n"
            "  --devices SPEC   what each executor offers: cuda, cpu:N or sim:TYPE:N[:GIB] (default cpu:1)\n"
            "  --placed-workers no model worker of its own: the scheduler places whet-tiny's workers on the\n"
            "                   executors when requests come (from zero, scaled by load, stopped when idle)\n");
}

static int write_env_file(const char *data_dir, struct whet_err *err) {
    size_t cap = 4096, len = 0;
    char *buf = xmalloc(cap);
    len += (size_t)snprintf(buf, cap, "# written by `whet up`; holds secrets (mode 0600)\n");
    for (size_t i = 0; i < WHET_ARRAY_LEN(env_file_keys); i++) {
        const char *v = getenv(env_file_keys[i]);
        if (!v || !*v) continue;
        size_t need = strlen(env_file_keys[i]) + strlen(v) + 3;
        if (len + need >= cap) buf = xrealloc(buf, cap = (cap + need) * 2);
        len += (size_t)snprintf(buf + len, cap - len, "%s=%s\n", env_file_keys[i], v);
    }
    char *path = xasprintf("%s/whet.env", data_dir);
    int rc = whet_write_file_atomic_mode(path, buf, len, 0600, err);
    free(path);
    free(buf);
    return rc;
}

static void set_default(const char *name, const char *value) {
    if (!whet_env(name, NULL)) setenv(name, value, 1);
}

static void add_child(struct up *up, const char *name, char **argv) {
    struct child *c = &up->children[up->nchildren++];
    c->name = xstrdup(name);
    c->argv = argv;
}

static char **argv_dup(const char *first, ...) {
    char **argv = xcalloc(16, sizeof *argv);
    va_list ap;
    va_start(ap, first);
    int n = 0;
    for (const char *a = first; a && n < 15; a = va_arg(ap, const char *)) argv[n++] = xstrdup(a);
    va_end(ap);
    return argv;
}

/* A copy of the NULL-terminated `list`. */
static char **argv_copy(const char *const *list) {
    size_t n = 0;
    while (list[n]) n++;
    char **argv = xcalloc(n + 1, sizeof *argv);
    for (size_t i = 0; i < n; i++) argv[i] = xstrdup(list[i]);
    return argv;
}

static void argv_free(char **argv) {
    for (char **a = argv; *a; a++) free(*a);
    free(argv);
}

static int spawn_child(struct up *up, struct child *c) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        /* If the supervisor dies (even by SIGKILL), its components stop with it instead of running on
         * unsupervised. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(1);
        execv(up->self, c->argv);
        fprintf(stderr, "whet up: exec %s: %s\n", up->self, strerror(errno));
        _exit(127);
    }
    c->pid = pid;
    c->started_at = whet_now_mono();
    log_info("msg=\"started\" component=%s pid=%d", c->name, (int)pid);
    return 0;
}

/* GET /readyz on the gateway: 1 when it answers 200. */
static int gateway_ready(const char *hostport) {
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || (size_t)(colon - hostport) >= sizeof host) return 0;
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0) return 0;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), ok = 0;
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
        char req[512];
        int n = snprintf(req, sizeof req, "GET /readyz HTTP/1.0\r\nHost: %s\r\n\r\n", hostport);
        char resp[64] = {0};
        if (write(fd, req, (size_t)n) == n && read(fd, resp, sizeof resp - 1) > 12)
            ok = !strncmp(resp + 8, " 200", 4);
    }
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    return ok;
}

static void stop_children(struct up *up) {
    for (int i = up->nchildren - 1; i >= 0; i--)
        if (up->children[i].pid > 0) kill(up->children[i].pid, SIGTERM);
    double deadline = whet_now_mono() + 15;
    for (;;) {
        int alive = 0;
        for (int i = 0; i < up->nchildren; i++) {
            struct child *c = &up->children[i];
            if (c->pid > 0 && waitpid(c->pid, NULL, WNOHANG) == c->pid) c->pid = 0;
            alive += c->pid > 0;
        }
        if (!alive) return;
        if (whet_now_mono() > deadline) break;
        usleep(50 * 1000);
    }
    for (int i = 0; i < up->nchildren; i++)
        if (up->children[i].pid > 0) {
            log_warn("msg=\"did not stop in time; killing\" component=%s", up->children[i].name);
            kill(up->children[i].pid, SIGKILL);
            waitpid(up->children[i].pid, NULL, 0);
        }
}

/* Collects dead children and restarts them, at most once a second each; a component that dies 5 times
 * within a minute of starting gives up the whole stack. Returns -1 on that. */
static int reap_and_restart(struct up *up) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < up->nchildren; i++) {
            struct child *c = &up->children[i];
            if (c->pid != pid) continue;
            c->pid = 0;
            double lived = whet_now_mono() - c->started_at;
            log_warn("msg=\"component exited\" component=%s status=%d signal=%d lived_s=%.1f", c->name,
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0, lived);
            c->restarts = lived < 60 ? c->restarts + 1 : 0;
            if (c->restarts >= 5) {
                log_error("msg=\"component keeps dying; stopping\" component=%s", c->name);
                return -1;
            }
            usleep(lived < 1 ? 1000 * 1000 : 0);
            spawn_child(up, c);
        }
    }
    return 0;
}

/* Runs `whet ARGS...` (this binary) to completion, its output dropped when `quiet`; returns its exit
 * status. */
static int run_self(const char *self, char *const argv[], int quiet) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int null = quiet ? open("/dev/null", O_WRONLY | O_CLOEXEC) : -1;
        if (null >= 0) dup2(null, 1), dup2(null, 2);
        execv(self, argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A fresh catalog gets the bundled tiny model, so the API has a base model to fine-tune at once. */
static int register_tiny_model(PGconn *conn, const char *self, const char *data_dir, struct whet_err *err) {
    PGresult *res = whet_pg_query(conn, "SELECT count(*) FROM base_models", 0, NULL, err);
    if (!res) return -1;
    int empty = atoi(PQgetvalue(res, 0, 0)) == 0;
    PQclear(res);
    if (!empty) return 0;
    char *dir = xasprintf("%s/models/whet-tiny", data_dir);
    char *argv[] = {"whet", "model", "init", "--preset", "tiny", "--out", dir, NULL};
    int rc = run_self(self, argv, 0) == 0 ? model_register(whet_env("WHET_DATABASE_URL", ""), "whet-tiny", dir, err)
                                        : whet_errf(err, "whet model init --preset tiny failed");
    free(dir);
    return rc;
}

struct up_options {
    const char *data_dir, *http, *grpc, *dcs, *devices;
    long executors;
    int placed_workers;
};

/* 0: options read; 1: --help printed; 2: a usage error (printed). */
static int parse_up_options(int argc, char **argv, struct up_options *o) {
    static const struct option opts[] = {
        {"data-dir", required_argument, 0, 'd'}, {"http", required_argument, 0, 'H'},
        {"grpc", required_argument, 0, 'g'},     {"executors", required_argument, 0, 'e'},
        {"dcs", required_argument, 0, 'c'},      {"devices", required_argument, 0, 'v'},
        {"placed-workers", no_argument, 0, 'p'}, {"help", no_argument, 0, 'h'}, {0}};
    *o = (struct up_options){.data_dir = whet_env("WHET_DATA_DIR", "whet-data"), .dcs = "dc-1", .devices = "cpu:1",
                             .executors = 1};
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': o->data_dir = optarg; break;
        case 'H': o->http = optarg; break;
        case 'g': o->grpc = optarg; break;
        case 'c': o->dcs = optarg; break;
        case 'v': o->devices = optarg; break;
        case 'p': o->placed_workers = 1; break;
        case 'e':
            o->executors = strtol(optarg, &end, 10);
            if (*end || o->executors < 0 || o->executors > 32) {
                fprintf(stderr, "whet up: --executors must be between 0 and 32\n");
                return 2;
            }
            break;
        case 'h': up_usage(stdout); return 1;
        default: up_usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        up_usage(stderr);
        return 2;
    }
    if (o->placed_workers && (!o->executors || !whet_command_find("scheduler") || !whet_command_find("executor"))) {
        fprintf(stderr, "whet up: --placed-workers needs the scheduler and at least one executor (--executors N; "
                        "a build with both)\n");
        return 2;
    }
    return 0;
}

/* The settings every component reads, in this process's environment: what the operator set wins, then
 * whet.env of an earlier run, then defaults and fresh secrets. A private PostgreSQL is started unless
 * the operator names a database. */
static int prepare_environment(struct up *up, const char *abs_dir, struct local_pg *pg, struct whet_err *err) {
    /* The operator's environment decides whether the database is private: whet.env holds the URL of
     * the private one from an earlier run, which this run starts again. */
    int private_pg = !whet_env("WHET_DATABASE_URL", NULL);
    if (whet_env_load_data_dir(abs_dir, err) < 0) return -1;
    if (private_pg) {
        if (local_pg_start(pg, abs_dir, err) < 0) return -1;
        setenv("WHET_DATABASE_URL", pg->url, 1);
    }
    char *objects = xasprintf("file://%s/objects", abs_dir);
    set_default("WHET_OBJECT_STORE", objects);
    free(objects);
    set_default("WHET_HTTP", "127.0.0.1:8080");
    /* A model worker for the bundled base, so the tenant's models answer chat completions at once; an
     * operator's WHET_SERVE_WORKERS names their own instead, and with --placed-workers the scheduler
     * places them (the gateway finds them in the database). */
    if (!up->placed_workers && !whet_env("WHET_SERVE_WORKERS", NULL)) {
        int port = local_free_port();
        if (port > 0) {
            snprintf(up->serve_http, sizeof up->serve_http, "127.0.0.1:%d", port);
            char *workers = xasprintf("whet-tiny=%s", up->serve_http);
            setenv("WHET_SERVE_WORKERS", workers, 1);
            free(workers);
        }
    }
    set_default("WHET_GRPC", "127.0.0.1:7070");
    /* One machine, plain HTTP (the readiness check and the printed URL are http://): HTTPS is for a
     * production `whet gateway`. */
    if (whet_env("WHET_GATEWAY_TLS_CERT", NULL) || whet_env("WHET_GATEWAY_TLS_KEY", NULL)) {
        log_warn("msg=\"whet up serves plain HTTP: WHET_GATEWAY_TLS_CERT and WHET_GATEWAY_TLS_KEY are ignored\"");
        unsetenv("WHET_GATEWAY_TLS_CERT");
        unsetenv("WHET_GATEWAY_TLS_KEY");
    }
    set_default("WHET_JWT_ALG", "HS256");
    if (!whet_env("WHET_JWT_KEY", NULL)) {
        uint8_t secret[32];
        char hex[65];
        whet_random_bytes(secret, sizeof secret);
        whet_hex_encode(secret, sizeof secret, hex);
        setenv("WHET_JWT_KEY", hex, 1);
    }
    if (!whet_env("WHET_EXECUTOR_TOKEN", NULL)) {
        char token[48];
        whet_random_id("exec-", 40, token);
        setenv("WHET_EXECUTOR_TOKEN", token, 1);
    }
    return 0;
}

/* Migrations, the bundled tiny model in an empty catalog, then whet.env for the other subcommands. */
static int prepare_database(const struct up *up, const char *abs_dir, struct whet_err *err) {
    PGconn *conn = whet_pg_connect(whet_env("WHET_DATABASE_URL", ""), err);
    int applied;
    int rc = conn && whet_migrate(conn, &applied, err) == 0 && register_tiny_model(conn, up->self, abs_dir, err) == 0
                 ? 0
                 : -1;
    PQfinish(conn);
    if (rc == 0) rc = write_env_file(abs_dir, err);
    return rc;
}

/* Why the bundled model's worker cannot run sandboxed here (NULL: it can), its dirs made. */
static const char *serve_unsandboxed_why(const struct up *up, const char *store, const char *cache,
                                         struct whet_err *err) {
    char *const probe[] = {"whet", "sandbox", "probe", NULL};
    if (!whet_command_find("sandbox")) return "this build has no sandbox";
    if (strncmp(store, "file://", 7))
        return "its object store is not a file:// directory (the executors' placed workers, --placed-workers, reach "
               "an s3:// store from the sandbox)";
    if (run_self(up->self, probe, 1) != 0)
        return "the sandbox does not work on this host (`whet sandbox probe` says why)";
    if (whet_mkdir_p(cache, err) < 0 || whet_mkdir_p(store + 7, err) < 0) return err->msg;
    return NULL;
}

/* The bundled model's worker, sandboxed as the executors' placed workers are (serve_workers.c: the
 * trainers' limits, trainer_sandbox.h, and a server's network) through `whet sandbox run`: it may bind
 * the worker's address only and connect nowhere (the store is a directory, bound read-only: this
 * worker holds no training sessions, so it writes no saves), it sees its model, its cache, the store
 * and the operator keyring read-only; SIGTERM reaches it through the sandbox's init, and the sandbox
 * dies with `whet up`. Where the sandbox cannot be had, as for trainers, it runs as it is, with a
 * warning saying why. */
static void add_serve_worker(struct up *up, const char *abs_dir) {
    char model[4200], cache[4200], host[64], key_env[4200];
    snprintf(model, sizeof model, "%s/models/whet-tiny", abs_dir);
    snprintf(cache, sizeof cache, "%s/serve-cache", abs_dir);
    snprintf(host, sizeof host, "%.*s", (int)strcspn(up->serve_http, ":"), up->serve_http);
    const char *store = whet_env("WHET_OBJECT_STORE", ""), *keys = whet_env("WHET_DATA_KEY_FILE", NULL);
    struct whet_err err;
    const char *why = serve_unsandboxed_why(up, store, cache, &err);
    if (why) {
        log_warn("msg=\"the model worker runs unsandboxed: %s\"", why);
        add_child(up, "serve",
                  argv_dup("whet", "serve", "--model", model, "--name", "whet-tiny", "--http", up->serve_http,
                           "--object-store", store, "--cache-dir", cache, NULL));
        return;
    }
    snprintf(key_env, sizeof key_env, "WHET_DATA_KEY_FILE=%s", keys ? keys : "");
    const char *argv[] = {"whet", "sandbox", "run", "--procs", "512", "--files", "1024", "--listen", host,
                          "--writable", cache, "--readonly", model, "--readonly", store + 7, "--readonly", up->self,
                          "--env", "OMP_WAIT_POLICY=PASSIVE", "--env", "PATH=/usr/bin:/bin", "--env", "HOME=/tmp",
                          "--env", "LANG=C.UTF-8", "--", up->self, "serve", "--model", model, "--name", "whet-tiny",
                          "--http", up->serve_http, "--object-store", store, "--cache-dir", cache, NULL};
    const char *keyed[WHET_ARRAY_LEN(argv) + 4];
    size_t n = 0, k = 0;
    for (; strcmp(argv[k], "--"); k++) keyed[n++] = argv[k];
    if (keys && *keys) keyed[n++] = "--readonly", keyed[n++] = keys, keyed[n++] = "--env", keyed[n++] = key_env;
    for (; k < WHET_ARRAY_LEN(argv); k++) keyed[n++] = argv[k];
    log_info("msg=\"the model worker runs sandboxed\" listen=%s", host);
    add_child(up, "serve", argv_copy(keyed));
}

/* The gateway, and the scheduler and executors (spread round-robin over the data centers) in builds
 * that have them. */
static void add_components(struct up *up, const struct up_options *o, const char *abs_dir) {
    add_child(up, "gateway", argv_dup("whet", "gateway", "--data-dir", abs_dir, NULL));
    if (whet_command_find("scheduler")) add_child(up, "scheduler", argv_dup("whet", "scheduler", "--data-dir", abs_dir, NULL));
    if (up->serve_http[0] && whet_command_find("serve")) add_serve_worker(up, abs_dir);
    if (!whet_command_find("executor")) return;
    char *dc_list = xstrdup(o->dcs), *save = NULL;
    char *dc_names[16];
    int ndc = 0;
    for (char *t = strtok_r(dc_list, ",", &save); t && ndc < 16; t = strtok_r(NULL, ",", &save)) dc_names[ndc++] = t;
    for (long i = 0; i < o->executors && ndc; i++) {
        char name[64], work[4200];
        snprintf(name, sizeof name, "executor-%ld", i + 1);
        snprintf(work, sizeof work, "%s/executors/%s", abs_dir, name);
        add_child(up, name,
                  argv_dup("whet", "executor", "--data-dir", abs_dir, "--dc", dc_names[i % ndc], "--pool",
                           dc_names[i % ndc], "--devices", o->devices, "--work-dir", work, NULL));
    }
    free(dc_list);
}

/* Starts the children and keeps them running (a dead one is restarted) until SIGINT or SIGTERM; says
 * "whet: ready" once the gateway answers. 0 on a requested stop. */
static int supervise(struct up *up) {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    for (int i = 0; i < up->nchildren; i++) spawn_child(up, &up->children[i]);

    const char *addr = whet_env("WHET_HTTP", "");
    int ready = 0;
    for (;;) {
        struct timespec tick = {0, 200 * 1000 * 1000};
        int sig = sigtimedwait(&mask, NULL, &tick);
        if (sig == SIGINT || sig == SIGTERM) {
            log_info("msg=\"stopping\" signal=%d", sig);
            return 0;
        }
        if (reap_and_restart(up) < 0) return 1;
        if (!ready && gateway_ready(addr)) {
            ready = 1;
            printf("whet: ready http://%s\nwhet: console http://%s/console\n", addr, addr);
            fflush(stdout);
        }
    }
}

static int cmd_up(int argc, char **argv) {
    struct up_options o;
    int usage = parse_up_options(argc, argv, &o);
    if (usage) return usage == 1 ? 0 : 2;
    whet_log_component("up");
    static struct up up;
    struct whet_err err;
    struct local_pg pg = {0};

    char abs_dir[4096];
    if (whet_mkdir_p(o.data_dir, &err) < 0) {
        whet_err_report("whet up", &err);
        return 1;
    }
    if (!realpath(o.data_dir, abs_dir)) {
        fprintf(stderr, "whet up: data dir %s: %s\n", o.data_dir, strerror(errno));
        return 1;
    }
    ssize_t n = readlink("/proc/self/exe", up.self, sizeof up.self - 1);
    if (n <= 0) {
        fprintf(stderr, "whet up: cannot find its own binary\n");
        return 1;
    }
    up.self[n] = 0;
    setenv("WHET_DATA_DIR", abs_dir, 1);
    if (o.http) setenv("WHET_HTTP", o.http, 1);
    if (o.grpc) setenv("WHET_GRPC", o.grpc, 1);
    up.placed_workers = o.placed_workers;
    if (prepare_environment(&up, abs_dir, &pg, &err) < 0 || prepare_database(&up, abs_dir, &err) < 0) {
        whet_err_report("whet up", &err);
        local_pg_stop(&pg);
        return 1;
    }
    add_components(&up, &o, abs_dir);
    int rc = supervise(&up);
    stop_children(&up);
    for (int i = 0; i < up.nchildren; i++) {
        free(up.children[i].name);
        argv_free(up.children[i].argv);
    }
    local_pg_stop(&pg);
    return rc;
}

WHET_COMMAND("up", cmd_up, "run every component on this machine")
