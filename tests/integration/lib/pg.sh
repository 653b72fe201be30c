#!/usr/bin/env bash
# pg.sh - a throwaway PostgreSQL for running integration tests by hand, the way tests/run.sh starts
# the suite's (as the `postgres` user when root: PostgreSQL refuses to run as root).
#
#   eval "$(tests/integration/lib/pg.sh start /tmp/mypg)"   starts one, prints the exports
#                                                          (WHET_TEST_DATABASE_URL, WHET_TEST_PG_BIN)
#   tests/integration/lib/pg.sh stop /tmp/mypg             stops it and removes the directory
# Settings in WHET_PG_SETTINGS ("-c fsync=on ...") come after the defaults, so they win (tests/bench/gateway's
# --durable).
set -euo pipefail
cmd=${1:?usage: pg.sh start|stop DIR}
dir=${2:?usage: pg.sh start|stop DIR}
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
run_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case "$cmd" in
  start)
    mkdir -p "$dir"
    chmod 755 "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
    port=$(python3 "$(dirname "${BASH_SOURCE[0]}")/free_port.py")
    run_pg "$PG_BIN/initdb" -D "$dir/data" -U postgres -A trust --no-sync >/dev/null
    run_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
      -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c fsync=off \
          -c max_connections=300 ${WHET_PG_SETTINGS:-}" \
      start >/dev/null
    echo "export WHET_TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:$port/postgres"
    echo "export WHET_TEST_PG_BIN=$PG_BIN"
    ;;
  stop)
    run_pg "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
  *) echo "usage: pg.sh start|stop DIR" >&2; exit 2 ;;
esac
