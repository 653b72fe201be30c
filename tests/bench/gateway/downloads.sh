#!/usr/bin/env bash
# downloads.sh - what streaming a large download costs the gateway, in memory and in throughput. In
# one run, for each store (s3:// on a private s3rver, and file://), with the same object and client
# count:
#   N curl clients download GET /v1/fine_tuning/jobs/{job}/checkpoints/{ckpt}/files/model.safetensors
#   through the gateway  beside  N curl clients reading the same object straight from the store
#   (s3rver with curl's own SigV4; the file:// directory through python3 -m http.server).
# The two sides alternate for --rounds rounds and the medians of the aggregate MiB/s are compared.
# The gateway's peak RSS while serving (VmHWM, reset before the first round where the kernel allows)
# is set beside the baseline before any download and beside N x the object size, which is the least
# a gateway reading whole objects into memory (as it did before streaming) would need.
#
#   tests/bench/gateway/downloads.sh [--clients N] [--size-mib M] [--rounds R] [--threads T]
#                                    [--stores "s3 file"]
#
# WHET_BIN defaults to build/whet; api_put_dir (tests/integration/api) is taken from the same build.
# The gateway, its workers, curl, s3rver (node) and the file server share the machine: on a small one
# (2 cores, other work running) they compete for the same cores, which the figures include.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$(pwd)
clients=8 size_mib=256 rounds=3 threads=2 stores="s3 file"
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) clients=$2; shift ;;
    --size-mib) size_mib=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --threads) threads=$2; shift ;;
    --stores) stores=$2; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "downloads.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
WHET_BIN=${WHET_BIN:-$root/build/whet}
put_dir=$(dirname "$WHET_BIN")/tests/integration/api/api_put_dir
[ -x "$put_dir" ] || { echo "downloads.sh: $put_dir is missing (build the api_put_dir target)" >&2; exit 1; }

