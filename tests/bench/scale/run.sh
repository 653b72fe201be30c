#!/usr/bin/env bash
# run.sh - the scheduler at fleet scale (issue 15): a private PostgreSQL, the real gateway and
# scheduler (`whet gateway`, `whet scheduler`), and scale_fleet (fleet.c), a simulated fleet speaking
# the executor protocol for thousands of nodes. Two phases:
#   1. free capacity: --api-jobs jobs created through the gateway by --tenants tenants (tenant after
#      tenant, 8 concurrent clients) on an idle fleet: create -> placed latency (client's answer to
#      the attempt row) and create -> START delivered to the node;
#   2. backlog: --jobs queued jobs inserted by SQL in one statement (the gateway's ~400 creates/s here
#      would take minutes for 100k; phase 1 measured its path), then --seconds of steady state with the
#      fleet full and the queue deep: cycle time p50/p99 (the scheduler's cycle histogram, interpolated
#      within its buckets as Prometheus' histogram_quantile does), placements/s, PostgreSQL CPU per
#      placement (/proc ticks of the postmaster and its backends), the scheduler's RSS.
# The fleet reports heartbeats answered per second, latency p50/p99 and how many missed the
# executor's 3 s deadline or the interval, over both phases and over phase 2's window alone.
#
#   tests/bench/scale/run.sh [--nodes N] [--gpus G] [--jobs Q] [--tenants T] [--api-jobs A]
#                            [--seconds S] [--run-s MIN:MAX] [--lease-ms MS] [--fleet-threads K] [--held]
#   --held: phase 2's fleet is filled by running attempts inserted by SQL instead of by the scheduler:
#           the cycle at a full fleet and a deep queue without a fill of minutes. Their STARTs reach the
#           simulated nodes, which run them for --run-s like any other (so a --run-s longer than the
#           window keeps the fleet full, every heartbeat reporting the progress of a node's jobs)
#   tests/bench/scale/run.sh --smoke     20 nodes, 200 jobs through the gateway, runs of 1-2 s; fails unless
#                                        every job is placed once and succeeds and no heartbeat is missed
#   --slow-nodes-ms MS: every heartbeat statement takes MS longer (a trigger on nodes that sleeps in the
#           statement heartbeats.c writes): a database slow to write heartbeats, which they must not miss
#           their deadline over (handler threads that each waited for its statement answered 8 of them per
#           statement time in all; heartbeats.c's writers take every one queued meanwhile)
# Defaults: 1000 nodes x 8 GPUs, 10000 queued, 1000 tenants, 1000 API jobs, 60 s, runs of 10-40 s, a 20 s
# lease (so a 2 s heartbeat interval, the scheduler's lease / 10), one fleet thread. Issue 15's sizes are --nodes 1000
# and 10000 with --jobs 10000 and 100000; on a 2-core machine the fleet, gateway, scheduler and
# PostgreSQL share the cores, so state what you ran. Uses WHET_TEST_DATABASE_URL's server when set
# (ctest), else starts one (tests/integration/lib/pg.sh). WHET_BIN defaults to build/whet.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$(pwd)
nodes=1000 gpus=8 jobs=10000 tenants=1000 api_jobs=1000 seconds=60 run_s=10:40 lease_ms=20000 fleet_threads=
smoke=0 held=0 slow_nodes_ms=0 fleet=$root/build/tests/bench/scale/scale_fleet
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift ;;
    --gpus) gpus=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    --tenants) tenants=$2; shift ;;
    --api-jobs) api_jobs=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    --run-s) run_s=$2; shift ;;
    --lease-ms) lease_ms=$2; shift ;;
    --fleet-threads) fleet_threads=$2; shift ;;
    --fleet) fleet=$2; shift ;;
    --held) held=1 ;;
    --slow-nodes-ms) slow_nodes_ms=$2; shift ;;
    --smoke) smoke=1 nodes=20 gpus=8 jobs=0 tenants=10 api_jobs=200 run_s=1:2 lease_ms=10000 ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
