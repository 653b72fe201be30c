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

static struct pl_cotrain_group *group_find(const struct pl_cluster *c, uint64_t id) {
    for (int32_t i = 0; i < c->n_groups; i++)
        if (c->groups[i].id == id) return &c->groups[i];
    return NULL;
}

/* Counts member j in group g: its part, and its base when that is the largest so far. */
static void group_add(struct pl_cotrain_group *g, const struct pl_job *j) {
    g->members++;
    if (j->cotrain_base_mib > g->base_mib) g->base_mib = j->cotrain_base_mib;
    g->members_mib += j->cotrain_member_mib;
    g->unsized += !j->cotrain_base_mib && !j->cotrain_member_mib;
}

static struct pl_cotrain_group *group_new(struct pl_cluster *c, uint64_t id, const struct pl_job *holder) {
    c->groups = pl_grow(c->groups, &c->cap_groups, c->n_groups + 1, sizeof *c->groups);
    struct pl_cotrain_group *g = &c->groups[c->n_groups++];
    memset(g, 0, sizeof *g);
    g->id = id;
    g->key = holder->cotrain_key;
    g->node = holder->alloc.slots[0].node;
    g->mask = holder->alloc.slots[0].gpu_mask;
    group_add(g, holder);
    if (id >= c->next_group_id) c->next_group_id = id + 1;
    return g;
}

static void group_remove(struct pl_cluster *c, struct pl_cotrain_group *g) { *g = c->groups[--c->n_groups]; }

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
}

void pl_cotrain_open(struct pl_cluster *c, struct pl_job *j) {
    if (!j->cotrain_key || c->cfg.cotrain_max < 2 || j->gpus != 1 || pl_job_milli(j) != PL_MILLI ||
        j->alloc.n_slots != 1)
        return;
    struct pl_cotrain_group *g = group_new(c, c->next_group_id ? c->next_group_id : 1, j);
    g->open = 1;
    j->cotrain_group = g->id;
}

/* Memory (MiB) a group on node ni may fill: the usable part of the device; unknown memory limits nothing. */
static int64_t group_capacity(const struct pl_node *n) {
    return n->gpu_mem_mib > 0 ? (int64_t)(n->gpu_mem_mib * SZ_USABLE_FRACTION) : INT64_MAX;
}

int pl_cotrain_join(struct pl_cluster *c, struct pl_job *j, double now, struct pl_alloc *out) {
    if (!j->cotrain_key || c->cfg.cotrain_max < 2 || j->gpus != 1 || pl_job_milli(j) != PL_MILLI) return 0;
    struct pl_cotrain_group *best = NULL;
    int64_t best_left = 0;
    for (int32_t i = 0; i < c->n_groups; i++) {
        struct pl_cotrain_group *g = &c->groups[i];
        if (g->key != j->cotrain_key || g->members >= c->cfg.cotrain_max) continue;
        const struct pl_node *n = &c->nodes[g->node];
        if (!n->schedulable || (j->allowed_dcs && !(j->allowed_dcs >> n->dc & 1)) ||
            (j->allowed_types && (n->gpu_type < 0 || !(j->allowed_types >> n->gpu_type & 1))) ||
            n->cpu_free_milli < j->cpu_milli || n->mem_free_mib < j->mem_mib)
            continue;
        /* members of one base are alike: those of unknown memory count as this one */
        int64_t base = g->base_mib > j->cotrain_base_mib ? g->base_mib : j->cotrain_base_mib;
        int64_t left = group_capacity(n) - base - g->members_mib - ((int64_t)g->unsized + 1) * j->cotrain_member_mib;
        if (left < 0) continue;
        if (!best || left < best_left || (left == best_left && g->id < best->id)) {
            best = g;
            best_left = left;
        }
    }
    if (!best) return 0;
    out->n_slots = 1;
    out->slots[0] = (struct pl_slot){.node = best->node, .gpu_mask = best->mask, .gpu_count = 1};
    j->cotrain_rider = 1; /* before the commit: the holder holds the device, this member its CPU and memory */
    j->cotrain_group = best->id;
    group_add(best, j);
    pl_commit_place(c, j, out, now);
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

/* Wholly free devices of pool pi that a mover may take, less those claimed by members already stopping
 * (a co-trained member stopping leaves for a device of its own). */
static int64_t pool_free_for_movers(const struct pl_cluster *c, int32_t pi) {
    int64_t free = c->pools[pi].free_whole;
    for (int32_t r = 0; r < c->n_running; r++) {
        const struct pl_job *v = c->running[r];
        if (v->state == PL_JOB_STOPPING && v->cotrain_group && c->node_pool[v->alloc.slots[0].node] == pi) free--;
    }
    return free;
}

void pl_cotrain_move_out(struct pl_cluster *c, double now) {
    for (int32_t i = 0; i < c->n_groups; i++) {
        const struct pl_cotrain_group *g = &c->groups[i];
        int32_t pi = c->node_pool[g->node];
        int64_t free = pool_free_for_movers(c, pi);
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
            if (free <= 0 || staying < 2 || !mover) break;
            struct pl_decision *d = pl_decision_add(c, PL_MOVE_OUT, mover);
            d->alloc = mover->alloc;
            d->not_before = now + mover->grace_s;
            mover->state = PL_JOB_STOPPING;
            c->n_stopping++;
            free--;
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
