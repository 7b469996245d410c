#!/usr/bin/env bash
# Store vs the real Mooncake Store, side by side, in one run (see bench/README.md).
#
#   bash bench/run_store_side_by_side.sh                   # ~10 minutes on 2 vCPUs
#   OUT=/tmp/st CONFIGS=upstream,ours_shm bash bench/run_store_side_by_side.sh
#   CAPACITY=10000000 bash bench/run_store_side_by_side.sh # also the master core at 10M objects
#   ROUNDS=2 CAPACITY=0 bash bench/run_store_side_by_side.sh  # every config twice, in turn:
#                                                  # ratios as median (lowest-highest)
#
# Method: shared/bench/upstream/bench_mooncake.py's process-B suite, run unchanged against
# upstream (two_proc, TCP) and against ours (shm and forced tcp); see bench/store_bench.py.
# Needs the project installed, Debian's libibverbs1 librdmacm1 libnuma1 libcurl4 for the
# upstream binaries and PyPI access the first time (the upstream wheel goes into its own
# venv, never the project's). Everything listens on 127.0.0.1 and is stopped by PID.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
VENV="${VENV:-/tmp/mooncake-upstream-venv}"
PYTHON_UPSTREAM="${PYTHON_UPSTREAM:-python3.11}"   # the wheel is cp311
MC_VERSION="${MC_VERSION:-0.3.13.post1}"
OUT="${OUT:-$HERE/out/store_$(date -u +%Y%m%dT%H%M%SZ)}"
DURATION="${DURATION:-1}"
REPEATS="${REPEATS:-3}"
ROUNDS="${ROUNDS:-1}"
CONFIGS="${CONFIGS:-upstream,upstream_same_host,ours_shm,ours_tcp}"
CAPACITY="${CAPACITY:-1000000}"
UPSTREAM_BENCH="${UPSTREAM_BENCH:-/work/shared/bench/upstream/bench_mooncake.py}"
mkdir -p "$OUT"

if [[ "$CONFIGS" == *upstream* ]]; then
  missing=()
  for p in libibverbs1 librdmacm1 libnuma1 libcurl4; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "missing Debian packages for the upstream binaries: ${missing[*]} (apt-get install them)" >&2
    exit 2
  fi
  if ! "$VENV/bin/python" -c "import mooncake.store" 2>/dev/null; then
    "$PYTHON_UPSTREAM" -m venv "$VENV"
    "$VENV/bin/pip" install -q "mooncake-transfer-engine-non-cuda==$MC_VERSION" numpy
  fi
fi

{
  echo "date: $(date -u +%FT%TZ)"
  echo "kernel: $(uname -srm)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) x $(nproc)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "python: $(python --version 2>&1)"
  [[ "$CONFIGS" == *upstream* ]] && echo "upstream: $("$VENV/bin/pip" list 2>/dev/null | grep -i '^mooncake-transfer-engine')"
  echo "ours: $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet -- mooncake_core native || echo '+dirty')"
} > "$OUT/versions.txt"
cat "$OUT/versions.txt" >&2

cd "$ROOT"
python bench/store_bench.py run --configs "$CONFIGS" --upstream-venv "$VENV" \
  --upstream-bench "$UPSTREAM_BENCH" --out "$OUT" --duration "$DURATION" --repeats "$REPEATS" --rounds "$ROUNDS" "$@"
if [ "$CAPACITY" != "0" ]; then
  python bench/store_bench.py capacity --objects "$CAPACITY" --out "$OUT/capacity.json"
fi
python bench/store_bench.py rpc-floor --out "$OUT/rpc_floor.json"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/versions.txt"
echo "results: $OUT/table.md" >&2
