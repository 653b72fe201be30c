/* session_sweep.c - the state of ended training sessions removed from the object store (see session_sweep.h).
 * The thread (background.h) sleeps between sweeps and connects without blocking its stop; its statements are
 * plain blocking calls (the sweep is its only work) and its connection is made again after a failure. */
#include "session_sweep.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "files_common.h"
#include "log.h"
#include "pg.h"

#define SWEEP_S_DEFAULT 300
/* Sessions swept at most per round; a full round is followed by another at once (a backlog drains). */
#define SWEEP_BATCH 64

struct session_sweep {
    struct background thread;
    char *database_url;
    char idle_s[16], every_s[16];
    int every_ms;
};

/* Ended (deleted, or expired: no call for $1 seconds) at least $2 seconds ago, state not swept yet; $3 of them. */
static const char *const ended_sql = "SELECT id FROM training_sessions WHERE state_swept_at IS NULL"
                                     " AND (deleted_at < whet_now() - $2::int"
                                     "   OR last_call_at < extract(epoch FROM clock_timestamp()) - $1::int - $2::int)"
                                     " ORDER BY last_call_at LIMIT $3::int";

/* One round: removes the state of ended sessions; the number swept, or -1 when the database failed (err). */
static int sweep(const struct session_sweep *s, PGconn *conn, struct objstore *store, struct whet_err *err) {
    char batch[16];
    snprintf(batch, sizeof batch, "%d", SWEEP_BATCH);
    const char *params[] = {s->idle_s, s->every_s, batch};
    PGresult *res = whet_pg_query(conn, ended_sql, 3, params, err);
    if (!res) return -1;
    json_t *swept = json_array();
    for (int i = 0; i < PQntuples(res); i++) {
        const char *id = PQgetvalue(res, i, 0);
        char prefix[160];
        snprintf(prefix, sizeof prefix, "sessions/%s/state", id);
        struct whet_err left;
        if (objstore_delete_dir(store, prefix, &left)) {
            log_warn("msg=\"an ended training session's state is left in the object store until the next sweep\" "
                     "prefix=%s error=\"%s\"",
                     prefix, left.msg);
            continue;
        }
        json_array_append_new(swept, json_string(id));
    }
    PQclear(res);
    int n = (int)json_array_size(swept);
    char *ids = json_dumps(swept, JSON_COMPACT);
    json_decref(swept);
    const char *done[] = {ids};
    int rc = n == 0 || whet_pg_exec(conn,
                                    "UPDATE training_sessions SET state_swept_at = whet_now()"
                                    " WHERE id IN (SELECT jsonb_array_elements_text($1::jsonb))",
                                    1, done, err) >= 0
                 ? n
                 : -1;
    if (n > 0) log_info("msg=\"ended training sessions' state swept\" sessions=%s", ids);
    free(ids);
    return rc;
}

static void *sweep_main(void *arg) {
    struct session_sweep *s = arg;
    PGconn *conn = NULL;
    int warned = 0, stopping = 0;
    while (!stopping && background_wait(&s->thread, -1, 0, s->every_ms) == 0) {
        struct whet_err err;
        struct objstore *store = files_store(&err);
        if (!store) {
            if (!warned++)
                log_warn("msg=\"ended training sessions' state is not swept: no object store\" error=\"%s\"", err.msg);
            continue;
        }
        if (!conn && !(conn = whet_pg_connect_stoppable(s->database_url, &s->thread, &stopping, &err))) {
            if (stopping) break;
            log_warn("msg=\"ended training sessions' state not swept: the database is unreachable; trying again at "
                     "the next sweep\" error=\"%s\"",
                     err.msg);
            continue;
        }
        int n;
        while ((n = sweep(s, conn, store, &err)) == SWEEP_BATCH && background_wait(&s->thread, -1, 0, 0) == 0) continue;
        if (n < 0) {
            log_warn("msg=\"ended training sessions' state not swept: the database failed; trying again at the next "
                     "sweep\" error=\"%s\"",
                     err.msg);
            PQfinish(conn);
            conn = NULL;
        }
    }
    PQfinish(conn);
    return NULL;
}

struct session_sweep *session_sweep_start(const char *database_url, int idle_s) {
    const char *every = whet_env("WHET_SESSION_SWEEP_S", NULL);
    char *end;
    long every_s = every ? strtol(every, &end, 10) : SWEEP_S_DEFAULT;
    if (every && (*end || every_s < 1 || every_s > 86400)) {
        log_warn("msg=\"WHET_SESSION_SWEEP_S: expected seconds (1 to 86400), using the default\" value=\"%s\" "
                 "default=%d",
                 every, SWEEP_S_DEFAULT);
        every_s = SWEEP_S_DEFAULT;
    }
    struct session_sweep *s = xcalloc(1, sizeof *s);
    s->database_url = xstrdup(database_url);
    snprintf(s->idle_s, sizeof s->idle_s, "%d", idle_s);
    snprintf(s->every_s, sizeof s->every_s, "%ld", every_s);
    s->every_ms = (int)every_s * 1000;
    if (background_start(&s->thread, sweep_main, s) < 0) {
        log_warn("msg=\"training sessions' sweep not started: the state of ended sessions stays in the object "
                 "store\"");
        free(s->database_url);
        free(s);
        return NULL;
    }
    return s;
}

void session_sweep_stop(struct session_sweep *s) {
    if (!s) return;
    background_stop(&s->thread);
    free(s->database_url);
    free(s);
}
