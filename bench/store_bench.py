#!/usr/bin/env python3
"""Store side by side with the real Mooncake Store, in one run, on this host.

Method: exactly ``shared/bench/upstream/bench_mooncake.py`` (read its docstring). Its
process-B suite (``Client.run``: warm-up, put/put_from/batch_put_from on fresh keys with
untimed ``remove_all(force=True)`` every 2 GiB, then get/get_into/batch_get_into
round-robin over a <= 1 GiB working set; every op ``--repeats`` x >= ``--duration`` s,
median) is *imported and run unchanged* against our client through a thin adapter with
upstream's call shapes (``put_from(key, ptr, size) -> 0`` ...). Only the path check is
ours (``verify``: bytes equal, and every replica on process A's segment).

Configs (two processes each: A hosts the segment, B hosts nothing and puts/gets):

  ours_shm   A = ``mooncake store node``; B = our Client, transport auto (shm: same host)
  ours_tcp   the same with B forced to tcp
  upstream   ``bench_mooncake.py run --configs two_proc`` in the upstream venv, against
             upstream's ``mooncake_master`` (TCP protocol, as upstream's anchor)
  upstream_same_host  upstream's same-host mode (``upstream_same_host.py``: a standalone
             ``mooncake_client`` holds the segment, B attaches with ``setup_dummy``);
             the fair anchor for ours_shm (ours_tcp is compared with upstream tcp)

Each config gets a fresh master (ours: ``mooncake master``). Prints one markdown table
with ratios ours/anchor and writes ``results.json`` + ``table.md`` to ``--out``.
``--rounds N`` runs the whole list of configs N times in turn (upstream, ours, upstream,
ours...), each round in ``--out``/``roundK``: a machine whose speed drifts, or one
config's unusually fast or slow run, then shows as a spread instead of a verdict. The
table gives the median over rounds of each config's value and each ratio as
``median (lowest-highest)`` of the per-round ratios.

``capacity``: the master core alone (``MasterState`` in this process): RSS per million
objects and PutStart / GetReplicaList latency percentiles at N objects.

Run it through ``bench/run_store_side_by_side.sh``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
UPSTREAM_BENCH = Path("/work/shared/bench/upstream/bench_mooncake.py")
HERE = Path(__file__).resolve().parent
SEGMENT = "A"

TARGETS = {
    # (config, op family, min size): minimum ratio ours/upstream (issue 4)
    ("ours_shm", 1 * MiB): 3.0,
    ("ours_shm", 16 * MiB): 4.0,
    ("ours_tcp", 1 * MiB): 1.2,
}


def log(*a: Any) -> None:
    print(*a, file=sys.stderr, flush=True)


def load_upstream_bench(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_mooncake", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- process B
class OursStore:
    """Our Client behind upstream's MooncakeDistributedStore call shapes (rc ints)."""

    def __init__(self, master: str, transport: str) -> None:
        from mooncake_core.store.client import Client
        from mooncake_core.store.client.options import ClientOptions

        self.client = Client(ClientOptions(master=master, transport=transport)).setup()  # type: ignore[arg-type]
        self.errors: list[str] = []

    def _rc(self, exc: Exception) -> int:
        if len(self.errors) < 20:
            self.errors.append(repr(exc))
        return -1

    def get_hostname(self) -> str:
        return self.client.transfer_address

    def register_buffer(self, ptr: int, size: int) -> int:
        self.client.register_buffer(ptr, size)
        return 0

    def unregister_buffer(self, ptr: int) -> int:
        self.client.unregister_buffer(ptr)
        return 0

    def remove_all(self, force: bool) -> int:
        return int(self.client.remove_all(force=force).removed)

    def put(self, key: str, value: bytes) -> int:
        try:
            self.client.put(key, value)
            return 0
        except Exception as exc:
            return self._rc(exc)

    def put_from(self, key: str, ptr: int, size: int) -> int:
        try:
            self.client.put_from(key, ptr, size)
            return 0
        except Exception as exc:
            return self._rc(exc)

    def batch_put_from(self, keys: list[str], ptrs: list[int], sizes: list[int]) -> list[int]:
        res = self.client.batch_put_from(keys, ptrs, sizes)
        return [0 if r is None else self._rc(r) for r in res]

    def get(self, key: str) -> bytes:
        try:
            return self.client.get(key)
        except Exception as exc:
            self._rc(exc)
            return b""

    def get_into(self, key: str, ptr: int, size: int) -> int:
        try:
            return self.client.get_into(key, ptr, size)
        except Exception as exc:
            return self._rc(exc)

    def batch_get_into(self, keys: list[str], ptrs: list[int], sizes: list[int]) -> list[int]:
        res = self.client.batch_get_into(keys, ptrs, sizes)
        return [r if isinstance(r, int) else self._rc(r) for r in res]

    def close(self) -> None:
        self.client.close()


