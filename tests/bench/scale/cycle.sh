#!/usr/bin/env bash
# cycle.sh - the leader's cycle alone at fleet scale (issue 15: under 1 s at 10k nodes x 8 GPUs with 100k
# queued jobs), without run.sh's simulated fleet: on a small machine its thousands of threads and their
# heartbeats take most of the cores, and the cycle's figures then say more about the machine than about the
# cycle. A private PostgreSQL (or WHET_TEST_DATABASE_URL's server) holds, by SQL, --nodes ready nodes of
# --gpus devices (a lease of an hour: no heartbeat is due), every device held by a running attempt, and
# --jobs queued jobs over --tenants tenants; the real scheduler then cycles for --seconds with nothing to
# place (the fleet is full: each cycle reads, sizes the queue's head, runs placement, preemption's search
# included, and writes the public state). Reports the cycles' count, mean, p50 and p99 (the scheduler's
# histogram, interpolated within its buckets) against the goal, those over 1 s, and what a cycle costs:
# the scheduler's CPU and PostgreSQL's (the whole cluster's, /proc ticks), and the scheduler's RSS.
# The queued jobs tune another base than the running ones. --cotrain M: each device holds a co-training
# group of M running attempts (LoRA runs of one base) instead of one attempt; being of another base, no
# queued job joins them (still nothing to place).
# --free F: F nodes hold nothing and as many more jobs are queued: the window, from the end of the first
# cycle, sees the scheduler fill them (no executor takes the STARTs; an hour's lease keeps them running),
# and the slow cycles' parts are printed.
#
#   tests/bench/scale/cycle.sh [--nodes N] [--gpus G] [--jobs Q] [--tenants T] [--seconds S] [--cotrain M]
#                              [--free F]
#
# Defaults: 10000 nodes x 8 GPUs, 100000 queued, 1000 tenants, 40 s, no co-training. WHET_BIN defaults to
# build/whet.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$(pwd)
nodes=10000 gpus=8 jobs=100000 tenants=1000 seconds=40 cotrain=1 free=0
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift ;;
    --gpus) gpus=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    --tenants) tenants=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    --cotrain) cotrain=$2; shift ;;
    --free) free=$2; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "cycle.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
WHET_BIN=${WHET_BIN:-$root/build/whet}
. tests/bench/scale/lib.sh
say() { echo "cycle: $*"; }

work=$(mktemp -d /tmp/whet-cycle.XXXXXX)
chmod 755 "$work"
sched_pid=
cleanup() {
  set +e
  [ -n "$sched_pid" ] && kill "$sched_pid" 2>/dev/null && wait "$sched_pid" 2>/dev/null
  db_drop
  rm -rf "$work"
}
trap cleanup EXIT
db_open whet_cycle

t0=$(date +%s.%N)
q "INSERT INTO tenants (id, name) SELECT 'tenant-' || lpad(i::text, 6, '0'), 'bench-' || i FROM generate_series(1, $tenants) i;
   INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
     VALUES ('whet-tiny', 'llama', 1000000, 'models/whet-tiny', '00', '{}'),
            ('whet-tiny-b', 'llama', 1000000, 'models/whet-tiny-b', '00', '{}');
   INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key, format, line_count)
     SELECT 'file-' || id, id, 'fine-tune', 'train.jsonl', 100, '00', 'files/' || id, 'sft', 100 FROM tenants;
   INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms, address)
     SELECT 'node-' || i, 'dc-' || i % 3, 'dc-' || i % 3, (SELECT jsonb_agg(jsonb_build_object('type', 'sim-H100',
            'memory_mib', 81920, 'index', d)) FROM generate_series(0, $gpus - 1) d), 'sim-H100', $gpus, 64000, 512000,
            3600000, '127.0.0.1:' || i FROM generate_series(1, $nodes) i;
   WITH dev AS (SELECT n.id AS node, n.dc, g, m, (row_number() OVER () - 1) AS k
                FROM nodes n, generate_series(0, n.gpus - 1) g, generate_series(1, $cotrain) m
                WHERE substr(n.id, 6)::int <= $nodes - $free),
        t AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM tenants),
        j AS (INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, attempt, node_id,
                                placed_dc, created_at)
              SELECT 'ftjob-held' || d.k, t.id, 'whet-tiny', 'whet-tiny', 'file-' || t.id, '{\"type\":\"supervised\"}', 1,
                     'running', 1, d.node, d.dc, extract(epoch FROM now())::bigint FROM dev d JOIN t ON t.k = d.k % $tenants
              RETURNING id, tenant_id, node_id)
   INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, gpu_mask, device_type, cotrain_group)
     SELECT j.id, 1, j.tenant_id, j.node_id, 1 << d.g, 'sim-H100',
            CASE WHEN $cotrain > 1 THEN 'cotrain-' || d.node || '-' || d.g END
     FROM j JOIN dev d ON j.id = 'ftjob-held' || d.k;
   INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, created_at)
     SELECT 'ftjob-q' || i, t.id, 'whet-tiny-b', 'whet-tiny-b', 'file-' || t.id, '{\"type\":\"supervised\"}', 1, 'queued',
            extract(epoch FROM now())::bigint
     FROM generate_series(1, $jobs + $free * $gpus) i JOIN (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM tenants) t
       ON t.k = i % $tenants" >/dev/null