# The fleet's threads are event loops with their nodes' calls in flight together (fleet.c): one keeps 10,000
# nodes on time (its mean lag 8 ms at 5,000 heartbeats/s, held, on 2 cores).
[ -n "$fleet_threads" ] || fleet_threads=1
WHET_BIN=${WHET_BIN:-$root/build/whet}
[ -x "$fleet" ] || { echo "run.sh: $fleet is not built (cmake --build build --target scale_fleet)" >&2; exit 1; }

work=$(mktemp -d /tmp/whet-scale.XXXXXX)
chmod 755 "$work"
pids=()
. tests/bench/scale/lib.sh
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  db_drop
  rm -rf "$work"
}
trap cleanup EXIT
db_open whet_scale
say() { echo "scale: $*"; }
# When each phase began (Unix time): the fleet's failed heartbeats are placed among them at the end.
mark() { echo "$1 $(date +%s.%N)" >>"$work/marks"; }
fail() { echo "scale: FAIL $*" >&2; exit 1; }

hz=$(getconf CLK_TCK)

# --- the services ---
export WHET_JWT_KEY=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
export WHET_EXECUTOR_TOKEN=scale-token WHET_OBJECT_STORE="file://$work/objects"
"$WHET_BIN" gateway --http 127.0.0.1:0 --threads 2 --db-conns 4 2>"$work/gateway.log" &
pids+=($!)
for _ in $(seq 100); do grep -q "listening on" "$work/gateway.log" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.:]*' "$work/gateway.log" | head -n1)
[ -n "$url" ] || { cat "$work/gateway.log" >&2; fail "the gateway did not start"; }
admin=$("$WHET_BIN" token --admin)

read -r grpc_port metrics_port < <(free_ports 2)
grpc=127.0.0.1:$grpc_port metrics=127.0.0.1:$metrics_port
"$WHET_BIN" scheduler --grpc "$grpc" --lease-ms "$lease_ms" --metrics "$metrics" >"$work/scheduler.log" 2>&1 &
sched_pid=$!
pids+=($sched_pid)
for _ in $(seq 100); do grep -q "leading" "$work/scheduler.log" && break; sleep 0.1; done
grep -q "leading" "$work/scheduler.log" || { cat "$work/scheduler.log" >&2; fail "the scheduler did not start"; }

# Tenants through the admin API; one base model and one training file per tenant by SQL (uploads
# are not what this measures).
t0=$(date +%s.%N)
python3 tests/bench/scale/api.py tenants "$url" "$admin" "$tenants" "$work/tenants"
say "$tenants tenants created through the gateway in $(echo "$(date +%s.%N) - $t0" | bc | cut -c1-5) s"
q "INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
     VALUES ('whet-tiny', 'llama', 1000000, 'models/whet-tiny', '00', '{}');
   INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key, format, line_count)
     SELECT 'file-' || id, id, 'fine-tune', 'train.jsonl', 100, '00', 'files/' || id, 'sft', 100 FROM tenants"

if [ "$slow_nodes_ms" -gt 0 ]; then
  q "CREATE FUNCTION scale_slow_nodes() RETURNS trigger LANGUAGE plpgsql AS \$\$
     BEGIN IF current_query() LIKE 'WITH r AS (SELECT * FROM jsonb_to_recordset%' THEN
       PERFORM pg_sleep($slow_nodes_ms / 1000.0); END IF; RETURN NULL; END \$\$;
     CREATE TRIGGER scale_slow_nodes AFTER UPDATE ON nodes FOR EACH STATEMENT EXECUTE FUNCTION scale_slow_nodes()"
fi
total_s=$(( seconds + 600 ))
[ "$smoke" = 1 ] && total_s=100
"$fleet" --scheduler "$grpc" --nodes "$nodes" --gpus "$gpus" --threads "$fleet_threads" --run-s "$run_s" \
  --seconds "$total_s" >"$work/fleet.json" 2>"$work/fleet.err" &
fleet_pid=$!
pids+=($fleet_pid)
mark "nodes registering"
for _ in $(seq 600); do [ "$(q "SELECT count(*) FROM nodes WHERE state = 'ready'")" -ge "$nodes" ] && break; sleep 0.5; done
say "$(q "SELECT count(*) FROM nodes WHERE state = 'ready'") of $nodes simulated nodes x $gpus GPUs registered" \
    "(heartbeat every $((lease_ms / 10)) ms, lease $lease_ms ms, scheduler RSS $(awk '/VmRSS/ {print $2 " " $3}' /proc/$sched_pid/status))"

