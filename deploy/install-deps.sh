#!/usr/bin/env bash
# Installs everything whet's build, its services and its test suite need, from Debian's packages and
# (for the console's charts and the test peers) the npm registry. Safe to run any number of times: it
# installs only what is missing.
#
#   deploy/install-deps.sh            build + run + test dependencies
#   WHET_SKIP_NPM=1 deploy/install-deps.sh   skip the npm test peers
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

packages=(
  # build
  build-essential cmake pkg-config clang libclang-rt-14-dev
  libh2o-evloop-dev libssl-dev zlib1g-dev libpq-dev
  protobuf-c-compiler libprotobuf-c-dev libgrpc-dev
  libjwt-dev libzstd-dev libcurl4-openssl-dev libjansson-dev
  libopenblas-dev libopenblas0-openmp libpcre2-dev libseccomp-dev libgloo-dev
  # run
  postgresql postgresql-contrib python3
  # tests, fixtures and benchmarks
  python3-torch python3-numpy python3-botocore wrk hyperfine curl procps openssl
  # checkers of deploy/: systemd-analyze (units), promtool (alert rules)
  systemd prometheus
  # the console's browser test (tests/e2e/console drives it with puppeteer-core)
  chromium
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js: Debian's nodejs+npm, unless a nodejs that bundles npm (NodeSource) is already there.
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
# kubectl (its built-in kustomize renders deploy/k8s): Debian's kubernetes-client, unless one is there.
command -v kubectl >/dev/null || missing+=(kubernetes-client)
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# OpenBLAS must share OpenMP's thread pool with the training engine (see DESIGN.md, pitfalls).
# libopenblas.so.0 is what whet links (-lopenblas); libblas/liblapack.so.3 what PyTorch links.
if command -v update-alternatives >/dev/null; then
  for alt in libopenblas.so.0-x86_64-linux-gnu libblas.so.3-x86_64-linux-gnu liblapack.so.3-x86_64-linux-gnu; do
    path=$(update-alternatives --list "$alt" 2>/dev/null | grep openmp | head -n1 || true)
    [ -n "$path" ] && $SUDO update-alternatives --set "$alt" "$path" >/dev/null || true
  done
fi

# The console's build-time packages (uPlot), pinned in console/package.json: the build compiles them in.
if [ -f console/package.json ]; then
  if [ ! -d console/node_modules ] || [ console/package.json -nt console/node_modules ]; then
    (cd console && npm install --no-audit --no-fund --loglevel=error && touch node_modules)
  fi
fi

# npm test peers (s3rver, the OpenAI SDK, transformers.js tokenizers), pinned in tests/package.json.
if [ -z "${WHET_SKIP_NPM:-}" ] && [ -f tests/package.json ]; then
  if [ ! -d tests/node_modules ] || [ tests/package.json -nt tests/node_modules ]; then
    (cd tests && npm install --no-audit --no-fund --loglevel=error && touch node_modules)
  fi
fi
echo "install-deps: ok"
