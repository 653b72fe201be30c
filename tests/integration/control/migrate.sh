#!/usr/bin/env bash
# `whet migrate` against a fresh database on the suite's PostgreSQL: applies the schema once, a second
# run is a no-op, a newer database is refused, and row-level security keeps whet_app inside one tenant.
set -euo pipefail
: "${WHET_TEST_DATABASE_URL:?set by tests/run.sh}" "${WHET_BIN:?set by ctest}"
db="whet_migrate_$$_$RANDOM"
base="${WHET_TEST_DATABASE_URL%/*}"
psql -qX "$WHET_TEST_DATABASE_URL" -c "CREATE DATABASE $db"
trap 'psql -qX "$WHET_TEST_DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)"' EXIT
export WHET_DATABASE_URL="$base/$db"
fail() { echo "FAIL: $*" >&2; exit 1; }
q() { psql -qtAX "$WHET_DATABASE_URL" -v ON_ERROR_STOP=1 -c "$1"; }

migrations=$(ls "$WHET_SOURCE_DIR"/migrations/[0-9][0-9][0-9][0-9]_*.sql | wc -l)
out=$("$WHET_BIN" migrate 2>/dev/null)
[[ "$out" == *"$migrations migration"*" applied"* ]] || fail "first run: $out (expected $migrations)"
out=$("$WHET_BIN" migrate 2>/dev/null)
[[ "$out" == *"0 migrations applied"* ]] || fail "second run not a no-op: $out"
[ "$(q 'SELECT count(*) FROM whet_schema_migrations')" = "$migrations" ] || fail "versions not recorded once each"

q "INSERT INTO whet_schema_migrations VALUES (9999, 'from_the_future')"
if err=$("$WHET_BIN" migrate 2>&1); then fail "newer database accepted"; fi
[[ "$err" == *"newer than this binary"* ]] || fail "unclear refusal: $err"
q "DELETE FROM whet_schema_migrations WHERE version = 9999"

# Row-level security: as whet_app, only the tenant named by whet.tenant_id is visible or writable.
q "INSERT INTO tenants (id, name) VALUES ('t-a', 'alpha'), ('t-b', 'beta')"
q "INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key) VALUES
   ('file-a', 't-a', 'fine-tune', 'a.jsonl', 1, 'x', 'ka'), ('file-b', 't-b', 'fine-tune', 'b.jsonl', 1, 'x', 'kb')"
seen=$(psql -qtAX "$WHET_DATABASE_URL" -c "SET ROLE whet_app" -c "SELECT count(*) FROM files")
[ "$seen" = 0 ] || fail "whet_app without a tenant sees $seen files"
seen=$(psql -qtAX "$WHET_DATABASE_URL" -c "SET ROLE whet_app" -c "SET whet.tenant_id = 't-a'" -c "SELECT string_agg(id, ',') FROM files")
[ "$seen" = "file-a" ] || fail "tenant t-a sees: $seen"
if psql -qtAX "$WHET_DATABASE_URL" -v ON_ERROR_STOP=1 -c "SET ROLE whet_app" -c "SET whet.tenant_id = 't-a'" \
   -c "UPDATE files SET tenant_id = 't-b' WHERE id = 'file-a'" 2>/dev/null; then
  fail "whet_app moved a row to another tenant"
fi
echo "1 passed, 0 failed"