# The cycles' time so far, and what their thread (the scheduler's main thread) spent running and waiting for a
# CPU (/proc's schedstat, ns): on a machine shared with the simulated fleet, a cycle's time is partly the
# wait for a core, which a scheduler on a machine of its own does not see.
cycle_time() { echo "$(metric whet_scheduler_cycle_duration_seconds_sum) $(cut -d' ' -f1,2 "/proc/$sched_pid/task/$sched_pid/schedstat")"; }
cycle_share() { # cycle_time BEFORE, cycle_time AFTER
  awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ")
    printf "cycles took %.1f s in all: their thread ran %.1f s and waited %.1f s for a CPU", y[1] - x[1],
           (y[2] - x[2]) / 1e9, (y[3] - x[3]) / 1e9 }'
}

# The slowest cycles (seconds per part) among the scheduler's log lines on stdin.
slowest() { grep 'slow cycle' | sed 's/.*seconds=/seconds=/' | sort -t= -k2 -rn | head -n 3 | sed 's/^/scale:     /'; }

# --- phase 1: creates through the gateway on a free fleet ---
mark "phase 1"
cycle_hist >"$work/h0"
ct0=$(cycle_time) lp0=$(wc -l <"$work/scheduler.log")
python3 tests/bench/scale/api.py jobs "$url" "$work/tenants" "$api_jobs" 8 "$work/created" | sed 's/^/scale: /'
q "CREATE TABLE scale_created (id text PRIMARY KEY, at float8)"
psql -qX -v ON_ERROR_STOP=1 "$WHET_DATABASE_URL" -c "\\copy scale_created FROM '$work/created' WITH (DELIMITER ' ')"
for _ in $(seq 1200); do
  [ "$(q "SELECT count(*) FROM scale_created c JOIN job_attempts a ON a.job_id = c.id AND a.attempt = 1")" -ge "$api_jobs" ] && break
  sleep 0.1
done
latency() { # SQL expression of the placement time
  q "SELECT round((percentile_cont(0.5) WITHIN GROUP (ORDER BY d))::numeric, 3) || ' ' ||
            round((percentile_cont(0.99) WITHIN GROUP (ORDER BY d))::numeric, 3) || ' ' || round(max(d)::numeric, 3) || ' ' || count(*)
     FROM (SELECT $1 - c.at AS d FROM scale_created c JOIN job_attempts a ON a.job_id = c.id AND a.attempt = 1
           JOIN node_commands n ON n.job_id = c.id AND n.attempt = 1 AND n.kind = 'start') s"
}
read -r pl50 pl99 plmax placed < <(latency a.started_at)
read -r st50 st99 stmax _ < <(latency n.delivered_at)
cycle_hist >"$work/h1"
say "phase 1 (free capacity): $placed of $api_jobs placed; create -> placed p50 ${pl50}s p99 ${pl99}s max ${plmax}s;" \
    "create -> START delivered p50 ${st50}s p99 ${st99}s; cycle p50 $(quantile 0.5 "$work/h0" "$work/h1")s" \
    "p99 $(quantile 0.99 "$work/h0" "$work/h1")s; $(cycle_share "$ct0" "$(cycle_time)")"
sed -n "$((lp0 + 1)),\$p" "$work/scheduler.log" | slowest || true

