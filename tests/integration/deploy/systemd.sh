#!/usr/bin/env bash
# systemd.sh - deploy/systemd: install.sh lays a node out (binary, units, environment files) under a
# scratch root; `systemd-analyze verify` accepts the three units with nothing to say (unknown keys are
# only warnings there, so any output fails); `systemd-analyze security --offline` scores each unit's
# exposure, printed here and held under a ceiling so that a loosened unit fails; as root, whet's
# sandbox is probed as an unprivileged user with no_new_privs, as the units run it. A missing
# systemd-analyze fails the test: deploy/install-deps.sh installs it.
set -euo pipefail
src=${WHET_SOURCE_DIR:?}
bin=${WHET_BIN:?}
command -v systemd-analyze >/dev/null || { echo "FAIL: systemd-analyze not found (deploy/install-deps.sh installs systemd)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$src/deploy/systemd/install.sh" --root "$work/root" --bin "$bin" --gateway --scheduler \
  --executor gpu0 --dc dc1 --pool a100 --devices cuda --metrics 0.0.0.0:9465
for f in usr/local/bin/whet etc/systemd/system/whet-gateway.service etc/systemd/system/whet-scheduler.service \
         etc/systemd/system/whet-executor@.service etc/whet/whet.env etc/whet/executor-gpu0.env; do
  [ -e "$work/root/$f" ] || fail "install.sh did not write $f"
done
grep -qx 'WHET_EXECUTOR_DEVICES=cuda' "$work/root/etc/whet/executor-gpu0.env" || fail "executor-gpu0.env lacks the devices"
grep -qx 'WHET_EXECUTOR_METRICS=0.0.0.0:9465' "$work/root/etc/whet/executor-gpu0.env" || fail "executor-gpu0.env lacks the metrics address"
if "$src/deploy/systemd/install.sh" --root "$work/other" --bin "$bin" --executor gpu0 >/dev/null 2>&1; then
  fail "install.sh accepted an executor without --dc, --pool and --devices"
fi

# The units as installed, with ExecStart pointing at the installed binary (verify checks it exists).
units="$work/units"
mkdir -p "$units"
for u in whet-gateway.service whet-scheduler.service whet-executor@.service; do
  sed "s#/usr/local/bin/whet#$work/root/usr/local/bin/whet#g" "$work/root/etc/systemd/system/$u" > "$units/$u"
done
cp "$units/whet-executor@.service" "$units/whet-executor@gpu0.service"
cd "$units"
if ! out=$(systemd-analyze verify --man=no ./whet-gateway.service ./whet-scheduler.service ./whet-executor@gpu0.service 2>&1); then
  fail "systemd-analyze verify failed: $out"
elif [ -n "$out" ]; then
  fail "systemd-analyze verify had something to say: $out"
else
  echo "ok: systemd-analyze verify: 3 units, no warnings"
fi
# A unit with a typo must not pass, or the check above checks nothing.
sed 's/^NoNewPrivileges=yes/NoNewPrivilege=yes/' whet-scheduler.service > typo.service
out=$(systemd-analyze verify --man=no ./typo.service 2>&1 || true)
[ -n "$out" ] || fail "systemd-analyze verify said nothing about an unknown key"

# Exposure (0 = locked down, 10 = unprotected) and the ceiling each unit is held to.
for spec in whet-gateway.service:3.5 whet-scheduler.service:1.5 whet-executor@gpu0.service:3.5; do
  unit=${spec%%:*} ceiling=${spec##*:}
  line=$(systemd-analyze security --offline=true --no-pager "./$unit" 2>&1 | grep 'Overall exposure level' || true)
  score=$(sed -n 's/.*: \([0-9.]*\) .*/\1/p' <<<"$line")
  [ -n "$score" ] || { fail "no exposure score for $unit: $line"; continue; }
  echo "systemd-analyze security: $unit exposure $score (ceiling $ceiling)"
  awk -v s="$score" -v c="$ceiling" 'BEGIN { exit !(s <= c) }' || fail "$unit exposure $score is above $ceiling"
done
nnp=$(grep -l '^NoNewPrivileges=yes' whet-gateway.service whet-scheduler.service whet-executor@gpu0.service | wc -l)
[ "$nnp" -eq 3 ] || fail "NoNewPrivileges=yes in $nnp of 3 units"

# What NoNewPrivileges=yes and User=whet leave the executor and the gateway: the sandbox must still
# work for an unprivileged user with no_new_privs set (user namespaces need no privilege).
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
  install -m 0755 "$bin" "$work/whet"
  chmod 0755 "$work"
  if out=$(setpriv --no-new-privs --reuid 65534 --regid 65534 --clear-groups "$work/whet" sandbox probe 2>&1); then
    echo "ok: the sandbox works as uid 65534 with no_new_privs: $(grep -m1 '^sandbox:' <<<"$out")"
  else
    fail "the sandbox does not work unprivileged with no_new_privs, which the units set: $out"
  fi
fi

[ $fails -eq 0 ] && echo "systemd: all checks passed" || echo "systemd: $fails failed"
exit $((fails > 0))