def cmd_client(args: argparse.Namespace) -> None:
    bm = load_upstream_bench(Path(args.upstream_bench))
    store_holder: dict[str, OursStore] = {}

    def make_store(a: Any, seg: int, local: int) -> OursStore:
        s = OursStore(a.master, args.transport)
        store_holder["s"] = s
        return s

    setattr(bm, "make_store", make_store)  # noqa: B010 - patch the imported bench

    class OursClient(bm.Client):  # type: ignore[name-defined]
        def verify(self, size: int, ws_keys: list[str], expected_owner: str) -> dict[str, Any]:
            np = self.np
            c = self.store.client
            self.region[self.half : self.half + size] = 0
            rc = self.store.get_into(ws_keys[0], self.dst_ptr, size)
            ok_into = rc == size and np.array_equal(
                self.region[:size], self.region[self.half : self.half + size]
            )
            v = self.store.get(ws_keys[0])
            ok_get = len(v) == size and v == self.region[:size].tobytes()
            segs = sorted({s.segment for r in c.stat(ws_keys[0]).replicas for s in r})
            info = {
                "get_into_matches": bool(ok_into),
                "get_matches": bool(ok_get),
                "replica_segments": segs,
                "transport": c.transport_of(SEGMENT),
                "owner_ok": segs == [SEGMENT],
                "replica_te_endpoints": [],
                "replica_owner_segments": segs,
                "mounted_segments": [SEGMENT],
            }
            if not (ok_into and ok_get and info["owner_ok"]):
                self.errors.append(f"verify failed size={size}: {info}")
            return info

    ns = argparse.Namespace(
        hostname="127.0.0.1",
        metadata="-",
        master=args.master,
        admin="",
        segment_size=0,
        local_buffer_size=0,
        duration=args.duration,
        repeats=args.repeats,
        max_size=args.max_size,
        put_cap_bytes=args.put_cap_bytes,
        config=args.config,
        expect_owner=SEGMENT,
        out=args.out,
    )
    OursClient(ns).run()
    s = store_holder.get("s")
    if s is not None and s.errors:
        with open(args.out) as f:
            res = json.load(f)
        res["errors"] = res.get("errors", []) + s.errors
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


# --------------------------------------------------------------------------- driver
def _spawn(cmd: list[str], ready: str, logf: Path, timeout: float = 60) -> subprocess.Popen[bytes]:
    f = open(logf, "wb")  # noqa: SIM115 - child keeps writing after we return
    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    t0 = time.time()
    while ready not in logf.read_text(errors="replace"):
        if p.poll() is not None or time.time() - t0 > timeout:
            p.kill()
            raise SystemExit(f"{cmd[:4]} did not start; see {logf}")
        time.sleep(0.1)
    return p


def _stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@contextlib.contextmanager
def master_and_node(
    out: Path, node_bytes: int = 1 << 30, master_prefix: tuple[str, ...] = ()
) -> Iterator[str]:
    """Our master and one store node ``A`` of ``node_bytes`` on 127.0.0.1 (logs and
    config in ``out``) for the body; yields the master's address, stops both after.
    ``master_prefix``: interpreter options for the master (``-m cProfile -o f``)."""
    cfg = out / "c.yaml"
    cfg.write_text(json.dumps({"state_dir": str(out), "master": {}}))
    port, py = free_port(), sys.executable
    master = _spawn(
        [py, *master_prefix, "-m", "mooncake_cli", "master", "--config", str(cfg),
         "--port", str(port), "--metrics-port", "0"],
        "serving on", out / "master.log",
    )  # fmt: skip
    node = None
    try:
        node = _spawn(
            [py, "-m", "mooncake_cli", "store", "node", "--name", "A", "--size",
             str(node_bytes), "--master", f"127.0.0.1:{port}", "--config", str(cfg)],
            "serving segment", out / "node.log",
        )  # fmt: skip
        yield f"127.0.0.1:{port}"
    finally:
        if node is not None:
            _stop(node)
        _stop(master)


