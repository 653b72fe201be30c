/* heartbeat_quiet.c - the heartbeats that need not reach the database.
 *
 * Most heartbeats find nothing to do there: the node's stored lease is not yet due for a write (heartbeats.c
 * writes it every quarter lease), its jobs' progress is not news (progress.c), no command waits for it and no
 * model worker was given to it. Yet each ran the heartbeat statement: ~620 us of PostgreSQL CPU a heartbeat
 * with a quiet fleet of 2,000 nodes (tests/bench/scale), 5,000 heartbeats a second at 10k nodes. So the
 * leader remembers, per node, what that node's last statement told it (known, no model workers, and when its
 * stored lease falls due for a write), and answers a heartbeat that brings no progress from that memory while
 * the lease is not yet due and nothing was given to the node since.
 *
 * "Nothing given since" is heard, not polled: every statement that inserts a node's command or model worker
 * names the node on the channel whet_node_wake (migration 0061), which this file's thread LISTENs to on its own
 * connection. Each node has a wake count, bumped by each such NOTIFY; a statement's writer reads the count
 * before the statement runs (quiet_mark) and the memory it leaves (quiet_written) holds only while the count
 * is unchanged. A command committed after the statement read the node's rows is announced after that commit,
 * so after the mark: the next heartbeat goes to the database and delivers it. A command committed just before
 * a heartbeat whose NOTIFY has not yet been read waits for the next heartbeat, as a command inserted just
 * after a heartbeat always did.
 *
 * Everything remembered holds for one epoch: the epoch moves when the listening connection is made (it may
 * have missed NOTIFYs before), when it breaks, and on a NOTIFY of '*' (too many nodes for one payload). While
 * nothing listens, every heartbeat goes to the database, as before this file. A connection that died without
 * the socket saying so would hold back a command until its node's next lease write, a quarter lease at most:
 * late, never lost.
 *
 * Safety of the lease: a node is answered from memory only until its stored lease falls due for a write, so it
 * is written as often as before (the due heartbeat reaches the database); the lease expiry declares a node lost
 * only when its stored lease is a lease and a quarter old (leases.c), far past that point, so a node answered
 * from memory is never one the database declared lost. */
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "background.h"
#include "log.h"
#include "pg.h"
#include "service_internal.h"

#define FORGET_AFTER_S 600.0 /* a node not heard of for this long is forgotten (its next heartbeat is written) */

