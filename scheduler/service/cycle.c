/* cycle.c - one scheduling cycle of the leader: leases, tenant requests, sizing, placement, and what
 * the tenant sees of it.
 *
 * The snapshot is read from PostgreSQL each cycle (the fleet and queue of one control plane fit
 * easily), the running attempts as changes to what the leader already holds (running.c), the queued
 * jobs' specifications once per job (queue.c). Each queued job is sized (scheduler/placement/sizing.h: gang and minimum device memory from
 * its base model, method, batch and sequence length, within whet.max_gpus and on the pools its
 * whet.gpu_types and whet.regions allow, at least whet.min_gpus), handed to the placement library,
 * which places a job on one node or, too big for any one, over the fewest nodes of one data center; a
 * job on more than one device runs as a gang (gang.c: one attempt of N ranks, one trainer process per
 * device, on one node or several), and its decisions are
 * written back: PLACE decisions in batches, each one statement (so one transaction), PREEMPT each in
 * its own, so a crash between two writes leaves a consistent state to start again from; then, in one
 * transaction, the public state of every job (public_state.c): wait_reason and queue_position of the
 * waiting ones (a running job's estimated_finish is its readers', from its progress: migrations/
 * 0029_job_progress.sql). Co-trainable jobs (LoRA SFT, DPO or GRPO on one device) carry their base's key and
 * memory split into placement, which may pack them into a group on one device
 * (scheduler/placement/cotrain.c): the group is named here, recorded on each member's attempt and handed
 * to the executor in the START manifests; MOVE_OUT decisions stop a member like a preemption, to be
 * placed alone next cycle. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crypto.h"
#include "job_sizing.h"
#include "log.h"
#include "pg.h"
#include "placement.h"
#include "service_internal.h"
#include "serving.h"
#include "sizing.h"

/* ------------------------------------------------------------------------------------------------
 * Tenant requests (leases: leases.c)
 * ---------------------------------------------------------------------------------------------- */

/* Pause and cancel of jobs that run somewhere become STOP and CANCEL commands (once per attempt and
 * node: to every node of a gang that runs its ranks); queued jobs change state at once. Both find the
 * jobs asked to stop through jobs_stop_requested (migrations/0020_scheduler_scale.sql). */
static int apply_tenant_requests(PGconn *conn, struct whet_err *err) {
    return whet_pg_exec(conn,
                        "INSERT INTO node_commands (node_id, job_id, attempt, kind, grace_ms, reason)"
                        " SELECT n.node_id, a.job_id, a.attempt, CASE j.desired WHEN 'pause' THEN 'stop' ELSE 'cancel' END,"
                        "   30000, j.desired FROM jobs j JOIN job_attempts a ON a.job_id = j.id AND a.ended_at IS NULL"
                        " CROSS JOIN LATERAL " GANG_NODES_SQL " n"
                        " WHERE j.desired IN ('pause', 'cancel') AND j.status IN ('queued', 'running') AND NOT EXISTS (SELECT 1 FROM node_commands c"
                        "   WHERE c.job_id = j.id AND c.attempt = a.attempt AND c.node_id = n.node_id"
                        "   AND c.kind IN ('stop', 'cancel'))",
                        0, NULL, err) < 0 ||
                   whet_pg_exec(conn,
                                "UPDATE jobs SET status = CASE desired WHEN 'pause' THEN 'paused' ELSE 'cancelled' END,"
                                " finished_at = CASE desired WHEN 'cancel' THEN whet_now() END"
                                " WHERE status = 'queued' AND desired IN ('pause', 'cancel')",
                                0, NULL, err) < 0
               ? -1
               : 0;
}

/* ------------------------------------------------------------------------------------------------
 * The snapshot
 * ---------------------------------------------------------------------------------------------- */

/* Small name -> id tables for data centers and device types. */
struct names {
    int n;
    char *name[PL_MAX_TYPES];
};

static int name_id(struct names *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->name[i], name)) return i;
    if (t->n == PL_MAX_TYPES) return -1;
    t->name[t->n] = xstrdup(name);
    return t->n++;
}

static void names_free(struct names *t) {
    for (int i = 0; i < t->n; i++) free(t->name[i]);
}

/* A (data center, device type, device memory) group of nodes: its devices (pool.max_node_devices:
 * a gang may span its nodes) and its largest node. */
struct sizing_pool {
    int dc, type;
    int largest_node;
    struct sz_pool pool;
};

struct snapshot {
    struct names dcs, types;
    int n_tenants;
    char **tenant_ids;          /* the tenants with active jobs, sorted (strcmp): a job's tenant index */
    struct pl_tenant *tenants;  /* their weights and quotas, same order */
    int n_nodes;
    struct pl_node *nodes;
    char **node_ids, **node_addrs; /* the node cache's strings, for this cycle */
    const int *node_by_id;         /* node indexes sorted by id, to find a running attempt's node (the cache's) */
    int n_pools;
    struct sizing_pool *pools; /* the fleet as sizing sees it */
    int n_running, n_queued, running_cap;
    struct pl_job *running, *queued;  /* stable addresses for the library; running: running_cap of room */
    char **running_ids, **queued_ids; /* running_ids: the running cache's strings */
    int *running_attempts;
    struct running_attempt **running_cached; /* each running job's entry in the running cache, for this cycle */
    int *running_gpus;               /* each running job's devices before placement resizes it (elastic) */
    struct sz_choice *sized;         /* per queued job: its gang, or why no node holds it */
    /* Co-training groups (scheduler/placement/cotrain.c). Running: placement id k+1 is the group named
     * running_groups[k] (the running cache's strings). Formed this cycle: named by name_new_groups. */
    const char **running_groups;
    int n_running_groups;
    int *running_group_members;      /* running members of each */
    int *running_group_slots;        /* running_groups by name: an open-addressing table of indexes (-1: empty) */
    unsigned n_running_group_slots;  /* a power of two, 0 until the first co-trained attempt */
    struct new_group *new_groups;
    int n_new_groups;
    int *new_group_at;               /* placement's group id -> index in new_groups (-1: none), ids 0..max */
    uint64_t max_new_group_id;
};

/* A co-training group placement put jobs into in this cycle, formed now or running: placement's id, the
 * name its attempts record and the START manifests carry, its members placed now (their job ids) and those
 * already running (joined: its running process takes the new ones). */
struct new_group {
    uint64_t id;
    char name[40];
    json_t *members;
    int running;
};

/* The array of running jobs is kept from one snapshot for the next: 80k running jobs at 10k nodes x 8 take
 * 35 MB, which glibc maps afresh for each allocation of that size (past its largest mmap threshold), and
 * the first writes to those fresh pages (their page faults) were a quarter of the scheduler's CPU at a full
 * fleet (perf, tests/bench/scale/cycle.sh). Each entry is cleared where it is filled (load_snapshot). */
static struct pl_job *running_array(struct scheduler *sch, int n, int *cap) {
    struct pl_job *a = sch->running_spare;
    int spare = sch->running_spare_n;
    sch->running_spare = NULL, sch->running_spare_n = 0;
    if (a && spare >= n) {
        *cap = spare;
        return a;
    }
    free(a);
    *cap = n + n / 8; /* a growing fleet does not map a new array every cycle */
    return xmalloc((size_t)*cap * sizeof *a);
}

static void snapshot_free(struct scheduler *sch, struct snapshot *s) {
    if (s->running && s->running_cap > sch->running_spare_n) {
        free(sch->running_spare);
        sch->running_spare = s->running, sch->running_spare_n = s->running_cap;
    } else {
        free(s->running);
    }
    for (int i = 0; i < s->n_queued; i++) free(s->queued_ids[i]);
    for (int i = 0; i < s->n_tenants; i++) free(s->tenant_ids[i]);
    free(s->tenant_ids);
    free(s->tenants);
    free(s->nodes);
    free(s->node_ids);
    free(s->node_addrs);
    free(s->queued);
    free(s->running_ids);
    free(s->queued_ids);
    free(s->running_attempts);
    free(s->running_cached);
    free(s->running_gpus);
    free(s->pools);
    free(s->sized);
    free(s->running_groups);
    free(s->running_group_members);
    free(s->running_group_slots);
    for (int i = 0; i < s->n_new_groups; i++) json_decref(s->new_groups[i].members);
    free(s->new_groups);
    free(s->new_group_at);
    names_free(&s->dcs);
    names_free(&s->types);
}

/* Binary search of `id` in the strings names[order[k]] (order NULL: names itself), sorted by strcmp.
 * Returns the index into names, or -1. */
static int sorted_find(char *const *names, const int *order, int n, const char *id) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, k = order ? order[mid] : mid, c = strcmp(names[k], id);
        if (c == 0) return k;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* A running attempt's node by id: a linear search for each attempt would cost nodes x attempts. */
static int node_index(const struct snapshot *s, const char *id) {
    return sorted_find(s->node_ids, s->node_by_id, s->n_nodes, id);
}

/* Bit mask of the names in a JSON array that the table knows (0 when the array is absent: any). An
 * array naming only unknown entries gives a mask no pool matches, so the job waits with a reason. */
