/* cotrain.c - co-training groups: LoRA jobs of one base model (one cotrain_key) that share one
 * training process, one copy of the base and one device (`whet train --cotrain`: each step one pass
 * over all members' rows, each member its own optimizer).
 *
 * The rule. A co-trainable job first tries to run alone, as any job: on an idle device it runs fastest
 * and nothing else waits for that device. Only when it fits nowhere alone (it would wait, or preempt)
 * does it join a group of its key, formed in this cycle or running, on a device whose memory holds one
 * more member: the group holds the base and one bounded shared pass once (the largest cotrain_base_mib of
 * its members: sizing.h's sz_cotrain_mib) plus each member's adapter and optimizer state
 * (cotrain_member_mib), within SZ_USABLE_FRACTION of the device's memory, and at most cfg.cotrain_max
 * members. For a fleet operator that is the cheaper of the two choices whenever the fleet is full: a
 * member costs its adapter's memory and its share of a pass instead of a whole device and a copy of the
 * base (4 runs in one process took 14.8 s against 21.5 s as 4 processes, README "Co-training"), and it
 * starts now instead of after a running job; when devices are free, spreading the jobs is faster for each
 * of them and costs no one anything. Among the groups that hold it, the
 * fullest (least memory left) wins, then the lowest id: groups fill up before others are opened.
 *
 * Every co-trainable one-device job placed alone opens a group; a group still alone at the end of the
 * cycle is no group (its job runs a trainer of its own). Groups of running jobs take members too, by the
 * same rules: the executor hands a new member to the group's running process, which adds it to its
 * lock-step from its next step (`whet train --cotrain --join-dir`), or starts a process of the group's
 * for it when that one ended meanwhile.
 *
 * Moving out. When nobody waits and a group's pool has wholly free devices, a member runs faster on one
 * of its own than beside the others in the shared pass: MOVE_OUT stops it (it checkpoints, the others go
 * on) and the next cycle places it alone, resuming from that checkpoint. One member per free device,
 * the group keeping at least one; members that ran less than cfg.min_run_s stay (a restart costs a
 * restore), and so do members with less work left than cfg.cotrain_move_min_left_s (they end before
 * the move would pay: the stop, a new process and a load of the base); the newest leave first, and
 * members already stopping count against the free devices (the caller's next snapshot still shows
 * those devices free until the movers take them).
 *
 * Accounting. One member, the holder, holds the whole device (under its tenant); the others, riders,
 * hold none of it (pl_job_milli is 0 for them). When the holder ends first a rider takes the hold over,
 * so the device stays taken until the last member ends. A member of a group of several is never a
 * preemption victim: stopping it would free no device. */
#include <string.h>

#include "internal.h"
#include "sizing.h"

/* Groups by id (group_slots): linear probing, a deleted slot's followers shifted back into it. A fleet of
 * co-training has thousands of groups, each found for every member when the cluster is built. */
static uint32_t group_hash(const struct pl_cluster *c, uint64_t id) {
    return (uint32_t)((id * 0x9e3779b97f4a7c15ull) >> 32) & (uint32_t)(c->n_group_slots - 1);
}

static int32_t group_slot(const struct pl_cluster *c, uint64_t id) {
    if (!c->n_group_slots) return -1;
    for (uint32_t k = group_hash(c, id);; k = (k + 1) & (uint32_t)(c->n_group_slots - 1))
        if (c->group_slots[k] < 0 || c->groups[c->group_slots[k]].id == id) return (int32_t)k;
}

static struct pl_cotrain_group *group_find(const struct pl_cluster *c, uint64_t id) {
    int32_t k = group_slot(c, id);
    return k >= 0 && c->group_slots[k] >= 0 ? &c->groups[c->group_slots[k]] : NULL;
}

/* Indexes groups[0..n_groups) anew, in a table of twice `groups` slots at least (pl_grow: a power of two). */
static void group_slots_build(struct pl_cluster *c, int32_t groups) {
    c->group_slots = pl_grow(c->group_slots, &c->n_group_slots, 2 * groups, sizeof *c->group_slots);
    memset(c->group_slots, 0xff, (size_t)c->n_group_slots * sizeof *c->group_slots);
    for (int32_t i = 0; i < c->n_groups; i++) c->group_slots[group_slot(c, c->groups[i].id)] = i;
}

/* Removes slot k, moving back the entries after it that probed past it. */
static void group_slot_delete(struct pl_cluster *c, uint32_t k) {
    uint32_t mask = (uint32_t)c->n_group_slots - 1;
    for (uint32_t j = (k + 1) & mask; c->group_slots[j] >= 0; j = (j + 1) & mask) {
        uint32_t home = group_hash(c, c->groups[c->group_slots[j]].id);
        if (((j - home) & mask) >= ((j - k) & mask)) { /* its probe passed k: it may move there */
            c->group_slots[k] = c->group_slots[j];
            k = j;
        }
    }
    c->group_slots[k] = -1;
}