if [ "$smoke" = 1 ]; then
  for _ in $(seq 600); do
    [ "$(q "SELECT count(*) FROM jobs WHERE status = 'succeeded'")" -ge "$api_jobs" ] && break
    sleep 0.1
  done
  sleep 2 # a few heartbeats after the last finish
  kill -TERM "$fleet_pid"
  wait "$fleet_pid" || true
  heartbeats=$(heartbeats_answered)
  cat "$work/fleet.json"
  read -r ok attempts lost <<<"$(q "SELECT count(*) FILTER (WHERE status = 'succeeded'), (SELECT count(*) FROM job_attempts),
                                   (SELECT count(*) FROM nodes WHERE state = 'lost') FROM jobs" | tr '|' ' ')"
  missed=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["heartbeats_missed_deadline"] + d["heartbeat_failed"] + d["finish_failed"] + d["checkpoint_failed"])' "$work/fleet.json")
  ckpts=$(q "SELECT count(DISTINCT job_id) FROM checkpoints")
  usage=$(q "SELECT count(*) FROM usage_records WHERE device_seconds > 0")
  [ "$placed" = "$api_jobs" ] || fail "$placed of $api_jobs jobs placed"
  [ "$ok" = "$api_jobs" ] || fail "$ok of $api_jobs jobs succeeded"
  [ "$attempts" = "$api_jobs" ] || fail "$attempts attempts for $api_jobs jobs (a job placed twice, or lost)"
  [ "$ckpts" = "$api_jobs" ] || fail "$ckpts of $api_jobs jobs have their checkpoint"
  [ "$usage" = "$api_jobs" ] || fail "$usage of $api_jobs attempts have usage"
  [ "$lost" = 0 ] || fail "$lost nodes declared lost"
  [ "$missed" = 0 ] || fail "$missed heartbeats or reports failed or missed their deadline"
  if [ "$slow_nodes_ms" -gt 0 ]; then # statements a second long hold back pruning: HOT is measured without
    say "smoke: ok ($api_jobs jobs placed once, checkpointed and succeeded on $nodes nodes; no heartbeat missed," \
        "with every statement updating nodes ${slow_nodes_ms} ms slower)"
    exit 0
  fi
  # The heartbeats' progress writes are HOT (migration 0028): job_progress's updates stay on their page
  # and add no index entry. The counts are the scheduler's backends', flushed as they exit.
  kill -TERM "$sched_pid"
  wait "$sched_pid" || true
  for _ in $(seq 50); do
    read -r ins upd hot <<<"$(q "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
                                 WHERE relname = 'job_progress'" | tr '|' ' ')"
    [ "$ins" -ge "$api_jobs" ] && break
    sleep 0.1
  done
  say "smoke: job_progress: $ins rows, $upd updates, $hot of them HOT"
  [ "$ins" = "$api_jobs" ] || fail "$ins rows of job_progress for $api_jobs jobs"
  [ "$upd" -gt 0 ] && [ $((hot * 10)) -ge $((upd * 9)) ] || fail "only $hot of $upd updates of job_progress were HOT"
  # A heartbeat writes its node's row only once its stored lease is a quarter lease old (heartbeats.c): with
  # a heartbeat every tenth of a lease, about one in three renews it (registrations and the leader's takeover
  # write the rows too).
  node_upd=$(q "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'nodes'")
  say "smoke: nodes: $node_upd row updates for ${heartbeats%.*} heartbeats"
  [ $((node_upd * 2)) -lt "${heartbeats%.*}" ] || fail "$node_upd updates of nodes for ${heartbeats%.*} heartbeats"
  say "smoke: ok ($api_jobs jobs placed once, checkpointed and succeeded on $nodes nodes; no heartbeat missed)"
  exit 0
fi

# --- phase 2: a deep queue, by SQL ---
mark "phase 2's SQL"
if [ "$held" = 1 ]; then
  # Every free device taken at once by a running attempt inserted by SQL, with its START, instead of a
  # fill through the scheduler (minutes at this machine's placement rate).
  q "WITH free AS (SELECT n.id AS node, n.dc, g, row_number() OVER () AS k FROM nodes n, generate_series(0, n.gpus - 1) g
                   WHERE n.state = 'ready' AND NOT EXISTS (SELECT 1 FROM job_attempts a WHERE a.node_id = n.id
                     AND a.ended_at IS NULL AND (a.gpu_mask >> g) & 1 = 1)),
        t AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM tenants),
        j AS (INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, attempt, node_id,
                                placed_dc, created_at)
              SELECT 'ftjob-held' || f.k, t.id, 'whet-tiny', 'whet-tiny', 'file-' || t.id, '{\"type\":\"supervised\"}', 1,
                     'running', 1, f.node, f.dc, extract(epoch FROM now())::bigint FROM free f JOIN t ON t.k = f.k % $tenants
              RETURNING id, tenant_id, node_id)
     , a AS (INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, gpu_mask, device_type)
             SELECT j.id, 1, j.tenant_id, j.node_id, 1 << f.g, 'sim-H100' FROM j JOIN free f ON j.id = 'ftjob-held' || f.k)
     INSERT INTO node_commands (node_id, job_id, attempt, kind) SELECT node_id, id, 1, 'start' FROM j" >/dev/null
  say "phase 2: every free device held by a running attempt inserted by SQL ($(q "SELECT count(*) FROM job_attempts WHERE ended_at IS NULL") running)"