static uint64_t mask_of(json_t *array, struct names *t) {
    if (!json_is_array(array) || json_array_size(array) == 0) return 0;
    uint64_t mask = 0;
    size_t i;
    json_t *v;
    json_array_foreach(array, i, v) {
        const char *name = json_string_value(v);
        for (int k = 0; name && k < t->n; k++)
            if (!strcmp(t->name[k], name)) mask |= 1ull << k;
    }
    return mask ? mask : 1ull << 63;
}

/* What every job carries into placement: tenant, priority, arrival, and the types and regions its
 * `whet` extension allows. Its size is set apart: from its attempt when it runs, by sizing when it
 * waits. */
static void placement_job_init(struct pl_job *j, struct snapshot *s, const char *tenant_id, json_t *whet,
                               int priority, double created_at, uint64_t id) {
    j->id = id;
    j->tenant = sorted_find(s->tenant_ids, NULL, s->n_tenants, tenant_id); /* -1: its tenant came after the
                                                                               snapshot's; no quota, this cycle */
    j->priority = priority;
    j->gpus = 1;
    j->gpu_milli = PL_MILLI;
    j->allowed_types = mask_of(json_object_get(whet, "gpu_types"), &s->types);
    j->allowed_dcs = mask_of(json_object_get(whet, "regions"), &s->dcs);
    j->preemptible = 1;
    j->grace_s = 30;
    j->submit_time = created_at;
}

/* Whether the job's whet.gpu_types and whet.regions admit the pool. */
static int pool_allowed(const struct pl_job *j, const struct sizing_pool *sp) {
    if (j->allowed_types && (sp->type < 0 || !(j->allowed_types >> sp->type & 1))) return 0;
    return !j->allowed_dcs || (sp->dc >= 0 && (j->allowed_dcs >> sp->dc & 1));
}

/* The co-training key of a base model: FNV-1a of its id, never 0 (0: not co-trainable). The method is not
 * in it: one co-training process runs SFT, DPO and GRPO members side by side. */
static uint64_t cotrain_key(const char *base_model) {
    uint64_t h = whet_hash_text(base_model);
    return h ? h : 1;
}

/* Seconds an elastic job runs at a size before placement may grow or shrink it. */
#define ELASTIC_MIN_RUN_S 5

/* Sizes a queued job over the pools it may use: sets its gang and minimum device memory. An elastic job
 * the scheduler resized (resize_to > 0: migrations/0023_elastic.sql) restarts at that size. A co-training
 * group's passes hold at most pass_tokens tokens (scheduler_options.cotrain_pass_tokens). */
static void size_job(struct pl_job *j, struct sz_choice *out, const struct snapshot *s,
                     const struct job_sizing_spec *spec, const struct sz_model *model, int resize_to,
                     const char *base_model, int32_t pass_tokens) {
    struct sz_pool *allowed = xcalloc((size_t)s->n_pools + 1, sizeof *allowed);
    int n = 0;
    for (int p = 0; p < s->n_pools; p++)
        if (pool_allowed(j, &s->pools[p])) allowed[n++] = s->pools[p].pool;
    struct sz_estimate e;
    j->gpus = job_sizing_choose(out, &e, model, spec, allowed, n);
    free(allowed);
    if (resize_to > 0) j->gpus = resize_to;
    j->min_gpu_mem_mib = out->min_gpu_mem_mib;
    /* A co-trainable job on one device may share it with jobs of its base (the key), each
     * adding its own part of the memory to the base's once (placement's cotrain.c). */
    if (e.cotrainable && j->gpus == 1) {
        j->cotrain_key = cotrain_key(base_model);
        sz_cotrain_mib(&e, pass_tokens, &j->cotrain_base_mib, &j->cotrain_member_mib);
    }
    /* A gang that one allowed node holds stays on one node, where its ranks talk over the node's own
     * links (NVLink, loopback) rather than the network; a bigger one may span the nodes of one data
     * center. Either way one trainer process per device (gang_ranks). */
    int largest = 0;
    for (int p = 0; p < s->n_pools; p++)
        if (pool_allowed(j, &s->pools[p]) && s->pools[p].largest_node > largest) largest = s->pools[p].largest_node;
    j->max_nodes = s->n_pools > 0 && j->gpus > largest ? 0 : 1;
}

/* The sizing pools of the fleet: one per (data center, device type, device memory), with its devices
 * and its largest node. */
static void load_pools(struct snapshot *s) {
    s->pools = xcalloc((size_t)s->n_nodes + 1, sizeof *s->pools);
    for (int i = 0; i < s->n_nodes; i++) {
        const struct pl_node *n = &s->nodes[i];
        int p = 0;
        while (p < s->n_pools && !(s->pools[p].dc == n->dc && s->pools[p].type == n->gpu_type &&
                                   s->pools[p].pool.device_mib == n->gpu_mem_mib))
            p++;
        if (p == s->n_pools)
            s->pools[s->n_pools++] = (struct sizing_pool){.dc = n->dc, .type = n->gpu_type, .pool.device_mib = n->gpu_mem_mib};
        s->pools[p].pool.max_node_devices += n->gpus;
        if (n->gpus > s->pools[p].largest_node) s->pools[p].largest_node = n->gpus;
    }
}

/* Adds a node's devices to an allocation: to its slot when it has one. */
static void alloc_add(struct pl_alloc *a, int node, uint16_t mask) {
    int k = 0;
    while (k < a->n_slots && a->slots[k].node != node) k++;
    if (k == a->n_slots) {
        if (k == PL_MAX_NODES_PER_JOB) return;
        a->slots[a->n_slots++] = (struct pl_slot){.node = node};
    }
    a->slots[k].gpu_mask |= mask;
    a->slots[k].gpu_count = (uint16_t)__builtin_popcount(a->slots[k].gpu_mask);
}

/* A running gang's allocation from its ranks ("NODE MASK NODE MASK …"); nodes not ready are left
 * out (they are being declared lost, which ends the gang). */
static void gang_alloc(const struct snapshot *s, struct pl_alloc *a, const char *ranks) {
    char *copy = xstrdup(ranks), *save = NULL;
    for (char *node = strtok_r(copy, " ", &save), *mask; node && (mask = strtok_r(NULL, " ", &save));
         node = strtok_r(NULL, " ", &save)) {
        int n = node_index(s, node);
        if (n >= 0) alloc_add(a, n, (uint16_t)atoi(mask));
    }
    free(copy);
}

/* The weights and quotas of the tenants with active jobs, in one query, sorted by id as strcmp sorts
 * (COLLATE "C") for sorted_find. */
static int load_tenants(PGconn *conn, struct snapshot *s, struct whet_err *err) {
    PGresult *res = whet_pg_query(conn,
                                  "SELECT t.id, t.weight, q.gpu_type, q.gpus FROM tenants t"
                                  " JOIN tenant_active_jobs c ON c.tenant_id = t.id AND c.active > 0"
                                  " LEFT JOIN quotas q ON q.tenant_id = t.id ORDER BY t.id COLLATE \"C\"",
                                  0, NULL, err);
    if (!res) return -1;
    int rows = PQntuples(res);
    s->tenant_ids = xcalloc((size_t)rows + 1, sizeof *s->tenant_ids);
    s->tenants = xcalloc((size_t)rows + 1, sizeof *s->tenants);
    for (int r = 0; r < rows; r++) {
        const char *id = PQgetvalue(res, r, 0);
        if (!s->n_tenants || strcmp(s->tenant_ids[s->n_tenants - 1], id)) { /* one row per quota */
            s->tenant_ids[s->n_tenants] = xstrdup(id);
            s->tenants[s->n_tenants].weight = atof(PQgetvalue(res, r, 1));
            s->tenants[s->n_tenants].may_borrow = 1;
            s->n_tenants++;
        }
        if (PQgetisnull(res, r, 2)) continue;
        for (int k = 0; k < s->types.n; k++)
            if (!strcmp(s->types.name[k], PQgetvalue(res, r, 2)))
                s->tenants[s->n_tenants - 1].quota_gpus[k] = atoi(PQgetvalue(res, r, 3));
    }
    PQclear(res);
    return 0;
}

/* Placement's id of a running co-training group: its members share one. Found by name in a table sized
 * for `most` groups (a fleet of co-training has thousands: a search per member was O(members x groups)). */
static uint64_t running_group_id(struct snapshot *s, const char *name, int most) {
    if (!s->n_running_group_slots) {
        s->n_running_group_slots = 16;
        while (s->n_running_group_slots < 2u * (unsigned)most) s->n_running_group_slots *= 2;
        s->running_group_slots = xmalloc(s->n_running_group_slots * sizeof *s->running_group_slots);
        memset(s->running_group_slots, 0xff, s->n_running_group_slots * sizeof *s->running_group_slots);
        s->running_group_members = xcalloc((size_t)most, sizeof *s->running_group_members);
    }
    unsigned mask = s->n_running_group_slots - 1, k = (unsigned)whet_hash_text(name) & mask;
    while (s->running_group_slots[k] >= 0 && strcmp(s->running_groups[s->running_group_slots[k]], name))
        k = (k + 1) & mask;
    if (s->running_group_slots[k] < 0) {
        s->running_group_slots[k] = s->n_running_groups;
        s->running_groups[s->n_running_groups++] = name;
    }
    s->running_group_members[s->running_group_slots[k]]++;
    return (uint64_t)s->running_group_slots[k] + 1;
}