def run_ours(args: argparse.Namespace, config: str, out: Path, bm: ModuleType) -> dict[str, Any]:
    transport = "tcp" if config == "ours_tcp" else "auto"
    port = free_port()
    cfg = out / f"{config}.yaml"
    cfg.write_text(json.dumps({"state_dir": str(out), "master": {}}))
    py = sys.executable
    master = _spawn(
        [
            py,
            "-m",
            "mooncake_cli",
            "master",
            "--config",
            str(cfg),
            "--port",
            str(port),
            "--metrics-port",
            "0",
        ],
        "serving on",
        out / f"{config}.master.log",
    )
    addr = f"127.0.0.1:{port}"
    node = None
    try:
        node = _spawn(
            [
                py,
                "-m",
                "mooncake_cli",
                "store",
                "node",
                "--name",
                SEGMENT,
                "--size",
                str(args.segment_size),
                "--master",
                addr,
                "--config",
                str(cfg),
            ],
            "serving segment",
            out / f"{config}.A.log",
        )
        time.sleep(0.5)
        pids = {"master": master.pid, "A": node.pid}
        a_idle = bm.proc_status(node.pid).get("VmRSS")
        cpu0 = {n: bm.proc_cpu_s(p) for n, p in pids.items()}
        res_path = out / f"{config}.B.json"
        cmd = [
            py,
            str(Path(__file__).resolve()),
            "client",
            "--master",
            addr,
            "--transport",
            transport,
            "--config",
            config,
            "--out",
            str(res_path),
            "--duration",
            str(args.duration),
            "--repeats",
            str(args.repeats),
            "--max-size",
            str(args.max_size),
            "--put-cap-bytes",
            str(args.put_cap_bytes),
            "--upstream-bench",
            str(args.upstream_bench),
        ]
        t0 = time.time()
        with open(out / f"{config}.B.log", "wb") as blog:
            b = subprocess.Popen(cmd, stdout=blog, stderr=subprocess.STDOUT)
            pids["B"] = b.pid
            sampler = bm.Sampler(pids)
            sampler.start()
            last_cpu_b = 0.0
            while b.poll() is None:
                c = bm.proc_cpu_s(b.pid)
                if c == c:
                    last_cpu_b = c
                time.sleep(0.25)
            sampler.stop_ev.set()
            sampler.join()
        if b.returncode != 0:
            raise SystemExit(f"{config}: client B exited {b.returncode}; see {out}/{config}.B.log")
        res: dict[str, Any] = json.loads(res_path.read_text())
        res["wall_s"] = time.time() - t0
        res["max_rss_bytes"] = dict(sampler.max_rss)
        res["cpu_s"] = {"B": last_cpu_b} | {
            n: bm.proc_cpu_s(p) - cpu0[n] for n, p in pids.items() if n != "B"
        }
        res["rss_baseline_bytes"] = {"A_after_setup_idle": a_idle}
        return res
    finally:
        if node is not None:
            _stop(node)
        _stop(master)