struct node_memo {
    char *id;
    unsigned long wake;  /* NOTIFYs naming the node */
    unsigned long seen;  /* the wake count its last statement's writer read */
    unsigned long epoch; /* the epoch of that read */
    double quiet_until;  /* whet_now_mono(): its stored lease falls due for a write; 0 when not to be quiet */
    double touched;      /* whet_now_mono() of the last heartbeat or NOTIFY */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct node_memo **memos; /* sorted by id */
static size_t n_memos, cap_memos;
static unsigned long epoch;
static int listening;
static double last_sweep;
static struct background thread;
static int thread_started;

static int cmp_id(const void *key, const void *memo) { return strcmp(key, (*(struct node_memo *const *)memo)->id); }

/* The node's memo (created when absent), under the lock. */
static struct node_memo *memo_of(const char *id, double now) {
    size_t lo = 0, hi = n_memos;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = cmp_id(id, &memos[mid]);
        if (!c) {
            memos[mid]->touched = now;
            return memos[mid];
        }
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    if (n_memos == cap_memos) {
        cap_memos = cap_memos ? 2 * cap_memos : 1024;
        memos = xrealloc(memos, cap_memos * sizeof *memos);
    }
    memmove(memos + lo + 1, memos + lo, (n_memos - lo) * sizeof *memos);
    struct node_memo *m = memos[lo] = xcalloc(1, sizeof *m);
    m->id = xstrdup(id);
    m->touched = now;
    n_memos++;
    return m;
}

/* Drops the memos of nodes not heard of for FORGET_AFTER_S (decommissioned, or renamed), under the lock. */
static void sweep(double now) {
    size_t kept = 0;
    for (size_t i = 0; i < n_memos; i++) {
        if (now - memos[i]->touched < FORGET_AFTER_S) {
            memos[kept++] = memos[i];
            continue;
        }
        free(memos[i]->id);
        free(memos[i]);
    }
    n_memos = kept;
    last_sweep = now;
}

int quiet_answer(const char *node, double now) {
    pthread_mutex_lock(&lock);
    int quiet = 0;
    if (listening) {
        const struct node_memo *m = memo_of(node, now);
        quiet = m->epoch == epoch && m->seen == m->wake && now < m->quiet_until;
    }
    pthread_mutex_unlock(&lock);
    return quiet;
}

struct quiet_mark quiet_mark(const char *node) {
    pthread_mutex_lock(&lock);
    const struct node_memo *m = memo_of(node, whet_now_mono());
    struct quiet_mark mark = {.wake = m->wake, .epoch = epoch};
    pthread_mutex_unlock(&lock);
    return mark;
}

void quiet_written(const char *node, struct quiet_mark mark, int quiet, double quiet_until) {
    double now = whet_now_mono();
    pthread_mutex_lock(&lock);
    struct node_memo *m = memo_of(node, now);
    m->seen = mark.wake;
    m->epoch = mark.epoch;
    m->quiet_until = quiet ? quiet_until : 0;
    if (now - last_sweep >= FORGET_AFTER_S) sweep(now);
    pthread_mutex_unlock(&lock);
}

/* A NOTIFY's payload: node ids separated by spaces, or '*' for every node. */
static void wake(const char *payload) {
    double now = whet_now_mono();
    pthread_mutex_lock(&lock);
    if (!strcmp(payload, "*")) {
        epoch++;
    } else {
        char *ids = xstrdup(payload), *save = NULL;
        for (char *id = strtok_r(ids, " ", &save); id; id = strtok_r(NULL, " ", &save)) memo_of(id, now)->wake++;
        free(ids);
    }
    pthread_mutex_unlock(&lock);
}

static void set_listening(int on) {
    pthread_mutex_lock(&lock);
    listening = on;
    epoch++;
    pthread_mutex_unlock(&lock);
}

static void *listen_main(void *arg) {
    const char *url = arg;
    PGconn *conn = NULL;
    int stopping = 0, warned = 0;
    for (int wait_ms = 0;;) {
        int woke =
            conn ? background_wait(&thread, PQsocket(conn), POLLIN, -1) : background_wait(&thread, -1, 0, wait_ms);
        if (woke < 0) break;
        wait_ms = 1000;
        if (!conn) {
            struct whet_err err;
            conn = whet_pg_connect_stoppable(url, &thread, &stopping, &err);
            if (stopping) break;
            if (!conn || whet_pg_exec(conn, "LISTEN whet_node_wake", 0, NULL, &err) < 0) {
                if (!warned++)
                    log_warn("msg=\"every heartbeat is written until the node wake-ups are heard\" error=\"%s\"",
                             err.msg);
                PQfinish(conn);
                conn = NULL;
                continue;
            }
            warned = 0;
            set_listening(1);
            continue;
        }
        if (!PQconsumeInput(conn) || PQstatus(conn) != CONNECTION_OK) {
            set_listening(0);
            PQfinish(conn);
            conn = NULL;
            continue;
        }
        PGnotify *note;
        while ((note = PQnotifies(conn))) {
            wake(note->extra);
            PQfreemem(note);
        }
    }
    set_listening(0);
    PQfinish(conn);
    return NULL;
}

void quiet_start(const struct scheduler_options *opts) {
    thread_started = background_start(&thread, listen_main, (void *)opts->database_url) == 0;
    if (!thread_started) log_warn("msg=\"node wake-ups not heard: every heartbeat is written\"");
}

void quiet_stop(void) {
    if (thread_started) background_stop(&thread);
    thread_started = 0;
    pthread_mutex_lock(&lock);
    sweep(1e300); /* everything is older than that */
    free(memos);
    memos = NULL;
    n_memos = cap_memos = 0;
    last_sweep = 0;
    pthread_mutex_unlock(&lock);
}
