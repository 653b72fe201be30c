#!/usr/bin/env bash
# Installs whet on one node under systemd: the binary, the units of deploy/systemd, the `whet` system
# user, /etc/whet/whet.env (from whet.env.example, never overwritten: edit it) and, for an executor
# node, /etc/whet/executor-NAME.env; then enables the chosen services.
#
#   deploy/systemd/install.sh --bin build/whet --gateway --scheduler            a control-plane node
#   deploy/systemd/install.sh --bin build/whet --executor gpu --dc dc1 --pool a100 --devices cuda \
#                             [--metrics 0.0.0.0:9465]    (the executor's Prometheus metrics)
#   deploy/systemd/install.sh ... --migrate      also apply the database migrations (once per cluster)
#   deploy/systemd/install.sh ... --root DIR     lay the files out under DIR only (packaging, tests):
#                                                no user, no systemctl, no migrations
#
# Executors need unprivileged user namespaces (their sandbox): the script checks with `whet sandbox
# probe` as the whet user and says what to change when they are off.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

root=/ bin="" migrate=0 services=() executor="" dc="" pool="" devices="" metrics=""
usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root=$2; shift ;;
    --bin) bin=$2; shift ;;
    --gateway) services+=(whet-gateway.service) ;;
    --scheduler) services+=(whet-scheduler.service) ;;
    --executor) executor=$2; shift ;;
    --dc) dc=$2; shift ;;
    --pool) pool=$2; shift ;;
    --devices) devices=$2; shift ;;
    --metrics) metrics=$2; shift ;;
    --migrate) migrate=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
fail() { echo "install.sh: $*" >&2; exit 1; }
[ -n "$bin" ] && [ -x "$bin" ] || fail "--bin PATH must name the built whet binary (cmake --build build: build/whet)"
if [ -n "$executor" ]; then
  [[ "$executor" =~ ^[A-Za-z0-9_.-]+$ ]] || fail "--executor NAME: letters, digits, _ . - only (it names the unit instance)"
  [ -n "$dc" ] && [ -n "$pool" ] && [ -n "$devices" ] || fail "--executor needs --dc, --pool and --devices"
  services+=("whet-executor@$executor.service")
fi
[ ${#services[@]} -gt 0 ] || fail "nothing to install: give --gateway, --scheduler and/or --executor NAME"
live=0
[ "$root" = / ] && live=1
[ $live -eq 0 ] || [ "$(id -u)" -eq 0 ] || fail "run as root (or with --root DIR to only lay out files)"

install -D -m 0755 "$bin" "$root/usr/local/bin/whet"
install -d -m 0755 "$root/etc/systemd/system"
for unit in whet-gateway.service whet-scheduler.service whet-executor@.service; do
  install -m 0644 "$here/$unit" "$root/etc/systemd/system/$unit"
done
install -d -m 0750 "$root/etc/whet"
[ -e "$root/etc/whet/whet.env" ] || install -m 0640 "$here/whet.env.example" "$root/etc/whet/whet.env"
if [ -n "$executor" ]; then
  printf 'WHET_EXECUTOR_DC=%s\nWHET_EXECUTOR_POOL=%s\nWHET_EXECUTOR_DEVICES=%s\n' "$dc" "$pool" "$devices" \
    > "$root/etc/whet/executor-$executor.env"
  [ -z "$metrics" ] || echo "WHET_EXECUTOR_METRICS=$metrics" >> "$root/etc/whet/executor-$executor.env"
  chmod 0640 "$root/etc/whet/executor-$executor.env"
fi
if [ $live -eq 0 ]; then
  echo "install.sh: laid out under $root: ${services[*]}"
  exit 0
fi

getent group whet >/dev/null || groupadd --system whet
getent passwd whet >/dev/null || useradd --system --gid whet --home-dir /var/lib/whet --shell /usr/sbin/nologin whet
chgrp whet /etc/whet /etc/whet/*.env
if grep -q CHANGE-ME /etc/whet/whet.env; then
  echo "install.sh: edit /etc/whet/whet.env (the CHANGE-ME values), then run this again" >&2
  exit 1
fi
if [ -n "$executor" ] && ! runuser -u whet -- /usr/local/bin/whet sandbox probe; then
  fail "the executor's sandbox does not work for the whet user; unprivileged user namespaces may be off" \
       "(sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone, or an AppArmor restriction)"
fi
if [ $migrate -eq 1 ]; then
  # systemd parses the environment file as the services will see it
  systemd-run --quiet --wait --pipe --collect -p User=whet -p EnvironmentFile=/etc/whet/whet.env /usr/local/bin/whet migrate
fi
systemctl daemon-reload
systemctl enable --now "${services[@]}"
systemctl --no-pager --lines=0 status "${services[@]}" || true