fi
# As many more as the fleet has free devices, so that --jobs still wait once it is full.
bulk=$(( jobs + nodes * gpus - $(q "SELECT count(*) FROM job_attempts WHERE ended_at IS NULL") ))
say "phase 2: $bulk queued jobs inserted by SQL over $tenants tenants (the gateway path is phase 1's): $jobs wait once the fleet is full"
q "INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, created_at)
   SELECT 'ftjob-bulk' || i, t.id, 'whet-tiny', 'whet-tiny', 'file-' || t.id, '{\"type\":\"supervised\"}', 1, 'queued',
          extract(epoch FROM now())::bigint
   FROM generate_series(1, $bulk) i
   JOIN (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM tenants) t ON t.k = i % $tenants;
   NOTIFY whet_jobs" >/dev/null
q "ANALYZE" >/dev/null
mark "the fill"
# The first cycles fill the free devices; the window starts once two cycles have ended after that.
cycles_done() { metric whet_scheduler_cycle_duration_seconds_count; }
fill0=$(date +%s.%N) c0=$(cycles_done)
for _ in $(seq 1200); do [ "$(cycles_done)" -ge $((c0 + 3)) ] && break; sleep 0.5; done
fill_s=$(echo "$(date +%s.%N) - $fill0" | bc)
filled=$(q "SELECT count(*) FROM job_attempts WHERE job_id LIKE 'ftjob-bulk%'")
say "  the fill: $filled placed in ${fill_s%.*} s ($(echo "$filled / $fill_s" | bc) placements/s)"
cycle_hist >"$work/h2"
heartbeat_hist >"$work/hb2"
a0=$(q "SELECT count(*) FROM job_attempts")
f0=$(q "SELECT count(*) FROM job_attempts WHERE ended_at IS NOT NULL")
# Where the server preloads pg_stat_statements (and the base database has the extension), the window's
# top statements by total time are printed too; where it tracks functions (track_functions = 'pl' or 'all'),
# its top functions, triggers among them.
pgss=$(psql -qtAX "$WHET_TEST_DATABASE_URL" -c "SELECT count(*) FROM pg_extension WHERE extname = 'pg_stat_statements'" 2>/dev/null || echo 0)
[ "$pgss" = 1 ] && psql -qtAX "$WHET_TEST_DATABASE_URL" -c "SELECT pg_stat_statements_reset()" >/dev/null
track_functions=$(q "SHOW track_functions")
q "SELECT pg_stat_reset()" >/dev/null
# Heartbeats due a second: every node once an interval, a tenth of the lease (the scheduler's answer to RegisterNode).
hb_due=$(echo "$nodes * 10000 / $lease_ms" | bc -l)
# Heartbeats in the window: the scheduler's count of those written (a heartbeat renews its node's row only
# every quarter lease, so the row's updates no longer count them).
hs0=$(metric whet_scheduler_heartbeat_statements_total) hw0=$(metric whet_scheduler_heartbeats_total) hb0=$(heartbeats_answered)
p0=$(pg_ticks) s0=$(ticks "$sched_pid") x0=$(ticks "$fleet_pid") w0=$(date +%s.%N) l0=$(wc -l <"$work/scheduler.log") ct0=$(cycle_time)
kill -USR1 "$fleet_pid" # the fleet's own figures of the window (fleet.c)
mark "the window"
sleep "$seconds"
kill -USR1 "$fleet_pid"
mark "after the window"
x1=$(ticks "$fleet_pid")
hs1=$(metric whet_scheduler_heartbeat_statements_total) hw1=$(metric whet_scheduler_heartbeats_total) hb1=$(heartbeats_answered)
a1=$(q "SELECT count(*) FROM job_attempts")
f1=$(q "SELECT count(*) FROM job_attempts WHERE ended_at IS NOT NULL")
p1=$(pg_ticks) s1=$(ticks "$sched_pid") w1=$(date +%s.%N) l1=$(wc -l <"$work/scheduler.log") ct1=$(cycle_time)
cycle_hist >"$work/h3"
heartbeat_hist >"$work/hb3"
el=$(echo "$w1 - $w0" | bc)
placements=$((a1 - a0))
cycles=$(paste "$work/h2" "$work/h3" | awk '$1 == "+Inf" {print $4 - $2}')
say "phase 2 ($nodes nodes x $gpus GPUs, $(metric whet_scheduler_jobs_queued) queued and $(metric whet_scheduler_jobs_running) running at the end, ${el%.*} s):"
say "  cycles: $cycles, p50 $(quantile 0.5 "$work/h2" "$work/h3")s, p99 $(quantile 0.99 "$work/h2" "$work/h3")s; $(cycle_share "$ct0" "$ct1")"
awk -v p="$placements" -v f="$((f1 - f0))" -v el="$el" -v pt="$((p1 - p0))" -v st="$((s1 - s0))" -v hz="$hz" 'BEGIN {
  printf "scale:   placements: %d (%.1f/s), attempts finished %.1f/s\n", p, p / el, f / el
  printf "scale:   PostgreSQL CPU: %.2f cores, %.2f ms per placement; scheduler CPU: %.2f cores, %.2f ms per placement\n",
         pt / hz / el, p ? pt * 1000 / hz / p : 0, st / hz / el, p ? st * 1000 / hz / p : 0 }'
