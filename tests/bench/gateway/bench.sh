#!/usr/bin/env bash
# bench.sh - what the gateway costs over the database itself. In one run, against one private
# PostgreSQL, with the same client count:
#   GET  /v1/fine_tuning/jobs/{id}  (wrk, API key)  beside  pgbench running the same SELECT
#   POST /v1/fine_tuning/jobs       (wrk, API key)  beside  pgbench running the same statements
#        (the model/file lookup, then the estimate with the job INSERT, its event INSERT and pg_notify in
#        one statement)
# pgbench connects as whet_app with whet.tenant_id set, so row-level security runs in both. The two
# sides alternate for --rounds rounds (so a change in the machine's background load hits both), and
# the medians of requests/s and p99 are compared (goal: the gateway within 20% of the database), and
# the CPU each side spends per request (gateway + PostgreSQL + wrk against PostgreSQL + pgbench).
#
#   tests/bench/gateway/bench.sh [--clients N] [--seconds S] [--rounds R] [--threads T] [--db-conns C]
#                                [--client-threads W] [--depths N,N,...] [--nodes N] [--tenants T] [--durable]
#                                [--statements]
#
# --threads and --db-conns configure the gateway; --client-threads is wrk's -t and pgbench's -j.
# --depths repeats both comparisons with the tenant holding N queued jobs (default 0; issue 15 asks
# for 1000,10000,100000: a create's cost must not grow with the queue). --nodes registers N ready nodes of
# 8 devices each (default 0), the fleet every create's estimate sizes the job over (issue 15: 10,000).
# --tenants spreads the creates (both sides, and the bare INSERT) over T tenants, the clients over them
# round-robin (default 1: every create takes the one tenant's counter of active jobs, a row that its
# concurrent creates wait on in turn). The GET and the queue depth stay the first tenant's; with T > 1 a
# third comparison, GET /v1/fine_tuning/jobs?limit=1 from the T tenants in turn beside pgbench listing
# each tenant's page, shows the gateway serving many tenants' reads on its few connections.
#
# --durable runs PostgreSQL with fsync on (the test servers' default is off): every commit then waits for its
# WAL to reach the disk, so what a create's transactions cost, shared or not, shows as it would in production.
# --statements loads pg_stat_statements (nested statements too) and shows where the PostgreSQL time of the
# gateway's creates went in the last round: each statement's calls a create and mean time.
#
# Needs wrk and pgbench (Debian: wrk, postgresql-client). WHET_BIN defaults to build/whet. The
# gateway, wrk, pgbench and PostgreSQL share the machine: on a small one (2 cores) they compete for
# the same cores, which the figures include.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$(pwd)
clients=32 seconds=5 rounds=3 threads=2 db_conns=2 client_threads=1 depths=0 nodes=0 tenants=1
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) clients=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --threads) threads=$2; shift ;;
    --db-conns) db_conns=$2; shift ;;
    --client-threads) client_threads=$2; shift ;;
    --depths) depths=$2; shift ;;
    --nodes) nodes=$2; shift ;;
    --tenants) tenants=$2; shift ;;
    --durable) export WHET_PG_SETTINGS="${WHET_PG_SETTINGS:-} -c fsync=on" ;;
    --statements) statements=1
                  export WHET_PG_SETTINGS="${WHET_PG_SETTINGS:-} -c shared_preload_libraries=pg_stat_statements"
                  WHET_PG_SETTINGS+=" -c pg_stat_statements.track=all -c track_functions=all" ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
WHET_BIN=${WHET_BIN:-$root/build/whet}
[ "$tenants" -ge 1 ] && [ "$tenants" -le "$clients" ] || { echo "bench.sh: --tenants must be 1..--clients" >&2; exit 2; }
for tool in wrk pgbench psql; do command -v $tool >/dev/null || { echo "bench.sh: $tool is not installed" >&2; exit 1; }; done