q "VACUUM ANALYZE" >/dev/null
say "$nodes nodes x $gpus GPUs, $(q "SELECT count(*) FROM job_attempts") running, $jobs queued over $tenants tenants" \
    "inserted in $(echo "$(date +%s.%N) - $t0" | bc | cut -c1-5) s"

read -r grpc_port metrics_port < <(free_ports 2)
metrics=127.0.0.1:$metrics_port
WHET_EXECUTOR_TOKEN=cycle-bench WHET_OBJECT_STORE="file://$work/objects" "$WHET_BIN" scheduler \
  --grpc "127.0.0.1:$grpc_port" --lease-ms 3600000 --metrics "$metrics" >"$work/scheduler.log" 2>&1 &
sched_pid=$!
# The first cycles read everything and write every waiting job's public state; the window starts after them.
first=3
[ "$free" -gt 0 ] && first=1
for _ in $(seq 3000); do [ "$(metric whet_scheduler_cycle_duration_seconds_count 2>/dev/null || echo 0)" -ge $first ] && break; sleep 0.2; done
cycle_hist >"$work/h0"
c0=$(metric whet_scheduler_cycle_duration_seconds_count) s0=$(metric whet_scheduler_cycle_duration_seconds_sum)
k0=$(ticks "$sched_pid") p0=$(pg_ticks)
sleep "$seconds"
cycle_hist >"$work/h1"
c1=$(metric whet_scheduler_cycle_duration_seconds_count) s1=$(metric whet_scheduler_cycle_duration_seconds_sum)
k1=$(ticks "$sched_pid") p1=$(pg_ticks)
over=$(paste "$work/h0" "$work/h1" | awk '$1 == "1" {a = $4 - $2} $1 == "+Inf" {b = $4 - $2} END {print b - a}')
per_cycle() { awk -v t="$1" -v hz="$(getconf CLK_TCK)" -v n="$((c1 - c0))" 'BEGIN {printf "%.3f", t / hz / n}'; } # TICKS -> s
say "cycles in ${seconds} s: $((c1 - c0)), mean $(awk -v s="$s1" -v r="$s0" -v n="$((c1 - c0))" 'BEGIN {printf "%.3f", (s - r) / n}') s," \
    "p50 $(quantile 0.5 "$work/h0" "$work/h1") s, p99 $(quantile 0.99 "$work/h0" "$work/h1") s, $over over 1 s (goal: 1 s)"
say "CPU a cycle: the scheduler $(per_cycle $((k1 - k0))) s, PostgreSQL $(per_cycle $((p1 - p0))) s;" \
    "scheduler RSS $(awk '/VmRSS/ {print $2 " " $3}' /proc/$sched_pid/status)"
if [ "$free" -gt 0 ]; then
  say "the fill: $(q "SELECT count(*) FROM job_attempts WHERE job_id LIKE 'ftjob-q%'") of $((free * gpus)) free devices" \
      "taken; the slow cycles (seconds per part):"
  grep 'slow cycle' "$work/scheduler.log" | sed 's/.*msg="slow cycle" /cycle:   /' || true
fi