/* Counts member j in group g: its part, and its base when that is the largest so far. */
static void group_add(struct pl_cotrain_group *g, const struct pl_job *j) {
    g->members++;
    if (j->cotrain_base_mib > g->base_mib) g->base_mib = j->cotrain_base_mib;
    g->members_mib += j->cotrain_member_mib;
    g->unsized += !j->cotrain_base_mib && !j->cotrain_member_mib;
}

/* Memory (MiB) a group on node ni may fill: the usable part of the device; unknown memory limits nothing. */
static int64_t group_capacity(const struct pl_node *n) {
    return n->gpu_mem_mib > 0 ? (int64_t)(n->gpu_mem_mib * SZ_USABLE_FRACTION) : INT64_MAX;
}

static struct pl_join_shape join_shape(const struct pl_job *j) {
    return (struct pl_join_shape){.key = j->cotrain_key,
                                  .dcs = j->allowed_dcs,
                                  .types = j->allowed_types,
                                  .cpu = j->cpu_milli,
                                  .mem = j->mem_mib,
                                  .base_mib = j->cotrain_base_mib,
                                  .member_mib = j->cotrain_member_mib};
}

/* Whether group g takes a job of shape s, and the device memory (MiB) it then has left. */
static int group_takes(const struct pl_cluster *c, const struct pl_cotrain_group *g, const struct pl_join_shape *s,
                       int64_t *left) {
    if (g->key != s->key || g->members >= c->cfg.cotrain_max) return 0;
    const struct pl_node *n = &c->nodes[g->node];
    if (!n->schedulable || (s->dcs && !(s->dcs >> n->dc & 1)) ||
        (s->types && (n->gpu_type < 0 || !(s->types >> n->gpu_type & 1))) || n->cpu_free_milli < s->cpu ||
        n->mem_free_mib < s->mem)
        return 0;
    /* members of one base are alike: those of unknown memory count as this one */
    int64_t base = g->base_mib > s->base_mib ? g->base_mib : s->base_mib;
    *left = group_capacity(n) - base - g->members_mib - ((int64_t)g->unsized + 1) * s->member_mib;
    return *left >= 0;
}

/* Puts group i, which takes m's shape with `left` MiB to spare, among m's groups by the rule (fullest first,
 * then the lowest id) if it ranks among the first PL_JOIN_BEST; lefts[] holds those of m's groups. */
static void memo_rank(const struct pl_cluster *c, struct pl_join_memo *m, int64_t *lefts, int32_t i, int64_t left) {
    uint64_t id = c->groups[i].id;
    int32_t at = m->n;
    while (at > 0 && (left < lefts[at - 1] || (left == lefts[at - 1] && id < c->groups[m->groups[at - 1]].id))) at--;
    if (at == m->n && m->more) return; /* after the kept ones, where groups not kept may rank before it */
    if (at == PL_JOIN_BEST || m->n == PL_JOIN_BEST) m->more = 1;
    if (at == PL_JOIN_BEST) return;
    int32_t last = m->n < PL_JOIN_BEST ? m->n : PL_JOIN_BEST - 1;
    memmove(&m->groups[at + 1], &m->groups[at], (size_t)(last - at) * sizeof m->groups[0]);
    memmove(&lefts[at + 1], &lefts[at], (size_t)(last - at) * sizeof lefts[0]);
    m->groups[at] = i;
    lefts[at] = left;
    if (m->n < PL_JOIN_BEST) m->n++;
}

/* Fills m with the groups that take its shape: one pass over all groups. */
static void join_search(const struct pl_cluster *c, struct pl_join_memo *m) {
    int64_t lefts[PL_JOIN_BEST];
    m->n = m->next = m->more = 0;
    for (int32_t i = 0; i < c->n_groups; i++) {
        int64_t left;
        if (group_takes(c, &c->groups[i], &m->shape, &left)) memo_rank(c, m, lefts, i, left);
    }
}

static int memo_valid(const struct pl_cluster *c, const struct pl_join_memo *m) {
    return m->stamp == c->stamp && m->gen == c->cotrain_gen;
}

/* Group i formed or took a member: in the searches of its key it takes the rank it has now. Their groups
 * that no longer take the shape never will while the search holds: they leave first. */