work=$(mktemp -d /tmp/whet-bench.XXXXXX)
chmod 755 "$work"
gw_pid=
cleanup() {
  set +e
  [ -n "$gw_pid" ] && kill "$gw_pid" 2>/dev/null && wait "$gw_pid" 2>/dev/null
  tests/integration/lib/pg.sh stop "$work/pg" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

eval "$(tests/integration/lib/pg.sh start "$work/pg")"
db_url="${WHET_TEST_DATABASE_URL%/*}/whet_bench"
psql -qX "$WHET_TEST_DATABASE_URL" -c "CREATE DATABASE whet_bench"
WHET_DATABASE_URL=$db_url "$WHET_BIN" migrate >/dev/null 2>&1
q() { psql -qtAX -v ON_ERROR_STOP=1 "$db_url" -c "$1"; }
[ -n "${statements:-}" ] && q "CREATE EXTENSION pg_stat_statements"

secret=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
WHET_DATABASE_URL=$db_url WHET_JWT_KEY=$secret "$WHET_BIN" gateway --http 127.0.0.1:0 --threads "$threads" \
  --db-conns "$db_conns" 2>"$work/gateway.log" &
gw_pid=$!
for _ in $(seq 100); do grep -q "listening on" "$work/gateway.log" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.:]*' "$work/gateway.log" | head -n1)
[ -n "$url" ] || { echo "bench.sh: the gateway did not start:"; cat "$work/gateway.log"; exit 1; } >&2
admin=$(WHET_JWT_KEY=$secret "$WHET_BIN" token --admin)

# One tenant with limits out of the way, a base model, a training file and a job to read.
created=$(curl -fsS -X POST "$url/admin/v1/tenants" -H "authorization: Bearer $admin" \
  -d '{"name":"bench","rate_per_s":1e9,"rate_burst":1000000000,"max_active_jobs":1000000000}')
key=$(echo "$created" | sed -n 's/.*"api_key":"\([^"]*\)".*/\1/p')
tenant=$(echo "$created" | sed -n 's/.*"id":"\(tenant-[^"]*\)".*/\1/p')
q "INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
   VALUES ('whet-tiny', 'llama', 1000000, 'models/whet-tiny', '00', '{}')"