/* How often a co-trained member's work left is read again: in between, the last read less the time since.
 * Reading every member each cycle (~15k under churn in tests/bench/scale, their progress rows by key) took
 * ~270 ms of a cycle; a move-out needs only whether a member has minutes left, not its latest step. */
#define MEMBERS_REMAINING_READ_S 10.0

/* Each co-trained member's work left at its pace so far (pl_job.remaining_s), from its progress row, so
 * that placement keeps a member about to end in its group. The row's step is written at most every
 * progress_ms, so the estimate errs long (a move that may not pay), never short. Only the members not read
 * within MEMBERS_REMAINING_READ_S are read (and those never read: new, or without progress yet). */
static int load_members_remaining(struct snapshot *s, PGconn *conn, struct whet_err *err) {
    int *members = xcalloc((size_t)s->n_running + 1, sizeof *members), n = 0; /* index in s->running */
    double now = whet_now_mono();
    json_t *ids = json_array();
    for (int i = 0; i < s->n_running; i++) {
        const struct running_attempt *ra = s->running_cached[i];
        if (!s->running[i].cotrain_group ||
            (ra->remaining_read_at > 0 && now - ra->remaining_read_at < MEMBERS_REMAINING_READ_S))
            continue;
        members[n++] = i;
        json_array_append_new(ids, json_string(s->running_ids[i]));
    }
    PGresult *res = NULL;
    if (n > 0) {
        char *list = json_dumps(ids, JSON_COMPACT);
        const char *params[] = {list};
        res = whet_pg_query(conn,
                            "SELECT x.i - 1, p.attempt, p.last_step - p.resume_step, p.total_steps - p.last_step,"
                            " extract(epoch FROM clock_timestamp()) - p.started_at"
                            " FROM jsonb_array_elements_text($1::jsonb) WITH ORDINALITY AS x(id, i)"
                            " JOIN job_progress p ON p.job_id = x.id"
                            " WHERE p.total_steps IS NOT NULL AND p.last_step > p.resume_step",
                            1, params, err);
        free(list);
    }
    json_decref(ids);
    for (int r = 0; res && r < PQntuples(res); r++) {
        int k = members[atoi(PQgetvalue(res, r, 0))];
        if (atoi(PQgetvalue(res, r, 1)) != s->running_attempts[k]) continue; /* an earlier attempt's */
        double done = atof(PQgetvalue(res, r, 2)), left = atof(PQgetvalue(res, r, 3)),
               ran_s = atof(PQgetvalue(res, r, 4));
        if (ran_s <= 0) continue;
        s->running_cached[k]->remaining_s = left * ran_s / done;
        s->running_cached[k]->remaining_read_at = now;
    }
    int rc = n == 0 || res ? 0 : -1;
    PQclear(res);
    free(members);
    for (int i = 0; i < s->n_running; i++) {
        const struct running_attempt *ra = s->running_cached[i];
        if (s->running[i].cotrain_group && ra->remaining_read_at > 0) /* 0 would read "unknown" */
            s->running[i].remaining_s = fmax(ra->remaining_s - (now - ra->remaining_read_at), 1e-3);
    }
    return rc;
}

/* The shapes of the base models the queue's jobs train (job_sizing_model), read each cycle: few rows. */
struct base_shapes {
    int n;
    char **ids; /* by id (strcmp) */
    struct sz_model *models;
};

/* Reads the base models named in column 6 of the queue's rows. */
static int load_base_shapes(PGconn *conn, const PGresult *queue, struct base_shapes *b, struct whet_err *err) {
    int rows = PQntuples(queue);
    char **named = xcalloc((size_t)rows + 1, sizeof *named);
    for (int r = 0; r < rows; r++) named[r] = PQgetvalue(queue, r, 6);
    qsort(named, (size_t)rows, sizeof *named, whet_cmp_strp);
    json_t *names = json_array();
    for (int r = 0; r < rows; r++)
        if (!r || strcmp(named[r], named[r - 1])) json_array_append_new(names, json_string(named[r]));
    free(named);
    char *list = json_dumps(names, JSON_COMPACT);
    json_decref(names);
    const char *params[] = {list};
    PGresult *res = whet_pg_query(conn,
                                  "SELECT id, parameters, config::text FROM base_models"
                                  " WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb))) ORDER BY id COLLATE \"C\"",
                                  1, params, err);
    free(list);
    if (!res) return -1;
    b->n = PQntuples(res);
    b->ids = xcalloc((size_t)b->n + 1, sizeof *b->ids);
    b->models = xcalloc((size_t)b->n + 1, sizeof *b->models);
    for (int r = 0; r < b->n; r++) {
        b->ids[r] = xstrdup(PQgetvalue(res, r, 0));
        job_sizing_model(&b->models[r], PQgetvalue(res, r, 1), PQgetvalue(res, r, 2));
    }
    PQclear(res);
    return 0;
}

static const struct sz_model *base_shape(const struct base_shapes *b, const char *id) {
    int at = sorted_find(b->ids, NULL, b->n, id);
    return at < 0 ? NULL : &b->models[at];
}

static void base_shapes_free(struct base_shapes *b) {
    for (int i = 0; i < b->n; i++) free(b->ids[i]);
    free(b->ids);
    free(b->models);
}

/* A device a model worker holds (serving.h) takes no job, unless a running attempt of the snapshot holds
 * it already (a job preempted for the worker, still checkpointing there): its alloc takes it from the
 * free, and taking it twice would leave less than nothing. Decided against the running set the cycle
 * places with, not against the attempts running when the workers were read: an attempt that ended
 * between the two reads would have left the device free to a job while its worker was starting on it. */
static void hold_workers_devices(struct snapshot *s, uint32_t *worker_held) {
    for (int i = 0; i < s->n_running; i++) {
        const struct pl_alloc *a = &s->running[i].alloc;
        for (int k = 0; k < a->n_slots; k++) worker_held[a->slots[k].node] &= ~(uint32_t)a->slots[k].gpu_mask;
    }
    for (int i = 0; i < s->n_nodes; i++)
        for (int g = 0; g < s->nodes[i].gpus; g++)
            if (worker_held[i] >> g & 1) s->nodes[i].gpu_free_milli[g] = 0;
}

/* The devices model workers hold (serving.h), by node: worker_held[i] for node i, a mask. A device that a job
 * preempted for a worker still holds is the job's until its attempt ends (hold_workers_devices). */
static int load_workers_held(PGconn *conn, const struct snapshot *s, uint32_t *worker_held, struct whet_err *err) {
    PGresult *res = whet_pg_query(conn, "SELECT node_id, bit_or(1 << device_index) FROM model_workers GROUP BY node_id",
                                  0, NULL, err);
    if (!res) return -1;
    for (int r = 0; r < PQntuples(res); r++) {
        int node = node_index(s, PQgetvalue(res, r, 0));
        if (node >= 0) worker_held[node] = (uint32_t)atoll(PQgetvalue(res, r, 1));
    }
    PQclear(res);
    return 0;
}

/* The cycle's view of the database. silent: the nodes that take no new work this cycle
 * (scheduler_expire_leases), "ID ID …" or NULL. */
