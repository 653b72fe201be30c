/* agent.h - the executor (`whet executor`): one per machine, running the jobs the scheduler assigns.
 *
 * It registers its devices with the scheduler, then heartbeats; the heartbeat replies carry commands.
 * For START it fetches the base model (cached per node in WORK_DIR/models, bounded in size: the least
 * recently used models not in use go; checked against the manifest's SHA-256s), the
 * data and the checkpoint to resume from, writes the trainer config and runs `whet train` in the
 * sandbox, turning the trainer's event lines into progress, events and checkpoint reports, and
 * uploading each checkpoint while training goes on. STOP asks the trainer to checkpoint and exit;
 * CANCEL kills it. If the scheduler no longer knows the node (it was declared lost), the executor
 * kills what it runs — those jobs have moved elsewhere — and registers again.
 * A gang's START names one rank (the manifest's "distributed"): each rank is a job here of its own,
 * one trainer on one device, whose config carries the distributed object; rank 0 publishes its
 * rendezvous (PublishRendezvous) and alone reports progress, events, checkpoints and the final model;
 * every rank reports its own FinishJob, and STOP/CANCEL reach every rank of the attempt. Its trainer
 * reaches only the gang's nodes, on WHET_GANG_PORTS (executor/sandbox/sandbox_net.c). */
#ifndef WHET_AGENT_H
#define WHET_AGENT_H

#include <stdint.h>

#include "util.h"

#define AGENT_MAX_DEVICES 16

struct agent_device {
    char type[32];       /* "H100", "cpu", … */
    uint32_t memory_mib;
};

/* Parses an executor's --devices SPEC (DESIGN.md): `cuda` (every visible CUDA GPU, via nvidia-smi),
 * `cpu:N` (N CPU slots), `sim:TYPE:N[:GIB]` (N simulated accelerators of TYPE whose training runs on
 * the CPU). Returns the number of devices, or -1 with err. */
int agent_parse_devices(const char *spec, struct agent_device *out, int max, struct whet_err *err);

/* The devices a job holds on its node, as bits of a mask (device i is bit i): the `want` lowest
 * devices not in *busy among the first n_devices, marked busy. When fewer are free (the scheduler
 * counts the devices of a stopping attempt free before this node has reaped it) the lowest busy ones
 * fill the rest, and *shared says so. A device is free again once no job that holds it is left. */
uint32_t agent_take_devices(uint32_t *busy, int n_devices, int want, int *shared);

/* What a job on CUDA devices gets: CUDA_VISIBLE_DEVICES with the devices of `mask` (numbered as
 * nvidia-smi numbers them, in PCI bus order; CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA agree) and the
 * /dev nodes its sandbox binds: the control and UVM nodes and nvidia<N> of each device (the minor
 * number of a GPU's node is its nvidia-smi index on the drivers we know). */
struct agent_cuda_grant {
    char visible[32 + 4 * AGENT_MAX_DEVICES];  /* "CUDA_VISIBLE_DEVICES=0,2" */
    char names[AGENT_MAX_DEVICES][16];
    const char *nodes[AGENT_MAX_DEVICES + 4];  /* NULL-terminated: names under /dev */
};
void agent_cuda_grant(struct agent_cuda_grant *g, uint32_t mask);

struct executor_options {
    const char *scheduler;   /* HOST:PORT */
    const char *token;       /* the shared executor token */
    const char *dc, *pool;
    const char *devices;     /* SPEC */
    const char *work_dir;
    const char *object_store; /* URL; a manifest may name another */
    const char *trainer;     /* absolute path of the program run as `TRAINER train --config FILE` in the
                              * sandbox: this whet binary, or an operator's build of it */
    const char *metrics_addr; /* HOST:PORT serving GET /metrics (Prometheus), or NULL: none */
    const char *model_cache_max; /* the bound of WORK_DIR/models as written (dir_cache_parse_bound), NULL:
                                    AGENT_MODEL_CACHE_MAX_DEFAULT */
};

/* Half the file system that holds the work dir: a node keeps the models it has used until they crowd out
 * its jobs' own dirs (checkpoints, data), which share that disk; a fixed size would be too small for a
 * node of 70B models or too large for a small disk. */
#define AGENT_MODEL_CACHE_MAX_DEFAULT "50%"

/* Runs until SIGINT/SIGTERM (stopping its jobs with a checkpoint first) or a fatal error. */
int executor_run(const struct executor_options *opts, struct whet_err *err);

#endif