awk -v h="$((${hb1%.*} - ${hb0%.*}))" -v el="$el" -v pt="$((p1 - p0))" -v st="$((s1 - s0))" -v xt="$((x1 - x0))" -v hz="$hz" \
    -v due="$hb_due" 'BEGIN {
  printf "scale:   heartbeats: %d (%.0f/s of %.0f/s due); CPU per heartbeat (ms), everything in the window included:" \
         " PostgreSQL %.3f, scheduler %.3f, the simulated fleet %.3f\n", h, h / el, due, h ? pt * 1000 / hz / h : 0,
         h ? st * 1000 / hz / h : 0, h ? xt * 1000 / hz / h : 0 }'
awk -v s="$((${hs1%.*} - ${hs0%.*}))" -v w="$((${hw1%.*} - ${hw0%.*}))" -v b="$((hb1 - hb0))" 'BEGIN {
  printf "scale:   heartbeats written: %d in %d statements, %.1f each (heartbeats arriving together share one); %d answered" \
         " from memory (nothing to write or hand out)\n", w, s, s ? w / s : 0, b - w }'
say "  scheduler RSS $(awk '/VmRSS/ {print $2 " " $3}' /proc/$sched_pid/status) (peak $(awk '/VmHWM/ {print $2 " " $3}' /proc/$sched_pid/status))"
if [ "$pgss" = 1 ]; then
  say "  top statements (pg_stat_statements): calls, total ms, ms per call, statement"
  psql -qtAX -F ' ' "$WHET_TEST_DATABASE_URL" -c "SELECT calls, round(total_exec_time), round((total_exec_time / greatest(calls, 1))::numeric, 3),
      left(regexp_replace(query, '\\s+', ' ', 'g'), 110) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
      WHERE d.datname = '$db' ORDER BY total_exec_time DESC LIMIT ${WHET_SCALE_TOP_STATEMENTS:-10}" | sed 's/^/scale:     /'
fi
if [ "$track_functions" != none ]; then
  say "  top functions (pg_stat_user_functions): calls, total ms, self ms, ms per call, function"
  q "SELECT calls, round(total_time), round(self_time), round((total_time / greatest(calls, 1))::numeric, 3), funcname
     FROM pg_stat_user_functions ORDER BY total_time DESC LIMIT 10" | tr '|' ' ' | sed 's/^/scale:     /'