static int load_snapshot(struct scheduler *sch, PGconn *conn, const char *silent, struct snapshot *s,
                         struct whet_err *err) {
    memset(s, 0, sizeof *s);
    if (node_cache_refresh(&sch->nodes, conn, err) < 0) return -1;
    const struct node_cache *nc = &sch->nodes;
    s->n_nodes = nc->n;
    s->nodes = xcalloc((size_t)s->n_nodes + 1, sizeof *s->nodes);
    s->node_ids = xcalloc((size_t)s->n_nodes + 1, sizeof *s->node_ids);
    s->node_addrs = xcalloc((size_t)s->n_nodes + 1, sizeof *s->node_addrs);
    s->node_by_id = nc->by_id;
    for (int i = 0; i < s->n_nodes; i++) {
        const struct cached_node *c = &nc->a[i];
        struct pl_node *n = &s->nodes[i];
        s->node_ids[i] = c->id;
        s->node_addrs[i] = c->address;
        n->dc = name_id(&s->dcs, c->dc);
        n->gpu_type = name_id(&s->types, c->device_type);
        n->gpus = c->gpus > PL_MAX_GPUS_PER_NODE ? PL_MAX_GPUS_PER_NODE : c->gpus;
        n->cpu_milli = c->cpu_milli;
        n->mem_mib = c->mem_mib;
        n->gpu_mem_mib = c->gpu_mem_mib;
        n->schedulable = 1;
        pl_node_reset_free(n);
    }
    if (silent) {
        char *copy = xstrdup(silent), *save = NULL;
        for (char *id = strtok_r(copy, " ", &save); id; id = strtok_r(NULL, " ", &save)) {
            int node = node_index(s, id);
            if (node >= 0) s->nodes[node].schedulable = 0;
        }
        free(copy);
    }
    load_pools(s);
    uint32_t *worker_held = xcalloc((size_t)s->n_nodes + 1, sizeof *worker_held);
    if (load_workers_held(conn, s, worker_held, err) < 0) {
        free(worker_held);
        return -1;
    }
    if (load_tenants(conn, s, err) < 0 || running_refresh(&sch->running, conn, err) < 0) {
        free(worker_held);
        return -1;
    }

    /* The running attempts, brought up to date (running.c). */
    struct running_cache *rc = &sch->running;
    s->running = running_array(sch, rc->n + 1, &s->running_cap);
    s->running_ids = xcalloc((size_t)rc->n + 1, sizeof *s->running_ids);
    s->running_attempts = xcalloc((size_t)rc->n + 1, sizeof *s->running_attempts);
    s->running_cached = xcalloc((size_t)rc->n + 1, sizeof *s->running_cached);
    s->running_gpus = xcalloc((size_t)rc->n + 1, sizeof *s->running_gpus);
    s->running_groups = xcalloc((size_t)rc->n + 1, sizeof *s->running_groups);
    double now = (double)whet_now_unix();
    for (int i = 0; i < rc->n; i++) {
        struct running_attempt *ra = &rc->a[i];
        struct pl_job *j = &s->running[s->n_running];
        memset(j, 0, sizeof *j);
        if (!ra->ranks) {
            if (ra->node_generation != sch->nodes.generation) {
                ra->node_index = node_index(s, ra->node_id);
                ra->node_generation = sch->nodes.generation;
            }
            int node = ra->node_index;
            if (node >= 0) alloc_add(&j->alloc, node, (uint16_t)ra->gpu_mask);
        } else {
            gang_alloc(s, &j->alloc, ra->ranks);
        }
        if (j->alloc.n_slots == 0) continue; /* its node is being declared lost */
        /* A running job holds what its attempt holds, wherever that is: no type or region filter. */
        placement_job_init(j, s, ra->tenant_id, NULL, ra->priority, ra->created_at, (uint64_t)ra->seq);
        j->gpus = 0;
        for (int k = 0; k < j->alloc.n_slots; k++) j->gpus += j->alloc.slots[k].gpu_count;
        /* A victim already told to stop keeps its resources until it has; the library then waits for it
         * instead of choosing new victims. Victims are chosen by the work they lose since their last
         * checkpoint. */
        j->state = ra->stopping ? PL_JOB_STOPPING : PL_JOB_RUNNING;
        /* Elastic (whet.min_gpus < whet.max_gpus): placement grows it into idle devices when nobody
         * waits and shrinks it before stopping anyone (record_resize) — once it has run a while, so a
         * job placed beside idle devices is not restarted at once. A member of a co-training group
         * shares its device: placement knows its group (one member holds the device) and resizes none. */
        if (ra->cotrain_group) {
            j->cotrain_group = running_group_id(s, ra->cotrain_group, rc->n);
            j->cotrain_key = cotrain_key(ra->base_model); /* jobs of its base may join its group */
        } else if (ra->max_gpus > ra->min_gpus && ra->max_gpus > 1 && now - ra->started_at >= ELASTIC_MIN_RUN_S) {
            j->min_gpus = ra->min_gpus > 1 ? ra->min_gpus : 1;
            j->max_gpus = ra->max_gpus;
        }
        s->running_gpus[s->n_running] = j->gpus;
        j->start_time = ra->started_at;
        j->last_checkpoint_time = ra->last_checkpoint;
        s->running_ids[s->n_running] = ra->job_id; /* the cache's, for this cycle */
        s->running_attempts[s->n_running] = ra->attempt;
        s->running_cached[s->n_running] = ra;
        s->n_running++;
    }
    hold_workers_devices(s, worker_held);
    free(worker_held);
    if (s->n_running_groups > 0 && load_members_remaining(s, conn, err) < 0) return -1;

    /* The head of the queue in order; what never changes of each job comes from the cache (queue.c). */
    PGresult *res = whet_pg_query(conn,
                                  "SELECT id, tenant_id, priority, created_at, seq, resize_to, base_model FROM jobs"
                                  " WHERE status = 'queued' AND desired = 'run' ORDER BY seq LIMIT 10000",
                                  0, NULL, err);
    if (!res) return -1;
    int rows = PQntuples(res);
    char **ids = xcalloc((size_t)rows + 1, sizeof *ids);
    for (int r = 0; r < rows; r++) ids[r] = PQgetvalue(res, r, 0);
    struct base_shapes bases = {0};
    int failed = queue_cache_update(&sch->queue, conn, ids, rows, err) < 0 || load_base_shapes(conn, res, &bases, err) < 0;
    free(ids);
    if (failed) {
        PQclear(res);
        return -1;
    }
    s->queued = xcalloc((size_t)rows + 1, sizeof *s->queued);
    s->queued_ids = xcalloc((size_t)rows + 1, sizeof *s->queued_ids);
    s->sized = xcalloc((size_t)rows + 1, sizeof *s->sized);
    for (int r = 0; r < rows; r++) {
        const struct queued_spec *spec = queue_cache_find(&sch->queue, PQgetvalue(res, r, 0));
        const struct sz_model *model = base_shape(&bases, PQgetvalue(res, r, 6));
        if (!spec || !model) continue; /* deleted since, or its base model is */
        int i = s->n_queued++;
        placement_job_init(&s->queued[i], s, PQgetvalue(res, r, 1), spec->whet, atoi(PQgetvalue(res, r, 2)),
                           atof(PQgetvalue(res, r, 3)), (uint64_t)atoll(PQgetvalue(res, r, 4)));
        size_job(&s->queued[i], &s->sized[i], s, &spec->sizing, model, atoi(PQgetvalue(res, r, 5)),
                 PQgetvalue(res, r, 6), sch->opts->cotrain_pass_tokens);
        s->queued_ids[i] = xstrdup(PQgetvalue(res, r, 0));
    }
    base_shapes_free(&bases);
    PQclear(res);
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * Decisions
 * ---------------------------------------------------------------------------------------------- */

/* How long one cycle runs before it leaves the decisions it has not written to the next cycles (kept_plan
 * below): filling an empty fleet of 1000 nodes took one cycle of 117 s in tests/bench/scale, during which
 * no lease expired, no pause or cancel was applied and no newly created job was considered. The target is
 * --cycle-target-ms; a cycle writes one batch at least. */
#define CYCLE_TARGET_MS_DEFAULT 800

/* Placements are written PLACE_BATCH at a time, each batch one query for the manifests' rows and one
 * statement for every row they write (one at a time they cost 5 round trips and ~1.8 ms of database
 * time each in tests/bench/scale). A batch is also the unit of the budget above. */
#define PLACE_BATCH 256

/* A PLACE decision waiting for its batch: the queued job's index in the snapshot and the decision. */
struct placement {
    int q;
    const struct pl_decision *d;
};

/* A gang's ranks, one per device of its allocation (`world` of them) in slot order (rank 0: the first
 * slot's lowest device), each with its START manifest, as the JSON array the batch inserts into
 * gang_ranks; and "node A (ranks 0-1), node B (ranks 2-3)" for the placement event. q: the job's index
 * in the queue (its sizing). */
static json_t *gang_ranks(const struct snapshot *s, int q, const struct pl_alloc *a, int world, const json_t *manifest,
                          int attempt, char *where, size_t where_len) {
    json_t *peers = json_array(), *ranks = json_array();
    for (int k = 0; k < a->n_slots; k++) json_array_append_new(peers, json_string(s->node_addrs[a->slots[k].node]));
    char rendezvous[300];
    snprintf(rendezvous, sizeof rendezvous, "%s:0", s->node_addrs[a->slots[0].node]);
    size_t len = 0;
    where[0] = 0;
    int rank = 0;
    for (int k = 0; k < a->n_slots; k++) {
        const char *node = s->node_ids[a->slots[k].node];
        int first = rank;
        for (int g = 0; g < PL_MAX_GPUS_PER_NODE; g++) {
            if (!(a->slots[k].gpu_mask >> g & 1)) continue;
            struct gang_rank r = {.world_size = world, .rank = rank, .generation = attempt,
                                  .host = s->node_addrs[a->slots[k].node], .rendezvous = rank == 0 ? rendezvous : NULL,
                                  .peers = peers, .base_needs_gang = s->sized[q].gpus > 1};
            json_array_append_new(ranks, json_pack("{s:i, s:s, s:i, s:o}", "rank", rank, "node", node, "mask", 1 << g,
                                                   "manifest", scheduler_rank_manifest(manifest, &r)));
            rank++;
        }
        if (len >= where_len) continue;
        if (rank - first > 1)
            len += (size_t)snprintf(where + len, where_len - len, "%snode %s (ranks %d-%d)", k ? ", " : "", node, first,
                                    rank - 1);
        else
            len += (size_t)snprintf(where + len, where_len - len, "%snode %s (rank %d)", k ? ", " : "", node, first);
    }
    json_decref(peers);
    return ranks;
}

/* The co-training group placement put jobs into in this cycle with placement's id `id`, or NULL. */
static struct new_group *new_group_find(const struct snapshot *s, uint64_t id) {
    return id && id <= s->max_new_group_id && s->new_group_at[id] >= 0 ? &s->new_groups[s->new_group_at[id]] : NULL;
}

/* Names the co-training groups placement put jobs into in this cycle and lists their new members: a
 * running group (placement id k+1 <= n_running_groups) keeps its name, a group formed now (numbered above
 * every running group: pl_cluster_reserve_groups) gets one. Ids are dense (running groups, then those
 * formed in the cycle), so new_group_at is an array by id. */
static void name_new_groups(struct snapshot *s, const struct pl_result *r) {
    s->new_groups = xcalloc((size_t)r->n + 1, sizeof *s->new_groups);
    for (int i = 0; i < r->n; i++)
        if (r->decisions[i].action == PL_PLACE && r->decisions[i].job->cotrain_group > s->max_new_group_id)
            s->max_new_group_id = r->decisions[i].job->cotrain_group;
    s->new_group_at = xmalloc((size_t)(s->max_new_group_id + 1) * sizeof *s->new_group_at);
    memset(s->new_group_at, 0xff, (size_t)(s->max_new_group_id + 1) * sizeof *s->new_group_at);
    for (int i = 0; i < r->n; i++) {
        const struct pl_decision *d = &r->decisions[i];
        if (d->action != PL_PLACE || !d->job->cotrain_group || d->job < s->queued || d->job >= s->queued + s->n_queued)
            continue;
        struct new_group *g = new_group_find(s, d->job->cotrain_group);
        if (!g) {
            s->new_group_at[d->job->cotrain_group] = s->n_new_groups;
            g = &s->new_groups[s->n_new_groups++];
            g->id = d->job->cotrain_group;
            if (g->id <= (uint64_t)s->n_running_groups) {
                snprintf(g->name, sizeof g->name, "%s", s->running_groups[g->id - 1]);
                g->running = s->running_group_members[g->id - 1];
            } else {
                whet_random_id("cotrain-", 24, g->name);
            }
            g->members = json_array();
        }
        json_array_append_new(g->members, json_string(s->queued_ids[d->job - s->queued]));
    }
}

/* One placement as a row of the batch (placement_sql's jsonb_to_recordset): the job's next attempt on
 * the decision's devices with its START manifest, built from row `row` of scheduler_manifest_rows.
 * NULL with err when its manifest cannot be made. */
static json_t *placement_row(struct scheduler *sch, PGconn *conn, const struct snapshot *s, const struct placement *p,
                             const PGresult *rows, int row, struct whet_err *err) {
    const char *job_id = s->queued_ids[p->q];
    const struct pl_alloc *alloc = &p->d->alloc;
    /* More than one device, on one node or several: a gang, one trainer process per device (a process
     * given several devices would train on the first alone). */
    int node = alloc->slots[0].node, world = 0;
    for (int k = 0; k < alloc->n_slots; k++) world += alloc->slots[k].gpu_count;
    int gang = world > 1;
    json_t *manifest = scheduler_manifest_build(conn, sch->opts, rows, row, job_id, alloc->slots[0].gpu_count, err);
    if (!manifest) return NULL;
    const struct new_group *group = new_group_find(s, p->d->job->cotrain_group);
    if (group) scheduler_manifest_cotrain(manifest, group->name, group->members);
    int attempt = (int)json_integer_value(json_object_get(manifest, "attempt"));
    json_t *resume = json_object_get(manifest, "resume");
    int resume_step = json_is_object(resume) ? (int)json_integer_value(json_object_get(resume, "step")) : 0;
    char event_id[40], where[1024];
    whet_random_id("ftevent-", 24, event_id);
    /* A gang's START goes to rank 0 alone; the others get theirs once it has published its address
     * (gang.c). */
    json_t *ranks = gang ? gang_ranks(s, p->q, alloc, world, manifest, attempt, where, sizeof where) : json_array();
    if (!gang) snprintf(where, sizeof where, "node %s", s->node_ids[node]);
    int type = s->nodes[node].gpu_type >= 0 ? s->nodes[node].gpu_type : 0;
    return json_pack("{s:s, s:i, s:s, s:i, s:i, s:s, s:i, s:o, s:s, s:s, s:i, s:o, s:s, s:o, s:i}", "job", job_id,
                     "attempt", attempt, "node", s->node_ids[node], "mask", (int)alloc->slots[0].gpu_mask, "milli",
                     p->d->job->gpu_milli, "type", s->types.name[type], "resume", resume_step, "manifest", manifest,
                     "event", event_id, "dc", s->dcs.name[s->nodes[node].dc], "world", gang ? world : 1,
                     "ranks", ranks, "place", where, "cotrain", group ? json_string(group->name) : json_null(),
                     "cotrain_size", group ? group->running + (int)json_array_size(group->members) : 0);
}

/* Every row of a batch of placements in one statement, so one transaction: each job still queued and
 * on the attempt its manifest was made for moves to running (the jobs row is where exactly-once
 * placement is decided: a job paused, cancelled or placed since the snapshot is skipped, and with it
 * everything below), and gets its attempt, a gang's ranks, the START for its node (a gang's rank 0)
 * and the placement event. Only the leader writes it, on the connection that holds the leader lock.
 * Returns the placed jobs and their attempts. */
static const char *const placement_sql =
    "WITH p AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS p(job text, attempt int, node text, mask int, milli int,"
    "   type text, resume int, manifest jsonb, event text, dc text, world int, ranks jsonb, place text, cotrain text,"
    "   cotrain_size int)),"
    " j AS (UPDATE jobs SET attempt = p.attempt, status = 'running', node_id = p.node, placed_dc = p.dc,"
    "   wait_reason = NULL, queue_position = NULL FROM p"
    "   WHERE jobs.id = p.job AND jobs.status = 'queued' AND jobs.desired = 'run' AND jobs.attempt = p.attempt - 1"
    "   RETURNING jobs.id, jobs.tenant_id),"
    " pj AS (SELECT p.*, j.tenant_id FROM p JOIN j ON j.id = p.job),"
    " a AS (INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, gpu_mask, gpu_milli, device_type, resume_step,"
    "   world_size, rendezvous_deadline, cotrain_group)"
    "   SELECT job, attempt, tenant_id, node, mask, milli, type, resume, world,"
    "     CASE WHEN world > 1 THEN extract(epoch FROM clock_timestamp()) + $2::int END, cotrain FROM pj),"
    " r AS (INSERT INTO gang_ranks (job_id, attempt, rank, node_id, gpu_mask, manifest, started_at)"
    "   SELECT pj.job, pj.attempt, x.rank, x.node, x.mask, x.manifest,"
    "     CASE WHEN x.rank = 0 THEN extract(epoch FROM clock_timestamp()) END"
    "   FROM pj, jsonb_to_recordset(pj.ranks) AS x(rank int, node text, mask int, manifest jsonb)),"
    " c AS (INSERT INTO node_commands (node_id, job_id, attempt, kind, manifest)"
    "   SELECT node, job, attempt, 'start', coalesce((SELECT x.manifest FROM"
    "     jsonb_to_recordset(pj.ranks) AS x(rank int, manifest jsonb) WHERE x.rank = 0), pj.manifest) FROM pj),"
    " e AS (INSERT INTO job_events (id, tenant_id, job_id, message, data)"
    "   SELECT event, tenant_id, job, 'Job placed on ' ||"
    "     CASE WHEN world > 1 THEN 'a gang of ' || world || ' ranks: ' ELSE '' END || place || ' in ' || dc ||"
    "     CASE WHEN resume > 0 THEN ', resuming from step ' || resume ELSE '' END ||"
    "     CASE WHEN cotrain IS NOT NULL THEN ', co-trained with ' || (cotrain_size - 1) || ' other job'"
    "       || CASE WHEN cotrain_size > 2 THEN 's' ELSE '' END || ' of its base model on one device ('"
    "       || cotrain || ')'"
    "     ELSE '' END,"
    "     jsonb_build_object('node', node, 'dc', dc, 'attempt', attempt, 'device_type', type, 'world_size', world,"
    "       'cotrain_group', cotrain)"
    "   FROM pj)"
    " SELECT job, attempt, node, dc, resume, place FROM pj";

/* Writes placements p[0..n): the manifests' rows in one query, then placement_sql. A batch that fails
 * is halved until the placement that fails is alone, which is then logged and left queued: one
 * decision that cannot be written must not hold up the others. Returns how many jobs were placed (a
 * job paused or cancelled since the snapshot is not), or -1 when the connection broke. */
static int write_placements(struct scheduler *sch, PGconn *conn, const struct snapshot *s, const struct placement *p,
                            int n, struct whet_err *err) {
    if (n == 0) return 0;
    json_t *ids = json_array(), *batch = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(ids, json_string(s->queued_ids[p[i].q]));
    char *ids_json = json_dumps(ids, JSON_COMPACT);
    json_decref(ids);
    PGresult *rows = scheduler_manifest_rows(conn, ids_json, err);
    free(ids_json);
    int placed = -1;
    for (int r = 0; rows && r < PQntuples(rows); r++) {
        const struct placement *one = p; /* the batch is small: found by a linear search */
        while (strcmp(s->queued_ids[one->q], PQgetvalue(rows, r, 0))) one++;
        json_t *row = placement_row(sch, conn, s, one, rows, r, err);
        if (row)
            json_array_append_new(batch, row);
        else
            log_warn("msg=\"placement not recorded\" job=%s error=\"%s\"", s->queued_ids[one->q], err->msg);
    }
    PGresult *res = NULL;
    if (rows && json_array_size(batch) > 0) {
        char *list = json_dumps(batch, JSON_COMPACT), deadline[16];
        snprintf(deadline, sizeof deadline, "%d", GANG_RENDEZVOUS_S);
        const char *params[] = {list, deadline};
        res = whet_pg_query(conn, placement_sql, 2, params, err);
        free(list);
    }
    if (res) {
        placed = PQntuples(res);
        for (int r = 0; r < placed; r++)
            log_info("msg=\"job placed\" job=%s attempt=%s where=\"%s\" dc=%s resume_step=%s", PQgetvalue(res, r, 0),
                     PQgetvalue(res, r, 1), PQgetvalue(res, r, 5), PQgetvalue(res, r, 3), PQgetvalue(res, r, 4));
    } else if (rows && json_array_size(batch) == 0) {
        placed = 0; /* none left to write: gone since the snapshot, or no manifest */
    } else if (PQstatus(conn) == CONNECTION_OK && n > 1) {
        int first = write_placements(sch, conn, s, p, n / 2, err), second = -1;
        if (first >= 0) second = write_placements(sch, conn, s, p + n / 2, n - n / 2, err);
        placed = first < 0 || second < 0 ? -1 : first + second;
    } else if (PQstatus(conn) == CONNECTION_OK) {
        log_warn("msg=\"placement not recorded\" job=%s error=\"%s\"", s->queued_ids[p->q], err->msg);
        placed = 0;
    }
    PQclear(res);
    PQclear(rows);
    json_decref(batch);
    return placed;
}

/* write_placements, timed: a cycle starts no batch that would end past its target by the last whole
 * batch's time (a batch takes 0.1-0.5 s here; a check after each alone let a cycle of 0.8 s run to 1.3).
 * Preemptions and resizes past that point are left to the next full cycle too. The time carries over from
 * cycle to cycle (and leader to leader): one whole batch corrects it. */
static int write_batch(struct scheduler *sch, PGconn *conn, const struct snapshot *s, const struct placement *p, int n,
                       struct whet_err *err) {
    double started = whet_now_mono();
    int placed = write_placements(sch, conn, s, p, n, err);
    if (n == PLACE_BATCH) sch->place_batch_s = whet_now_mono() - started;
    return placed;
}

/* Whether a batch begun now would end past `until`. */
static int batch_too_late(const struct scheduler *sch, double until) {
    return whet_now_mono() + sch->place_batch_s > until;
}

/* The placements counted so far plus a batch's (-1: the connection broke, the cycle ends). */
static int add_placed(int placed, int batch) { return placed < 0 || batch < 0 ? -1 : placed + batch; }

/* ------------------------------------------------------------------------------------------------
 * A plan kept across cycles
 * ---------------------------------------------------------------------------------------------- */

/* A cycle that reaches its target with placements left hands them to the next cycles, which write them
 * instead of reading the fleet and the queue again and deciding anew: at 10k nodes x 8 with 100k queued
 * that costs 0.5-1.5 s a cycle here, as long as the writing it leaves room for, so a fill would either
 * slow down or, as before, run cycles of 2-5 s. Each of those cycles first expires leases, ends overdue
 * gangs and applies pauses and cancels, then writes for its target. A plan is trusted for
 * PLAN_MAX_AGE_S after its snapshot (about as long as the one long cycle it replaces wrote one snapshot's
 * decisions, co-training groups among them), and while no node is declared lost or newly silent.
 * Preemptions and resizes left are not kept: the next full cycle decides them again, as it did when a cycle
 * ran out of time; the placements kept after them take no device of theirs (a victim holds its devices until
 * it has stopped). Devices it places on can only have come free since (attempts ended): model workers take
 * devices only in a full cycle's serving step, which continuing cycles skip; and the placement statement
 * writes only jobs still queued, to run, on the attempt their manifest was made for. */
#define PLAN_MAX_AGE_S 3.0

struct kept_plan {
    struct snapshot s;
    struct pl_cluster *cluster; /* owns the decisions */
    struct pl_job **queue;
    const struct pl_decision **left; /* the placements not yet written, in placement's order */
    int n_left, next;
    char *silent;   /* the nodes silent when the snapshot was read ("ID ID …", NULL: none) */
    double read_at; /* when it was read (whet_now_mono) */
};

void scheduler_plan_drop(struct scheduler *sch) {
    struct kept_plan *p = sch->plan;
    if (!p) return;
    snapshot_free(sch, &p->s);
    pl_cluster_free(p->cluster);
    free(p->queue);
    free(p->left);
    free(p->silent);
    free(p);
    sch->plan = NULL;
}

/* Whether the kept plan may still be written: young enough, no node lost this cycle, the same nodes silent. */
static int plan_trusted(const struct kept_plan *p, const char *silent, int lost) {
    return lost == 0 && whet_now_mono() - p->read_at < PLAN_MAX_AGE_S &&
           strcmp(p->silent ? p->silent : "", silent ? silent : "") == 0;
}

/* Writes the kept plan's next placements, a batch at a time, until `until` (one batch at least); drops the
 * plan once all are written. Returns how many jobs were placed, or -1 when the connection broke. */
static int plan_continue(struct scheduler *sch, PGconn *conn, double until, struct whet_err *err) {
    struct kept_plan *p = sch->plan;
    struct placement batch[PLACE_BATCH];
    int placed = 0;
    for (int first = 1; placed >= 0 && p->next < p->n_left && (first || !batch_too_late(sch, until)); first = 0) {
        int n = 0;
        while (n < PLACE_BATCH && p->next < p->n_left) {
            const struct pl_decision *d = p->left[p->next++];
            batch[n++] = (struct placement){.q = (int)(d->job - p->s.queued), .d = d};
        }
        placed = add_placed(placed, write_batch(sch, conn, &p->s, batch, n, err));
    }
    if (p->next == p->n_left) {
        log_info("msg=\"placements left by a cycle written\" placements=%d age=%.3f", p->n_left,
                 whet_now_mono() - p->read_at);
        scheduler_plan_drop(sch);
    }
    return placed;
}

/* ------------------------------------------------------------------------------------------------
 * What the tenant sees of a waiting job: wait_reason, queue_position
 * ---------------------------------------------------------------------------------------------- */

/* "needs 2 devices with at least 70.5 GiB each": the sized demand, the start of every wait reason. */
static void demand_text(char *buf, size_t len, const struct pl_job *j) {
    if (j->min_gpu_mem_mib > 0)
        snprintf(buf, len, "needs %d device%s with at least %.1f GiB each", j->gpus, j->gpus == 1 ? "" : "s",
                 j->min_gpu_mem_mib / 1024.0);
    else
        snprintf(buf, len, "needs %d device%s", j->gpus, j->gpus == 1 ? "" : "s");
}

/* The waiting jobs written at the end of the cycle (public_state.c), at most one per queued job. */
struct waiting {
    int n;
    struct waiting_job *a;
};

/* Adds a waiting job to the list; position 0: in no queue; reason NULL: leave its reason and position
 * as they are (a placement left to the next cycle). */
static void waiting_add(struct waiting *w, const struct snapshot *s, int q, const char *reason, int position) {
    w->a[w->n++] = (struct waiting_job){.id = s->queued_ids[q], .reason = reason ? xstrdup(reason) : NULL,
                                        .position = position};
}

/* The reason placement gave, after the demand. */
static void placement_reason(char *buf, size_t len, const struct snapshot *s, const struct pl_decision *d) {
    char demand[96], why[512];
    demand_text(demand, sizeof demand, d->job);
    pl_reason_format(why, sizeof why, &d->reason, (const char *const *)s->dcs.name, (const char *const *)s->types.name);
    if (s->n_nodes == 0) snprintf(why, sizeof why, "no executor is registered");
    snprintf(buf, len, "%s; %s", demand, why);
}

/* A job no node of the fleet can hold, even empty: how big it is and what would make it fit. */
static void too_big_reason(char *buf, size_t len, const struct snapshot *s, int q) {
    const struct pl_job *j = &s->queued[q];
    const struct sz_choice *c = &s->sized[q];
    int largest = 0;
    for (int p = 0; p < s->n_pools; p++) {
        const struct sizing_pool *sp = &s->pools[p];
        if (pool_allowed(j, sp) && sp->pool.max_node_devices > largest) largest = sp->pool.max_node_devices;
    }
    const char *smaller = "LoRA instead of full fine-tuning, a shorter whet.max_seq_len or a smaller batch_size";
    struct whet_err e;
    if (c->gpus == 0) {
        whet_errf(&e, "one training example does not fit the memory of any allowed device");
        whet_err_hint(&e, "%s", smaller);
    } else if (c->capped) {
        whet_errf(&e, "needs %d devices with at least %.1f GiB each, more than whet.max_gpus allows", c->gpus,
                  c->min_gpu_mem_mib / 1024.0);
        whet_err_hint(&e, "raise whet.max_gpus to %d, or %s", c->gpus, smaller);
    } else {
        whet_errf(&e, "needs %d devices with at least %.1f GiB each in one data center", c->gpus,
                  c->min_gpu_mem_mib / 1024.0);
        whet_err_detail(&e, "the largest allowed pool has %d", largest);
        whet_err_hint(&e, "%s", smaller);
    }
    whet_err_text(&e, buf, len);
}

/* Running jobs stopped (they checkpoint) and queued again: preempted for another job (PL_PREEMPT), or a
 * co-trained job leaving its group to run alone on a free device (PL_MOVE_OUT: the next cycle places it
 * there, the other members going on in their process). Written STOP_BATCH at a time, each batch one
 * statement: under job churn a cycle made hundreds of them, a statement each, and spent its whole decision
 * budget writing them. Every node of a gang is told (GANG_NODES_SQL): each rank's trainer stops at the same
 * step boundary. A job already asked to stop is not asked again. */
#define STOP_BATCH 256

static const char *const stop_sql =
    "WITH p AS (SELECT * FROM jsonb_to_recordset($1::jsonb)"
    "   AS p(job text, attempt int, for_job text, event text, moving bool)),"
    " j AS (UPDATE jobs SET preempt_requested = true FROM p WHERE jobs.id = p.job AND NOT jobs.preempt_requested"
    "   RETURNING jobs.id, jobs.tenant_id, p.attempt, p.for_job, p.event, p.moving),"
    " c AS (INSERT INTO node_commands (node_id, job_id, attempt, kind, grace_ms, reason)"
    "   SELECT n.node_id, j.id, j.attempt, 'stop', 30000, CASE WHEN j.moving THEN 'moved out' ELSE 'preempted' END"
    "   FROM j JOIN job_attempts a ON a.job_id = j.id AND a.attempt = j.attempt"
    "   CROSS JOIN LATERAL " GANG_NODES_SQL " n)"
    " INSERT INTO job_events (id, tenant_id, job_id, level, message, data)"
    " SELECT j.event, j.tenant_id, j.id, CASE WHEN j.moving THEN 'info' ELSE 'warn' END,"
    "  CASE WHEN j.moving THEN 'The job leaves its co-training group to run alone on a free device; it checkpoints"
    " now and resumes there' ELSE 'The job is being preempted for a job of higher priority; it checkpoints now and"
    " resumes later' END, jsonb_build_object('for_job', nullif(j.for_job, '')) FROM j"
    " RETURNING job_id, level = 'info', coalesce(data ->> 'for_job', '')";

/* Writes the stop decisions d[0..n) (PL_PREEMPT, PL_MOVE_OUT). A batch that fails is halved until the
 * decision that fails is alone, which is then logged: one decision that cannot be written must not hold up
 * the others. 0, or -1 when the connection broke. */
static int write_stops(PGconn *conn, const struct snapshot *s, const struct pl_decision *const *d, int n,
                       struct whet_err *err) {
    if (n == 0) return 0;
    json_t *batch = json_array();
    for (int i = 0; i < n; i++) {
        int r = (int)(d[i]->job - s->running);
        const char *for_job = "";
        if (d[i]->for_job && d[i]->for_job >= s->queued && d[i]->for_job < s->queued + s->n_queued)
            for_job = s->queued_ids[d[i]->for_job - s->queued];
        char event_id[40];
        whet_random_id("ftevent-", 24, event_id);
        json_array_append_new(batch, json_pack("{s:s, s:i, s:s, s:s, s:b}", "job", s->running_ids[r], "attempt",
                                               s->running_attempts[r], "for_job", for_job, "event", event_id, "moving",
                                               d[i]->action == PL_MOVE_OUT));
    }
    char *list = json_dumps(batch, JSON_COMPACT);
    json_decref(batch);
    const char *params[] = {list};
    PGresult *res = whet_pg_query(conn, stop_sql, 1, params, err);
    free(list);
    if (res) {
        for (int i = 0; i < PQntuples(res); i++)
            log_info("msg=\"%s\" job=%s for=%s",
                     PQgetvalue(res, i, 1)[0] == 't' ? "moving out of its co-training group" : "preempting",
                     PQgetvalue(res, i, 0), PQgetvalue(res, i, 2));
        PQclear(res);
        return 0;
    }
    if (PQstatus(conn) != CONNECTION_OK) return -1;
    if (n > 1) {
        if (write_stops(conn, s, d, n / 2, err) < 0) return -1;
        return write_stops(conn, s, d + n / 2, n - n / 2, err);
    }
    log_warn("msg=\"decision not recorded\" action=%d job_seq=%llu error=\"%s\"", (int)d[0]->action,
             (unsigned long long)d[0]->job->id, err->msg);
    return 0;
}

/* An elastic job resized (PL_GROW into idle devices, PL_SHRINK for a job of higher priority): its
 * attempt stops like a preempted one (every rank checkpoints at the same step) and the job, queued again,
 * restarts at the new size from that checkpoint (size_job), its data cursor and schedule going on. */
static int record_resize(PGconn *conn, struct snapshot *s, const struct pl_decision *d, struct whet_err *err) {
    int r = (int)(d->job - s->running);
    if (r < 0 || r >= s->n_running) return 0;
    const char *for_job = "";
    if (d->for_job && d->for_job >= s->queued && d->for_job < s->queued + s->n_queued)
        for_job = s->queued_ids[d->for_job - s->queued];
    int from = s->running_gpus[r], grow = d->action == PL_GROW;
    char attempt[16], to[16], from_s[16], event_id[40], message[256];
    snprintf(attempt, sizeof attempt, "%d", s->running_attempts[r]);
    snprintf(to, sizeof to, "%d", d->gpus);
    snprintf(from_s, sizeof from_s, "%d", from);
    snprintf(message, sizeof message, "The job %s from %d to %d devices %s; it checkpoints now and restarts at the new size",
             grow ? "grows" : "shrinks", from, d->gpus, grow ? "into idle capacity" : "to make room for a job of higher priority");
    whet_random_id("ftevent-", 24, event_id);
    const char *params[] = {s->running_ids[r], attempt, for_job, event_id, to, from_s, message};
    if (whet_pg_exec(conn,
                     "WITH j AS (UPDATE jobs SET preempt_requested = true, resize_to = $5::int"
                     "   WHERE id = $1 AND NOT preempt_requested RETURNING id, tenant_id),"
                     " c AS (INSERT INTO node_commands (node_id, job_id, attempt, kind, grace_ms, reason)"
                     "   SELECT n.node_id, j.id, $2::int, 'stop', 30000, 'resized' FROM j"
                     "   JOIN job_attempts a ON a.job_id = j.id AND a.attempt = $2::int CROSS JOIN LATERAL " GANG_NODES_SQL " n)"
                     " INSERT INTO job_events (id, tenant_id, job_id, level, message, data)"
                     " SELECT $4, tenant_id, id, 'info', $7, jsonb_build_object('from_gpus', $6::int, 'to_gpus', $5::int,"
                     "  'for_job', nullif($3::text, '')) FROM j",
                     7, params, err) < 0)
        return -1;
    log_info("msg=\"resizing\" job=%s from=%d to=%d for=%s", s->running_ids[r], from, d->gpus, for_job);
    return 0;
}

/* Whether a running elastic job could grow: placement runs then even with nobody queued. */
static int elastic_room(const struct snapshot *s) {
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i].max_gpus > s->running[i].gpus && s->running[i].state == PL_JOB_RUNNING) return 1;
    return 0;
}

