#!/usr/bin/env bash
# PostgreSQL restarted under a running job: `whet up` with its private PostgreSQL, an SFT job through
# the API, then `pg_ctl restart` while it trains. The gateway answers 503 while the database is away,
# the scheduler steps down and leads again, the executor's reports are retried; the job still succeeds,
# with every checkpoint, every metered attempt and the result file recorded exactly once.
set -euo pipefail
: "${WHET_BIN:?set by ctest}" "${WHET_SOURCE_DIR:?set by ctest}"
unset WHET_DATABASE_URL WHET_OBJECT_STORE WHET_JWT_KEY WHET_DATA_DIR
dir=$(mktemp -d /tmp/whet-pgr.XXXXXX)
chmod 755 "$dir"
up_pid=
cleanup() {
  [ -n "$up_pid" ] && kill "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null || true
  pkill -9 -f "postgres -D $dir/pg/data" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
. "$(dirname "$0")/../lib.sh"
http=127.0.0.1:$(port)

WHET_LEASE_MS=5000 up "$dir" "$http" --executors 1 --devices sim:H100:1
export WHET_DATA_DIR=$dir
key=$("$WHET_BIN" tenant create pgr 2>/dev/null)
file=$(api "http://$http/v1/files" -F purpose=fine-tune -F file=@"$WHET_SOURCE_DIR/tests/fixtures/sft/train.jsonl" | json "['id']")
job=$(api "http://$http/v1/fine_tuning/jobs" -H 'Content-Type: application/json' \
  -d "{\"model\":\"whet-tiny\",\"training_file\":\"$file\",\"whet\":{\"max_steps\":60,\"checkpoint_every_steps\":10}}" | json "['id']")
check "job created" '[[ "$job" == ftjob-* ]]'
# The trainer is held (SIGSTOP) from its first checkpoint until the database is back and the scheduler
# leads again, so the job runs through the outage however fast the CPU (tests/e2e/lib.mjs does the same).
jobdir="$dir/executors/executor-1/jobs/$job-1"
trainer=
for _ in $(seq 30000); do
  if ls "$jobdir/out/checkpoints" 2>/dev/null | grep -qx 'step-[0-9]*'; then
    trainer=$(pgrep -f "train --config $jobdir/trainer.json" || true)
    break
  fi
  sleep 0.01
done
check "the trainer is held at its first checkpoint" '[ -n "$trainer" ] && kill -STOP $trainer'
for _ in $(seq 600); do
  [ "$(api "http://$http/v1/fine_tuning/jobs/$job/checkpoints" | json "['data'].__len__()")" -ge 1 ] && break
  sleep 0.2
done
pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
runuser -u postgres -- "$pg_bin/pg_ctl" -D "$dir/pg/data" -m fast -w stop >/dev/null
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $key" "http://$http/v1/fine_tuning/jobs/$job")
check "the gateway answers 503 while PostgreSQL is down" '[ "$code" = 503 ]'
sleep 3
runuser -u postgres -- "$pg_bin/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/log" -w \
  -o "-c listen_addresses=127.0.0.1 -c port=$(cat "$dir/pg/whet.port") -c unix_socket_directories=$dir/pg" start >/dev/null
for _ in $(seq 600); do [ "$(grep -c 'comp=scheduler msg="leading"' "$dir/up.err")" -ge 2 ] && break; sleep 0.1; done
[ -n "$trainer" ] && kill -CONT $trainer
status=
for _ in $(seq 1500); do
  status=$(api "http://$http/v1/fine_tuning/jobs/$job" 2>/dev/null | json "['status']" 2>/dev/null || true)
  case "$status" in succeeded|failed|cancelled) break ;; esac
  sleep 0.2
done
check "the job succeeds after the restart" '[ "$status" = succeeded ]'
db=$(grep '^WHET_DATABASE_URL=' "$dir/whet.env" | cut -d= -f2-)
check "each checkpoint recorded once" '[ "$(q "SELECT count(*) - count(DISTINCT step_number) FROM checkpoints WHERE job_id = '"'"'$job'"'"'")" = 0 ] && [ "$(q "SELECT count(*) FROM checkpoints WHERE job_id = '"'"'$job'"'"'")" -ge 6 ]'
check "each attempt metered once" '[ "$(q "SELECT count(*) - count(DISTINCT attempt) FROM usage_records WHERE job_id = '"'"'$job'"'"'")" = 0 ]'
check "one result file" '[ "$(q "SELECT jsonb_array_length(result_files) FROM jobs WHERE id = '"'"'$job'"'"'")" = 1 ]'
check "the scheduler led again" '[ "$(grep -c "comp=scheduler msg=\"leading\"" "$dir/up.err")" -ge 2 ]'
[ $fails -eq 0 ] || tail -n 40 "$dir/up.err" >&2
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