# The tenants the creates go to, each with its key and training file: the first is the one above.
tenant_ids=("$tenant") keys=("$key") files=(file-bench)
for i in $(seq 2 "$tenants"); do
  created=$(curl -fsS -X POST "$url/admin/v1/tenants" -H "authorization: Bearer $admin" \
    -d '{"name":"bench-'"$i"'","rate_per_s":1e9,"rate_burst":1000000000,"max_active_jobs":1000000000}')
  keys+=("$(echo "$created" | sed -n 's/.*"api_key":"\([^"]*\)".*/\1/p')")
  tenant_ids+=("$(echo "$created" | sed -n 's/.*"id":"\(tenant-[^"]*\)".*/\1/p')")
  files+=("file-bench-$i")
done
for i in "${!tenant_ids[@]}"; do
  q "INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key, format, line_count)
     VALUES ('${files[$i]}', '${tenant_ids[$i]}', 'fine-tune', 'train.jsonl', 100, '00', 'k', 'sft', 100)"
done
q "INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms)
   SELECT 'node-bench' || i, 'dc-' || i % 3, 'p', (SELECT jsonb_agg(jsonb_build_object('type', 'H100',
          'memory_mib', 81920, 'index', d)) FROM generate_series(0, 7) d), 'H100', 8, 64000, 512000, 10000
   FROM generate_series(1, $nodes) i"
job=$(curl -fsS -X POST "$url/v1/fine_tuning/jobs" -H "authorization: Bearer $key" -H 'content-type: application/json' \
  -d '{"model":"whet-tiny","training_file":"file-bench"}' | sed -n 's/.*"id":"\(ftjob-[^"]*\)".*/\1/p')
[ -n "$job" ] || { echo "bench.sh: could not create the job to read" >&2; exit 1; }
status=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/fine_tuning/jobs/$job" -H "authorization: Bearer $key")
[ "$status" = 200 ] || { echo "bench.sh: GET job answered $status" >&2; exit 1; }
# The SQL text of one of gateway/jobs.c's string macros (JOB_* and NEW_JOB_*), as the C preprocessor expands it.
sql_macro() { # NAME
  { awk '/^#define (JOB_|NEW_JOB_)/ {p = 1} p {print} p && !/\\$/ {p = 0}' gateway/jobs.c; echo "$1"; } | cpp -P -w - |
    tr -d '\n' | sed 's/" *"//g; s/^ *"//; s/" *$//'
}
# GET's columns and FROM, and the columns a create answers with.
cols=$(sql_macro JOB_COLUMNS) from=$(sql_macro JOB_FROM) new_cols=$(sql_macro NEW_JOB_COLUMNS)
[[ "$cols" == j.id* && "$from" == *jobs* && "$new_cols" == j.id* ]] ||
  { echo "bench.sh: JOB_COLUMNS, JOB_FROM or NEW_JOB_COLUMNS not found in gateway/jobs.c" >&2; exit 1; }
# The create's inputs as the gateway resolved them for the job above (its method and its estimate, which the
# gateway computes), and each tenant's API key, for the pgbench mirror of the create (as variables).
method=$(q "SELECT method FROM jobs WHERE id = '$job'")
estimate=$(q "SELECT estimate FROM jobs WHERE id = '$job'")
key_ids=()
for t in "${tenant_ids[@]}"; do key_ids+=("$(q "SELECT id FROM api_keys WHERE tenant_id = '$t' LIMIT 1")"); done

# CPU time (clock ticks) of a process, and of the whole PostgreSQL cluster: its live processes plus what
# the postmaster has reaped (pgbench's backends exit when it does).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
pg_ticks() {
  local pm t c
  pm=$(head -n1 "$work/pg/data/postmaster.pid")
  t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
  for c in $(pgrep -P "$pm"); do t=$((t + $(ticks "$c"))); done
  echo "$t"
}
hz=$(getconf CLK_TCK)
# Runs a client command, printing "SERVER_TICKS PG_TICKS CLIENT_TICKS" to fd 3 (client from /usr/bin/time).
measure() {
  local g0 p0 g1 p1 client=0
  g0=$(ticks "$gw_pid"); p0=$(pg_ticks)
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f '%U %S' -o "$work/time.out" "$@"
    client=$(awk '{printf "%d", ($1 + $2) * '"$hz"'}' "$work/time.out")
  else
    "$@"
  fi
  g1=$(ticks "$gw_pid"); p1=$(pg_ticks)
  echo "$((g1 - g0)) $((p1 - p0)) $client" >"$work/ticks.out"
}
# "N RATE" + ticks -> microseconds of CPU per request for the gateway, PostgreSQL and the client.
per_request() { # COUNT
  awk -v n="$1" -v hz="$hz" '{printf "%.1f %.1f %.1f", $1 * 1e6 / hz / n, $2 * 1e6 / hz / n, $3 * 1e6 / hz / n}' "$work/ticks.out"
}

# wrk: RPS and p99 (in ms) from its --latency report, then CPU per request. A BODY naming @FILE@ is a
# create: each request goes to the next tenant, with its key and its training file in the body.
wrk_run() { # METHOD PATH [BODY]
  cat >"$work/wrk.lua" <<EOF
wrk.method = "$1"
wrk.headers["authorization"] = "Bearer $key"
wrk.headers["content-type"] = "application/json"
${3:+wrk.body = '$3'}
EOF
  if [ "$1" = GET ] && [ "$2" = "$list_path" ]; then
    cat >>"$work/wrk.lua" <<EOF
local keys = {$(printf '"%s",' "${keys[@]}")}
local next_tenant = 0
request = function()
  next_tenant = next_tenant % #keys + 1
  wrk.headers["authorization"] = "Bearer " .. keys[next_tenant]
  return wrk.format()
end
EOF
  fi
  if [[ "${3:-}" == *@FILE@* ]]; then
    cat >>"$work/wrk.lua" <<EOF
local keys = {$(printf '"%s",' "${keys[@]}")}
local files = {$(printf '"%s",' "${files[@]}")}
local next_tenant = 0
request = function()
  next_tenant = next_tenant % #keys + 1
  wrk.headers["authorization"] = "Bearer " .. keys[next_tenant]
  return wrk.format(nil, nil, nil, (string.gsub(wrk.body, "@FILE@", files[next_tenant])))
end
EOF
  fi
  measure wrk -t"$client_threads" -c"$clients" -d"${seconds}s" --latency -s "$work/wrk.lua" "$url$2" >"$work/wrk.out"
  local rps p99 non2xx total
  rps=$(awk '/^Requests\/sec/ {print $2}' "$work/wrk.out")
  p99=$(awk '$1 == "99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; print v}' "$work/wrk.out")
  non2xx=$(awk '/Non-2xx/ {print $NF}' "$work/wrk.out")
  [ -z "$non2xx" ] || { echo "bench.sh: $non2xx non-2xx answers to $1 $2" >&2; cat "$work/wrk.out" >&2; exit 1; }
  total=$(awk '/requests in/ {print $1}' "$work/wrk.out")
  echo "$rps $p99 $(per_request "$total")"
}

# pgbench: TPS and p99 (in ms) from its per-transaction log. TENANTS (default 1): one pgbench per tenant
# at once (a connection's tenant is set as it connects), the clients split between them.
pgbench_run() { # SCRIPT [TENANTS]
  local n=${2:-1} i
  rm -f "$work"/pgb_log* "$work"/pgbench.out*
  for i in $(seq 0 $((n - 1))); do
    echo "PGOPTIONS='-c role=whet_app -c whet.tenant_id=${tenant_ids[$i]}' pgbench -n -M prepared" \
         "-c $((clients / n + (i < clients % n))) -j $client_threads -T $seconds -l --log-prefix=pgb_log$i" \
         "-D tenant=${tenant_ids[$i]} -D file=${files[$i]} -D apikey=${key_ids[$i]} -D job=$job" \
         "-D method=$(printf %q "$method") -D estimate=$(printf %q "$estimate")" \
         "-f '$1' '$db_url' >pgbench.out$i 2>&1 &"
  done >"$work/pgbench.sh"
  echo wait >>"$work/pgbench.sh"
  (cd "$work" && measure bash pgbench.sh)
  local tps p99 total
  tps=$(awk '/^tps = / {t += $3} END {print t}' "$work"/pgbench.out*)
  p99=$(cat "$work"/pgb_log* | awk '{print $3}' | sort -n | awk '{v[NR]=$1} END {i=int(NR*0.99); if (i<1) i=1; print v[i]/1000}')
  total=$(awk '/number of transactions actually processed/ {t += $NF} END {print t}' "$work"/pgbench.out*)
  [ "$(cat "$work"/pgbench.out* | grep -c '^tps = ')" = "$n" ] && [ "${total:-0}" -gt 0 ] ||
    { echo "bench.sh: pgbench did not run $1 to its end:" >&2; cat "$work"/pgbench.out* >&2; exit 1; }
  echo "$tps $p99 $(per_request "$total")"
}

cat >"$work/select.sql" <<EOF
SELECT $cols FROM $from WHERE j.tenant_id = :tenant AND j.id = :job;
EOF
# The first page of a tenant's jobs, as jobs_list reads it for limit=1 (one more row tells whether more follow).
list_path='/v1/fine_tuning/jobs?limit=1'
cat >"$work/list.sql" <<EOF
SELECT $cols FROM $from WHERE j.tenant_id = :tenant AND j.seq = ANY (ARRAY(SELECT seq FROM jobs
  WHERE tenant_id = :tenant AND seq < 9223372036854775807 ORDER BY seq DESC LIMIT 2)) ORDER BY j.seq DESC;
EOF
# The statements POST /v1/fine_tuning/jobs runs, with fresh ids per create (keep in step with gateway/jobs.c and
# gateway/estimate.h): jobs_lookup (the model, the files and the estimate's inputs), then jobs_create (the
# estimate the gateway made, checked against the budget and the API key's limit, then the row, its event and
# NOTIFY; its commit counts the tenant's active jobs against its limit), a transaction of its own. A
# max_seq_len that keeps no count, as at the gateway.
cat >"$work/insert.sql" <<EOF
\set n random(1, 1000000000)
SELECT * FROM whet_job_create_lookup(:tenant, 'whet-tiny', :file, NULL, '{"type":"supervised"}', 1024);
WITH s (e, b, over_hard, over_soft, key_limit, key_spent) AS (
  SELECT e, b, (b ->> 'monthly_limit') IS NOT NULL AND (b ->> 'spent')::numeric +
    (e -> 'cost' ->> 'amount')::numeric > (b ->> 'monthly_limit')::numeric, (b ->> 'soft_limit') IS NOT NULL AND
    (b ->> 'spent')::numeric + (e -> 'cost' ->> 'amount')::numeric >= (b ->> 'soft_limit')::numeric,
    k.monthly_limit, k.spent FROM (SELECT CASE WHEN EXISTS (SELECT 1 FROM files WHERE id = :file AND tenant_id = :tenant)
      THEN :estimate::jsonb END AS e,
    CASE WHEN false OR EXISTS (SELECT 1 FROM budgets WHERE tenant_id = :tenant AND
      (monthly_limit IS NOT NULL OR soft_limit IS NOT NULL)) THEN whet_budget_status(:tenant) END AS b OFFSET 0) s
    LEFT JOIN LATERAL (SELECT monthly_limit, whet_key_spend(id) AS spent FROM api_keys
      WHERE id = :apikey AND monthly_limit IS NOT NULL) k
    ON k.spent + (e -> 'cost' ->> 'amount')::numeric > k.monthly_limit),
j AS (INSERT INTO jobs (id, tenant_id, model, base_model, init_checkpoint, training_file, validation_file, method,
                       suffix, seed, metadata, whet, status, created_at, priority, estimate, api_key_id)
  SELECT 'ftjob-pgb' || :n || '-' || :tenant || :client_id, :tenant, 'whet-tiny', 'whet-tiny', NULL, :file, NULL,
         :method::jsonb, NULL, 1, NULL::jsonb, '{}'::jsonb, 'queued', 0, 0, s.e, :apikey FROM s
  WHERE s.e IS NOT NULL AND s.over_hard IS NOT TRUE AND s.key_limit IS NULL RETURNING *),
c AS (INSERT INTO job_events (id, tenant_id, job_id, message, created_at)
  SELECT 'ftevent-pgb' || :n || '-' || :tenant || :client_id, tenant_id, id, 'Created fine-tuning job: ' || id,
         created_at FROM j),
w AS (INSERT INTO job_events (id, tenant_id, job_id, level, message, data, created_at)
  SELECT 'ftwarn-pgb' || :n || '-' || :tenant || :client_id, j.tenant_id, j.id, 'warn', 'over the soft budget', s.b,
         j.created_at FROM j, s WHERE s.over_soft)
SELECT $new_cols, CASE WHEN j.id IS NOT NULL THEN pg_notify('whet_jobs', j.id) END, s.* FROM s LEFT JOIN j ON true;
EOF
# The bare INSERT issue 15 quotes pgbench at (one row, no lookup, estimate, event or limit): how far the
# whole create is from the cheapest write of a job.
cat >"$work/bare.sql" <<'EOF'
\set n random(1, 1000000000)
INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, created_at)
  VALUES ('ftjob-bare' || :n || '-' || :tenant || :client_id, :tenant, 'whet-tiny', 'whet-tiny', :file, '{}', 1,
          'queued', 0);
EOF
# Leaves the job to read plus DEPTH queued jobs of the tenant (the queue the creates land on: issue 15
# measures creates at queue depths up to 100k), vacuumed and analyzed.
reset_jobs() { # DEPTH
  q "DELETE FROM job_events WHERE job_id <> '$job'; DELETE FROM jobs WHERE id <> '$job'" >/dev/null
  if [ "$1" -gt 0 ]; then
    q "INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, created_at)
       SELECT 'ftjob-depth' || i, '$tenant', 'whet-tiny', 'whet-tiny', 'file-bench', '{\"type\":\"supervised\"}', 1,
              'queued', 0 FROM generate_series(1, $1) i" >/dev/null
  fi
  q "VACUUM ANALYZE jobs, job_events" >/dev/null
}
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# The database's committed transactions so far (its statistics are flushed within a second of a backend's
# last transaction: read after a pause).
commits() { sleep 1.2; q "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"; }
col() { awk -v c="$2" '{print $c}' "$1" | median; }

report() { # NAME GW_RPS GW_P99 PG_RPS PG_P99
  awk -v n="$1" -v gr="$2" -v gp="$3" -v pr="$4" -v pp="$5" 'BEGIN {
    printf "%-28s gateway %9.0f req/s  p99 %7.2f ms | pgbench %9.0f tx/s  p99 %7.2f ms | throughput %.2fx  p99 %.2fx\n",
           n, gr, gp, pr, pp, gr / pr, gp / pp }'
}
cpu() { # NAME FILE-GW FILE-PG
  printf "%-28s CPU per request: gateway %.0f us + PostgreSQL %.0f us + wrk %.0f us | PostgreSQL %.0f us + pgbench %.0f us\n" \
    "$1" "$(col "$2" 3)" "$(col "$2" 4)" "$(col "$2" 5)" "$(col "$3" 4)" "$(col "$3" 5)"
}
# Throughput on a busy machine follows the share of the cores each side gets (pgbench runs one
# backend per client, the gateway side a few threads), so the CPU a request costs on each side is the
# steadier comparison: what the gateway's throughput would be, relative to pgbench's, on cores the
# benchmark had to itself.
capacity() { # NAME FILE-GW FILE-PG
  printf "%-28s CPU per request, whole path: gateway side %.0f us, pgbench side %.0f us | saturated-throughput ratio %.2fx\n" \
    "$1" "$(col "$2" 3 | awk -v p="$(col "$2" 4)" -v w="$(col "$2" 5)" '{print $1 + p + w}')" \
    "$(col "$3" 4 | awk -v c="$(col "$3" 5)" '{print $1 + c}')" \
    "$(awk -v g="$(col "$2" 3)" -v p="$(col "$2" 4)" -v w="$(col "$2" 5)" -v q="$(col "$3" 4)" -v c="$(col "$3" 5)" \
       'BEGIN {print (q + c) / (g + p + w)}')"
}

echo "gateway bench: $tenants tenants, $nodes nodes, $clients clients ($client_threads client threads), $rounds rounds of ${seconds}s per side, gateway $threads threads x $db_conns tenant connections, PostgreSQL fsync $(q "SHOW fsync"), $(nproc) cores shared by all (load $(cut -d' ' -f1-3 /proc/loadavg))"
for depth in ${depths//,/ }; do
  echo "queue depth $depth (the tenant's queued jobs when each round starts):"
  : >"$work/get.gw"; : >"$work/get.pg"; : >"$work/post.gw"; : >"$work/post.pg"; : >"$work/bare.pg"
  : >"$work/list.gw"; : >"$work/list.pg"; : >"$work/post.batch"
  reset_jobs "$depth"
  for round in $(seq "$rounds"); do
    wrk_run GET "/v1/fine_tuning/jobs/$job" >>"$work/get.gw"
    pgbench_run "$work/select.sql" >>"$work/get.pg"
    if [ "$tenants" -gt 1 ]; then
      wrk_run GET "$list_path" >>"$work/list.gw"
      pgbench_run "$work/list.sql" "$tenants" >>"$work/list.pg"
    fi
  done
  for round in $(seq "$rounds"); do
    reset_jobs "$depth"
    x0=$(commits) j0=$(q "SELECT count(*) FROM jobs")
    [ -n "${statements:-}" ] && q "SELECT pg_stat_statements_reset()" >/dev/null
    wrk_run POST /v1/fine_tuning/jobs '{"model":"whet-tiny","training_file":"@FILE@"}' >>"$work/post.gw"
    x1=$(commits) j1=$(q "SELECT count(*) FROM jobs")
    [ -n "${statements:-}" ] && q "SELECT to_char(calls::numeric / $((j1 - j0)), '990.99') || ' a create, ' ||
        to_char(mean_exec_time * 1000, '99990') || ' us: ' || left(regexp_replace(query, '\s+', ' ', 'g'), 90)
      FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      ORDER BY total_exec_time DESC LIMIT 12" >"$work/post.statements"
    echo "$(( (x1 - x0 - 2) * 100 / (j1 - j0) ))" >>"$work/post.batch" # less the two counts' own transactions
    reset_jobs "$depth"
    pgbench_run "$work/insert.sql" "$tenants" >>"$work/post.pg"
    reset_jobs "$depth"
    pgbench_run "$work/bare.sql" "$tenants" >>"$work/bare.pg"
  done
  for f in get.gw get.pg post.gw post.pg bare.pg $([ "$tenants" -gt 1 ] && echo list.gw list.pg); do
    echo "  $f per round (req/s, p99 ms, CPU us/request: gateway, PostgreSQL, client): $(tr '\n' ';' <"$work/$f")"
  done
  report "GET /v1/fine_tuning/jobs/{id}" "$(col "$work/get.gw" 1)" "$(col "$work/get.gw" 2)" "$(col "$work/get.pg" 1)" "$(col "$work/get.pg" 2)"
  report "POST /v1/fine_tuning/jobs" "$(col "$work/post.gw" 1)" "$(col "$work/post.gw" 2)" "$(col "$work/post.pg" 1)" "$(col "$work/post.pg" 2)"
  report "POST vs a bare INSERT" "$(col "$work/post.gw" 1)" "$(col "$work/post.gw" 2)" "$(col "$work/bare.pg" 1)" "$(col "$work/bare.pg" 2)"
  if [ "$tenants" -gt 1 ]; then
    report "GET jobs?limit=1, $tenants tenants" "$(col "$work/list.gw" 1)" "$(col "$work/list.gw" 2)" "$(col "$work/list.pg" 1)" "$(col "$work/list.pg" 2)"
    cpu "GET jobs?limit=1, $tenants tenants" "$work/list.gw" "$work/list.pg"
  fi
  cpu "GET /v1/fine_tuning/jobs/{id}" "$work/get.gw" "$work/get.pg"
  cpu "POST /v1/fine_tuning/jobs" "$work/post.gw" "$work/post.pg"
  printf "%-28s committed transactions a create (its 2 requests share them with others', db.c): %s\n" \
    "POST /v1/fine_tuning/jobs" \
    "$(median <"$work/post.batch" | awk '{printf "%.2f", $1 / 100}')"
  capacity "GET /v1/fine_tuning/jobs/{id}" "$work/get.gw" "$work/get.pg"
  capacity "POST /v1/fine_tuning/jobs" "$work/post.gw" "$work/post.pg"
  if [ -n "${statements:-}" ]; then
    echo "POST /v1/fine_tuning/jobs    PostgreSQL's statements in the last round (pg_stat_statements, nested included):"
    sed 's/^/  /' "$work/post.statements"
  fi
done
echo "(medians over the rounds; throughput: gateway/pgbench, higher is better; p99: gateway/pgbench, lower is better;"
echo " goal: >= 0.80x and <= 1.20x)"
