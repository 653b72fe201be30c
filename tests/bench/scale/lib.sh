# lib.sh - what the scale benchmarks (run.sh, cycle.sh) share, sourced from the repository root: their
# database, free ports, CPU ticks, and the scheduler's metrics at $metrics (HOST:PORT): one value, and quantiles
# of a histogram (the cycle's, the heartbeat handlers').

# A migrated database of the benchmark's own, WHET_DATABASE_URL (and q: SQL on it): on WHET_TEST_DATABASE_URL's
# server when set (ctest), else on a PostgreSQL started in $work/pg. db_drop undoes it (the caller's cleanup).
db_open() { # NAME
  own_pg=0 db=
  if [ -z "${WHET_TEST_DATABASE_URL:-}" ]; then
    eval "$(tests/integration/lib/pg.sh start "$work/pg")"
    own_pg=1
  fi
  db="$1_$$"
  psql -qX "$WHET_TEST_DATABASE_URL" -c "CREATE DATABASE $db"
  export WHET_DATABASE_URL="${WHET_TEST_DATABASE_URL%/*}/$db"
  "$WHET_BIN" migrate >/dev/null 2>&1
}
db_drop() {
  if [ "${own_pg:-0}" = 1 ]; then
    tests/integration/lib/pg.sh stop "$work/pg" >/dev/null 2>&1
  elif [ -n "${db:-}" ]; then
    psql -qX "$WHET_TEST_DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
  fi
}
q() { psql -qtAX -v ON_ERROR_STOP=1 "$WHET_DATABASE_URL" -c "$1"; }

free_ports() { python3 tests/integration/lib/free_port.py "$1"; }

# CPU ticks of a process, and of the whole PostgreSQL cluster: the postmaster with what it reaped, and
# its live backends (the pg_stat_statements extension needs a preload this server may not have). pg_ticks
# runs q (the caller's: SQL on its database).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
pg_ticks() {
  local pm t c
  pm=$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'" | xargs -I{} awk '{print $4}' /proc/{}/stat)
  t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
  for c in $(pgrep -P "$pm"); do t=$((t + $(ticks "$c"))); done
  echo "$t"
}

metric() { curl -fs "http://$metrics/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
# Heartbeats the scheduler answered: written to the database, and answered from memory (heartbeat_quiet.c).
heartbeats_answered() {
  local w h
  w=$(metric whet_scheduler_heartbeats_total) h=$(metric whet_scheduler_heartbeats_quiet_total)
  echo $((${w%.*} + ${h%.*}))
}
# A histogram's buckets, one "le count" line each.
histogram() { curl -fs "http://$metrics/metrics" | sed -n "s/^$1_bucket{le=\"\([^\"]*\)\"} \(.*\)/\1 \2/p"; } # NAME
cycle_hist() { histogram whet_scheduler_cycle_duration_seconds; }
# The heartbeat handlers' time (the scheduler's side of a heartbeat, without the wait for a handler thread).
heartbeat_hist() { histogram whet_scheduler_heartbeat_duration_seconds; }
# histogram_quantile over the difference of two scrapes of a histogram, in its unit times SCALE (default 1).
quantile() { # Q BEFORE AFTER [SCALE]
  paste "$2" "$3" | awk -v q="$1" -v scale="${4:-1}" '{le[NR] = $1; c[NR] = $4 - $2} END {
    n = c[NR]; if (n == 0) {print "n/a"; exit}
    want = q * n; prev = 0; lo = 0
    for (i = 1; i <= NR; i++) {
      if (c[i] >= want) {
        if (le[i] == "+Inf") {print ">" lo * scale; exit}
        printf "%.3f\n", scale * (lo + (le[i] - lo) * (want - prev) / (c[i] - prev > 0 ? c[i] - prev : 1)); exit
      }
      prev = c[i]; lo = le[i]
    }}'
}

