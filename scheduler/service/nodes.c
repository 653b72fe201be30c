/* nodes.c - the ready nodes as the leader's cycle sees them, kept between cycles.
 *
 * Reading every ready node each cycle took ~150 ms of PostgreSQL a cycle at 10k nodes under load
 * (tests/bench/scale), for rows that change on a registration, a loss or new devices. The leader reads
 * them all once, then each cycle only the nodes that triggers named in node_changes
 * (migrations/0059_node_changes.sql) since its previous read (change_log.c): each is read again and
 * replaces what the cache held of it, or leaves it when it is no longer ready. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "pg.h"
#include "service_internal.h"

/* What placement reads of a node, after its id (column 0). */
#define NODE_COLUMNS                                                                                                   \
    "n.dc, n.device_type, n.gpus, n.cpu_milli, n.memory_mib, coalesce((n.devices->0->>'memory_mib')::int, 0), "        \
    "n.address"

static void node_free(void *entry) {
    struct cached_node *n = entry;
    free(n->id);
    free(n->dc);
    free(n->device_type);
    free(n->address);
}

void node_cache_reset(struct node_cache *c) {
    for (int i = 0; i < c->n; i++) node_free(&c->a[i]);
    free(c->a);
    free(c->by_id);
    memset(c, 0, sizeof *c);
}

/* The placement library's order of nodes (by data center, then id), which the full read had. */
static int cmp_node(const void *x, const void *y) {
    const struct cached_node *a = x, *b = y;
    int c = strcmp(a->dc, b->dc);
    return c ? c : strcmp(a->id, b->id);
}

/* qsort_r is not C17: the nodes whose indexes are being sorted are passed through a file-scope pointer. */
static const struct cached_node *sorting;
static int cmp_index_by_id(const void *x, const void *y) {
    return strcmp(sorting[*(const int *)x].id, sorting[*(const int *)y].id);
}

int node_cache_refresh(struct node_cache *c, PGconn *conn, struct whet_err *err) {
    const char *params[] = {c->loaded ? c->xmin : NULL};
    char xmin[CHANGE_XMIN_LEN];
    if (change_log_advance(conn, "node_changes", params[0], xmin, err) < 0) return -1;
    PGresult *res;
    if (c->loaded) /* a node no longer ready (lost, cordoned, deleted) comes with NULLs */
        res = whet_pg_query(conn,
                            "WITH ch AS (SELECT DISTINCT node_id FROM node_changes WHERE xid >= $1::xid8)"
                            " SELECT ch.node_id, " NODE_COLUMNS
                            " FROM ch LEFT JOIN nodes n ON n.id = ch.node_id AND n.state = 'ready'",
                            1, params, err);
    else
        res = whet_pg_query(conn, "SELECT n.id, " NODE_COLUMNS " FROM nodes n WHERE n.state = 'ready'", 0, NULL, err);
    if (!res) return -1;
    int rows = PQntuples(res);
    if (c->loaded) /* what the read holds of the changed nodes replaces them */
        c->n = change_log_drop(c->a, c->n, sizeof *c->a, offsetof(struct cached_node, id), res, node_free);
    else
        node_cache_reset(c);
    if (c->n + rows > c->cap) {
        c->cap = c->n + rows + 1024;
        c->a = xrealloc(c->a, (size_t)c->cap * sizeof *c->a);
    }
    for (int r = 0; r < rows; r++) {
        if (PQgetisnull(res, r, 1)) continue;
        c->a[c->n++] = (struct cached_node){
            .id = xstrdup(PQgetvalue(res, r, 0)),
            .dc = xstrdup(PQgetvalue(res, r, 1)),
            .device_type = xstrdup(PQgetvalue(res, r, 2)),
            .gpus = atoi(PQgetvalue(res, r, 3)),
            .cpu_milli = atoll(PQgetvalue(res, r, 4)),
            .mem_mib = atoll(PQgetvalue(res, r, 5)),
            .gpu_mem_mib = atoi(PQgetvalue(res, r, 6)),
            .address = xstrdup(PQgetvalue(res, r, 7)),
        };
    }
    PQclear(res);
    if (rows > 0 || !c->loaded) {
        static unsigned generations;
        if (++generations == 0) generations = 1;
        c->generation = generations;
        if (c->n) qsort(c->a, (size_t)c->n, sizeof *c->a, cmp_node); /* no node yet: c->a is NULL */
        free(c->by_id);
        c->by_id = xcalloc((size_t)c->n + 1, sizeof *c->by_id);
        for (int i = 0; i < c->n; i++) c->by_id[i] = i;
        sorting = c->a;
        qsort(c->by_id, (size_t)c->n, sizeof *c->by_id, cmp_index_by_id);
    }
    memcpy(c->xmin, xmin, sizeof xmin);
    c->loaded = 1;
    return 0;
}
