#!/usr/bin/env bash
# A PostgreSQL primary failover under load: a primary and a synchronous streaming standby on loopback,
# `whet up` and a second gateway pointed at both through one libpq multi-host conninfo with
# target_session_attrs=read-write, jobs running and a client creating files and reading a job through
# both gateways; then the primary is killed (pg_ctl -m immediate) and the standby promoted.
# Asserts: both gateways and the scheduler find the new primary by themselves (the outage window, as
# the client saw it, is printed and bounded), every create that was answered 2xx is on the new primary,
# every other answer during the outage is a 503 with retry-after (never a 500, never a dropped
# connection, no process dies), and the jobs finish with no job ever placed twice at once.
#
# Why synchronous replication (synchronous_standby_names on the primary, the default synchronous_commit
# = on): a commit is answered only once the standby has flushed its WAL, so nothing a client was told
# was created can be missing after the promotion. Asynchronously, the last commits before the kill may
# never reach the standby.
set -euo pipefail
: "${WHET_BIN:?set by ctest}" "${WHET_SOURCE_DIR:?set by ctest}"
unset WHET_DATABASE_URL WHET_OBJECT_STORE WHET_JWT_KEY WHET_DATA_DIR
dir=$(mktemp -d /tmp/whet-fo.XXXXXX)
chmod 755 "$dir"
pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
run_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
up_pid= gw2_pid= load_pid= hold_pid=
cleanup() {
  [ -n "$hold_pid" ] && kill "$hold_pid" 2>/dev/null || true
  touch "$dir/stop-load"
  [ -n "$load_pid" ] && wait "$load_pid" 2>/dev/null || true
  [ -n "$gw2_pid" ] && kill "$gw2_pid" 2>/dev/null && wait "$gw2_pid" 2>/dev/null || true
  [ -n "$up_pid" ] && kill "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null || true
  for d in primary standby; do run_pg "$pg_bin/pg_ctl" -D "$dir/$d" -m immediate stop >/dev/null 2>&1 || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
. "$(dirname "$0")/../lib.sh"

# The primary, then the standby cloned from it (-R: it follows the primary); cluster_name is the name
# the standby's WAL receiver reports, which synchronous_standby_names waits for.
p1=$(port) p2=$(port)
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
run_pg "$pg_bin/initdb" -D "$dir/primary" -U postgres -A trust --no-sync >/dev/null
pg_opts="-c listen_addresses=127.0.0.1 -c unix_socket_directories=$dir -c fsync=off -c max_connections=300"
run_pg "$pg_bin/pg_ctl" -D "$dir/primary" -l "$dir/primary.log" -w \
  -o "$pg_opts -c port=$p1 -c synchronous_standby_names=whet_standby" start >/dev/null
run_pg "$pg_bin/pg_basebackup" -h 127.0.0.1 -p "$p1" -U postgres -D "$dir/standby" -R -X stream -c fast
run_pg "$pg_bin/pg_ctl" -D "$dir/standby" -l "$dir/standby.log" -w \
  -o "$pg_opts -c port=$p2 -c cluster_name=whet_standby" start >/dev/null
q1() { psql -qtAX "postgresql://postgres@127.0.0.1:$p1/postgres" -c "$1"; }
q2() { psql -qtAX "postgresql://postgres@127.0.0.1:$p2/postgres" -c "$1"; }
for _ in $(seq 100); do [ "$(q1 "SELECT sync_state FROM pg_stat_replication")" = sync ] && break; sleep 0.1; done
check "the standby replicates synchronously" '[ "$(q1 "SELECT sync_state FROM pg_stat_replication")" = sync ]'

export WHET_DATABASE_URL="postgresql://postgres@127.0.0.1:$p1,127.0.0.1:$p2/postgres?target_session_attrs=read-write"
http1=127.0.0.1:$(port) http2=127.0.0.1:$(port)
gateways=("$http1" "$http2")
mkdir "$dir/up"
WHET_LEASE_MS=5000 WHET_GATEWAY_AUTH_CACHE_MS=60000 up "$dir/up" "$http1" --executors 2 --devices sim:H100:1
WHET_GATEWAY_AUTH_CACHE_MS=60000 "$WHET_BIN" gateway --data-dir "$dir/up" --http "$http2" --threads 2 2>"$dir/gw2.err" &
gw2_pid=$!
for _ in $(seq 300); do curl -sf "http://$http2/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
export WHET_DATA_DIR=$dir/up
key=$("$WHET_BIN" tenant create fo 2>/dev/null)
# While PostgreSQL is down the answers are quick 503s and the load below outruns a tenant's default rate
# limit (50/s, split between the two gateways): 429s, once in a CI run. This test is about the failover.
q1 "UPDATE tenants SET rate_per_s = 100000, rate_burst = 100000 WHERE name = 'fo'" >/dev/null
file=$(api "http://$http1/v1/files" -F purpose=fine-tune -F file=@"$WHET_SOURCE_DIR/tests/fixtures/sft/train.jsonl" | json "['id']")
# The trainers are held (SIGSTOP) at their first checkpoint until the failover is over, so the jobs run
# through it however fast the CPU. A background loop holds each as it gets there, from before the creates (on
# a fast CPU a job trains all its steps in the seconds the next creates take), until two are held.
hold_trainers() {
  local held_jobs=" " job t
  while [ "$(wc -w <<<"$held_jobs")" -lt 2 ]; do
    for job in "$dir"/up/executors/executor-*/jobs/ftjob-*-1; do
      [[ -d "$job" && "$held_jobs" != *" $job "* ]] || continue
      ls "$job/out/checkpoints" 2>/dev/null | grep -qx 'step-[0-9]*' || continue
      t=$(pgrep -f "train --config $job/trainer.json" || true)
      [ -n "$t" ] && kill -STOP $t && echo $t >>"$dir/held" && held_jobs+="$job "
    done
    sleep 0.05
  done
}
hold_trainers &
hold_pid=$!
jobs=()
for i in 1 2 3; do
  jobs+=("$(api "http://${gateways[i % 2]}/v1/fine_tuning/jobs" -H 'Content-Type: application/json' \
    -d "{\"model\":\"whet-tiny\",\"training_file\":\"$file\",\"whet\":{\"max_steps\":60,\"checkpoint_every_steps\":10}}" \
    | json "['id']")")
done
check "jobs created through both gateways" '[[ "${jobs[0]}" == ftjob-* && "${jobs[1]}" == ftjob-* && "${jobs[2]}" == ftjob-* ]]'

for _ in $(seq 2400); do kill -0 "$hold_pid" 2>/dev/null || break; sleep 0.05; done
kill "$hold_pid" 2>/dev/null || true
wait "$hold_pid" 2>/dev/null || true
hold_pid=
held=($(cat "$dir/held" 2>/dev/null || true))
check "two jobs are running (trainers held at a checkpoint)" '[ -f "$dir/held" ] && [ "$(wc -l <"$dir/held")" -ge 2 ]'

python3 "$WHET_SOURCE_DIR/tests/e2e/failover/load.py" "$key" "${jobs[0]}" "$dir/stop-load" "$dir/load.json" \
  "http://$http1" "http://$http2" &
load_pid=$!
sleep 3
before=$(q1 "SELECT count(*) FROM files")
killed_at=$(date +%s.%N)
run_pg "$pg_bin/pg_ctl" -D "$dir/primary" -m immediate -w stop >/dev/null
sleep 1
run_pg "$pg_bin/pg_ctl" -D "$dir/standby" -w promote >/dev/null
promoted_at=$(date +%s.%N)
leads() { grep -c 'comp=scheduler msg="leading"' "$dir/up/up.err" || true; }
for _ in $(seq 300); do [ "$(leads)" -ge 2 ] && break; sleep 0.1; done
led_at=$(date +%s.%N)
check "the scheduler leads again on the new primary" '[ "$(leads)" -ge 2 ]'
sleep 5
touch "$dir/stop-load"
wait "$load_pid"
load_pid=
# A held process that is gone is reported, not fatal here: `pgrep -f` may have matched a short-lived process of
# the trainer's start beside it (CI once stopped at this line); a trainer killed because its attempt was given
# up fails the checks below (no node lost, each job placed once). What the log says of attempts that ended is
# shown with the note: the cause was not found the once it happened.
for t in "${held[@]}"; do
  kill -CONT "$t" 2>/dev/null && continue
  echo "note: held process $t is gone; the log's lines on ended or abandoned attempts:"
  grep -E 'abandon|declared|requeue|attempt.*(ended|failed|lost)|signal' "$dir/up/up.err" | tail -n 20 || true
done
check "no component died" 'kill -0 $up_pid && kill -0 $gw2_pid && ! grep -q "component exited" "$dir/up/up.err"'

# The client's view: per gateway, the outage window (its first failed answer, and the first create
# answered 2xx after its last one, both from the kill; the kill-to-promotion second stands for a
# failover manager's detection), and every answer a 2xx or a 503 with retry-after.
report=$(python3 - "$dir/load.json" "$killed_at" "$promoted_at" <<'PY'
import json, sys
recs, killed, promoted = json.load(open(sys.argv[1])), float(sys.argv[2]), float(sys.argv[3])
bad = [r for r in recs if not (200 <= r[4] < 300 or (r[4] == 503 and r[5]))]
for g in sorted({r[0] for r in recs}):
    mine = [r for r in recs if r[0] == g]
    failed = [r for r in mine if not 200 <= r[4] < 300]
    first = min((r[1] for r in failed), default=killed)
    last = max((r[1] for r in failed), default=killed)
    back = min((r[1] + r[2] for r in mine if r[3] == "create" and 200 <= r[4] < 300 and r[1] > last), default=None)
    slowest = max((r[2] for r in mine if r[1] + r[2] > killed), default=0)
    print("gateway%d: %d answers 503 from %.2f s after the kill; creates answered again %s s after the kill"
          " (%.2f s after the promotion); slowest answer %.2f s" % (g + 1, len(failed), first - killed,
          "%.2f" % (back - killed) if back else "never", (back - promoted) if back else -1, slowest))
    if back is None or back - promoted > 15: print("UNBOUNDED")
print("requests %d, not 2xx or 503+retry-after: %d %s" % (len(recs), len(bad), bad[:5]))
open(sys.argv[1] + ".ids", "w").write("".join(r[6] + "\n" for r in recs if r[6]))
PY
)
echo "$report"
check "every answer is a 2xx or a 503 with retry-after" 'grep -q "not 2xx or 503+retry-after: 0 " <<<"$report"'
check "both gateways serve creates again within 15 s of the promotion" '! grep -q UNBOUNDED <<<"$report"'
echo "scheduler: leading again $(python3 -c "print('%.2f' % ($led_at - $killed_at))") s after the kill"
acked=$(wc -l <"$dir/load.json.ids")
present=$(q2 "SELECT count(*) FROM files WHERE id IN ($(sed "s/.*/'&'/" "$dir/load.json.ids" | paste -sd,))")
echo "creates answered 2xx: $acked; on the new primary: $present; files on the old primary before the kill: $before"
check "every acknowledged create is on the new primary" '[ "$acked" -gt 0 ] && [ "$present" = "$acked" ]'

# The gateways LISTEN again on the new primary: a key revoked through one gateway is refused by the
# other at once (the auth cache TTL is set to a minute, so only the notification can explain it).
k2=$(api "http://$http1/v1/api_keys" -H 'Content-Type: application/json' -d '{"name":"fo2"}')
k2_id=$(json "['id']" <<<"$k2") k2_key=$(json "['key']" <<<"$k2")
code() { curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $k2_key" "http://$http2/v1/fine_tuning/jobs/${jobs[0]}"; }
check "a new key works on the other gateway (and is cached there)" '[ "$(code)" = 200 ]'
api -X DELETE "http://$http1/v1/api_keys/$k2_id" >/dev/null
for _ in $(seq 50); do [ "$(code)" = 401 ] && break; sleep 0.1; done
check "the key revoked through gateway 1 is refused by gateway 2 within 5 s" '[ "$(code)" = 401 ]'

for j in "${jobs[@]}"; do
  status=
  for _ in $(seq 1500); do
    status=$(api "http://$http2/v1/fine_tuning/jobs/$j" 2>/dev/null | json "['status']" 2>/dev/null || true)
    case "$status" in succeeded|failed|cancelled) break ;; esac
    sleep 0.2
  done
  check "job $j succeeds after the failover" '[ "$status" = succeeded ]'
done
# The executors find the scheduler again within their lease: no node is declared lost, so no job is
# placed a second time (a requeued attempt would run beside the one its node still trains).
check "no node declared lost" '! grep -q "msg=\"node lost\"" "$dir/up/up.err"'
check "each job placed once" '[ "$(q2 "SELECT count(*) FROM job_attempts")" = 3 ] &&
  [ "$(q2 "SELECT count(DISTINCT job_id) FROM job_attempts")" = 3 ]'
check "each checkpoint recorded once" '[ "$(q2 "SELECT count(*) - count(DISTINCT (job_id, step_number)) FROM checkpoints")" = 0 ]'
check "each attempt metered once" '[ "$(q2 "SELECT count(*) - count(DISTINCT (job_id, attempt)) FROM usage_records")" = 0 ]'
[ $fails -eq 0 ] || { tail -n 40 "$dir/up/up.err" >&2; tail -n 20 "$dir/gw2.err" >&2; }
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
