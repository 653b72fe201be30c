/* test_placement.c - the placement library's rules, one test each: gangs all-or-nothing, one node
 * when it fits else fewest nodes of one data center, type and data-center constraints with
 * spill-over, quotas, borrowing and reclaim, fair-share order, backfill that never delays the head,
 * preemption of the cheapest victims with grace periods, elastic grow and shrink, GPU sharing, FGD,
 * reasons, determinism and snapshot validation, co-training groups. */
#include <stdlib.h>
#include <string.h>

#include "placement.h"
#include "sizing.h"
#include "test.h"

/* ---------------------------------------------------------------------------------------------- */
/* Builders                                                                                        */

static struct pl_node node(int dc, int type, int gpus) {
    struct pl_node n;
    memset(&n, 0, sizeof n);
    n.dc = dc;
    n.gpu_type = type;
    n.gpus = gpus;
    n.gpu_mem_mib = 81920;
    n.cpu_milli = 64000;
    n.mem_mib = 512 * 1024;
    n.schedulable = 1;
    pl_node_reset_free(&n);
    return n;
}

static struct pl_job job(uint64_t id, int tenant, int gpus) {
    struct pl_job j;
    memset(&j, 0, sizeof j);
    j.id = id;
    j.tenant = tenant;
    j.gpus = gpus;
    j.gpu_milli = PL_MILLI;
    j.cpu_milli = 1000 * gpus;
    j.mem_mib = 1024 * gpus;
    j.preemptible = 1;
    j.submit_time = (double)id;
    return j;
}

static struct pl_tenant tenant(double weight) {
    struct pl_tenant t;
    memset(&t, 0, sizeof t);
    t.weight = weight;
    t.may_borrow = 1;
    return t;
}

static struct pl_cluster *cluster(const struct pl_node *nodes, int n, const struct pl_tenant *t, int nt,
                                  const char *policy) {
    struct pl_config cfg;
    CHECK(pl_config_for_policy(&cfg, policy) == 0);
    char err[256];
    struct pl_cluster *c = pl_cluster_new(nodes, n, t, nt, &cfg, err, sizeof err);
    CHECK_MSG(c != NULL, "%s", err);
    return c;
}

static const struct pl_decision *find(const struct pl_result *r, enum pl_action a, uint64_t id) {
    for (int i = 0; i < r->n; i++)
        if (r->decisions[i].action == a && r->decisions[i].job->id == id) return &r->decisions[i];
    return NULL;
}

static int free_gpus(const struct pl_cluster *c, int ni) {
    const struct pl_node *n = pl_cluster_node(c, ni);
    int k = 0;
    for (int g = 0; g < n->gpus; g++) k += n->gpu_free_milli[g] == PL_MILLI;
    return k;
}

/* Places `j` alone and returns the decision (asserting the action). */
static const struct pl_decision *place(struct pl_cluster *c, struct pl_job *j, double now) {
    const struct pl_result *r = pl_schedule(c, &j, 1, now);
    const struct pl_decision *d = find(r, PL_PLACE, j->id);
    CHECK_MSG(d != NULL, "job %llu was not placed", (unsigned long long)j->id);
    return d;
}

/* ---------------------------------------------------------------------------------------------- */
/* Gangs                                                                                           */

TEST(gang_all_or_nothing) {
    struct pl_node nodes[2] = {node(0, 0, 4), node(0, 0, 4)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 2, &t, 1, "whet");
    struct pl_job a = job(1, 0, 1), b = job(2, 0, 1), big = job(3, 0, 7);
    place(c, &a, 0);
    place(c, &b, 0);
    CHECK(free_gpus(c, 0) + free_gpus(c, 1) == 6);
    struct pl_job *q = &big;
    const struct pl_result *r = pl_schedule(c, &q, 1, 1);
    CHECK(find(r, PL_WAIT, 3) != NULL);
    CHECK(big.state == PL_JOB_QUEUED);
    CHECK(free_gpus(c, 0) + free_gpus(c, 1) == 6); /* nothing half-taken */
    CHECK(pl_cluster_gpu_milli_used(c) == 2000);
    big.gpus = 6;
    const struct pl_decision *d = place(c, &big, 2);
    CHECK(d && d->alloc.n_slots == 2);
    CHECK(pl_cluster_gpu_milli_used(c) == 8000);
    pl_cluster_free(c);
}

TEST(gang_one_node_when_it_fits) {
    /* Node 0 has 4 free GPUs, node 1 has 8: a 4-GPU job must not be split, an 8-GPU job goes whole
     * onto node 1. */
    struct pl_node nodes[2] = {node(0, 0, 4), node(0, 0, 8)};
    struct pl_tenant t = tenant(1);
    for (int p = 0; p < 3; p++) {
        const char *policy = p == 0 ? "fifo" : p == 1 ? "bestfit" : "whet";
        struct pl_cluster *c = cluster(nodes, 2, &t, 1, policy);
        struct pl_job four = job(1, 0, 4), eight = job(2, 0, 8);
        const struct pl_decision *d = place(c, &four, 0);
        CHECK(d && d->alloc.n_slots == 1 && d->alloc.slots[0].gpu_count == 4);
        d = place(c, &eight, 0);
        CHECK(d && d->alloc.n_slots == 1 && d->alloc.slots[0].node == 1);
        pl_cluster_free(c);
    }
}

TEST(gang_fewest_nodes) {
    /* Free GPUs per node: 2, 8, 3, 8, 4. A 16-GPU gang takes the two 8s, not five nodes. */
    struct pl_node nodes[5] = {node(0, 0, 8), node(0, 0, 8), node(0, 0, 8), node(0, 0, 8), node(0, 0, 8)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 5, &t, 1, "whet");
    struct pl_job fill0 = job(1, 0, 6), fill2 = job(2, 0, 5), fill4 = job(3, 0, 4);
    place(c, &fill0, 0);
    place(c, &fill2, 0);
    place(c, &fill4, 0);
    struct pl_job gang = job(10, 0, 16);
    const struct pl_decision *d = place(c, &gang, 1);
    CHECK(d && d->alloc.n_slots == 2);
    if (d && d->alloc.n_slots == 2) {
        CHECK(d->alloc.slots[0].gpu_count == 8 && d->alloc.slots[1].gpu_count == 8);
        CHECK(free_gpus(c, d->alloc.slots[0].node) == 0 && free_gpus(c, d->alloc.slots[1].node) == 0);
    }
    /* 10 GPUs now: 2 + 3 + 4 are left (9): does not fit; with 9 it takes all three. */
    struct pl_job ten = job(11, 0, 10), nine = job(12, 0, 9);
    struct pl_job *q = &ten;
    CHECK(find(pl_schedule(c, &q, 1, 2), PL_WAIT, 11) != NULL);
    d = place(c, &nine, 3);
    CHECK(d && d->alloc.n_slots == 3);
    pl_cluster_free(c);
}

TEST(gang_confined_to_one_node) {
    /* Two 4-GPU nodes with 1 free GPU each: a 2-GPU gang spans both, unless the job may use one node
     * only (max_nodes = 1: a trainer that runs as one process); then it waits and takes nothing. */
    struct pl_node nodes[2] = {node(0, 0, 4), node(0, 0, 4)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 2, &t, 1, "whet");
    struct pl_job fill0 = job(1, 0, 3), fill1 = job(2, 0, 3);
    place(c, &fill0, 0);
    place(c, &fill1, 0);
    struct pl_job single = job(3, 0, 2);
    single.max_nodes = 1;
    struct pl_job *q = &single;
    CHECK(find(pl_schedule(c, &q, 1, 1), PL_WAIT, 3) != NULL);
    CHECK(free_gpus(c, 0) + free_gpus(c, 1) == 2);
    struct pl_job spread = job(4, 0, 2);
    const struct pl_decision *d = place(c, &spread, 2);
    CHECK(d && d->alloc.n_slots == 2);
    pl_cluster_free(c);
}

TEST(gang_prefers_the_pool_needing_fewest_nodes) {
    /* Pool of type 0: four 4-GPU nodes; pool of type 1: two 8-GPU nodes, same data center. A 16-GPU
     * gang allowed on both goes to type 1 (2 nodes) rather than type 0 (4 nodes). */
    struct pl_node nodes[6] = {node(0, 0, 4), node(0, 0, 4), node(0, 0, 4), node(0, 0, 4), node(0, 1, 8), node(0, 1, 8)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 6, &t, 1, "whet");
    struct pl_job gang = job(1, 0, 16);
    const struct pl_decision *d = place(c, &gang, 0);
    CHECK(d && d->alloc.n_slots == 2);
    if (d && d->alloc.n_slots == 2) CHECK(pl_cluster_node(c, d->alloc.slots[0].node)->gpu_type == 1);
    pl_cluster_free(c);
}

