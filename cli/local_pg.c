/* local_pg.c - see local_pg.h. The server programs run as child processes; their output goes to
 * DIR/pg/log so that `whet up`'s own output stays readable. */
#include "local_pg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "crypto.h"
#include "log.h"
#include "pg.h"

/* The newest installed server's bin directory. */
static char *find_pg_bin(struct whet_err *err) {
    glob_t g;
    if (glob("/usr/lib/postgresql/*/bin/pg_ctl", 0, NULL, &g) != 0) {
        whet_errf(err, "no PostgreSQL server found under /usr/lib/postgresql");
        whet_err_hint(err, "run deploy/install-deps.sh, or set WHET_DATABASE_URL to an existing database");
        return NULL;
    }
    char *best = NULL;
    long best_version = -1;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        long v = strtol(g.gl_pathv[i] + strlen("/usr/lib/postgresql/"), NULL, 10);
        if (v > best_version) {
            best_version = v;
            best = g.gl_pathv[i];
        }
    }
    char *bin = xstrdup(best);
    *strrchr(bin, '/') = 0;
    globfree(&g);
    return bin;
}

/* Runs argv (as the postgres user when we are root) with output appended to `log_path`; returns
 * the exit status, or -1. */
static int run_as_pg_user(char *const argv[], const char *log_path) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        /* Drop to the postgres user first, so the log it creates is its own (pg_ctl appends to it). */
        if (geteuid() == 0) {
            struct passwd *pw = getpwnam("postgres");
            if (!pw || setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0) _exit(126);
        }
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Whether 127.0.0.1:port can be bound now. */
static int port_is_free(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* Not a port from bind(0): those come from the kernel's ephemeral range, which every outgoing
 * connect() on the machine draws from too, so one could take it in the moment between our check and
 * the child's bind (CI saw `whet serve` lose its port to a parallel test's connection that way). A
 * random port below that range is one no connect() is handed. */
int local_free_port(void) {
    int ephemeral_low = 32768, ephemeral_high = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &ephemeral_low, &ephemeral_high) != 2) ephemeral_low = 32768;
        fclose(f);
    }
    /* Above the ports services usually claim (8080, 9090, ...) and below the ephemeral range; above
     * it on a machine whose range starts low. */
    int first = 20000, end = ephemeral_low;
    if (end - first < 1000) {
        first = ephemeral_high + 1;
        end = 65536;
    }
    if (end - first < 1000) return -1;
    for (int attempt = 0; attempt < 64; attempt++) {
        uint32_t r;
        whet_random_bytes(&r, sizeof r);
        int port = first + (int)(r % (uint32_t)(end - first));
        if (port_is_free(port)) return port;
    }
    return -1;
}

/* Hands `path` to the postgres user when we are root (PostgreSQL insists on owning its data). */
static int give_to_pg_user(const char *path, struct whet_err *err) {
    if (geteuid() != 0) return 0;
    struct passwd *pw = getpwnam("postgres");
    if (!pw) return whet_errf(err, "running as root but there is no `postgres` user to run PostgreSQL as");
    if (chown(path, pw->pw_uid, pw->pw_gid) != 0) return whet_errf(err, "chown %s: %s", path, strerror(errno));
    return 0;
}

int local_pg_start(struct local_pg *pg, const char *data_dir, struct whet_err *err) {
    memset(pg, 0, sizeof *pg);
    if (!(pg->bin = find_pg_bin(err))) return -1;
    pg->dir = xasprintf("%s/pg", data_dir);
    char *pgdata = xasprintf("%s/data", pg->dir);
    char *log_path = xasprintf("%s/log", pg->dir);
    char *port_path = xasprintf("%s/whet.port", pg->dir);
    char *pg_ctl = xasprintf("%s/pg_ctl", pg->bin);
    char *initdb = xasprintf("%s/initdb", pg->bin);
    char *opts = NULL;
    int rc = -1;

    if (whet_mkdir_p(pg->dir, err) < 0 || give_to_pg_user(pg->dir, err) < 0) goto out;
    struct stat st;
    if (stat(pgdata, &st) != 0) {
        log_info("msg=\"creating private PostgreSQL cluster\" dir=%s", pgdata);
        char *argv[] = {initdb, "-D", pgdata, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", NULL};
        if (run_as_pg_user(argv, log_path) != 0) {
            whet_errf(err, "initdb %s failed; see %s (as root, every parent directory of the data dir must be "
                           "searchable by the postgres user)", pgdata, log_path);
            goto out;
        }
    }
    char *port_text = NULL;
    if (whet_read_file(port_path, 32, &port_text, NULL, NULL) == 0) {
        pg->port = atoi(port_text);
        free(port_text);
    }
    if (pg->port <= 0) {
        pg->port = local_free_port();
        char buf[16];
        int n = snprintf(buf, sizeof buf, "%d\n", pg->port);
        if (pg->port <= 0 || whet_write_file_atomic(port_path, buf, (size_t)n, err) < 0) goto out;
    }
    pg->url = xasprintf("postgresql://postgres@127.0.0.1:%d/whet", pg->port);

    char *status_argv[] = {pg_ctl, "-D", pgdata, "status", NULL};
    if (run_as_pg_user(status_argv, log_path) != 0) {
        opts = xasprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=%s -c max_connections=200",
                         pg->port, pg->dir);
        char *start_argv[] = {pg_ctl, "-D", pgdata, "-l", log_path, "-w", "-t", "60", "-o", opts, "start", NULL};
        if (run_as_pg_user(start_argv, log_path) != 0) {
            whet_errf(err, "could not start PostgreSQL; see %s", log_path);
            goto out;
        }
        pg->started = 1;
    }
    /* Create the database on first start. */
    char *admin_url = xasprintf("postgresql://postgres@127.0.0.1:%d/postgres", pg->port);
    PGconn *conn = whet_pg_connect(admin_url, err);
    free(admin_url);
    if (!conn) goto out;
    PGresult *res = whet_pg_query(conn, "SELECT 1 FROM pg_database WHERE datname = 'whet'", 0, NULL, err);
    int exists = res && PQntuples(res) == 1;
    PQclear(res);
    rc = exists || whet_pg_exec(conn, "CREATE DATABASE whet", 0, NULL, err) == 0 ? 0 : -1;
    PQfinish(conn);
out:
    free(pgdata);
    free(log_path);
    free(port_path);
    free(pg_ctl);
    free(initdb);
    free(opts);
    if (rc < 0) local_pg_stop(pg);
    return rc;
}

void local_pg_stop(struct local_pg *pg) {
    if (pg->started) {
        char *pgdata = xasprintf("%s/data", pg->dir);
        char *log_path = xasprintf("%s/log", pg->dir);
        char *pg_ctl = xasprintf("%s/pg_ctl", pg->bin);
        char *argv[] = {pg_ctl, "-D", pgdata, "-m", "fast", "-w", "stop", NULL};
        run_as_pg_user(argv, log_path);
        free(pgdata);
        free(log_path);
        free(pg_ctl);
        pg->started = 0;
    }
    free(pg->dir);
    free(pg->bin);
    free(pg->url);
    pg->dir = pg->bin = pg->url = NULL;
}
