#!/usr/bin/env python3
"""Store under concurrency: N client processes against one master, ours beside upstream.

Each config gets a fresh master and a segment host A (``bench_mooncake.py segment`` from
``shared/bench/upstream``, run unchanged under each side's interpreter: the upstream
venv's ``mooncake`` package, or ours). Then for N in ``--clients`` (1, 4, 16), N worker
processes start together (a shared start time) and each, through the upstream Python API
(``MooncakeDistributedStore.setup(..., protocol, ...)``, no segment of its own, so every
byte crosses to A):

* put phase: ``put(key, value)`` on fresh keys for ``--duration`` s (or until the worker's
  share of the 3 GiB write budget is spent, so the segment never fills up);
* get phase: ``get(key)`` round-robin over the keys it wrote, for ``--duration`` s,
  each value checked byte for byte (a wrong byte fails the run).

Reported per (config, size, N, op): total ops/s over all workers (sum of each worker's
ops / its phase time) and p50 / p99 of every call's latency. Configs:

  upstream   PyPI ``mooncake-transfer-engine-non-cuda`` (its ``mooncake_master``), tcp
  ours_tcp   our ``mooncake_master`` and ``mooncake`` package, protocol tcp with
             ``MC_FORCE_TCP=1`` (every byte over loopback tcp, like upstream here)
  ours       the same without ``MC_FORCE_TCP``: our adapter reaches the same-host
             segment over shm (what an application passing protocol "tcp" gets)

Usage (also from ``bench/run_store_side_by_side.sh``)::

  python bench/store_concurrency.py run --upstream-venv /tmp/mooncake-upstream-venv \\
      [--clients 1,4,16] [--sizes 4096,65536] [--duration 2] [--out DIR]

Everything listens on 127.0.0.1 and every process is stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
UPSTREAM_BENCH = Path("/work/shared/bench/upstream/bench_mooncake.py")
GiB, MiB = 1 << 30, 1 << 20
WRITE_BUDGET = 3 * GiB


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------ one worker
def cmd_worker(a: argparse.Namespace) -> None:
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 64 * MiB, a.protocol, "", a.master)
    if rc != 0:
        raise SystemExit(f"setup() failed rc={rc}")
    value = os.urandom(a.size)
    limit = max(1, a.budget // a.size)
    out: dict[str, Any] = {}
    for j in range(20):  # untimed warm-up: connections, first-touch of buffers
        store.put(f"{a.prefix}-warm-{j}", value)
        store.get(f"{a.prefix}-warm-{j}")
    while time.time() < a.start_at:
        time.sleep(0.001)
    keys: list[str] = []
    lat: list[float] = []
    errors = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < a.duration and len(keys) < limit:
        k = f"{a.prefix}-{len(keys)}"
        t = time.perf_counter()
        rc = store.put(k, value)
        lat.append(time.perf_counter() - t)
        if rc == 0:
            keys.append(k)
        else:
            errors += 1
    out["put"] = {"ops": len(lat), "secs": time.perf_counter() - t0, "lat": lat, "errors": errors}
    lat, errors, wrong = [], 0, 0
    t0 = time.perf_counter()
    i = 0
    while keys and time.perf_counter() - t0 < a.duration:
        t = time.perf_counter()
        got = store.get(keys[i % len(keys)])
        lat.append(time.perf_counter() - t)
        if not got:
            errors += 1
        elif got != value:
            wrong += 1
        i += 1
    out["get"] = {"ops": len(lat), "secs": time.perf_counter() - t0, "lat": lat, "errors": errors}
    out["wrong_bytes"] = wrong
    Path(a.out).write_text(json.dumps(out))
    store.close()


# ------------------------------------------------------------------------ the driver
def _spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def _stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _wait_port(port: int, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port}")


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def run_config(a: argparse.Namespace, config: str, out: Path) -> list[dict[str, Any]]:
    if config == "upstream":
        py = str(Path(a.upstream_venv) / "bin" / "python")
        pkg = subprocess.run(
            [py, "-c", "import mooncake, os; print(os.path.dirname(mooncake.__file__))"],
            capture_output=True,
            text=True,
            check=True,
            cwd="/",  # not this checkout: its own `mooncake` package would shadow the venv's
        ).stdout.strip()
        master_bin = f"{pkg}/mooncake_master"
        extra = ["--rpc_address=127.0.0.1", "--enable_http_metadata_server=false"]
    else:
        py = sys.executable
        master_bin = shutil.which("mooncake_master") or "mooncake_master"
        extra = ["--rpc_address=127.0.0.1"]
    env = dict(os.environ, MC_FORCE_TCP="1") if config == "ours_tcp" else None
    port, metrics = free_port(), free_port()
    master = _spawn(
        [master_bin, f"--rpc_port={port}", f"--metrics_port={metrics}", *extra],
        out / f"{config}.master.log",
    )
    procs = [master]
    rows: list[dict[str, Any]] = []
    try:
        _wait_port(port)
        ready = out / f"{config}.A.ready"
        ready.unlink(missing_ok=True)
        seg = _spawn(
            [
                py,
                str(a.upstream_bench),
                "segment",
                "--hostname",
                "127.0.0.1",
                "--metadata",
                "P2PHANDSHAKE",
                "--master",
                f"127.0.0.1:{port}",
                "--segment-size",
                str(4 * GiB),
                "--ready-file",
                str(ready),
            ],
            out / f"{config}.A.log",
        )
        procs.append(seg)
        end = time.monotonic() + 60
        while not ready.exists():
            if seg.poll() is not None or time.monotonic() > end:
                raise SystemExit(f"{config}: segment host did not start; see {out}")
            time.sleep(0.1)
        for size in a.sizes:
            for n in a.clients:
                start_at = time.time() + 3.0 + 0.2 * n  # every worker set up before it
                files = [out / f"{config}.{size}.{n}.{i}.json" for i in range(n)]
                workers = [
                    _spawn(
                        [
                            py,
                            __file__,
                            "worker",
                            "--master",
                            f"127.0.0.1:{port}",
                            "--size",
                            str(size),
                            "--duration",
                            str(a.duration),
                            "--prefix",
                            f"{size}-{n}-{i}",
                            "--start-at",
                            str(start_at),
                            "--budget",
                            str(WRITE_BUDGET // n),
                            "--protocol",
                            "tcp",
                            "--out",
                            str(f),
                        ],
                        out / f"{config}.{size}.{n}.{i}.log",
                        env,
                    )
                    for i, f in enumerate(files)
                ]
                for w in workers:
                    w.wait(a.duration * 4 + 120)
                res = [json.loads(f.read_text()) for f in files]
                for op in ("put", "get"):
                    lat = [x for r in res for x in r[op]["lat"]]
                    rows.append(
                        {
                            "config": config,
                            "size": size,
                            "clients": n,
                            "op": op,
                            "ops_s": sum(r[op]["ops"] / r[op]["secs"] for r in res),
                            "p50_us": _pct(lat, 0.50) * 1e6,
                            "p99_us": _pct(lat, 0.99) * 1e6,
                            "mean_us": statistics.fmean(lat) * 1e6 if lat else float("nan"),
                            "errors": sum(r[op]["errors"] for r in res),
                            "wrong_bytes": sum(r["wrong_bytes"] for r in res),
                        }
                    )
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
                # the next point starts from an empty store, as the first one did
                _clear(py, port)
    finally:
        for p in reversed(procs):
            _stop(p)
    return rows


def _clear(py: str, port: int) -> None:
    code = (
        "from mooncake.store import MooncakeDistributedStore as S\n"
        "s=S(); assert s.setup('127.0.0.1','P2PHANDSHAKE',0,16<<20,'tcp','',"
        f"'127.0.0.1:{port}')==0\n"
        "s.remove_all(True); s.close()\n"
    )
    subprocess.run([py, "-c", code], check=False, capture_output=True, timeout=120, cwd="/")


def table(rows: list[dict[str, Any]]) -> str:
    by = {(r["config"], r["size"], r["clients"], r["op"]): r for r in rows}
    configs = [c for c in ("upstream", "ours_tcp", "ours") if any(r["config"] == c for r in rows)]
    others = [c for c in configs if c != "upstream"]
    hdr = "| size | clients | op |" + "".join(f" {c} ops/s | p50 / p99 us |" for c in configs)
    hdr += "".join(f" {c} / upstream |" for c in others)
    lines = [hdr, "|" + "---|" * (3 + 2 * len(configs) + len(others))]
    for size, n, op in sorted({(r["size"], r["clients"], r["op"]) for r in rows}):
        row = f"| {size // 1024} KiB | {n} | {op} |"
        for c in configs:
            r = by.get((c, size, n, op))
            row += (
                " - | - |"
                if r is None
                else (f" {r['ops_s']:,.0f} | {r['p50_us']:,.0f} / {r['p99_us']:,.0f} |")
            )
        up = by.get(("upstream", size, n, op))
        for c in others:
            r = by.get((c, size, n, op))
            ok = r is not None and up is not None and up["ops_s"] > 0
            row += f" {r['ops_s'] / up['ops_s']:.2f}x |" if ok else " - |"  # type: ignore[index]
        lines.append(row)
    return "\n".join(lines)


def cmd_run(a: argparse.Namespace) -> None:
    out = Path(a.out or HERE / "out" / time.strftime("conc_%Y%m%dT%H%M%SZ", time.gmtime()))
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for config in a.configs.split(","):
        rows += run_config(a, config, out)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    bad = [r for r in rows if r["wrong_bytes"]]
    text = table(rows) + "\n"
    text += "\nwrong bytes: " + ("none" if not bad else json.dumps(bad)) + "\n"
    (out / "table.md").write_text(text)
    print(text)
    if bad:
        raise SystemExit(1)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--configs", default="upstream,ours_tcp,ours")
    r.add_argument("--clients", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16])
    r.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[4096, 65536])
    r.add_argument("--duration", type=float, default=2.0)
    r.add_argument("--upstream-venv", default="/tmp/mooncake-upstream-venv")
    r.add_argument("--upstream-bench", type=Path, default=UPSTREAM_BENCH)
    r.add_argument("--out", default="")
    r.set_defaults(fn=cmd_run)
    w = sub.add_parser("worker")
    w.add_argument("--master", required=True)
    w.add_argument("--size", type=int, required=True)
    w.add_argument("--duration", type=float, required=True)
    w.add_argument("--prefix", required=True)
    w.add_argument("--start-at", type=float, required=True)
    w.add_argument("--budget", type=int, required=True)
    w.add_argument("--protocol", default="tcp")
    w.add_argument("--out", required=True)
    w.set_defaults(fn=cmd_worker)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