TEST(gang_never_across_data_centers) {
    struct pl_node nodes[3] = {node(0, 0, 4), node(1, 0, 4), node(1, 0, 4)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 3, &t, 1, "whet");
    struct pl_job blocker = job(1, 0, 4);
    blocker.allowed_dcs = 1u << 1;
    place(c, &blocker, 0); /* dc1 now has 4 free, dc0 has 4 free: 8 in total, split */
    struct pl_job gang = job(2, 0, 8);
    struct pl_job *q = &gang;
    const struct pl_result *r = pl_schedule(c, &q, 1, 1);
    const struct pl_decision *d = find(r, PL_WAIT, 2);
    CHECK(d != NULL);
    if (d) {
        CHECK(d->reason.n_pools == 2);
        CHECK(d->reason.main == PL_F_GPUS);
    }
    CHECK(pl_cluster_gpu_milli_used(c) == 4000);
    /* When one data center can hold it, it goes there, on that data center's nodes only. */
    pl_cluster_release(c, &blocker);
    d = place(c, &gang, 2);
    CHECK(d && d->alloc.n_slots == 2);
    if (d && d->alloc.n_slots == 2) {
        CHECK(pl_cluster_node(c, d->alloc.slots[0].node)->dc == 1);
        CHECK(pl_cluster_node(c, d->alloc.slots[1].node)->dc == 1);
    }
    pl_cluster_free(c);
}

/* ---------------------------------------------------------------------------------------------- */
/* Constraints, quotas, reasons                                                                    */

TEST(type_and_dc_constraints_spill_over) {
    /* Types: 0 = A100 (dc0), 1 = H100 (dc0), 1 = H100 (dc1). */
    struct pl_node nodes[3] = {node(0, 0, 2), node(0, 1, 2), node(1, 1, 2)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 3, &t, 1, "whet");
    struct pl_job a = job(1, 0, 2), b = job(2, 0, 2), e = job(4, 0, 1);
    a.allowed_types = b.allowed_types = 1u << 1; /* H100 only */
    a.allowed_dcs = b.allowed_dcs = 1u << 0;       /* dc0 only */
    const struct pl_decision *d = place(c, &a, 0);
    CHECK(d && d->alloc.slots[0].node == 1);
    /* dc0's H100 pool is full: b may not spill to the A100s nor to dc1. */
    struct pl_job *q = &b;
    const struct pl_result *r = pl_schedule(c, &q, 1, 1);
    d = find(r, PL_WAIT, 2);
    CHECK(d != NULL);
    if (d) {
        int saw_type = 0, saw_dc = 0, saw_gpus = 0;
        for (int i = 0; i < d->reason.n_pools && i < PL_MAX_REASON_POOLS; i++) {
            saw_type |= d->reason.pools[i].filter == PL_F_TYPE && d->reason.pools[i].gpu_type == 0;
            saw_dc |= d->reason.pools[i].filter == PL_F_DC && d->reason.pools[i].dc == 1;
            saw_gpus |= d->reason.pools[i].filter == PL_F_GPUS && d->reason.pools[i].gpu_type == 1;
        }
        CHECK(saw_type && saw_dc && saw_gpus);
        char text[512];
        const char *dcs[] = {"eu", "us"}, *types[] = {"A100", "H100"};
        pl_reason_format(text, sizeof text, &d->reason, dcs, types);
        CHECK_CONTAINS(text, "dc eu type A100: GPU type not allowed");
        CHECK_CONTAINS(text, "dc us type H100: data center not allowed");
        CHECK_CONTAINS(text, "dc eu type H100: not enough free GPUs");
    }
    /* Allowing dc1 too spills b over to the other data center's H100s. */
    b.allowed_dcs |= 1u << 1;
    d = place(c, &b, 2);
    CHECK(d && d->alloc.slots[0].node == 2);
    /* A job with no constraint takes what is left (the A100s). */
    d = place(c, &e, 3);
    CHECK(d && d->alloc.slots[0].node == 0);
    pl_cluster_free(c);
}

TEST(quota_without_borrowing) {
    struct pl_node nodes[1] = {node(0, 0, 8)};
    struct pl_tenant t = tenant(1);
    t.may_borrow = 0;
    t.quota_gpus[0] = 4;
    struct pl_cluster *c = cluster(nodes, 1, &t, 1, "whet");
    struct pl_job a = job(1, 0, 3), b = job(2, 0, 1), over = job(3, 0, 1);
    place(c, &a, 0);
    place(c, &b, 0);
    CHECK(pl_cluster_tenant_gpus(c, 0, 0) == 4);
    struct pl_job *q = &over;
    const struct pl_result *r = pl_schedule(c, &q, 1, 1);
    const struct pl_decision *d = find(r, PL_WAIT, 3);
    CHECK(d && d->reason.main == PL_F_QUOTA);
    CHECK(free_gpus(c, 0) == 4); /* idle, but not this tenant's */
    pl_cluster_free(c);
}

TEST(borrow_then_reclaim) {
    /* Tenant 0 has no quota but may borrow; tenant 1 is guaranteed 4 GPUs of type 0. */
    struct pl_node nodes[1] = {node(0, 0, 4)};
    struct pl_tenant ts[2] = {tenant(1), tenant(1)};
    ts[1].quota_gpus[0] = 4;
    struct pl_cluster *c = cluster(nodes, 1, ts, 2, "whet");
    struct pl_job b1 = job(1, 0, 2), b2 = job(2, 0, 2);
    b1.last_checkpoint_time = 0;   /* 100 s of work at risk at t=100 */
    b2.last_checkpoint_time = 90;  /* 10 s at risk */
    b1.grace_s = b2.grace_s = 30;
    place(c, &b1, 0);
    place(c, &b2, 0);
    CHECK(b1.borrowed && b2.borrowed);
    struct pl_job owner = job(3, 1, 2);
    owner.submit_time = 100;
    struct pl_job *q = &owner;
    const struct pl_result *r = pl_schedule(c, &q, 1, 400);
    const struct pl_decision *p2 = find(r, PL_PREEMPT, 2), *p1 = find(r, PL_PREEMPT, 1);
    CHECK(p2 != NULL && p1 == NULL); /* one victim is enough: the one losing least work */
    CHECK(p2 && p2->for_job == &owner && p2->not_before == 430);
    const struct pl_decision *w = find(r, PL_WAIT, 3);
    CHECK(w && w->reason.preemption_pending);
    pl_cluster_release(c, &b2);
    const struct pl_decision *d = place(c, &owner, 430);
    CHECK(d != NULL);
    CHECK(!owner.borrowed);
    pl_cluster_free(c);
}

/* ---------------------------------------------------------------------------------------------- */
/* Order                                                                                           */

TEST(fair_share_order) {
    /* Two tenants of equal weight; tenant 0 already holds 2 GPUs. One GPU is left: tenant 1 gets it
     * although tenant 0's job arrived first. With weights 3:1, tenant 0 (share 2/4 over 3) is
     * below tenant 1 holding 1 GPU (1/4 over 1) and goes first. */
    struct pl_node nodes[1] = {node(0, 0, 4)};
    struct pl_tenant ts[2] = {tenant(1), tenant(1)};
    struct pl_cluster *c = cluster(nodes, 1, ts, 2, "whet");
    struct pl_job r0 = job(1, 0, 2), filler = job(2, 0, 1);
    place(c, &r0, 0);
    place(c, &filler, 0);
    struct pl_job early = job(10, 0, 1), late = job(11, 1, 1);
    struct pl_job *q[2] = {&early, &late};
    const struct pl_result *r = pl_schedule(c, q, 2, 1);
    CHECK(find(r, PL_PLACE, 11) != NULL);
    CHECK(find(r, PL_WAIT, 10) != NULL);
    pl_cluster_free(c);

    ts[0].weight = 3;
    c = cluster(nodes, 1, ts, 2, "whet");
    struct pl_job h0 = job(1, 0, 2), h1 = job(2, 1, 1);
    place(c, &h0, 0);
    place(c, &h1, 0);
    CHECK(pl_cluster_tenant_share(c, 0) < pl_cluster_tenant_share(c, 1));
    struct pl_job e2 = job(20, 0, 1), l2 = job(21, 1, 1);
    e2.submit_time = 50; /* tenant 0's job now arrives later: share decides, not arrival */
    struct pl_job *q2[2] = {&l2, &e2};
    r = pl_schedule(c, q2, 2, 1);
    CHECK(find(r, PL_PLACE, 20) != NULL);
    CHECK(find(r, PL_WAIT, 21) != NULL);
    pl_cluster_free(c);
}

