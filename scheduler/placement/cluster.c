/* cluster.c - the placement library's model of the fleet: nodes grouped into pools, free resources,
 * tenant usage, the running set, and the fragmentation cache the FGD score reads (score_fgd.c).
 *
 * Every change to a node goes through node_take / node_give so the pool summaries (how many nodes
 * have k whole GPUs free, how many GPUs have a given share free) and the node's cached
 * fragmentation stay exact; the filters use those summaries to reject a pool without touching its
 * nodes. See placement.h for the contract and schedule.c for the cycle. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---------------------------------------------------------------------------------------------- */
/* Small helpers                                                                                   */

void *pl_grow(void *p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return p;
    int32_t n = *cap ? *cap : 16;
    while (n < need) n *= 2;
    void *q = realloc(p, (size_t)n * elem);
    if (!q) abort(); /* running out of memory is not an error a scheduler can mend */
    *cap = n;
    return q;
}

static void set_err(char *err, size_t len, const char *fmt, ...) {
    if (!err || !len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

int32_t pl_popcount16(uint32_t x) { return __builtin_popcount(x & 0xffffu); }

int64_t pl_share_cpu(const struct pl_job *job, int32_t count) {
    if (job->gpus <= 1 || count >= job->gpus) return job->cpu_milli;
    return (job->cpu_milli * count + job->gpus - 1) / job->gpus;
}

int64_t pl_share_mem(const struct pl_job *job, int32_t count) {
    if (job->gpus <= 1 || count >= job->gpus) return job->mem_mib;
    return (job->mem_mib * count + job->gpus - 1) / job->gpus;
}

int64_t pl_slot_cpu(const struct pl_job *job, int32_t slot) {
    return pl_share_cpu(job, job->alloc.slots[slot].gpu_count);
}

int64_t pl_slot_mem(const struct pl_job *job, int32_t slot) {
    return pl_share_mem(job, job->alloc.slots[slot].gpu_count);
}

int64_t pl_job_gpu_milli(const struct pl_job *j) { return (int64_t)(j->gpus > 0 ? j->gpus : 0) * pl_job_milli(j); }

int32_t pl_job_milli(const struct pl_job *job) {
    if (job->gpus <= 0 || job->cotrain_rider) return 0; /* a rider's group holder holds its device */
    if (job->gpu_milli <= 0 || job->gpu_milli > PL_MILLI || job->gpus > 1) return PL_MILLI;
    return job->gpu_milli;
}

void pl_node_reset_free(struct pl_node *node) {
    for (int i = 0; i < PL_MAX_GPUS_PER_NODE; i++) node->gpu_free_milli[i] = i < node->gpus ? PL_MILLI : 0;
    node->cpu_free_milli = node->cpu_milli;
    node->mem_free_mib = node->mem_mib;
}

/* ---------------------------------------------------------------------------------------------- */
/* Pool summaries                                                                                  */

static int32_t whole_free(const struct pl_node *n) {
    int32_t k = 0;
    for (int g = 0; g < n->gpus; g++) k += n->gpu_free_milli[g] == PL_MILLI;
    return k;
}

/* Adds (sign +1) or removes (-1) a node's contribution to its pool's summaries. */
static void pool_account(struct pl_cluster *c, int32_t ni, int sign) {
    const struct pl_node *n = &c->nodes[ni];
    struct pl_pool *p = &c->pools[c->node_pool[ni]];
    if (!n->schedulable) return;
    int32_t k = whole_free(n);
    p->whole_hist[k] += sign;
    p->free_whole += sign * k;
    int any_free = 0;
    for (int g = 0; g < n->gpus; g++) {
        p->share_hist[n->gpu_free_milli[g] / PL_SHARE_BUCKET] += sign;
        any_free |= n->gpu_free_milli[g] > 0;
    }
    if (sign > 0 && any_free && c->node_pos[ni] < p->first_free) p->first_free = c->node_pos[ni];
}

static void node_refresh_frag(struct pl_cluster *c, int32_t ni) {
    const struct pl_node *n = &c->nodes[ni];
    c->frag[ni] = pl_frag(c, n, n->gpu_free_milli, n->cpu_free_milli, n->mem_free_mib);
}

/* Takes (sign +1) or gives back (-1) `milli` of each GPU in mask plus cpu and memory on a node, and
 * keeps the tenant's usage and the cluster totals in step. */
void pl_node_apply(struct pl_cluster *c, int32_t ni, uint32_t mask, int32_t milli, int64_t cpu, int64_t mem,
                   int32_t tenant, int sign) {
    struct pl_node *n = &c->nodes[ni];
    pool_account(c, ni, -1);
    int32_t count = 0;
    for (int g = 0; g < n->gpus; g++)
        if (mask & (1u << g)) {
            n->gpu_free_milli[g] -= sign * milli;
            count++;
        }
    n->cpu_free_milli -= sign * cpu;
    n->mem_free_mib -= sign * mem;
    if (sign < 0) c->cotrain_gen++; /* a co-training group there may take more */
    pl_node_class_update(c, ni);
    pool_account(c, ni, +1);
    if (c->scores.frag_cache) node_refresh_frag(c, ni);
    int64_t gpu = (int64_t)count * milli * sign;
    c->used_gpu_milli += gpu;
    if (tenant >= 0 && tenant < c->n_tenants) {
        if (tenant != c->fair_tenant) c->fair_stale = 1;
        struct pl_usage *u = &c->usage[tenant];
        if (n->gpu_type >= 0) u->gpu_milli[n->gpu_type] += gpu;
        u->gpu_milli_total += gpu;
        u->cpu_milli += sign * cpu;
        u->mem_mib += sign * mem;
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Construction                                                                                    */

struct pl_cluster *pl_cluster_new(const struct pl_node *nodes, int32_t n_nodes, const struct pl_tenant *tenants,
                                  int32_t n_tenants, const struct pl_config *cfg, char *err, size_t errlen) {
    if (n_nodes < 0 || n_tenants < 0) {
        set_err(err, errlen, "negative node or tenant count");
        return NULL;
    }
    for (int32_t i = 0; i < n_nodes; i++) {
        const struct pl_node *n = &nodes[i];
        if (n->gpus < 0 || n->gpus > PL_MAX_GPUS_PER_NODE) {
            set_err(err, errlen, "node %d: gpus: %d is outside 0..%d", i, n->gpus, PL_MAX_GPUS_PER_NODE);
            return NULL;
        }
        if (n->dc < 0 || n->dc >= PL_MAX_DCS) {
            set_err(err, errlen, "node %d: dc: id %d is outside 0..%d", i, n->dc, PL_MAX_DCS - 1);
            return NULL;
        }
        if (n->gpu_type < -1 || n->gpu_type >= PL_MAX_TYPES || (n->gpus > 0 && n->gpu_type < 0)) {
            set_err(err, errlen, "node %d: gpu_type: id %d is outside 0..%d", i, n->gpu_type, PL_MAX_TYPES - 1);
            return NULL;
        }
        if (n->cpu_milli < 0 || n->mem_mib < 0) {
            set_err(err, errlen, "node %d: negative capacity", i);
            return NULL;
        }
        for (int g = 0; g < n->gpus; g++)
            if (n->gpu_free_milli[g] < 0 || n->gpu_free_milli[g] > PL_MILLI) {
                set_err(err, errlen, "node %d: gpu %d: free share %d is outside 0..1000", i, g, n->gpu_free_milli[g]);
                return NULL;
            }
    }
    for (int32_t t = 0; t < n_tenants; t++)
        if (!(tenants[t].weight > 0)) {
            set_err(err, errlen, "tenant %d: weight must be greater than 0", t);
            return NULL;
        }

    struct pl_cluster *c = calloc(1, sizeof *c);
    if (!c) abort();
    c->cfg = *cfg;
    pl_scores_init(&c->scores, cfg);
    c->n_nodes = n_nodes;
    size_t nn = (size_t)(n_nodes ? n_nodes : 1);
    c->nodes = malloc(nn * sizeof *c->nodes);
    c->node_pool = malloc(nn * sizeof *c->node_pool);
    c->node_pos = malloc(nn * sizeof *c->node_pos);
    c->frag = calloc(nn, sizeof *c->frag);
    c->nominee = calloc(nn, sizeof *c->nominee);
    c->nominee_until = calloc(nn, sizeof *c->nominee_until);
    c->mark = calloc(nn, sizeof *c->mark);
    c->hyp_stamp = calloc(nn, sizeof *c->hyp_stamp);
    c->hyp_free = malloc(nn * sizeof *c->hyp_free);
    c->hyp_cpu = malloc(nn * sizeof *c->hyp_cpu);
    c->hyp_mem = malloc(nn * sizeof *c->hyp_mem);
    c->scratch = malloc(nn * sizeof *c->scratch);
    c->node_jobs = calloc(nn, sizeof *c->node_jobs);
    c->n_tenants = n_tenants;
    c->tenants = malloc((size_t)(n_tenants ? n_tenants : 1) * sizeof *c->tenants);
    c->usage = calloc((size_t)(n_tenants ? n_tenants : 1), sizeof *c->usage);
    c->tenants_active = calloc((size_t)(n_tenants ? n_tenants : 1), sizeof *c->tenants_active);
    c->passed = calloc((size_t)(n_tenants ? n_tenants : 1), sizeof *c->passed);
    if (!c->nodes || !c->node_pool || !c->node_pos || !c->frag || !c->nominee || !c->nominee_until || !c->mark || !c->hyp_stamp ||
        !c->hyp_free || !c->hyp_cpu || !c->hyp_mem || !c->scratch || !c->node_jobs ||
        !c->tenants || !c->usage || !c->tenants_active || !c->passed)
        abort();
    if (n_nodes) memcpy(c->nodes, nodes, (size_t)n_nodes * sizeof *nodes);
    if (n_tenants) memcpy(c->tenants, tenants, (size_t)n_tenants * sizeof *tenants);

    /* Pools: one per (dc, gpu_type) in order of first appearance, so pool order follows node order. */
    c->pools = calloc(nn, sizeof *c->pools);
    if (!c->pools) abort();
    for (int32_t i = 0; i < n_nodes; i++) {
        const struct pl_node *n = &c->nodes[i];
        int32_t p = 0;
        while (p < c->n_pools && !(c->pools[p].dc == n->dc && c->pools[p].gpu_type == n->gpu_type)) p++;
        if (p == c->n_pools) {
            c->pools[p].dc = n->dc;
            c->pools[p].gpu_type = n->gpu_type;
            c->pools[p].first_free = INT32_MAX;
            c->n_pools++;
        }
        c->node_pool[i] = p;
        c->pools[p].n_nodes++;
    }
    c->node_class = malloc(nn * sizeof *c->node_class);
    if (!c->node_class) abort();
    c->class_words = (int32_t)((nn + 63) / 64);
    for (int32_t i = 0; i < n_nodes; i++) c->node_class[i] = -1;
    for (int32_t i = 0; i < n_nodes; i++) pl_node_class_update(c, i);
    c->pool_nodes = malloc(nn * sizeof *c->pool_nodes);
    c->pool_ok = malloc(nn * sizeof *c->pool_ok);
    c->pool_usable = malloc(nn * sizeof *c->pool_usable);
    if (!c->pool_nodes || !c->pool_ok || !c->pool_usable) abort();
    int32_t off = 0;
    for (int32_t p = 0; p < c->n_pools; p++) {
        c->pools[p].nodes = c->pool_nodes + off;
        off += c->pools[p].n_nodes;
        c->pools[p].n_nodes = 0;
    }
    for (int32_t i = 0; i < n_nodes; i++) {
        struct pl_pool *p = &c->pools[c->node_pool[i]];
        const struct pl_node *n = &c->nodes[i];
        c->node_pos[i] = p->n_nodes;
        p->nodes[p->n_nodes++] = i;
        if (n->gpus > p->max_node_gpus) p->max_node_gpus = n->gpus;
        if (n->gpu_mem_mib > p->max_gpu_mem_mib) p->max_gpu_mem_mib = n->gpu_mem_mib;
        p->total_gpus += n->gpus;
        if (n->schedulable) p->n_schedulable++;
        pool_account(c, i, +1);
        c->cap_gpu_milli += (int64_t)n->gpus * PL_MILLI;
        c->cap_cpu += n->cpu_milli;
        c->cap_mem += n->mem_mib;
        for (int g = 0; g < n->gpus; g++) c->used_gpu_milli += PL_MILLI - n->gpu_free_milli[g];
        if (n->cpu_milli > c->max_node_cpu) c->max_node_cpu = n->cpu_milli;
        if ((int64_t)n->gpus * PL_MILLI > c->max_node_gpu_milli) c->max_node_gpu_milli = (int64_t)n->gpus * PL_MILLI;
    }
    return c;
}

void pl_cluster_free(struct pl_cluster *c) {
    if (!c) return;
    free(c->nodes);
    free(c->node_pool);
    free(c->node_pos);
    free(c->frag);
    free(c->nominee);
    free(c->nominee_until);
    free(c->noms);
    free(c->mark);
    free(c->hyp_stamp);
    free(c->hyp_free);
    free(c->hyp_cpu);
    free(c->hyp_mem);
    free(c->scratch);
    for (int32_t i = 0; i < c->n_nodes; i++) free(c->node_jobs[i].jobs);
    free(c->node_jobs);
    free(c->pools);
    free(c->pool_nodes);
    free(c->node_class);
    free(c->classes);
    free(c->class_bits);
    free(c->live);
    free(c->class_slots);
    free(c->pool_ok);
    free(c->pool_usable);
    free(c->tenants);
    free(c->usage);
    free(c->tenants_active);
    free(c->passed);
    free(c->fair_key);
    free(c->fair_heap);
    free(c->profile);
    free(c->running);
    free(c->groups);
    free(c->group_slots);
    free(c->order);
    free(c->tenant_head);
    free(c->tenant_end);
    free(c->decisions);
    free(c->victims);
    free(c->run_mark);
    free(c);
}

int pl_cluster_set_profile(struct pl_cluster *c, const struct pl_shape *shapes, int32_t n) {
    if (n < 0) return -1;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        if (shapes[i].weight < 0) return -1;
        if (shapes[i].gpus > 0) sum += shapes[i].weight;
    }
    c->profile = pl_grow(c->profile, &c->cap_profile, n, sizeof *c->profile);
    c->n_profile = 0;
    for (int32_t i = 0; i < n; i++) {
        if (shapes[i].gpus <= 0 || shapes[i].weight <= 0) continue;
        struct pl_shape s = shapes[i];
        s.gpu_milli = s.gpu_milli <= 0 || s.gpu_milli > PL_MILLI || s.gpus > 1 ? PL_MILLI : s.gpu_milli;
        s.weight /= sum;
        c->profile[c->n_profile++] = s;
    }
    for (int32_t i = 0; i < c->n_nodes; i++) node_refresh_frag(c, i);
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Running set                                                                                     */

void pl_running_add(struct pl_cluster *c, struct pl_job *job) {
    c->running = pl_grow(c->running, &c->cap_running, c->n_running + 1, sizeof *c->running);
    job->run_index = c->n_running;
    c->running[c->n_running++] = job;
    if (job->max_gpus > 0) c->n_elastic++;
}

static void running_remove(struct pl_cluster *c, struct pl_job *job) {
    int32_t i = job->run_index;
    if (i < 0 || i >= c->n_running || c->running[i] != job) return;
    /* Keep the set in insertion order (a swap would make iteration order depend on history that a
     * reloaded snapshot does not have): shift down. Releases are rare next to decisions. */
    memmove(&c->running[i], &c->running[i + 1], (size_t)(c->n_running - i - 1) * sizeof *c->running);
    c->n_running--;
    for (int32_t k = i; k < c->n_running; k++) c->running[k]->run_index = k;
    job->run_index = -1;
    if (job->max_gpus > 0) c->n_elastic--;
}

/* Adds (sign +1) or removes (-1) job from the list of jobs on node ni (preemption reads it). */
static void node_jobs_update(struct pl_cluster *c, int32_t ni, struct pl_job *job, int sign) {
    struct pl_node_jobs *l = &c->node_jobs[ni];
    if (sign > 0) {
        l->jobs = pl_grow(l->jobs, &l->cap, l->n + 1, sizeof *l->jobs);
        l->jobs[l->n++] = job;
        return;
    }
    for (int32_t i = 0; i < l->n; i++)
        if (l->jobs[i] == job) {
            l->jobs[i] = l->jobs[--l->n];
            return;
        }
}

/* Holds (sign +1) or gives back (-1) job->alloc's resources; the caller checked they are free. */
void pl_alloc_take(struct pl_cluster *c, struct pl_job *job, int sign) {
    int32_t milli = pl_job_milli(job);
    for (int32_t s = 0; s < job->alloc.n_slots; s++) {
        const struct pl_slot *sl = &job->alloc.slots[s];
        pl_node_apply(c, sl->node, sl->gpu_mask, milli, pl_slot_cpu(job, s), pl_slot_mem(job, s), job->tenant, sign);
        node_jobs_update(c, sl->node, job, sign);
    }
}

int pl_cluster_add_running(struct pl_cluster *c, struct pl_job *job, char *err, size_t errlen) {
    job->cotrain_rider = pl_cotrain_members(c, job) > 0; /* its group's first member holds the device */
    int32_t milli = pl_job_milli(job);
    int32_t count = 0;
    if (job->alloc.n_slots < 1 || job->alloc.n_slots > PL_MAX_NODES_PER_JOB) {
        set_err(err, errlen, "job %llu: alloc: %d slots", (unsigned long long)job->id, job->alloc.n_slots);
        return -1;
    }
    for (int32_t s = 0; s < job->alloc.n_slots; s++) {
        struct pl_slot *sl = &job->alloc.slots[s];
        if (sl->node < 0 || sl->node >= c->n_nodes) {
            set_err(err, errlen, "job %llu: slot %d: no node %d", (unsigned long long)job->id, s, sl->node);
            return -1;
        }
        const struct pl_node *n = &c->nodes[sl->node];
        sl->gpu_count = (uint16_t)pl_popcount16(sl->gpu_mask);
        count += sl->gpu_count;
        for (int g = 0; g < PL_MAX_GPUS_PER_NODE; g++)
            if ((sl->gpu_mask & (1u << g)) && (g >= n->gpus || n->gpu_free_milli[g] < milli)) {
                set_err(err, errlen, "job %llu: slot %d: gpu %d of node %d is not free", (unsigned long long)job->id, s,
                        g, sl->node);
                return -1;
            }
        if (n->cpu_free_milli < pl_slot_cpu(job, s) || n->mem_free_mib < pl_slot_mem(job, s)) {
            set_err(err, errlen, "job %llu: slot %d: not enough cpu or memory free on node %d",
                    (unsigned long long)job->id, s, sl->node);
            return -1;
        }
    }
    if (count != (job->gpus > 0 ? job->gpus : 0)) {
        set_err(err, errlen, "job %llu: alloc holds %d GPUs, the job has %d", (unsigned long long)job->id, count,
                job->gpus);
        return -1;
    }
    pl_alloc_take(c, job, +1);
    pl_cotrain_add_running(c, job);
    if (job->state == PL_JOB_STOPPING) c->n_stopping++;
    else job->state = PL_JOB_RUNNING;
    pl_running_add(c, job);
    return 0;
}

void pl_cluster_release(struct pl_cluster *c, struct pl_job *job) {
    if (job->state != PL_JOB_RUNNING && job->state != PL_JOB_STOPPING) return;
    if (job->state == PL_JOB_STOPPING) c->n_stopping--;
    pl_alloc_take(c, job, -1);
    pl_cotrain_release(c, job);
    running_remove(c, job);
    job->state = PL_JOB_QUEUED;
    job->alloc.n_slots = 0;
    job->borrowed = 0;
}

void pl_cluster_shrink(struct pl_cluster *c, struct pl_job *job, const struct pl_alloc *give_back) {
    int32_t removed = 0;
    for (int32_t k = 0; k < give_back->n_slots; k++) removed += give_back->slots[k].gpu_count;
    if (removed <= 0 || removed >= job->gpus) return;
    int64_t cpu_per = job->cpu_milli / job->gpus, mem_per = job->mem_mib / job->gpus;
    /* Give back the CPU and memory the per-slot split assigned, then recompute the split. */
    pl_alloc_take(c, job, -1);
    for (int32_t k = 0; k < give_back->n_slots; k++)
        for (int32_t s = 0; s < job->alloc.n_slots; s++)
            if (job->alloc.slots[s].node == give_back->slots[k].node) {
                job->alloc.slots[s].gpu_mask &= (uint16_t)~give_back->slots[k].gpu_mask;
                job->alloc.slots[s].gpu_count = (uint16_t)pl_popcount16(job->alloc.slots[s].gpu_mask);
            }
    int32_t w = 0;
    for (int32_t s = 0; s < job->alloc.n_slots; s++)
        if (job->alloc.slots[s].gpu_count) job->alloc.slots[w++] = job->alloc.slots[s];
    job->alloc.n_slots = w;
    job->gpus -= removed;
    job->cpu_milli = cpu_per * job->gpus;
    job->mem_mib = mem_per * job->gpus;
    pl_alloc_take(c, job, +1);
}

/* ---------------------------------------------------------------------------------------------- */
/* Read access                                                                                     */

int32_t pl_cluster_n_nodes(const struct pl_cluster *c) { return c->n_nodes; }
const struct pl_node *pl_cluster_node(const struct pl_cluster *c, int32_t i) { return &c->nodes[i]; }
int32_t pl_cluster_n_running(const struct pl_cluster *c) { return c->n_running; }
struct pl_job *pl_cluster_running(const struct pl_cluster *c, int32_t i) { return c->running[i]; }
int64_t pl_cluster_gpu_milli_capacity(const struct pl_cluster *c) { return c->cap_gpu_milli; }
int64_t pl_cluster_gpu_milli_used(const struct pl_cluster *c) { return c->used_gpu_milli; }

double pl_tenant_share_with(const struct pl_cluster *c, int32_t t, int64_t gpu, int64_t cpu, int64_t mem) {
    const struct pl_usage *u = &c->usage[t];
    double s = 0;
    if (c->cap_gpu_milli) s = fmax(s, (double)(u->gpu_milli_total + gpu) / (double)c->cap_gpu_milli);
    if (c->cap_cpu) s = fmax(s, (double)(u->cpu_milli + cpu) / (double)c->cap_cpu);
    if (c->cap_mem) s = fmax(s, (double)(u->mem_mib + mem) / (double)c->cap_mem);
    return s / c->tenants[t].weight;
}

double pl_cluster_tenant_share(const struct pl_cluster *c, int32_t tenant) {
    if (tenant < 0 || tenant >= c->n_tenants) return 0;
    return pl_tenant_share_with(c, tenant, 0, 0, 0);
}

double pl_cluster_tenant_gpus(const struct pl_cluster *c, int32_t tenant, int32_t gpu_type) {
    if (tenant < 0 || tenant >= c->n_tenants || gpu_type < 0 || gpu_type >= PL_MAX_TYPES) return 0;
    return (double)c->usage[tenant].gpu_milli[gpu_type] / PL_MILLI;
}

/* ---------------------------------------------------------------------------------------------- */
/* Reasons                                                                                         */

const char *pl_filter_name(enum pl_filter f) {
    static const char *names[PL_F_COUNT] = {
        [PL_OK] = "fits",
        [PL_F_DC] = "data center not allowed",
        [PL_F_TYPE] = "GPU type not allowed",
        [PL_F_GPU_MEM] = "GPU memory too small",
        [PL_F_NODE_SIZE] = "pool too small for the gang",
        [PL_F_QUOTA] = "tenant quota reached for this GPU type",
        [PL_F_LIMIT] = "tenant GPU limit reached",
        [PL_F_GPUS] = "not enough free GPUs",
        [PL_F_CPU] = "not enough free CPU next to free GPUs",
        [PL_F_MEM] = "not enough free memory next to free GPUs",
        [PL_F_RESERVED] = "free room reserved for a job ahead in the queue",
        [PL_F_UNSCHEDULABLE] = "all nodes cordoned",
    };
    return f >= 0 && f < PL_F_COUNT ? names[f] : "unknown";
}

void pl_reason_format(char *buf, size_t len, const struct pl_reason *r, const char *const *dc_names,
                      const char *const *type_names) {
    if (!len) return;
    size_t off = 0;
    buf[0] = 0;
#define APPEND(...)                                                                                \
    do {                                                                                           \
        if (off < len) {                                                                           \
            int w_ = snprintf(buf + off, len - off, __VA_ARGS__);                                  \
            if (w_ > 0) off += (size_t)w_;                                                         \
        }                                                                                          \
    } while (0)
    if (r->preemption_pending) APPEND("waiting for preempted jobs to stop; ");
    if (r->n_pools == 0) APPEND("%s", pl_filter_name(r->main));
    int32_t listed = r->n_pools < PL_MAX_REASON_POOLS ? r->n_pools : PL_MAX_REASON_POOLS;
    for (int32_t i = 0; i < listed; i++) {
        char dc[32], ty[32];
        if (dc_names) snprintf(dc, sizeof dc, "%s", dc_names[r->pools[i].dc]);
        else snprintf(dc, sizeof dc, "%d", r->pools[i].dc);
        if (r->pools[i].gpu_type < 0) snprintf(ty, sizeof ty, "none");
        else if (type_names) snprintf(ty, sizeof ty, "%s", type_names[r->pools[i].gpu_type]);
        else snprintf(ty, sizeof ty, "%d", r->pools[i].gpu_type);
        APPEND("%sdc %s type %s: %s", i ? "; " : "", dc, ty, pl_filter_name(r->pools[i].filter));
    }
    if (r->n_pools > listed) APPEND("; %d more pools", r->n_pools - listed);
#undef APPEND
}