fi
# The slow cycles of the whole run (the fill's among them), then of the window alone.
slow=$(grep -c 'slow cycle' "$work/scheduler.log" || true)
if [ "$slow" -gt 0 ]; then
  say "  cycles over 1 s, whole run: $slow; the slowest (seconds per part):"
  slowest <"$work/scheduler.log"
  say "  cycles over 1 s in the window: $(sed -n "$((l0 + 1)),${l1}p" "$work/scheduler.log" | grep -c 'slow cycle' || true); the slowest:"
  sed -n "$((l0 + 1)),${l1}p" "$work/scheduler.log" | slowest || true
fi
# Cycles of the window that rewrote many rows of public state, and which rule let them through
# (public_state.c): moved by more than a tenth, a stale reason, newly waiting.
sed -n "$((l0 + 1)),${l1}p" "$work/scheduler.log" | { grep 'public state rewritten' || true; } | awk '{
    for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] += kv[2] } n++ }
  END { printf "scale:   cycles rewriting 1000+ rows of public state in the window: %d", n
        if (n) printf ", per such cycle: %d rows (%d moved, %d reasons, %d entered, %d left; %d left to later cycles)",
                      v["rows"] / n, v["moved"] / n, v["reason"] / n, v["entered"] / n, v["left"] / n, v["later"] / n
        printf "\n" }'
kill -TERM "$fleet_pid"
wait "$fleet_pid" || true
say "fleet: $(cat "$work/fleet.json")"
# The first failures of each method (fleet.c prints three), when any call failed.
[ -s "$work/fleet.err" ] && sed 's/^/scale: fleet: /' "$work/fleet.err" | head -n 12
python3 - "$work/fleet.json" "$hb_due" <<'PY' | sed 's/^/scale: /'
import json, sys
w = json.load(open(sys.argv[1]))["window"]
due = float(sys.argv[2])
print("phase 2 as the fleet saw it: %.0f heartbeats/s answered of %.0f/s due, latency p50 %.1f ms, p99 %.1f ms, max %.1f ms;"
      " %d past the 3 s deadline or failed, %d past the interval; the simulator sent %d late (mean lag %.1f ms)"
      % (w["heartbeats_answered_per_s"], due, w["heartbeat_p50_ms"], w["heartbeat_p99_ms"], w["heartbeat_max_ms"],
         w["heartbeats_missed_deadline"], w["heartbeats_over_interval"], w["sim_lagged_heartbeats"], w["sim_mean_lag_ms"]))
PY
python3 - "$work/fleet.json" "$work/marks" <<'PY' | sed 's/^/scale: /'
import json, sys
run = json.load(open(sys.argv[1]))
marks = [(float(t), name) for name, t in (l.rsplit(" ", 1) for l in open(sys.argv[2]).read().splitlines())]
by_phase = {}  # in the order the phases came: the fleet lists its seconds in order
for second, n in run["heartbeats_failed_by_second"].items():
    began = [(m, name) for m, name in marks if m <= float(second) + 1]
    phase = max(began)[1] if began else "before the first phase"
    by_phase[phase] = by_phase.get(phase, 0) + n
if by_phase:
    print("heartbeats failed by phase (the second each ended in): " +
          ", ".join("%s %d" % kv for kv in by_phase.items()))
PY
say "  the scheduler's heartbeat handlers in the window (from their start to their answer, a written one's" \
    "statement included; without the wait for a thread):" \
    "p50 $(quantile 0.5 "$work/hb2" "$work/hb3" 1000) ms, p99 $(quantile 0.99 "$work/hb2" "$work/hb3" 1000) ms"
say "nodes declared lost: $(metric whet_scheduler_nodes_lost_total); calls answered unrun, past their deadline" \
    "when a handler thread or a heartbeat writer came to them: $(metric whet_scheduler_rpc_calls_expired_total)"
# The peer of the fill's placements/s: the placement library alone on a fleet and queue of the same
# size (`whet sim scale`, one cycle, CPU time).
bare=$("$WHET_BIN" sim scale --nodes "$nodes" --gpus-per-node "$gpus" --queued "$((jobs + nodes * gpus))" --policy whet |
       sed -n 's/.*"decisions_per_s":\([0-9.]*\).*/\1/p')
say "the placement library alone: $bare decisions/s (whet sim scale, same sizes); the service's fill placed" \
    "$(echo "scale=4; $filled / $fill_s / $bare" | bc) of that rate"