static void memo_group_changed(struct pl_cluster *c, int32_t i) {
    const struct pl_cotrain_group *g = &c->groups[i];
    for (int32_t k = 0; k < PL_JOIN_MEMO; k++) {
        struct pl_join_memo *m = &c->join_memo[k];
        int64_t left, lefts[PL_JOIN_BEST];
        if (!memo_valid(c, m) || m->shape.key != g->key) continue;
        int32_t kept = 0;
        for (int32_t r = m->next; r < m->n; r++)
            if (m->groups[r] != i && group_takes(c, &c->groups[m->groups[r]], &m->shape, &lefts[kept]))
                m->groups[kept++] = m->groups[r];
        m->next = 0;
        m->n = kept;
        if (group_takes(c, g, &m->shape, &left)) memo_rank(c, m, lefts, i, left);
    }
}

static struct pl_cotrain_group *group_new(struct pl_cluster *c, uint64_t id, const struct pl_job *holder) {
    c->groups = pl_grow(c->groups, &c->cap_groups, c->n_groups + 1, sizeof *c->groups);
    if (2 * (c->n_groups + 1) > c->n_group_slots) group_slots_build(c, c->n_groups + 1);
    struct pl_cotrain_group *g = &c->groups[c->n_groups++];
    memset(g, 0, sizeof *g);
    g->id = id;
    g->key = holder->cotrain_key;
    g->node = holder->alloc.slots[0].node;
    g->mask = holder->alloc.slots[0].gpu_mask;
    group_add(g, holder);
    c->group_slots[group_slot(c, id)] = (int32_t)(g - c->groups);
    if (id >= c->next_group_id) c->next_group_id = id + 1;
    memo_group_changed(c, (int32_t)(g - c->groups));
    return g;
}

static void group_remove(struct pl_cluster *c, struct pl_cotrain_group *g) {
    group_slot_delete(c, (uint32_t)group_slot(c, g->id));
    *g = c->groups[--c->n_groups];
    if (g != &c->groups[c->n_groups]) c->group_slots[group_slot(c, g->id)] = (int32_t)(g - c->groups);
    c->cotrain_gen++; /* groups moved in the array */
}

int32_t pl_cotrain_members(const struct pl_cluster *c, const struct pl_job *j) {
    const struct pl_cotrain_group *g = j->cotrain_group ? group_find(c, j->cotrain_group) : NULL;
    return g ? g->members : 0;
}

void pl_cluster_reserve_groups(struct pl_cluster *c, uint64_t last) {
    if (last >= c->next_group_id) c->next_group_id = last + 1;
}

void pl_cotrain_add_running(struct pl_cluster *c, struct pl_job *j) {
    if (!j->cotrain_group) return;
    struct pl_cotrain_group *g = group_find(c, j->cotrain_group);
    if (!g) {
        group_new(c, j->cotrain_group, j); /* not open: it stays a group whoever joins it */
        return;
    }
    group_add(g, j);
    memo_group_changed(c, (int32_t)(g - c->groups));
}

void pl_cotrain_open(struct pl_cluster *c, struct pl_job *j) {
    if (!j->cotrain_key || c->cfg.cotrain_max < 2 || j->gpus != 1 || pl_job_milli(j) != PL_MILLI ||
        j->alloc.n_slots != 1)
        return;
    struct pl_cotrain_group *g = group_new(c, c->next_group_id ? c->next_group_id : 1, j);
    g->open = 1;
    j->cotrain_group = g->id;
}

/* The search for jobs of j's shape, kept or made anew. */
static struct pl_join_memo *join_memo(struct pl_cluster *c, const struct pl_job *j) {
    struct pl_join_shape s = join_shape(j);
    uint64_t h = s.key * 0x9e3779b97f4a7c15ull ^ s.dcs * 31 ^ s.types * 131 ^ (uint64_t)s.cpu * 8191 ^
                 (uint64_t)s.mem * 524287 ^ (uint64_t)s.base_mib * 65537 ^ (uint64_t)s.member_mib;
    struct pl_join_memo *m = &c->join_memo[(h ^ h >> 32) % PL_JOIN_MEMO];
    if (memo_valid(c, m) && !memcmp(&m->shape, &s, sizeof s)) return m;
    memset(m, 0, sizeof *m);
    m->stamp = c->stamp;
    m->gen = c->cotrain_gen;
    m->shape = s;
    join_search(c, m);
    return m;
}

/* The group j joins: the first of its search's groups that still takes it. Since the search, groups have
 * only lost room and resources (anything else voids it) but for those formed or joined, which were ranked
 * anew, so the first that takes j is the fullest of all. Past the last kept, a new search when there were
 * more. */
static struct pl_cotrain_group *group_to_join(struct pl_cluster *c, const struct pl_job *j) {
    struct pl_join_memo *m = join_memo(c, j);
    for (;;) {
        for (; m->next < m->n; m->next++) {
            struct pl_cotrain_group *g = &c->groups[m->groups[m->next]];
            int64_t left;
            if (group_takes(c, g, &m->shape, &left)) return g;
        }
        if (!m->more) return NULL;
        join_search(c, m);
    }
}