def run_upstream(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    vpy = Path(args.upstream_venv) / "bin" / "python"
    pkg = subprocess.run(
        [str(vpy), "-c", "import mooncake, os; print(os.path.dirname(mooncake.__file__))"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",  # not this checkout: its own `mooncake` package would shadow the venv's
    ).stdout.strip()
    rpc, metrics = free_port(), free_port()
    master = _spawn(
        [
            f"{pkg}/mooncake_master",
            "--rpc_address=127.0.0.1",
            f"--rpc_port={rpc}",
            "--metrics_host=127.0.0.1",
            f"--metrics_port={metrics}",
            "--enable_http_metadata_server=false",
        ],
        "",
        out / "upstream.master.log",
    )
    time.sleep(2.0)
    try:
        logdir = out / "upstream"
        cmd = [
            str(vpy),
            str(args.upstream_bench),
            "run",
            "--configs",
            "two_proc",
            "--master",
            f"127.0.0.1:{rpc}",
            "--admin",
            f"http://127.0.0.1:{metrics}",
            "--master-pid",
            str(master.pid),
            "--logdir",
            str(logdir),
            "--segment-size",
            str(args.segment_size),
            "--duration",
            str(args.duration),
            "--repeats",
            str(args.repeats),
            "--max-size",
            str(args.max_size),
            "--put-cap-bytes",
            str(args.put_cap_bytes),
        ]
        with open(out / "upstream.run.log", "wb") as f:
            subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=True)
        (res,) = json.loads((logdir / "mooncake_results.json").read_text())
        res["config"] = "upstream"
        return dict(res)
    finally:
        _stop(master)


def run_upstream_same_host(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Upstream's same-host mode (``shared/bench/upstream/upstream_same_host.py``): a
    standalone ``mooncake_client`` holds the segment, the benchmark attaches with
    ``setup_dummy`` and buffers from ``alloc_from_mem_pool``; the fair anchor for our
    shm path. The script runs bench_mooncake.py's process-B suite unchanged."""
    vpy = Path(args.upstream_venv) / "bin" / "python"
    script = Path(args.upstream_bench).parent / "upstream_same_host.py"
    logdir = out / "upstream_same_host"
    cmd = [str(vpy), str(script), "run", "--out", str(logdir)]
    cmd += ["--duration", str(args.duration), "--repeats", str(args.repeats)]
    cmd += ["--max-size", str(args.max_size), "--put-cap-bytes", str(args.put_cap_bytes)]
    with open(out / "upstream_same_host.run.log", "wb") as f:
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=True)
    (res,) = json.loads((logdir / "dummy_results.json").read_text())
    res["config"] = "upstream_same_host"
    return dict(res)


def fmt_size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"


def table(
    results: list[dict[str, Any]], spread: dict[tuple[str, int, str], list[float]] | None = None
) -> str:
    """One row per (size, op): each upstream mode, then each of ours with its ratio to
    its fair anchor (shm to upstream's same-host mode when it ran, tcp to upstream tcp).
    ``spread``: per-round ratios; the ratio column then shows their median and range."""
    by = {r["config"]: {(p["size"], p["op"]): p for p in r["points"]} for r in results}
    anchors = [c for c in ("upstream", "upstream_same_host") if c in by]
    ours = [c for c in ("ours_shm", "ours_tcp") if c in by]
    ref_of = {c: _anchor(c, by) for c in ours}
    hdr = "| size | op | batch |" + "".join(f" {c} |" for c in anchors)
    hdr += "".join(f" {c} | vs {ref_of[c]} |" for c in ours)
    lines = [hdr, "|" + "---|" * (3 + len(anchors) + 2 * len(ours))]
    keys = sorted({k for d in by.values() for k in d}, key=lambda k: (k[0], OPS.index(k[1])))
    for size, op in keys:
        unit = "ops/s" if size < 64 * KiB else "GB/s"

        def val(p: dict[str, Any] | None, unit: str = unit) -> str:
            if p is None:
                return "-"
            return (
                f"{p['median_ops_s']:,.0f} ops/s"
                if unit == "ops/s"
                else f"{p['median_GBps']:.2f} GB/s"
            )

        any_p = next(d[(size, op)] for d in by.values() if (size, op) in d)
        row = f"| {fmt_size(size)} | {op} | {any_p['batch']} |"
        row += "".join(f" {val(by[c].get((size, op)))} |" for c in anchors)
        for c in ours:
            p = by[c].get((size, op))
            ref = by.get(ref_of[c], {}).get((size, op))
            ratio = "-"
            runs = (spread or {}).get((c, size, op))
            if runs:
                ratio = f"{statistics.median(runs):.2f}x ({min(runs):.2f}-{max(runs):.2f})"
            elif p is not None and ref is not None and ref["median_GBps"] > 0:
                ratio = f"{p['median_GBps'] / ref['median_GBps']:.2f}x"
            row += f" {val(p)} | {ratio} |"
        lines.append(row)
    return "\n".join(lines)


OPS = ["put", "put_from", "batch_put_from", "get", "get_into", "batch_get_into"]


def over_rounds(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One result per config whose points hold the median over ``rounds`` of its
    values; each point's ``ratio_range`` maps ``ours_*`` to the per-round ratios."""
    merged: dict[str, dict[str, Any]] = {}
    for results in rounds:
        for r in results:
            m = merged.setdefault(r["config"], {"config": r["config"], "points": {}})
            for p in r["points"]:
                m["points"].setdefault((p["size"], p["op"]), []).append(p)
    out = []
    for m in merged.values():
        points = []
        for runs in m["points"].values():
            med = dict(runs[0])
            for field in ("median_ops_s", "median_GBps"):
                med[field] = statistics.median(p[field] for p in runs)
            points.append(med)
        out.append({"config": m["config"], "points": points})
    return out


def _round_ratios(rounds: list[list[dict[str, Any]]]) -> dict[tuple[str, int, str], list[float]]:
    """(our config, size, op) -> its ratio to its anchor in each round."""
    ratios: dict[tuple[str, int, str], list[float]] = {}
    for results in rounds:
        by = {r["config"]: {(p["size"], p["op"]): p for p in r["points"]} for r in results}
        for c in ("ours_shm", "ours_tcp"):
            ref_name = _anchor(c, by)
            for k, p in by.get(c, {}).items():
                ref = by.get(ref_name, {}).get(k)
                if ref is not None and ref["median_GBps"] > 0:
                    ratios.setdefault((c, *k), []).append(p["median_GBps"] / ref["median_GBps"])
    return ratios


def _anchor(config: str, by: dict[str, Any]) -> str:
    if config == "ours_shm" and "upstream_same_host" in by:
        return "upstream_same_host"
    return "upstream"


def _one_round(args: argparse.Namespace, out: Path, bm: ModuleType) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for config in args.configs.split(","):
        log(f"== {config} (load {os.getloadavg()[0]:.1f})")
        t0 = time.time()
        if config == "upstream":
            r = run_upstream(args, out)
        elif config == "upstream_same_host":
            r = run_upstream_same_host(args, out)
        else:
            r = run_ours(args, config, out, bm)
        r["load_after"] = os.getloadavg()[0]
        results.append(r)
        log(f"   {config}: {time.time() - t0:.0f} s, errors {r.get('errors', [])[:3]}")
    (out / "results.json").write_text(json.dumps(results, indent=1))
    return results


def cmd_run(args: argparse.Namespace) -> None:
    out = Path(args.out or HERE / "out" / time.strftime("store_%Y%m%dT%H%M%SZ", time.gmtime()))
    out.mkdir(parents=True, exist_ok=True)
    bm = load_upstream_bench(Path(args.upstream_bench))
    if args.rounds < 2:
        results = _one_round(args, out, bm)
        md = table(results)
    else:
        rounds = []
        for k in range(1, args.rounds + 1):
            log(f"==== round {k} of {args.rounds}")
            rounds.append(_one_round(args, out / f"round{k}", bm))
            for r in rounds[-1]:
                r["round"] = k
            (out / f"round{k}" / "table.md").write_text(table(rounds[-1]) + "\n")
        results = [r for rr in rounds for r in rr]
        (out / "results.json").write_text(json.dumps(results, indent=1))
        md = table(over_rounds(rounds), _round_ratios(rounds))
    notes = []
    for r in results:
        ok = all(
            v.get("owner_ok") and v.get("get_matches") and v.get("get_into_matches")
            for v in r.get("verify", {}).values()
        )
        rss = {k: round(v / MiB) for k, v in r.get("max_rss_bytes", {}).items()}
        cpu = {k: round(v, 1) for k, v in r.get("cpu_s", {}).items()}
        tag = f" (round {r['round']})" if "round" in r else ""
        notes.append(
            f"- {r['config']}{tag}: verify ok={ok}, errors={r.get('errors', [])[:2]}, "
            f"wall {r.get('wall_s', 0):.0f} s, max RSS MiB {rss}, CPU s {cpu}"
        )
    text = md + "\n\n" + "\n".join(notes) + "\n"
    (out / "table.md").write_text(text)
    print(text)


# --------------------------------------------------------------------------- capacity
def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cmd_capacity(args: argparse.Namespace) -> None:
    from mooncake_core.config.models import MasterConfig
    from mooncake_core.store import MasterState

    n = args.objects
    st = MasterState(MasterConfig(), rng=random.Random(0))
    for i in range(4):
        st.mount_segment(f"seg{i}", "c", 1 << 40, 0.0, transport_address="127.0.0.1:1")
    gc.collect()
    base = _rss()
    lat_put: list[float] = []
    now = 1.0
    t0 = time.perf_counter()
    sample_every = max(1, n // 20_000)
    pc = time.perf_counter
    for i in range(n):
        key = f"kv/model/{i:016x}/0"
        if i % sample_every == 0:
            a = pc()
            st.put_start(key, 64 * KiB, "c", now)
            lat_put.append(pc() - a)
        else:
            st.put_start(key, 64 * KiB, "c", now)
        st.put_end(key, now)
        if i % 100_000 == 0:
            st.take_events()
            st.heartbeat("c", now)
    st.take_events()
    fill_s = time.perf_counter() - t0
    gc.collect()
    used = _rss() - base
    lat_get: list[float] = []
    rnd = random.Random(1)
    for _ in range(20_000):
        key = f"kv/model/{rnd.randrange(n):016x}/0"
        a = pc()
        st.get_replica_list(key, now)
        lat_get.append(pc() - a)

    def pct(xs: list[float], q: float) -> float:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e6

    res = {
        "objects": n,
        "rss_bytes": used,
        "bytes_per_object": used / n,
        "rss_per_million_MiB": used / n * 1e6 / MiB,
        "fill_objects_per_s": n / fill_s,
        "put_start_us": {"p50": pct(lat_put, 0.5), "p99": pct(lat_put, 0.99)},
        "get_replica_list_us": {"p50": pct(lat_get, 0.5), "p99": pct(lat_get, 0.99)},
        "load": os.getloadavg()[0],
    }
    print(json.dumps(res, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))


_TRIVIAL_SERVER = """
import asyncio, grpc
from mooncake_core.rpc import store_pb2 as pb, store_pb2_grpc as pbg
class S(pbg.MasterServiceServicer):
    async def Exist(self, request, context):
        return pb.ExistResponse()
async def main():
    s = grpc.aio.server()
    pbg.add_MasterServiceServicer_to_server(S(), s)
    s.add_insecure_port("127.0.0.1:%d")
    await s.start()
    print("ready", flush=True)
    await s.wait_for_termination()
asyncio.run(main())
"""


def _lat(fn: Any, n: int) -> dict[str, float]:
    for _ in range(50):
        fn()
    xs = []
    for _ in range(n):
        a = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - a)
    xs.sort()
    return {"p50_us": xs[n // 2] * 1e6, "p99_us": xs[int(n * 0.99)] * 1e6}


def cmd_rpc_floor(args: argparse.Namespace) -> None:
    """Unary call latency: an empty grpc.aio handler vs our master's hot calls, over gRPC
    and over the fast control channel (Exist, PutStart+PutEnd, GetReplicaList, batches)."""
    import grpc

    from mooncake_core.rpc import store_pb2 as pb
    from mooncake_core.rpc import store_pb2_grpc as pbg
    from mooncake_core.store.client.sync_master import SyncMaster

    n = args.calls
    res: dict[str, Any] = {"load_before": os.getloadavg()[0]}
    port = free_port()
    p = subprocess.Popen([sys.executable, "-c", _TRIVIAL_SERVER % port], stdout=subprocess.PIPE)
    try:
        assert p.stdout is not None
        p.stdout.readline()
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = pbg.MasterServiceStub(ch)
        res["empty_aio_handler"] = _lat(lambda: stub.Exist(pb.ExistRequest(key="k")), n)
        ch.close()
    finally:
        _stop(p)
    out = Path(args.out).parent if args.out else Path("/tmp")
    mport = free_port()
    cfg = out / "rpc_floor.yaml"
    # The segment is mounted once and never heartbeats: a slow run must not outlive the
    # client's TTL (the master would unmount it and drop every key it reads).
    cfg.write_text(json.dumps({"state_dir": str(out), "master": {"client_ttl_s": 3600}}))
    m = _spawn(
        [
            sys.executable,
            "-m",
            "mooncake_cli",
            "master",
            "--config",
            str(cfg),
            "--port",
            str(mport),
            "--metrics-port",
            "0",
            "--fast-port",
            "0",
        ],
        "serving on",
        out / "rpc_floor.master.log",
    )
    try:
        import asyncio

        from mooncake_core.store.client.async_master import MasterClient

        async def mount() -> None:
            async with MasterClient(f"127.0.0.1:{mport}", client_id="bench") as mc:
                await mc.mount_segment("s", 1 << 40, transport_address="127.0.0.1:1")

        asyncio.run(mount())
        i = iter(range(10**9))
        for label, fast in (("grpc", False), ("fast", True)):
            sm = SyncMaster(f"127.0.0.1:{mport}", "bench", None, fast=fast)
            sm.wait_ready(10)
            sm.exist("warm-up")
            res[f"{label}_exist"] = _lat(lambda sm=sm: sm.exist("k"), n)

            def pair(sm: SyncMaster = sm) -> None:
                k = f"k{next(i)}"
                sm.put_start(k, 4096, None)
                sm.put_end(k)

            res[f"{label}_put_start_plus_end"] = _lat(pair, n // 2)

            def batch_pair(sm: SyncMaster = sm) -> None:
                ks = [f"b{next(i)}" for _ in range(64)]
                sm.batch_put_start([(k, 4096) for k in ks], None)
                sm.batch_put_end(ks)

            res[f"{label}_batch64_put_start_plus_end"] = _lat(batch_pair, n // 10)
            keys = [f"k{j}" for j in range(64)]
            res[f"{label}_get_replica_list"] = _lat(lambda sm=sm: sm.get_replica_list("k0"), n)
            res[f"{label}_batch64_get_replica_list"] = _lat(
                lambda sm=sm, keys=keys: sm.batch_get_replica_list(keys), n // 10
            )
            res[f"{label}_calls_over_fast_channel"] = sm.fast_calls
            sm.close()
    finally:
        _stop(m)
    res["load_after"] = os.getloadavg()[0]
    print(json.dumps(res, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--duration", type=float, default=1.0)
        p.add_argument("--repeats", type=int, default=3)
        p.add_argument("--max-size", type=int, default=64 * MiB)
        p.add_argument("--put-cap-bytes", type=int, default=2 * GiB)
        p.add_argument("--upstream-bench", default=str(UPSTREAM_BENCH))

    p = sub.add_parser("run", help="the side-by-side driver")
    common(p)
    p.add_argument("--configs", default="upstream,ours_shm,ours_tcp")
    p.add_argument("--segment-size", type=int, default=4 * GiB)
    p.add_argument("--upstream-venv", default="/tmp/mooncake-upstream-venv")
    p.add_argument("--out", default="")
    p.add_argument("--rounds", type=int, default=1)
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("client", help="process B for our configs")
    common(p)
    p.add_argument("--master", required=True)
    p.add_argument("--transport", default="auto", choices=["auto", "tcp", "shm"])
    p.add_argument("--config", default="ours_shm")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_client)
    p = sub.add_parser("capacity", help="master core: RSS and latency at N objects")
    p.add_argument("--objects", type=int, default=1_000_000)
    p.add_argument("--out", default="")
    p.set_defaults(fn=cmd_capacity)
    p = sub.add_parser("rpc-floor", help="unary gRPC latency: empty handler vs our master")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--out", default="")
    p.set_defaults(fn=cmd_rpc_floor)
    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