static double cycle_target_s(const struct scheduler *sch) {
    return (sch->opts->cycle_target_ms > 0 ? sch->opts->cycle_target_ms : CYCLE_TARGET_MS_DEFAULT) / 1e3;
}

/* A cycle that writes placements a previous cycle left (kept_plan): 1, or -1 when the connection broke. */
static int cycle_continued(struct scheduler *sch, PGconn *conn, double t0, struct whet_err *err) {
    int left = sch->plan->n_left - sch->plan->next;
    double started = whet_now_mono();
    int placed = plan_continue(sch, conn, t0 + cycle_target_s(sch), err);
    if (placed < 0) {
        scheduler_plan_drop(sch);
        return whet_errf(err, "the database connection broke during the cycle");
    }
    double ended = whet_now_mono();
    if (ended - t0 > 1)
        log_info("msg=\"slow cycle\" seconds=%.3f leases_requests=%.3f continued=1 decisions=%.3f placed=%d left=%d",
                 ended - t0, started - t0, ended - started, placed, left);
    return 1; /* more to write, or a full cycle to run at once */
}

int scheduler_cycle(struct scheduler *sch, PGconn *conn, struct whet_err *err) {
    /* When each part of the cycle ended: a cycle slower than a second says where its time went. */
    double t[6] = {whet_now_mono()};
    int placed = 0, deferred = 0;
    char *silent = NULL; /* the nodes silent for half their lease: no new work */
    int lost = scheduler_expire_leases(conn, &silent, err);
    if (lost < 0 || scheduler_gang_deadlines(conn, err) < 0 || apply_tenant_requests(conn, err) < 0) {
        free(silent);
        scheduler_plan_drop(sch);
        return -1;
    }
    if (sch->plan && plan_trusted(sch->plan, silent, lost)) {
        free(silent);
        return cycle_continued(sch, conn, t[0], err);
    }
    if (sch->plan)
        log_info("msg=\"placements left by a cycle decided anew\" left=%d age=%.3f nodes_lost=%d",
                 sch->plan->n_left - sch->plan->next, t[0] - sch->plan->read_at, lost);
    scheduler_plan_drop(sch);
    /* Model workers first (serving.h): a free device goes to a worker before a job. Their failure does
     * not hold up the jobs' placement. */
    struct whet_err serr;
    if (scheduler_serving_cycle(conn, &serr) < 0) log_warn("msg=\"model workers not scaled\" error=\"%s\"", serr.msg);
    if (scheduler_retention(conn, &serr) < 0) log_warn("msg=\"expired rows not deleted\" error=\"%s\"", serr.msg);
    t[1] = whet_now_mono();
    struct snapshot s;
    struct pl_cluster *cluster = NULL;
    struct pl_job **queue = NULL;
    struct waiting waiting = {0};
    int rc = -1;
    const struct pl_decision **left = NULL; /* the placements left to the next cycles */
    int n_left = 0;
    int loaded = load_snapshot(sch, conn, silent, &s, err);
    if (loaded < 0) goto out;
    waiting.a = xcalloc((size_t)s.n_queued + 1, sizeof *waiting.a);
    t[2] = t[3] = t[4] = whet_now_mono();
    double oldest = 0, now = (double)whet_now_unix();
    for (int i = 0; i < s.n_queued; i++)
        if (now - s.queued[i].submit_time > oldest) oldest = now - s.queued[i].submit_time;
    scheduler_metrics_snapshot(s.n_nodes, s.n_running, s.n_queued, oldest);
    if (s.n_queued > 0 || elastic_room(&s) || s.n_running_groups > 0) { /* groups: members may move out */
        struct pl_config cfg;
        if (pl_config_for_policy(&cfg, sch->opts->policy ? sch->opts->policy : "whet") < 0) {
            whet_errf(err, "unknown placement policy \"%s\"", sch->opts->policy);
            goto out;
        }
        cfg.min_run_s = 5;
        /* Every feasible node is scored (nodes_to_score 0, the library's default). kube-scheduler's
         * sample (5% of a 10k fleet) costs the packing: `whet sim inflate` at 130% on the Alibaba 2023
         * traces with their fleet copied 8 times (9,704 nodes), allocation fell from 95.5% to 88.2%
         * (default) and 86.5% to 79.5% (gpushare100); a sample of 2,000 nodes still fell to 91.1% and
         * 80.0%. */
        cfg.cotrain_move_min_left_s = sch->opts->cotrain_move_min_left_s;
        char perr[256];
        cluster = pl_cluster_new(s.nodes, s.n_nodes, s.tenants, s.n_tenants, &cfg, perr, sizeof perr);
        if (!cluster) {
            whet_errf(err, "placement snapshot: %s", perr);
            goto out;
        }
        for (int i = 0; i < s.n_running; i++)
            if (pl_cluster_add_running(cluster, &s.running[i], perr, sizeof perr) < 0)
                log_warn("msg=\"running job does not fit its node\" job=%s error=\"%s\"", s.running_ids[i], perr);
        /* every running group's number, also of one whose members did not fit: a group formed now gets another */
        pl_cluster_reserve_groups(cluster, (uint64_t)s.n_running_groups);
        /* A job no allowed data center can hold even when empty stays out of placement and waits,
         * outside the queue, with its size as the reason. */
        queue = xcalloc((size_t)s.n_queued + 1, sizeof *queue);
        int n_queue = 0;
        for (int i = 0; i < s.n_queued; i++)
            if (s.sized[i].fits || s.n_nodes == 0) queue[n_queue++] = &s.queued[i];
        const struct pl_result *r = pl_schedule(cluster, queue, n_queue, (double)whet_now_unix());
        name_new_groups(&s, r);
        t[3] = whet_now_mono();
        int position = 0, n_batch = 0, taken = 0;
        char reason[768];
        struct placement batch[PLACE_BATCH];
        const struct pl_decision *stops[STOP_BATCH];
        int n_stops = 0;
        /* The public state is written after the placements: its time (the last cycle's) comes off theirs. */
        double place_until = t[0] + cycle_target_s(sch) - sch->public_state_s;
        left = xcalloc((size_t)r->n + 1, sizeof *left);
        for (int i = 0; i < r->n && placed >= 0 && PQstatus(conn) == CONNECTION_OK; i++) {
            const struct pl_decision *d = &r->decisions[i];
            log_debug("msg=\"decision\" action=%d job_seq=%llu for_seq=%llu", (int)d->action, (unsigned long long)d->job->id,
                      d->for_job ? (unsigned long long)d->for_job->id : 0ull);
            int q = d->job >= s.queued && d->job < s.queued + s.n_queued ? (int)(d->job - s.queued) : -1;
            int stop = d->action == PL_PREEMPT || d->action == PL_MOVE_OUT,
                resize = d->action == PL_GROW || d->action == PL_SHRINK;
            /* Past the target. Placements go to the next cycles (kept_plan), which start at once and write one
             * batch at least, even when reading the snapshot took this cycle past its target; preemptions and
             * resizes are decided again by the next full cycle, so one is late only once this cycle wrote a
             * batch's worth of decisions: every full cycle gets some done. */
            int late = d->action != PL_WAIT && (d->action == PL_PLACE || taken >= PLACE_BATCH) &&
                       batch_too_late(sch, place_until);
            taken += !late && (stop || resize || (d->action == PL_PLACE && q >= 0));
            if (d->action == PL_PLACE && q >= 0 && late) {
                /* Left to the next cycles (kept_plan), which start at once; its row is left as it is
                 * meanwhile (a reason that came and went with each deferral would rewrite thousands of
                 * rows), but it counts in the places of the jobs behind it. */
                waiting_add(&waiting, &s, q, NULL, ++position);
                left[n_left++] = d;
                deferred++;
            } else if (d->action == PL_PLACE && q >= 0) {
                batch[n_batch++] = (struct placement){.q = q, .d = d};
                if (n_batch == PLACE_BATCH)
                    placed = add_placed(placed, write_batch(sch, conn, &s, batch, n_batch, err));
                n_batch %= PLACE_BATCH;
            } else if (d->action == PL_WAIT && q >= 0) {
                placement_reason(reason, sizeof reason, &s, d);
                waiting_add(&waiting, &s, q, reason, ++position);
            } else if ((stop || resize) && late) {
                deferred++; /* decided anew by the next full cycle */
            } else if (stop) {
                int k = (int)(d->job - s.running);
                if (k >= 0 && k < s.n_running) stops[n_stops++] = d;
                if (n_stops == STOP_BATCH && write_stops(conn, &s, stops, n_stops, err) < 0) placed = -1;
                n_stops %= STOP_BATCH;
            } else if ((resize ? record_resize(conn, &s, d, err) : 0) < 0) {
                /* One decision that cannot be written must not hold up the others. */
                log_warn("msg=\"decision not recorded\" action=%d job_seq=%llu error=\"%s\"", (int)d->action,
                         (unsigned long long)d->job->id, err->msg);
            }
        }
        placed = add_placed(placed, write_batch(sch, conn, &s, batch, n_batch, err));
        if (placed >= 0 && write_stops(conn, &s, stops, n_stops, err) < 0) placed = -1;
        for (int i = 0; i < s.n_queued; i++)
            if (!s.sized[i].fits && s.n_nodes > 0) {
                too_big_reason(reason, sizeof reason, &s, i);
                waiting_add(&waiting, &s, i, reason, 0);
            }
    }
    if (placed < 0 || PQstatus(conn) != CONNECTION_OK) {
        whet_errf(err, "the database connection broke during the cycle");
        goto out;
    }
    t[4] = whet_now_mono();
    rc = public_state_record(&sch->public_state, conn, waiting.a, waiting.n, sch->running.stopped,
                             sch->running.n_stopped, err);
    t[5] = whet_now_mono();
    if (rc == 0) sch->public_state_s = t[5] - t[4];
    if (rc == 0 && t[5] - t[0] > 1)
        log_info(
            "msg=\"slow cycle\" seconds=%.3f leases_requests=%.3f snapshot=%.3f schedule=%.3f decisions=%.3f placed=%d"
            " deferred=%d kept=%d public_state=%.3f nodes=%d running=%d queued=%d tenants=%d",
            t[5] - t[0], t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3], placed, deferred, n_left > 0, t[5] - t[4],
            s.n_nodes, s.n_running, s.n_queued, s.n_tenants);
    if (rc == 0 && n_left > 0) { /* the snapshot, the cluster and its decisions go to the next cycles */
        struct kept_plan *p = xcalloc(1, sizeof *p);
        *p = (struct kept_plan){.s = s,
                                .cluster = cluster,
                                .queue = queue,
                                .left = left,
                                .n_left = n_left,
                                .silent = silent,
                                .read_at = t[1]};
        sch->plan = p;
        log_info("msg=\"placements left to the next cycles\" placed=%d left=%d", placed, n_left);
        memset(&s, 0, sizeof s);
        cluster = NULL, queue = NULL, left = NULL, silent = NULL;
    }
out:
    free(left);
    free(silent);
    free(queue);
    for (int i = 0; i < waiting.n; i++) free(waiting.a[i].reason);
    free(waiting.a);
    pl_cluster_free(cluster);
    snapshot_free(sch, &s);
    if (rc < 0) { /* what a failed cycle read or wrote is unknown */
        node_cache_reset(&sch->nodes);
        running_reset(&sch->running);
        public_state_reset(&sch->public_state);
    }
    return rc == 0 && deferred ? 1 : rc;
}