/* One node, full: two tenants of equal weight holding held[0] and held[1] of its GPUs, one job each
 * (`running`, room for all of them). */
static struct pl_cluster *full_node(const int held[2], struct pl_job *running) {
    struct pl_node n = node(0, 0, held[0] + held[1]);
    struct pl_tenant ts[2] = {tenant(1), tenant(1)};
    struct pl_cluster *c = cluster(&n, 1, ts, 2, "whet");
    for (int k = 0; k < held[0] + held[1]; k++) {
        running[k] = job((uint64_t)k + 1, k >= held[0], 1);
        place(c, &running[k], 0);
    }
    return c;
}

/* The six waiting jobs' ids in the order of the cycle's decisions. */
static void check_waiting_order(struct pl_cluster *c, const uint64_t want[6]) {
    struct pl_job w[6] = {job(10, 0, 1), job(11, 0, 1), job(12, 0, 1), job(20, 1, 1), job(21, 1, 1), job(22, 1, 1)};
    struct pl_job *q[6];
    for (int i = 0; i < 6; i++) q[i] = &w[i];
    const struct pl_result *r = pl_schedule(c, q, 6, 1);
    CHECK(r->n == 6);
    for (int i = 0; i < r->n && i < 6; i++)
        CHECK_MSG(r->decisions[i].action == PL_WAIT && r->decisions[i].job->id == want[i], "place %d: job %llu", i,
                  (unsigned long long)r->decisions[i].job->id);
}

TEST(fair_order_interleaves_waiting_tenants) {
    /* Two tenants of equal weight and usage wait with three jobs each, tenant 0's arriving first. The
     * waiting order is the order they would start in: one tenant's job after the other's (a job left
     * waiting counts in its tenant's share), not tenant 0's whole queue first. Once tenant 0 holds one
     * more GPU, its jobs go one place back each. */
    struct pl_job running[3];
    struct pl_cluster *c = full_node((const int[2]){1, 1}, running);
    check_waiting_order(c, (const uint64_t[6]){10, 20, 11, 21, 12, 22});
    pl_cluster_free(c);
    c = full_node((const int[2]){2, 1}, running);
    check_waiting_order(c, (const uint64_t[6]){20, 10, 21, 11, 22, 12});
    pl_cluster_free(c);
}

TEST(priority_first_then_las) {
    struct pl_node nodes[1] = {node(0, 0, 1)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 1, &t, 1, "las");
    struct pl_job old = job(1, 0, 1), fresh = job(2, 0, 1);
    old.attained_gpu_s = 50000; /* long attained service: the lowest LAS level */
    struct pl_job *q[2] = {&old, &fresh};
    const struct pl_result *r = pl_schedule(c, q, 2, 0);
    CHECK(find(r, PL_PLACE, 2) != NULL && find(r, PL_WAIT, 1) != NULL);
    pl_cluster_free(c);

    c = cluster(nodes, 1, &t, 1, "whet");
    struct pl_job low = job(3, 0, 1), high = job(4, 0, 1);
    high.priority = 5;
    high.submit_time = 100;
    struct pl_job *q2[2] = {&low, &high};
    r = pl_schedule(c, q2, 2, 0);
    CHECK(find(r, PL_PLACE, 4) != NULL && find(r, PL_WAIT, 3) != NULL);
    pl_cluster_free(c);
}

/* ---------------------------------------------------------------------------------------------- */
/* Backfill                                                                                        */