work=$(mktemp -d /tmp/whet-bench-dl.XXXXXX)
chmod 755 "$work"
gw_pid= s3_pid= fs_pid=
stop_gateway() {
  if [ -n "$gw_pid" ]; then kill "$gw_pid" 2>/dev/null; wait "$gw_pid" 2>/dev/null || true; gw_pid=; fi
}
cleanup() {
  set +e
  stop_gateway
  for p in $s3_pid $fs_pid; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  tests/integration/lib/pg.sh stop "$work/pg" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 tests/integration/lib/free_port.py; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
kib() { awk -v k="$1" '/^'"$1"':/ {print $2}' "/proc/$gw_pid/status"; }

eval "$(tests/integration/lib/pg.sh start "$work/pg")"
db_url="${WHET_TEST_DATABASE_URL%/*}/whet_bench_dl"
psql -qX "$WHET_TEST_DATABASE_URL" -c "CREATE DATABASE whet_bench_dl"
WHET_DATABASE_URL=$db_url "$WHET_BIN" migrate >/dev/null 2>&1
q() { psql -qtAX -v ON_ERROR_STOP=1 "$db_url" -c "$1"; }

s3_port=$(free_port)
mkdir -p "$work/s3"
node tests/node_modules/s3rver/bin/s3rver.js --directory "$work/s3" --address 127.0.0.1 --port "$s3_port" \
  --configure-bucket whet-bench --silent >"$work/s3rver.log" 2>&1 &
s3_pid=$!
s3_endpoint="http://127.0.0.1:$s3_port"
for _ in $(seq 100); do curl -fs -o /dev/null "$s3_endpoint/" 2>/dev/null && break; sleep 0.1; done
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1 WHET_S3_ENDPOINT=$s3_endpoint

# The object: random bytes, stored as a checkpoint in both stores by the real objstore_put_dir.
mkdir -p "$work/ckpt"
head -c $((size_mib << 20)) /dev/urandom >"$work/ckpt/model.safetensors"
want_sha=$(sha256sum "$work/ckpt/model.safetensors" | cut -d' ' -f1)
prefix=checkpoints/bench/step-1
WHET_OBJECT_STORE=s3://whet-bench "$put_dir" "$prefix" "$work/ckpt"
WHET_OBJECT_STORE=file://$work/objects "$put_dir" "$prefix" "$work/ckpt"
rm -f "$work/ckpt/model.safetensors"
fs_port=$(free_port)
python3 -m http.server "$fs_port" --bind 127.0.0.1 --directory "$work/objects" >"$work/fileserver.log" 2>&1 &
fs_pid=$!
for _ in $(seq 100); do curl -fs -o /dev/null "http://127.0.0.1:$fs_port/" 2>/dev/null && break; sleep 0.1; done

secret=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
admin=$(WHET_JWT_KEY=$secret "$WHET_BIN" token --admin)
start_gateway() { # $1: the store URL
  : >"$work/gateway.log"
  WHET_OBJECT_STORE=$1 WHET_DATABASE_URL=$db_url WHET_JWT_KEY=$secret WHET_GATEWAY_LOG_REQUESTS=0 \
    "$WHET_BIN" gateway --http 127.0.0.1:0 --threads "$threads" 2>"$work/gateway.log" &
  gw_pid=$!
  for _ in $(seq 100); do grep -q "listening on" "$work/gateway.log" && break; sleep 0.1; done
  url=$(grep -o 'http://[0-9.:]*' "$work/gateway.log" | head -n1)
  [ -n "$url" ] || { echo "downloads.sh: the gateway did not start:"; cat "$work/gateway.log"; exit 1; } >&2
}

# A tenant, a job and its checkpoint pointing at the prefix (the same rows serve both stores).
start_gateway "file://$work/objects"
created=$(curl -fsS -X POST "$url/admin/v1/tenants" -H "authorization: Bearer $admin" \
  -d '{"name":"bench","rate_per_s":1e9,"rate_burst":1000000000,"max_active_jobs":1000000000}')
key=$(echo "$created" | sed -n 's/.*"api_key":"\([^"]*\)".*/\1/p')
tenant=$(echo "$created" | sed -n 's/.*"id":"\(tenant-[^"]*\)".*/\1/p')
q "INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
   VALUES ('whet-tiny', 'llama', 1000000, 'models/whet-tiny', '00', '{}')"
q "INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key, format, line_count)
   VALUES ('file-bench', '$tenant', 'fine-tune', 'train.jsonl', 100, '00', 'k', 'sft', 100)"
job=$(curl -fsS -X POST "$url/v1/fine_tuning/jobs" -H "authorization: Bearer $key" -H 'content-type: application/json' \
  -d '{"model":"whet-tiny","training_file":"file-bench"}' | sed -n 's/.*"id":"\(ftjob-[^"]*\)".*/\1/p')
[ -n "$job" ] || { echo "downloads.sh: could not create the job" >&2; exit 1; }
q "INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint, metrics, object_prefix)
   VALUES ('ftckpt-bench', '$tenant', '$job', 1, 'ft:bench', '{}', '$prefix')"
stop_gateway
path_gw="/v1/fine_tuning/jobs/$job/checkpoints/ftckpt-bench/files/model.safetensors"

# N clients at once; prints the aggregate MiB/s, and fails unless every client got every byte.
fetch_all() { # $@: curl arguments before the URL; the URL last
  local t0 t1 i ok=0 pids=()
  t0=$(date +%s.%N)
  for i in $(seq "$clients"); do
    curl -s -o /dev/null -w '%{http_code} %{size_download}\n' "$@" >"$work/c$i" &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  t1=$(date +%s.%N)
  for i in $(seq "$clients"); do [ "$(cat "$work/c$i")" = "200 $((size_mib << 20))" ] && ok=$((ok + 1)); done
  [ "$ok" = "$clients" ] || { echo "downloads.sh: $((clients - ok)) of $clients downloads incomplete ($*)" >&2; exit 1; }
  awk -v n="$clients" -v m="$size_mib" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f\n", n * m / (b - a)}'
}

empty_sha=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 # SigV4's payload hash of a GET
echo "downloads: $clients clients x $size_mib MiB, $rounds rounds, gateway --threads $threads, $(nproc) cores"
for store in $stores; do
  case "$store" in
    s3) start_gateway "s3://whet-bench"
        peer=(--aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER -H "x-amz-content-sha256: $empty_sha"
              "$s3_endpoint/whet-bench/$prefix/model.safetensors")
        peer_name="curl from s3rver" ;;
    file) start_gateway "file://$work/objects"
          peer=("http://127.0.0.1:$fs_port/$prefix/model.safetensors")
          peer_name="curl from python3 -m http.server" ;;
    *) echo "downloads.sh: unknown store $store" >&2; exit 2 ;;
  esac
  # The bytes are right (once, outside the timing).
  got=$(curl -fsS -H "authorization: Bearer $key" "$url$path_gw" | sha256sum | cut -d' ' -f1)
  [ "$got" = "$want_sha" ] || { echo "downloads.sh: $store: the gateway served other bytes" >&2; exit 1; }
  echo 5 >"/proc/$gw_pid/clear_refs" 2>/dev/null || true # resets VmHWM to the current RSS
  base_kib=$(kib VmRSS)
  : >"$work/gw.rates"; : >"$work/peer.rates"
  for _ in $(seq "$rounds"); do
    fetch_all -H "authorization: Bearer $key" "$url$path_gw" >>"$work/gw.rates"
    fetch_all "${peer[@]}" >>"$work/peer.rates"
  done
  peak_kib=$(kib VmHWM)
  gw_rate=$(median <"$work/gw.rates") peer_rate=$(median <"$work/peer.rates")
  awk -v s="$store" -v g="$gw_rate" -v p="$peer_rate" -v pn="$peer_name" -v b="$base_kib" -v k="$peak_kib" \
      -v n="$clients" -v m="$size_mib" 'BEGIN {
    printf "%-4s  gateway %8.1f MiB/s   %s %8.1f MiB/s   ratio %.2fx\n", s, g, pn, p, g / p
    printf "      gateway RSS: %.1f MiB before, peak %.1f MiB while serving (+%.1f MiB for %d downloads, %.2f MiB each);\n",
           b / 1024, k / 1024, (k - b) / 1024, n, (k - b) / 1024 / n
    printf "      whole objects in memory would need at least %d MiB: streaming peak is %.4fx of that\n", n * m, (k - b) / 1024 / (n * m)
  }'
  stop_gateway
done