int pl_cotrain_join(struct pl_cluster *c, struct pl_job *j, double now, struct pl_alloc *out) {
    if (!j->cotrain_key || c->cfg.cotrain_max < 2 || j->gpus != 1 || pl_job_milli(j) != PL_MILLI) return 0;
    struct pl_cotrain_group *best = group_to_join(c, j);
    if (!best) return 0;
    out->n_slots = 1;
    out->slots[0] = (struct pl_slot){.node = best->node, .gpu_mask = best->mask, .gpu_count = 1};
    j->cotrain_rider = 1; /* before the commit: the holder holds the device, this member its CPU and memory */
    j->cotrain_group = best->id;
    group_add(best, j);
    pl_commit_place(c, j, out, now);
    memo_group_changed(c, (int32_t)(best - c->groups));
    return 1;
}

void pl_cotrain_release(struct pl_cluster *c, struct pl_job *j) {
    struct pl_cotrain_group *g = j->cotrain_group ? group_find(c, j->cotrain_group) : NULL;
    int was_rider = j->cotrain_rider;
    j->cotrain_group = 0;
    j->cotrain_rider = 0;
    if (!g) return;
    /* its base part stays counted: the process keeps the buffers of the largest pass it ran */
    g->members_mib -= j->cotrain_member_mib;
    c->cotrain_gen++; /* room for another */
    g->unsized -= !j->cotrain_base_mib && !j->cotrain_member_mib;
    if (--g->members == 0) {
        group_remove(c, g);
        return;
    }
    if (was_rider) return;
    /* The holder left first: the rider with the lowest id holds the device from now on. */
    struct pl_job *next = NULL;
    const struct pl_node_jobs *l = &c->node_jobs[g->node];
    for (int32_t i = 0; i < l->n; i++)
        if (l->jobs[i]->cotrain_group == g->id && (!next || l->jobs[i]->id < next->id)) next = l->jobs[i];
    if (!next) return;
    next->cotrain_rider = 0;
    pl_node_apply(c, g->node, g->mask, PL_MILLI, 0, 0, next->tenant, +1);
}

void pl_cotrain_move_out(struct pl_cluster *c, double now) {
    /* Wholly free devices of each pool that a mover may take (c->scratch, by pool), less those claimed by
     * members already stopping (a co-trained member stopping leaves for a device of its own). */
    int32_t *movable = c->scratch;
    for (int32_t pi = 0; pi < c->n_pools; pi++) movable[pi] = (int32_t)c->pools[pi].free_whole;
    for (int32_t r = 0; r < c->n_running; r++) {
        const struct pl_job *v = c->running[r];
        if (v->state == PL_JOB_STOPPING && v->cotrain_group) movable[c->node_pool[v->alloc.slots[0].node]]--;
    }
    for (int32_t i = 0; i < c->n_groups; i++) {
        const struct pl_cotrain_group *g = &c->groups[i];
        int32_t pi = c->node_pool[g->node];
        const struct pl_node_jobs *l = &c->node_jobs[g->node];
        for (;;) {
            struct pl_job *mover = NULL;
            int32_t staying = 0;
            for (int32_t k = 0; k < l->n; k++) {
                struct pl_job *v = l->jobs[k];
                if (v->cotrain_group != g->id || v->state != PL_JOB_RUNNING) continue;
                staying++;
                int ending = v->remaining_s > 0 && v->remaining_s <= c->cfg.cotrain_move_min_left_s;
                if (now - v->start_time >= c->cfg.min_run_s && !ending && (!mover || v->id > mover->id)) mover = v;
            }
            if (movable[pi] <= 0 || staying < 2 || !mover) break;
            struct pl_decision *d = pl_decision_add(c, PL_MOVE_OUT, mover);
            d->alloc = mover->alloc;
            d->not_before = now + mover->grace_s;
            mover->state = PL_JOB_STOPPING;
            c->n_stopping++;
            movable[pi]--;
        }
    }
}

void pl_cotrain_end_cycle(struct pl_cluster *c) {
    for (int32_t i = 0; i < c->n_groups;) {
        struct pl_cotrain_group *g = &c->groups[i];
        if (g->open && g->members == 1) { /* no one joined: its job runs alone */
            const struct pl_node_jobs *l = &c->node_jobs[g->node];
            for (int32_t k = 0; k < l->n; k++)
                if (l->jobs[k]->cotrain_group == g->id) l->jobs[k]->cotrain_group = 0;
            group_remove(c, g);
            continue;
        }
        g->open = 0;
        i++;
    }
}