TEST(backfill_never_delays_the_head) {
    /* node 0: 8 GPUs, all busy; node 1: 8 GPUs, 4 busy; node 2: 2 GPUs, free. The head wants 8:
     * it is reserved node 1 (closest to fitting). A 2-GPU job behind it runs on node 2, not on
     * node 1's free GPUs, so node 1 frees up for the head as soon as its own job ends. */
    struct pl_node nodes[3] = {node(0, 0, 8), node(0, 0, 8), node(0, 0, 2)};
    struct pl_tenant t = tenant(1);
    const char *policies[2] = {"whet", "fifo"};
    for (int p = 0; p < 2; p++) {
        struct pl_cluster *c = cluster(nodes, 3, &t, 1, policies[p]);
        struct pl_job busy0 = job(1, 0, 8), busy1 = job(2, 0, 4);
        busy0.allowed_types = 1;
        place(c, &busy0, 0);
        place(c, &busy1, 0);
        CHECK(free_gpus(c, 1) == 4);
        struct pl_job head = job(10, 0, 8), small = job(11, 0, 2), small2 = job(12, 0, 2);
        struct pl_job *q[3] = {&head, &small, &small2};
        const struct pl_result *r = pl_schedule(c, q, 3, 1);
        CHECK(find(r, PL_WAIT, 10) != NULL);
        const struct pl_decision *d = find(r, PL_PLACE, 11);
        CHECK(d != NULL);
        if (p == 0) {
            /* whet: the small job backfills elsewhere; the next one waits, reason "reserved". */
            CHECK(d && d->alloc.slots[0].node == 2);
            CHECK(free_gpus(c, 1) == 4);
            const struct pl_decision *w = find(r, PL_WAIT, 12);
            CHECK(w && w->reason.main == PL_F_RESERVED);
            /* The head starts the moment node 1's job ends. */
            pl_cluster_release(c, &busy1);
            struct pl_job *q2[2] = {&head, &small2};
            r = pl_schedule(c, q2, 2, 2);
            d = find(r, PL_PLACE, 10);
            CHECK(d && d->alloc.slots[0].node == 1);
        } else {
            /* fifo (no reservation) lets the small jobs eat the head's room. */
            CHECK(find(r, PL_PLACE, 12) != NULL);
            CHECK(free_gpus(c, 1) < 4);
        }
        pl_cluster_free(c);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Preemption                                                                                      */

TEST(preemption_picks_cheapest_victims_and_holds_for_grace) {
    struct pl_node nodes[2] = {node(0, 0, 4), node(0, 0, 4)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 2, &t, 1, "whet");
    /* Eight 1-GPU low-priority jobs; their last checkpoints differ. At t=1000 the two on node 1
     * with the freshest checkpoints lose least. */
    struct pl_job low[8];
    double ckpt[8] = {100, 200, 300, 400, 900, 990, 500, 980};
    for (int i = 0; i < 8; i++) {
        low[i] = job((uint64_t)i + 1, 0, 1);
        low[i].last_checkpoint_time = ckpt[i];
        low[i].grace_s = 10 * (i + 1);
        place(c, &low[i], 0);
    }
    CHECK(pl_cluster_gpu_milli_used(c) == 8000);
    struct pl_job high = job(100, 0, 2);
    high.priority = 10;
    struct pl_job *q = &high;
    const struct pl_result *r = pl_schedule(c, &q, 1, 1000);
    CHECK(r->preempted == 2);
    /* Which node each job landed on decides who shares a node: find the cheapest pair per node. */
    const struct pl_decision *v1 = NULL, *v2 = NULL;
    for (int i = 0; i < r->n; i++)
        if (r->decisions[i].action == PL_PREEMPT) {
            if (!v1) v1 = &r->decisions[i];
            else v2 = &r->decisions[i];
        }
    CHECK(v1 && v2);
    if (v1 && v2) {
        int node_of = v1->job->alloc.slots[0].node;
        CHECK(v2->job->alloc.slots[0].node == node_of);
        /* No other pair on any node loses less work than the chosen pair. */
        double chosen = (1000 - v1->job->last_checkpoint_time) + (1000 - v2->job->last_checkpoint_time);
        for (int n = 0; n < 2; n++) {
            double best1 = 1e18, best2 = 1e18;
            for (int i = 0; i < 8; i++) {
                if (low[i].alloc.slots[0].node != n) continue;
                double lost = 1000 - low[i].last_checkpoint_time;
                if (lost < best1) {
                    best2 = best1;
                    best1 = lost;
                } else if (lost < best2) {
                    best2 = lost;
                }
            }
            CHECK(chosen <= best1 + best2);
        }
        CHECK(v1->not_before == 1000 + v1->job->grace_s);
        CHECK(v1->job->state == PL_JOB_STOPPING);
        /* Decisions live until the next cycle: keep the victims. */
        struct pl_job *a = v1->job, *b = v2->job;
        /* During the grace period nothing else starts there and no second round of victims. A job
         * ordered ahead of the preemptor (same priority, earlier) finds nothing it may stop. */
        for (int i = 0; i < 8; i++)
            if (&low[i] != a && &low[i] != b) low[i].preemptible = 0;
        struct pl_job other = job(101, 0, 1);
        other.priority = 10;
        other.submit_time = 0;
        struct pl_job *q2[2] = {&other, &high};
        r = pl_schedule(c, q2, 2, 1005);
        const struct pl_decision *w = find(r, PL_WAIT, 100);
        CHECK(w && w->reason.preemption_pending);
        CHECK(r->preempted == 0);
        CHECK(find(r, PL_PREEMPT, a->id) == NULL);
        /* Victims stop: the preemptor, not the other job, gets their GPUs. */
        pl_cluster_release(c, a);
        pl_cluster_release(c, b);
        r = pl_schedule(c, q2, 2, 1100);
        const struct pl_decision *d = find(r, PL_PLACE, 100);
        CHECK(d && d->alloc.slots[0].node == node_of);
    }
    pl_cluster_free(c);
}

TEST(no_preemption_of_equal_priority_or_unpreemptible) {
    struct pl_node nodes[1] = {node(0, 0, 2)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 1, &t, 1, "whet");
    struct pl_job a = job(1, 0, 1), b = job(2, 0, 1);
    b.preemptible = 0;
    place(c, &a, 0);
    place(c, &b, 0);
    struct pl_job same = job(3, 0, 1);
    struct pl_job *q = &same;
    const struct pl_result *r = pl_schedule(c, &q, 1, 5000);
    CHECK(r->preempted == 0);
    struct pl_job high = job(4, 0, 2);
    high.priority = 1;
    q = &high;
    r = pl_schedule(c, &q, 1, 5000);
    CHECK(r->preempted == 0); /* b cannot be stopped, so stopping a would not make room */
    pl_cluster_free(c);
}

TEST(stopping_victims_are_counted_on) {
    /* A caller that rebuilds the cluster each cycle passes last cycle's victims as STOPPING: the
     * preemptor waits for them instead of choosing more victims. */
    struct pl_node nodes[1] = {node(0, 0, 4)};
    struct pl_tenant t = tenant(1);
    struct pl_config cfg;
    pl_config_for_policy(&cfg, "whet");
    char err[256];
    struct pl_cluster *c = pl_cluster_new(nodes, 1, &t, 1, &cfg, err, sizeof err);
    struct pl_job stopping = job(1, 0, 2), running = job(2, 0, 2);
    stopping.state = PL_JOB_STOPPING;
    stopping.alloc.n_slots = running.alloc.n_slots = 1;
    stopping.alloc.slots[0].gpu_mask = 0x3;
    running.alloc.slots[0].gpu_mask = 0xc;
    CHECK(pl_cluster_add_running(c, &stopping, err, sizeof err) == 0);
    CHECK(pl_cluster_add_running(c, &running, err, sizeof err) == 0);
    CHECK(stopping.state == PL_JOB_STOPPING);
    struct pl_job high = job(3, 0, 2);
    high.priority = 5;
    struct pl_job *q = &high;
    const struct pl_result *r = pl_schedule(c, &q, 1, 1000);
    CHECK(r->preempted == 0);
    const struct pl_decision *w = find(r, PL_WAIT, 3);
    CHECK(w && w->reason.preemption_pending);
    /* Wanting all four GPUs, it still needs the running job stopped. */
    high.gpus = 4;
    r = pl_schedule(c, &q, 1, 1000);
    CHECK(find(r, PL_PREEMPT, 2) != NULL && find(r, PL_PREEMPT, 1) == NULL);
    pl_cluster_free(c);
}

/* ---------------------------------------------------------------------------------------------- */
/* Elastic                                                                                         */

TEST(elastic_grow_then_shrink_first) {
    struct pl_node nodes[1] = {node(0, 0, 8)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 1, &t, 1, "whet");
    struct pl_job e = job(1, 0, 2);
    e.min_gpus = 2;
    e.max_gpus = 8;
    struct pl_job *q = &e;
    const struct pl_result *r = pl_schedule(c, &q, 1, 0);
    CHECK(find(r, PL_PLACE, 1) != NULL);
    const struct pl_decision *g = find(r, PL_GROW, 1);
    CHECK(g && g->gpus == 8 && e.gpus == 8);
    CHECK(free_gpus(c, 0) == 0);
    CHECK(e.cpu_milli == 8000);
    /* A new job of the same priority: the elastic job gives back GPUs; nobody is stopped. */
    struct pl_job newcomer = job(2, 0, 4);
    q = &newcomer;
    r = pl_schedule(c, &q, 1, 10);
    const struct pl_decision *s = find(r, PL_SHRINK, 1);
    CHECK(s != NULL && r->preempted == 0);
    if (s) {
        CHECK(s->gpus == 4 && s->for_job == &newcomer);
        pl_cluster_shrink(c, &e, &s->alloc);
    }
    CHECK(e.gpus == 4 && free_gpus(c, 0) == 4);
    CHECK(place(c, &newcomer, 11) != NULL);
    CHECK(free_gpus(c, 0) == 0);
    pl_cluster_free(c);
}

/* ---------------------------------------------------------------------------------------------- */
/* Sharing and fragmentation                                                                       */

TEST(gpu_share_packs_one_device) {
    struct pl_node nodes[1] = {node(0, 0, 2)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 1, &t, 1, "whet");
    struct pl_job a = job(1, 0, 1), b = job(2, 0, 1), whole = job(3, 0, 1);
    a.gpu_milli = 600;
    b.gpu_milli = 400;
    const struct pl_decision *da = place(c, &a, 0), *db = place(c, &b, 0);
    CHECK(da && db && da->alloc.slots[0].gpu_mask == db->alloc.slots[0].gpu_mask);
    CHECK(pl_cluster_gpu_milli_used(c) == 1000);
    CHECK(place(c, &whole, 0) != NULL); /* the other GPU stayed whole */
    pl_cluster_free(c);
}

TEST(fgd_avoids_fragmenting) {
    /* Two nodes, 2 GPUs each; node 0 has one GPU at 700 free (a 300 share runs), node 1 is empty.
     * The expected workload is whole 1-GPU and 2-GPU jobs. A 600 share placed on node 0's partly
     * used GPU strands 100; on node 1 it would break a whole node a 2-GPU job needs. */
    struct pl_node nodes[2] = {node(0, 0, 2), node(0, 0, 2)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 2, &t, 1, "whet");
    struct pl_shape shapes[2] = {{1, 1000, 0, 0, 0, 1}, {2, 1000, 0, 0, 0, 1}};
    CHECK(pl_cluster_set_profile(c, shapes, 2) == 0);
    struct pl_job s = job(1, 0, 1), x = job(2, 0, 1);
    s.gpu_milli = 300;
    const struct pl_decision *d = place(c, &s, 0);
    int first = d ? d->alloc.slots[0].node : -1;
    x.gpu_milli = 600;
    d = place(c, &x, 1);
    CHECK(d && d->alloc.slots[0].node == first);
    CHECK(d && d->alloc.slots[0].gpu_mask == s.alloc.slots[0].gpu_mask);
    struct pl_job two = job(3, 0, 2);
    CHECK(place(c, &two, 2) != NULL);
    pl_cluster_free(c);
}

/* Nodes in one state are scored once per job (state.c): each node's state follows its jobs. Four empty
 * 2-GPU nodes; 1-GPU jobs pack (best fit): two on a node, then the next node; a released GPU is taken
 * again before an empty node is broken, and no node is ever given more than it has. */
TEST(packing_follows_each_nodes_state) {
    struct pl_node nodes[4] = {node(0, 0, 2), node(0, 0, 2), node(0, 0, 2), node(0, 0, 2)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 4, &t, 1, "whet");
    struct pl_job jobs[5];
    int where[5];
    for (int i = 0; i < 4; i++) {
        jobs[i] = job((uint64_t)i + 1, 0, 1);
        const struct pl_decision *d = place(c, &jobs[i], i);
        where[i] = d ? d->alloc.slots[0].node : -1;
    }
    CHECK(where[0] >= 0 && where[1] == where[0]);
    CHECK(where[2] >= 0 && where[2] != where[0] && where[3] == where[2]);
    int busy = 0;
    for (int ni = 0; ni < 4; ni++) {
        CHECK(free_gpus(c, ni) >= 0);
        busy += free_gpus(c, ni) == 0;
    }
    CHECK(busy == 2);
    pl_cluster_release(c, &jobs[1]);
    CHECK(free_gpus(c, where[0]) == 1);
    jobs[4] = job(5, 0, 1);
    const struct pl_decision *d = place(c, &jobs[4], 5);
    CHECK(d && d->alloc.slots[0].node == where[0]);
    CHECK(free_gpus(c, where[0]) == 0);
    pl_cluster_free(c);
}

/* The pick goes through node states, not nodes (pick.c: best_of_states): through thousands of placements
 * and releases on 150 nodes, best fit must still take, of the nodes that hold the job, one left with the
 * fewest free devices, the lowest index among them, whatever its devices' pattern (nodes with as many free
 * devices in other patterns are other states of the same score). Fails when a state's lowest member is not
 * kept as nodes come and go, or when a tie between states is not broken by the index. */
TEST(best_fit_takes_the_lowest_index_of_the_best_state) {
    enum { N = 150, OPS = 4000 };
    struct pl_node nodes[N];
    for (int i = 0; i < N; i++) nodes[i] = node(0, 0, 8);
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, N, &t, 1, "bestfit");
    static struct pl_job jobs[OPS];
    int running[OPS], n_running = 0, wrong = 0, placed = 0;
    uint64_t x = 99;
    for (int op = 0; op < OPS; op++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        if ((x >> 33) % 10 < 4 && n_running > 0) { /* release a running job */
            int r = (int)((x >> 40) % (uint64_t)n_running);
            pl_cluster_release(c, &jobs[running[r]]);
            running[r] = running[--n_running];
            continue;
        }
        jobs[op] = job((uint64_t)op + 1, 0, 1 + (int)((x >> 50) % 3));
        int want = -1;
        for (int ni = 0; ni < N; ni++) {
            int f = free_gpus(c, ni);
            if (f >= jobs[op].gpus && (want < 0 || f < free_gpus(c, want))) want = ni;
        }
        struct pl_job *q = &jobs[op];
        const struct pl_decision *d = find(pl_schedule(c, &q, 1, (double)op), PL_PLACE, jobs[op].id);
        int got = d && d->alloc.n_slots == 1 ? d->alloc.slots[0].node : -1;
        wrong += got != want;
        if (got >= 0) {
            running[n_running++] = op;
            placed++;
        }
    }
    CHECK_MSG(wrong == 0, "%d of %d placements not on the lowest-index fullest node", wrong, placed);
    CHECK(placed > OPS / 2);
    pl_cluster_free(c);
}

/* ---------------------------------------------------------------------------------------------- */
/* Determinism and validation                                                                      */

static void run_mix(const char *policy, int reverse, uint64_t *out, int *n_out) {
    struct pl_node nodes[6];
    for (int i = 0; i < 6; i++) nodes[i] = node(i % 2, i % 3 == 0, i < 3 ? 8 : 4);
    struct pl_tenant ts[3] = {tenant(1), tenant(2), tenant(1)};
    struct pl_cluster *c = cluster(nodes, 6, ts, 3, policy);
    struct pl_job jobs[40];
    struct pl_job *q[40];
    uint64_t x = 12345;
    for (int i = 0; i < 40; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        jobs[i] = job((uint64_t)i + 1, (int)(x >> 60) % 3, (int)((x >> 40) % 5));
        if ((x >> 20) % 4 == 0 && jobs[i].gpus == 1) jobs[i].gpu_milli = 250 + (int)((x >> 10) % 500);
        jobs[i].submit_time = (double)((x >> 30) % 7);
        jobs[i].priority = (int)((x >> 50) % 2);
        q[reverse ? 39 - i : i] = &jobs[i];
    }
    const struct pl_result *r = pl_schedule(c, q, 40, 100);
    *n_out = 0;
    for (int i = 0; i < r->n; i++) {
        const struct pl_decision *d = &r->decisions[i];
        uint64_t h = d->job->id * 31 + (uint64_t)d->action;
        for (int s = 0; s < d->alloc.n_slots; s++) h = h * 1000003 + (uint64_t)d->alloc.slots[s].node * 65536 + d->alloc.slots[s].gpu_mask;
        out[(*n_out)++] = h;
    }
    pl_cluster_free(c);
}

TEST(deterministic) {
    const char *policies[4] = {"fifo", "bestfit", "las", "whet"};
    for (int p = 0; p < 4; p++) {
        uint64_t a[128], b[128], rev[128];
        int na, nb, nr;
        run_mix(policies[p], 0, a, &na);
        run_mix(policies[p], 0, b, &nb);
        run_mix(policies[p], 1, rev, &nr);
        CHECK(na == nb && na == nr && na >= 40);
        CHECK(!memcmp(a, b, (size_t)na * sizeof *a));
        CHECK_MSG(!memcmp(a, rev, (size_t)na * sizeof *a), "%s: queue order in the input changed decisions",
                  policies[p]);
    }
}

TEST(snapshot_validation) {
    struct pl_tenant t = tenant(1);
    struct pl_config cfg;
    pl_config_for_policy(&cfg, "whet");
    char err[256];
    struct pl_node bad = node(0, 0, 4);
    bad.gpus = 17;
    CHECK(pl_cluster_new(&bad, 1, &t, 1, &cfg, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "node 0: gpus: 17");
    bad = node(70, 0, 4);
    CHECK(pl_cluster_new(&bad, 1, &t, 1, &cfg, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "dc");
    struct pl_tenant zero = tenant(0);
    struct pl_node ok = node(0, 0, 4);
    CHECK(pl_cluster_new(&ok, 1, &zero, 1, &cfg, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "weight");
    CHECK(pl_config_for_policy(&cfg, "random") == -1);

    /* Loading a running job: its GPUs must be free and its size must match. */
    struct pl_cluster *c = pl_cluster_new(&ok, 1, &t, 1, &cfg, err, sizeof err);
    struct pl_job r = job(1, 0, 2);
    r.alloc.n_slots = 1;
    r.alloc.slots[0].node = 0;
    r.alloc.slots[0].gpu_mask = 0x3;
    CHECK(pl_cluster_add_running(c, &r, err, sizeof err) == 0);
    CHECK(free_gpus(c, 0) == 2 && pl_cluster_n_running(c) == 1);
    struct pl_job clash = job(2, 0, 1);
    clash.alloc.n_slots = 1;
    clash.alloc.slots[0].node = 0;
    clash.alloc.slots[0].gpu_mask = 0x2;
    CHECK(pl_cluster_add_running(c, &clash, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "gpu 1 of node 0 is not free");
    pl_cluster_release(c, &r);
    CHECK(free_gpus(c, 0) == 4 && pl_cluster_n_running(c) == 0 && r.state == PL_JOB_QUEUED);
    pl_cluster_free(c);
}

TEST(cpu_and_memory_filters) {
    struct pl_node nodes[1] = {node(0, 0, 4)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 1, &t, 1, "bestfit");
    struct pl_job hog = job(1, 0, 0);
    hog.cpu_milli = 63000; /* a CPU-only task takes almost all CPU */
    place(c, &hog, 0);
    struct pl_job g = job(2, 0, 1);
    g.cpu_milli = 2000;
    struct pl_job *q = &g;
    const struct pl_result *r = pl_schedule(c, &q, 1, 1);
    const struct pl_decision *d = find(r, PL_WAIT, 2);
    CHECK(d && d->reason.main == PL_F_CPU);
    pl_cluster_free(c);
}

/* ---------------------------------------------------------------------------------------------- */
/* Co-training groups                                                                              */

/* A LoRA job of base `key` whose group holds base_mib once and member_mib per member. */
static struct pl_job cotrain_job(uint64_t id, int tenant, uint64_t key, int32_t base_mib, int32_t member_mib) {
    struct pl_job j = job(id, tenant, 1);
    j.cotrain_key = key;
    j.cotrain_base_mib = base_mib;
    j.cotrain_member_mib = member_mib;
    return j;
}

/* Job j running as a member of group `group` on the devices `mask` of node 0 (a snapshot's job), added to
 * the cluster: pl_cluster_add_running's result. */
static int add_member(struct pl_cluster *c, struct pl_job *j, uint64_t group, uint16_t mask) {
    char err[256];
    j->cotrain_group = group;
    j->alloc.n_slots = 1;
    j->alloc.slots[0].node = 0;
    j->alloc.slots[0].gpu_mask = mask;
    return pl_cluster_add_running(c, j, err, sizeof err);
}

static int used_milli(const struct pl_cluster *c) { return (int)pl_cluster_gpu_milli_used(c); }

/* Group ids scattered over 48 bits (splitmix64's finalizer, one to one), so that groups share slots of the
 * placement's table of groups by id. */
static uint64_t group_fleet_id(int device) {
    uint64_t z = (uint64_t)device + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return ((z ^ (z >> 31)) >> 16) + 1;
}

/* A full fleet of co-training groups (every device one running group of 1-3 members, bases 1-3, some of
 * unknown memory) for the tests below; the same one for each call. */
static struct pl_cluster *group_fleet(struct pl_job *running, int *n_running) {
    enum { N = 40 };
    struct pl_node nodes[N];
    for (int i = 0; i < N; i++) {
        nodes[i] = node(i % 2, (i / 2) % 2, 8);
        if (i % 3 == 0) nodes[i].gpu_mem_mib = 141312;
    }
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, N, &t, 1, "whet");
    uint64_t x = 7;
    *n_running = 0;
    for (int ni = 0; ni < N; ni++)
        for (int g = 0; g < 8; g++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            int members = 1 + (int)((x >> 33) % 3), sized = (x >> 40) % 8 != 0;
            for (int m = 0; m < members; m++) {
                struct pl_job *j = &running[(*n_running)++];
                *j = cotrain_job((uint64_t)100000 + (uint64_t)*n_running, 0, 1 + (x >> 45) % 3,
                                 sized ? 8000 * (1 + (int32_t)((x >> 50) % 3)) : 0, sized ? 3000 : 0);
                j->preemptible = 0;
                j->cpu_milli = 500;
                j->cotrain_group = group_fleet_id(ni * 8 + g);
                j->alloc.n_slots = 1;
                j->alloc.slots[0].node = ni;
                j->alloc.slots[0].gpu_mask = (uint16_t)(1u << g);
                char err[256];
                CHECK_MSG(pl_cluster_add_running(c, j, err, sizeof err) == 0, "%s", err);
            }
        }
    return c;
}

/* Within a cycle a job's join search is remembered for the jobs that join alike (cotrain.c's memo) and
 * the groups joined since are ranked anew; the outcome must be what a search of its own finds: each job
 * of one cycle over the queue goes where it goes when it is the only job of a cycle, in the same order. */
TEST(cotrain_join_within_a_cycle_matches_a_full_search) {
    enum { Q = 600, R = 40 * 8 * 3 };
    static struct pl_job run_a[R], run_b[R], qa[Q], qb[Q];
    int n_run;
    struct pl_cluster *a = group_fleet(run_a, &n_run), *b = group_fleet(run_b, &n_run);
    struct pl_job *queue[Q];
    uint64_t x = 11;
    for (int i = 0; i < Q; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        qa[i] = cotrain_job((uint64_t)i + 1, 0, 1 + (x >> 33) % 3, 8000 * (1 + (int32_t)((x >> 36) % 3)),
                            1000 * (1 + 2 * (int32_t)((x >> 39) % 3)));
        qa[i].cpu_milli = 1000 * (1 + 5 * (int64_t)((x >> 42) % 3));
        if ((x >> 45) % 5 == 0) qa[i].allowed_dcs = 1ull << ((x >> 48) % 2);
        if ((x >> 50) % 5 == 0) qa[i].allowed_types = 1ull << ((x >> 53) % 2);
        qb[i] = qa[i];
        queue[i] = &qa[i];
    }
    const struct pl_result *r = pl_schedule(a, queue, Q, 0);
    int wrong = 0, joined = 0, waited = 0;
    for (int k = 0; k < r->n; k++) {
        const struct pl_decision *d = &r->decisions[k];
        struct pl_job *one = &qb[d->job->id - 1];
        const struct pl_decision *e = find(pl_schedule(b, &one, 1, 0), d->action, one->id);
        wrong += !e || (d->action == PL_PLACE && (e->alloc.slots[0].node != d->alloc.slots[0].node ||
                                                  e->alloc.slots[0].gpu_mask != d->alloc.slots[0].gpu_mask));
        joined += d->action == PL_PLACE;
        waited += d->action == PL_WAIT;
    }
    CHECK_MSG(wrong == 0, "%d of %d decisions differ from a search of their own", wrong, r->n);
    CHECK_MSG(joined > 200 && waited > 50, "joined %d, waited %d: the fleet should fill up", joined, waited);
    pl_cluster_free(a);
    pl_cluster_free(b);
}

static int device_of(const struct pl_job *j) {
    return j->alloc.slots[0].node * 8 + __builtin_ctz(j->alloc.slots[0].gpu_mask);
}

/* Groups are found by id (a hash table with deletions): through releases in random order, a device stays
 * held while its group has a member (the holder's hold passes to a rider), and only so long. */
TEST(cotrain_group_holds_its_device_until_its_last_member_leaves) {
    enum { R = 40 * 8 * 3 };
    static struct pl_job run[R];
    int n_run, left[40 * 8] = {0}, held = 0;
    struct pl_cluster *c = group_fleet(run, &n_run);
    int order[R];
    for (int i = 0; i < n_run; i++) {
        order[i] = i;
        if (left[device_of(&run[i])]++ == 0) held++;
    }
    CHECK(used_milli(c) == held * PL_MILLI);
    uint64_t x = 5;
    for (int i = n_run - 1; i > 0; i--) { /* a random order of release */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int k = (int)((x >> 33) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[k];
        order[k] = t;
    }
    int wrong = 0;
    for (int i = 0; i < n_run; i++) {
        struct pl_job *j = &run[order[i]];
        if (--left[device_of(j)] == 0) held--;
        pl_cluster_release(c, j);
        wrong += used_milli(c) != held * PL_MILLI;
    }
    CHECK_MSG(wrong == 0 && held == 0, "%d releases left the wrong devices held", wrong);
    pl_cluster_free(c);
}

TEST(cotrain_packs_when_no_device_is_free) {
    struct pl_node nodes[1] = {node(0, 0, 1)};
    struct pl_tenant t[2] = {tenant(1), tenant(1)};
    struct pl_cluster *c = cluster(nodes, 1, t, 2, "whet");
    struct pl_job j[4], other = cotrain_job(9, 0, 2, 20000, 1000);
    struct pl_job *q[5];
    for (int i = 0; i < 4; i++) {
        j[i] = cotrain_job((uint64_t)i + 1, i % 2, 1, 20000, 5000);
        q[i] = &j[i];
    }
    q[4] = &other; /* another base: no group of its key */
    const struct pl_result *r = pl_schedule(c, q, 5, 0);
    CHECK(r->placed == 4 && find(r, PL_WAIT, 9));
    CHECK(j[0].cotrain_group != 0);
    for (int i = 0; i < 4; i++) {
        const struct pl_decision *d = find(r, PL_PLACE, j[i].id);
        CHECK(d && d->alloc.n_slots == 1 && d->alloc.slots[0].node == 0 && d->alloc.slots[0].gpu_mask == 1);
        CHECK(j[i].cotrain_group == j[0].cotrain_group && j[i].state == PL_JOB_RUNNING);
    }
    CHECK(used_milli(c) == PL_MILLI); /* one device for the four */
    /* Each tenant's share counts what it holds: the holder's tenant the device, riders nothing. */
    CHECK(pl_cluster_tenant_gpus(c, j[0].tenant, 0) == 1.0 && pl_cluster_tenant_gpus(c, 1, 0) == 0.0);
    pl_cluster_free(c);
}

TEST(cotrain_runs_alone_on_free_devices) {
    struct pl_node nodes[1] = {node(0, 0, 2)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 1, &t, 1, "whet");
    struct pl_job a = cotrain_job(1, 0, 1, 20000, 5000), b = cotrain_job(2, 0, 1, 20000, 5000);
    struct pl_job *q[2] = {&a, &b};
    const struct pl_result *r = pl_schedule(c, q, 2, 0);
    CHECK(r->placed == 2 && free_gpus(c, 0) == 0);
    /* a group nobody joined is no group: each runs a trainer of its own */
    CHECK(a.cotrain_group == 0 && b.cotrain_group == 0);
    pl_cluster_free(c);
}

TEST(cotrain_group_limited_by_memory_and_size) {
    /* 80 GiB: 72 GiB usable. Base 40000 MiB + 10000 per member: 3 members (70000), not 4 (80000). */
    struct pl_node nodes[1] = {node(0, 0, 1)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 1, &t, 1, "whet");
    struct pl_job j[4];
    struct pl_job *q[4];
    for (int i = 0; i < 4; i++) {
        j[i] = cotrain_job((uint64_t)i + 1, 0, 1, 40000, 10000);
        q[i] = &j[i];
    }
    const struct pl_result *r = pl_schedule(c, q, 4, 0);
    CHECK(r->placed == 3 && find(r, PL_WAIT, 4) && j[3].cotrain_group == 0);
    pl_cluster_free(c);

    /* Small members: the group stops at cfg.cotrain_max. */
    c = cluster(nodes, 1, &t, 1, "whet");
    struct pl_job many[10];
    struct pl_job *mq[10];
    for (int i = 0; i < 10; i++) {
        many[i] = cotrain_job((uint64_t)i + 1, 0, 1, 1000, 100);
        mq[i] = &many[i];
    }
    r = pl_schedule(c, mq, 10, 0);
    CHECK(r->placed == 8 && r->waiting == 2);
    pl_cluster_free(c);

    /* A policy without co-training places one job per device. */
    c = cluster(nodes, 1, &t, 1, "fifo");
    for (int i = 0; i < 2; i++) j[i] = cotrain_job((uint64_t)i + 1, 0, 1, 40000, 10000);
    r = pl_schedule(c, q, 2, 0);
    CHECK(r->placed == 1);
    pl_cluster_free(c);
}

TEST(cotrain_running_group_holds_its_device_and_takes_members) {
    struct pl_node nodes[1] = {node(0, 0, 1)};
    struct pl_tenant t[2] = {tenant(1), tenant(1)};
    struct pl_cluster *c = cluster(nodes, 1, t, 2, "whet");
    /* A snapshot: a group of three already running on GPU 0 (any id the caller chose). */
    struct pl_job run[3];
    for (int i = 0; i < 3; i++) {
        run[i] = cotrain_job((uint64_t)i + 1, i == 2, 1, 20000, 5000);
        CHECK(add_member(c, &run[i], 77, 1) == 0);
    }
    CHECK(used_milli(c) == PL_MILLI && pl_cluster_n_running(c) == 3);
    /* A later job of the same base joins the running group (its process takes it) rather than wait; one of
     * another base waits. */
    struct pl_job late = cotrain_job(10, 1, 1, 20000, 5000), other = cotrain_job(12, 0, 2, 20000, 5000);
    struct pl_job *q2[2] = {&late, &other}, *q = &late;
    const struct pl_result *r = pl_schedule(c, q2, 2, 1000);
    CHECK(find(r, PL_PLACE, 10) && late.cotrain_group == 77 && late.cotrain_rider && late.alloc.slots[0].gpu_mask == 1);
    CHECK(find(r, PL_WAIT, 12) && other.cotrain_group == 0);
    CHECK(used_milli(c) == PL_MILLI && pl_cluster_n_running(c) == 4);
    /* up to cfg.cotrain_max members (8): four more of the base join, the fifth waits */
    struct pl_job more[5], *qm[5];
    for (int i = 0; i < 5; i++) more[i] = cotrain_job((uint64_t)20 + i, 0, 1, 20000, 5000), qm[i] = &more[i];
    r = pl_schedule(c, qm, 5, 1000);
    CHECK(r->placed == 4 && find(r, PL_WAIT, 24) && more[3].cotrain_group == 77);
    for (int i = 0; i < 4; i++) pl_cluster_release(c, &more[i]);
    /* Nor does a job of higher priority stop a member: that would free no device. */
    struct pl_job urgent = job(11, 1, 1);
    urgent.priority = 10;
    q = &urgent;
    r = pl_schedule(c, &q, 1, 1000);
    CHECK(find(r, PL_WAIT, 11) && r->preempted == 0);
    /* The holder ends first: the device stays held until the last member ends. */
    pl_cluster_release(c, &run[0]);
    CHECK(used_milli(c) == PL_MILLI && free_gpus(c, 0) == 0 && run[0].cotrain_group == 0);
    CHECK(pl_cluster_tenant_gpus(c, 0, 0) == 1.0); /* run[1], of tenant 0, holds it now */
    pl_cluster_release(c, &run[1]);
    CHECK(free_gpus(c, 0) == 0 && pl_cluster_tenant_gpus(c, 1, 0) == 1.0);
    pl_cluster_release(c, &run[2]);
    CHECK(free_gpus(c, 0) == 0 && pl_cluster_tenant_gpus(c, 1, 0) == 1.0); /* the member that joined */
    pl_cluster_release(c, &late);
    CHECK(free_gpus(c, 0) == 1 && used_milli(c) == 0 && pl_cluster_n_running(c) == 0);
    pl_cluster_free(c);
}

TEST(cotrain_running_group_of_unknown_memory_counts_its_members_as_the_joining_job) {
    struct pl_node nodes[1] = {node(0, 0, 1)}; /* 80 GiB: 73728 MiB usable */
    struct pl_tenant t[1] = {tenant(1)};
    struct pl_cluster *c = cluster(nodes, 1, t, 1, "whet");
    /* Two running members whose memory the caller does not know (only their key and group). */
    struct pl_job run[2];
    for (int i = 0; i < 2; i++) {
        run[i] = cotrain_job((uint64_t)i + 1, 0, 1, 0, 0);
        CHECK(add_member(c, &run[i], 3, 1) == 0);
    }
    /* base 40000 + 3 members of 10000 fit; a fourth (70000 + 10000) does not */
    struct pl_job a = cotrain_job(10, 0, 1, 40000, 10000), b = cotrain_job(11, 0, 1, 40000, 10000);
    struct pl_job *q[2] = {&a, &b};
    const struct pl_result *r = pl_schedule(c, q, 2, 1000);
    CHECK(find(r, PL_PLACE, 10) && a.cotrain_group == 3 && find(r, PL_WAIT, 11) && b.cotrain_group == 0);
    pl_cluster_free(c);
}

TEST(cotrain_group_holds_its_largest_base_once) {
    /* 73728 MiB usable. A joiner whose rows are longer (a larger shared pass: base 60000) makes the group's
     * base 60000, not 40000 + 60000: 60000 + 2 × 5000 fit. A third member (60000 + 3 × 5000) does not,
     * though the first member's base (40000) would have held it. */
    struct pl_node nodes[1] = {node(0, 0, 1)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 1, &t, 1, "whet");
    struct pl_job a = cotrain_job(1, 0, 1, 40000, 5000), b = cotrain_job(2, 0, 1, 60000, 5000),
                  d = cotrain_job(3, 0, 1, 40000, 5000);
    struct pl_job *q[3] = {&a, &b, &d};
    const struct pl_result *r = pl_schedule(c, q, 3, 0);
    CHECK(r->placed == 2 && b.cotrain_group == a.cotrain_group && a.cotrain_group != 0);
    CHECK(find(r, PL_WAIT, 3) && d.cotrain_group == 0);
    /* the member of the larger pass leaves: the process keeps that pass's buffers, the base stays 60000 */
    pl_cluster_release(c, &b);
    struct pl_job e = cotrain_job(4, 0, 1, 40000, 5000), f = cotrain_job(5, 0, 1, 40000, 5000);
    struct pl_job *q2[3] = {&d, &e, &f};
    r = pl_schedule(c, q2, 3, 1);
    CHECK(r->placed == 1 && d.cotrain_group == a.cotrain_group && find(r, PL_WAIT, 4) && find(r, PL_WAIT, 5));
    pl_cluster_free(c);
}

TEST(cotrain_eight_sized_members_share_one_device) {
    /* As the scheduler sizes them (sizing.h): Llama 3.1 8B LoRA SFT jobs, batch 4 × 512 tokens. The group holds
     * the base and one bounded pass once and each member its adapter's state: eight (cfg.cotrain_max) share
     * one 80 GiB device, the ninth waits for it. */
    const struct sz_model llama_8b = {.n_params = 8030261248, .hidden = 4096, .intermediate = 14336, .layers = 32,
                                      .heads = 32, .kv_heads = 8, .head_dim = 128, .vocab = 128256};
    const struct sz_job sft = {.method = SZ_SFT, .lora_r = 16, .batch_size = 4, .max_seq_len = 512};
    struct sz_estimate e;
    sz_estimate(&e, &llama_8b, &sft);
    int32_t base, member;
    sz_cotrain_mib(&e, 0, &base, &member);
    struct pl_node nodes[1] = {node(0, 0, 1)};
    struct pl_tenant t[4] = {tenant(1), tenant(1), tenant(1), tenant(1)};
    struct pl_cluster *c = cluster(nodes, 1, t, 4, "whet");
    struct pl_job j[9], *q[9];
    for (int i = 0; i < 9; i++) j[i] = cotrain_job((uint64_t)i + 1, i % 4, 1, base, member), q[i] = &j[i];
    const struct pl_result *r = pl_schedule(c, q, 9, 0);
    CHECK(r->placed == 8 && find(r, PL_WAIT, 9) && used_milli(c) == PL_MILLI);
    for (int i = 1; i < 8; i++) CHECK(j[i].cotrain_group == j[0].cotrain_group && j[i].cotrain_rider);
    pl_cluster_free(c);
}

TEST(cotrain_new_group_never_takes_a_running_groups_id) {
    /* The caller's snapshot has running groups 1 and 2; group 2's member no longer fits its node (its device
     * is gone), so placement never sees group 2. A group formed now must still not be numbered 2: the
     * caller names groups by these ids, and would give it the running group's name. */
    struct pl_node nodes[1] = {node(0, 0, 2)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 1, &t, 1, "whet");
    struct pl_job run[2] = {cotrain_job(1, 0, 1, 20000, 5000), cotrain_job(2, 0, 1, 20000, 5000)};
    CHECK(add_member(c, &run[0], 1, 1) == 0);
    CHECK(add_member(c, &run[1], 2, 1u << 5) < 0);
    pl_cluster_reserve_groups(c, 2);
    /* two jobs of another base: the first takes the free device alone, the second joins it: a new group */
    struct pl_job a = cotrain_job(10, 0, 2, 20000, 5000), b = cotrain_job(11, 0, 2, 20000, 5000);
    struct pl_job *q[2] = {&a, &b};
    const struct pl_result *r = pl_schedule(c, q, 2, 1000);
    CHECK(r->placed == 2 && a.cotrain_group == b.cotrain_group && a.cotrain_group > 2);
    pl_cluster_free(c);
}

/* A group of n co-trained jobs (ids 1..n) running on GPU 0 of node 0 since time 0. */
static void running_group(struct pl_cluster *c, struct pl_job *run, int n) {
    for (int i = 0; i < n; i++) {
        run[i] = cotrain_job((uint64_t)i + 1, 0, 1, 20000, 5000);
        CHECK(add_member(c, &run[i], 5, 1) == 0);
    }
}

static int count(const struct pl_result *r, enum pl_action a) {
    int k = 0;
    for (int i = 0; i < r->n; i++) k += r->decisions[i].action == a;
    return k;
}

TEST(cotrain_members_move_out_to_free_devices_when_nobody_waits) {
    struct pl_node nodes[1] = {node(0, 0, 4)};
    struct pl_tenant t = tenant(1);
    struct pl_cluster *c = cluster(nodes, 1, &t, 1, "whet");
    struct pl_job run[4];
    running_group(c, run, 4);
    /* too soon after the start: a restart costs a restore */
    const struct pl_result *r = pl_schedule(c, NULL, 0, 10);
    CHECK(count(r, PL_MOVE_OUT) == 0);
    /* a job waits (another base, four devices: none free for it): the members stay */
    struct pl_job big = job(9, 0, 4);
    struct pl_job *q = &big;
    r = pl_schedule(c, &q, 1, 1000);
    CHECK(find(r, PL_WAIT, 9) && count(r, PL_MOVE_OUT) == 0);
    /* nobody waits, three devices free: the three newest move out, the first stays */
    r = pl_schedule(c, NULL, 0, 1000);
    CHECK(count(r, PL_MOVE_OUT) == 3 && find(r, PL_MOVE_OUT, 4) && find(r, PL_MOVE_OUT, 2) && !find(r, PL_MOVE_OUT, 1));
    CHECK(run[1].state == PL_JOB_STOPPING && run[0].state == PL_JOB_RUNNING);
    /* while they stop, the free devices are theirs: no more decisions */
    r = pl_schedule(c, NULL, 0, 1001);
    CHECK(count(r, PL_MOVE_OUT) == 0);
    /* stopped and requeued, each runs alone */
    struct pl_job *movers[3] = {&run[1], &run[2], &run[3]};
    for (int i = 0; i < 3; i++) pl_cluster_release(c, movers[i]);
    CHECK(used_milli(c) == PL_MILLI && free_gpus(c, 0) == 3); /* the first holds the group's device */
    r = pl_schedule(c, movers, 3, 1002);
    CHECK(r->placed == 3 && free_gpus(c, 0) == 0);
    for (int i = 0; i < 3; i++) CHECK(movers[i]->cotrain_group == 0 && movers[i]->alloc.slots[0].gpu_mask != 1);
    pl_cluster_free(c);

    /* one free device: one member moves */
    struct pl_node two[1] = {node(0, 0, 2)};
    c = cluster(two, 1, &t, 1, "whet");
    running_group(c, run, 3);
    r = pl_schedule(c, NULL, 0, 1000);
    CHECK(count(r, PL_MOVE_OUT) == 1 && find(r, PL_MOVE_OUT, 3));
    pl_cluster_free(c);

    /* the newest ends within cfg.cotrain_move_min_left_s (60): it stays, and the next newest, with more
     * left, moves */
    c = cluster(two, 1, &t, 1, "whet");
    running_group(c, run, 3);
    run[2].remaining_s = 59;
    run[1].remaining_s = 61;
    r = pl_schedule(c, NULL, 0, 1000);
    CHECK(count(r, PL_MOVE_OUT) == 1 && find(r, PL_MOVE_OUT, 2));
    pl_cluster_free(c);
    /* all about to end: nobody moves */
    c = cluster(two, 1, &t, 1, "whet");
    running_group(c, run, 3);
    run[0].remaining_s = run[1].remaining_s = run[2].remaining_s = 10;
    r = pl_schedule(c, NULL, 0, 1000);
    CHECK(count(r, PL_MOVE_OUT) == 0);
    pl_cluster_free(c);
}

int main(void) {
    RUN(gang_all_or_nothing);
    RUN(gang_one_node_when_it_fits);
    RUN(gang_fewest_nodes);
    RUN(gang_confined_to_one_node);
    RUN(gang_prefers_the_pool_needing_fewest_nodes);
    RUN(gang_never_across_data_centers);
    RUN(type_and_dc_constraints_spill_over);
    RUN(quota_without_borrowing);
    RUN(borrow_then_reclaim);
    RUN(fair_share_order);
    RUN(fair_order_interleaves_waiting_tenants);
    RUN(priority_first_then_las);
    RUN(backfill_never_delays_the_head);
    RUN(preemption_picks_cheapest_victims_and_holds_for_grace);
    RUN(no_preemption_of_equal_priority_or_unpreemptible);
    RUN(stopping_victims_are_counted_on);
    RUN(elastic_grow_then_shrink_first);
    RUN(gpu_share_packs_one_device);
    RUN(fgd_avoids_fragmenting);
    RUN(packing_follows_each_nodes_state);
    RUN(best_fit_takes_the_lowest_index_of_the_best_state);
    RUN(deterministic);
    RUN(snapshot_validation);
    RUN(cpu_and_memory_filters);
    RUN(cotrain_join_within_a_cycle_matches_a_full_search);
    RUN(cotrain_group_holds_its_device_until_its_last_member_leaves);
    RUN(cotrain_packs_when_no_device_is_free);
    RUN(cotrain_runs_alone_on_free_devices);
    RUN(cotrain_group_limited_by_memory_and_size);
    RUN(cotrain_running_group_holds_its_device_and_takes_members);
    RUN(cotrain_running_group_of_unknown_memory_counts_its_members_as_the_joining_job);
    RUN(cotrain_group_holds_its_largest_base_once);
    RUN(cotrain_eight_sized_members_share_one_device);
    RUN(cotrain_new_group_never_takes_a_running_groups_id);
    RUN(cotrain_members_move_out_to_free_devices_when_nobody_waits);
    return test_summary();
}
