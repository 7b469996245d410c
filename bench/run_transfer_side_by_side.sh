#!/usr/bin/env bash
# Transfer Engine vs the real Mooncake, side by side, in one run (see bench/README.md).
#
#   bash bench/run_transfer_side_by_side.sh                # ~5 minutes on 2 vCPUs
#   VENV=/path OUT=bench/out/x DURATION=3 REPEATS=3 bash bench/run_transfer_side_by_side.sh
#
# Needs the project installed (pip install -e .[dev]), Debian's libibverbs1 librdmacm1
# libnuma1 libcurl4 (the upstream wheel's binaries link them) and PyPI access the first
# time, to put mooncake-transfer-engine-non-cuda into its own venv (never the project's).
# Everything listens on 127.0.0.1 and is stopped by PID.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
VENV="${VENV:-/tmp/mooncake-upstream-venv}"
PYTHON_UPSTREAM="${PYTHON_UPSTREAM:-python3.11}"   # the wheel is cp311
MC_VERSION="${MC_VERSION:-0.3.13.post1}"
OUT="${OUT:-$HERE/out/transfer_$(date -u +%Y%m%dT%H%M%SZ)}"
DURATION="${DURATION:-3}"
REPEATS="${REPEATS:-3}"
mkdir -p "$OUT"

missing=()
for p in libibverbs1 librdmacm1 libnuma1 libcurl4; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "missing Debian packages for the upstream binaries: ${missing[*]} (apt-get install them)" >&2
  exit 2
fi
if ! "$VENV/bin/python" -c "import mooncake" 2>/dev/null; then
  "$PYTHON_UPSTREAM" -m venv "$VENV"
  "$VENV/bin/pip" install -q "mooncake-transfer-engine-non-cuda==$MC_VERSION"
fi

{
  echo "date: $(date -u +%FT%TZ)"
  echo "kernel: $(uname -srm)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) x $(nproc)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "python: $(python --version 2>&1)"
  echo "upstream: $("$VENV/bin/pip" list 2>/dev/null | grep -i '^mooncake-transfer-engine')"
  echo "ours: $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet -- mooncake_core native || echo '+dirty')"
} > "$OUT/versions.txt"
cat "$OUT/versions.txt" >&2

cd "$ROOT"
python bench/transfer_bench.py --upstream-venv "$VENV" --out "$OUT" \
  --duration "$DURATION" --repeats "$REPEATS" "$@"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/versions.txt"
echo "results: $OUT/table.md" >&2
