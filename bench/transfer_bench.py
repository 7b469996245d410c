#!/usr/bin/env python3
"""Transfer Engine side by side with the real Mooncake, in one run, on loopback.

What runs (every point: batch 128, 1 submitting thread, ``--duration`` seconds, repeated
``--repeats`` times, median reported; ours and upstream alternate inside each repeat so
drift on this shared machine hits both alike):

* tcp, {4 KiB, 64 KiB, 1 MiB} x {read, write}: upstream ``transfer_engine_bench
  --protocol=tcp`` (the method of ``shared/bench/upstream/te_bench.py``: its own
  ``mooncake_http_metadata_server`` on 127.0.0.1, ``MC_TCP_BIND_ADDRESS=127.0.0.1``,
  ``--buffer_size=2 GiB``, GB/s = batch_count * 128 * block / duration) against
  ``mooncake bench transfer --protocol tcp`` with the same shape.
* tcp, 4 MiB x {read, write}: ours against one plain Python TCP connection moving 4 MiB
  ``sendall``/``recv_into`` buffers between two processes (``phys_limits.py``'s method).
* shm, {1 MiB, 4 MiB} x {read, write}: ours (target and initiator are two processes on
  this host) against a single-thread numpy ``copyto`` of the same blocks between two
  pre-faulted buffers of the same span, and the 1 GiB single-copy figure for reference.

Writes ``results.json`` (every repeat) and ``table.md`` to ``--out`` and prints the table.
GB = 1e9 bytes. Run it through ``bench/run_transfer_side_by_side.sh``, which also builds
the upstream venv.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
BATCH = 128
OURS = [sys.executable, "-m", "mooncake_cli", "bench", "transfer"]

TARGETS = {
    ("tcp", 64 * KiB): 1.2,
    ("tcp", MiB): 1.5,
    ("tcp", 4 * MiB): 0.9,
    ("shm", MiB): 0.8,
    ("shm", 4 * MiB): 0.8,
}
"""Minimum ratio ours/baseline per (protocol, block size): issue 3, tcp 4 MiB from issue 18."""


def log(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[Any], timeout: float = 15) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_listening(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"nothing listens on 127.0.0.1:{port} after {timeout} s"
                ) from None
            time.sleep(0.1)


def wait_for_line(
    path: Path, needle: str, proc: subprocess.Popen[Any], timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while needle not in path.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{path.name}: no {needle!r} (exit code {proc.poll()}); see the log")
        time.sleep(0.1)
    time.sleep(0.5)  # it publishes the segment right after listening


# ---------------------------------------------------------------------------- upstream


class Upstream:
    """Upstream's metadata server and one ``transfer_engine_bench`` target, started once."""

    def __init__(self, venv: Path, logdir: Path) -> None:
        py = venv / "bin" / "python"
        pkg = subprocess.run(
            [str(py), "-c", "import mooncake, os; print(os.path.dirname(mooncake.__file__))"],
            check=True,
            capture_output=True,
            text=True,
            cwd="/",  # not this checkout: its own `mooncake` package would shadow the venv's
        ).stdout.strip()
        # The real binary, not $VENV/bin's wrapper: signalling the wrapper orphans it.
        self.teb = os.path.join(pkg, "transfer_engine_bench")
        self.logdir = logdir
        self.env = dict(os.environ, MC_TCP_BIND_ADDRESS="127.0.0.1")
        meta_port = free_port()
        self.meta = f"http://127.0.0.1:{meta_port}/metadata"
        self.hms = subprocess.Popen(
            [
                str(venv / "bin" / "mooncake_http_metadata_server"),
                "--host",
                "127.0.0.1",
                "--port",
                str(meta_port),
                "--log-level",
                "WARNING",
            ],
            stdout=open(logdir / "upstream_hms.log", "w"),  # noqa: SIM115 (outlives this call: the child writes it)
            stderr=subprocess.STDOUT,
        )
        # The Python metadata server can take seconds to listen on a loaded box; the
        # target publishes its segment there at start-up and never retries.
        wait_listening(meta_port, timeout=60)
        self.target_port = free_port()
        self.target_cmd = [
            self.teb,
            "--mode=target",
            "--protocol=tcp",
            f"--metadata_server={self.meta}",
            f"--local_server_name=127.0.0.1:{self.target_port}",
            f"--buffer_size={2 * GiB}",
        ]
        self.target = subprocess.Popen(
            self.target_cmd,
            env=self.env,
            stdout=open(logdir / "upstream_target.log", "w"),  # noqa: SIM115 (child writes it)
            stderr=subprocess.STDOUT,
        )
        wait_for_line(logdir / "upstream_target.log", "TcpTransport: listen on port", self.target)
        self.runs = 0

    def point(self, op: str, block: int, duration: int) -> dict[str, Any]:
        self.runs += 1
        cmd = [
            self.teb,
            "--mode=initiator",
            "--protocol=tcp",
            f"--metadata_server={self.meta}",
            f"--local_server_name=127.0.0.1:{free_port()}",
            f"--segment_id=127.0.0.1:{self.target_port}",
            f"--operation={op}",
            f"--block_size={block}",
            f"--batch_size={BATCH}",
            "--threads=1",
            f"--duration={duration}",
            f"--buffer_size={2 * GiB}",
        ]
        logf = self.logdir / f"upstream_{op}_{block}_{self.runs}.log"
        with open(logf, "w") as fh:
            proc = subprocess.run(
                cmd, env=self.env, stdout=fh, stderr=subprocess.STDOUT, timeout=duration + 60
            )
        text = logf.read_text(errors="replace")
        m = re.search(r"Test completed: duration ([\d.]+), batch count (\d+)", text)
        if proc.returncode != 0 or m is None:
            return {"GBps": None, "rc": proc.returncode, "log": str(logf)}
        dur, batches = float(m.group(1)), int(m.group(2))
        return {
            "GBps": batches * BATCH * block / dur / 1e9,
            "iops": batches * BATCH / dur,
            "duration": dur,
            "batches": batches,
        }

    def close(self) -> None:
        stop(self.target)
        stop(self.hms)

    def command_lines(self) -> list[str]:
        return [
            " ".join(self.target_cmd)
            .replace(self.meta, "http://127.0.0.1:META/metadata")
            .replace(f":{self.target_port}", ":TARGET"),
            f"{self.teb} --mode=initiator --protocol=tcp --metadata_server=http://127.0.0.1:META/metadata "
            "--local_server_name=127.0.0.1:PORT --segment_id=127.0.0.1:TARGET --operation={read|write} "
            f"--block_size=BLOCK --batch_size={BATCH} --threads=1 --duration=D --buffer_size={2 * GiB}",
        ]


# ---------------------------------------------------------------------------- ours


class Ours:
    """``mooncake bench transfer`` targets (one per protocol) and initiator runs."""

    def __init__(self, logdir: Path, buffer_size: int) -> None:
        self.logdir = logdir
        self.buffer_size = buffer_size
        self.targets: dict[str, tuple[subprocess.Popen[str], str]] = {}
        self.runs = 0

    def target(self, protocol: str) -> str:
        if protocol not in self.targets:
            cmd = [
                *OURS,
                "--mode",
                "target",
                "--protocol",
                protocol,
                "--buffer-size",
                str(self.buffer_size),
                "--json",
            ]
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                text=True,
                stderr=open(self.logdir / f"ours_target_{protocol}.log", "w"),  # noqa: SIM115 (child writes it)
            )
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"our {protocol} target died; see ours_target_{protocol}.log")
            self.targets[protocol] = (proc, json.loads(line)["segment"])
        return self.targets[protocol][1]

    def point(self, protocol: str, op: str, block: int, duration: int) -> dict[str, Any]:
        self.runs += 1
        segment = self.target(protocol)
        cmd = [
            *OURS,
            "--mode",
            "initiator",
            "--protocol",
            protocol,
            "--segment",
            segment,
            "--operation",
            op,
            "--block-size",
            str(block),
            "--batch-size",
            str(BATCH),
            "--threads",
            "1",
            "--duration",
            str(duration),
            "--buffer-size",
            str(self.buffer_size),
            "--json",
        ]
        logf = self.logdir / f"ours_{protocol}_{op}_{block}_{self.runs}.log"
        with open(logf, "w") as fh:
            proc = subprocess.run(
                cmd, stdout=subprocess.PIPE, stderr=fh, text=True, timeout=duration + 120
            )
        if proc.returncode != 0:
            return {"GBps": None, "rc": proc.returncode, "log": str(logf)}
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        return {
            "GBps": res["gbps"],
            "iops": res["iops"],
            "duration": res["duration_s"],
            "GB_per_cpu_s": res["bytes"] / 1e9 / res["cpu_s"] if res["cpu_s"] else None,
            "batches": res["batches"],
            "verified": res["verified"],
        }

    def close(self) -> None:
        for proc, _ in self.targets.values():
            stop(proc)


# ---------------------------------------------------------------------------- baselines


def _sock_sink(port_q: Any, result_q: Any, bufsize: int) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port_q.put(srv.getsockname()[1])
    conn, _ = srv.accept()
    view = memoryview(bytearray(bufsize))
    total, t0 = 0, None
    while True:
        n = conn.recv_into(view, bufsize)
        if n == 0:
            break
        if t0 is None:
            t0 = time.perf_counter()
        total += n
    result_q.put((total, time.perf_counter() - (t0 or 0.0)))
    conn.close()
    srv.close()


def _sock_sink_spread(port_q: Any, result_q: Any, bufsize: int) -> None:
    """Like ``_sock_sink``, but each 4 MiB block lands whole in the next of ``BATCH``
    distinct blocks (a pre-faulted span as large as ours'), as a Transfer Engine target
    does; ``_sock_sink`` lets every recv overwrite the start of one buffer, which stays
    in the CPU cache."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port_q.put(srv.getsockname()[1])
    conn, _ = srv.accept()
    span = np.ones(bufsize * BATCH, dtype=np.uint8)
    view = memoryview(span.data).cast("B")
    total, t0, block, off = 0, None, 0, 0
    while True:
        n = conn.recv_into(view[block * bufsize + off : (block + 1) * bufsize])
        if n == 0:
            break
        if t0 is None:
            t0 = time.perf_counter()
        total += n
        off += n
        if off == bufsize:
            block, off = (block + 1) % BATCH, 0
    result_q.put((total, time.perf_counter() - (t0 or 0.0)))
    conn.close()
    srv.close()


def python_socket(seconds: float, bufsize: int = 4 * MiB, *, spread: bool = False) -> float:
    """One connection, 4 MiB sendall -> recv_into in another process (phys_limits.py).

    ``spread``: the sender cycles through ``BATCH`` distinct source blocks and the sink
    fills ``BATCH`` distinct blocks in turn (the memory footprint of ours' batch of 128).
    """
    ctx = mp.get_context("fork")
    port_q, result_q = ctx.Queue(), ctx.Queue()
    target = _sock_sink_spread if spread else _sock_sink
    sink = ctx.Process(target=target, args=(port_q, result_q, bufsize))
    sink.start()
    conn = socket.create_connection(("127.0.0.1", port_q.get()))
    n_src = BATCH if spread else 1
    src = memoryview(bytearray(os.urandom(bufsize)) * n_src)
    blocks = [src[i * bufsize : (i + 1) * bufsize] for i in range(n_src)]
    t, i = time.perf_counter(), 0
    while time.perf_counter() - t < seconds:
        conn.sendall(blocks[i])
        i = (i + 1) % n_src
    conn.shutdown(socket.SHUT_WR)
    conn.close()
    total, dt = result_q.get()
    sink.join()
    return float(total / dt / 1e9)


def memcpy_blocks(block: int, seconds: float) -> dict[str, float]:
    """Single-thread numpy copyto of BATCH blocks between two pre-faulted spans: GB/s, and
    GB per CPU-second (robust to other jobs taking CPU away, unlike GB/s)."""
    src = np.full(block * BATCH, 0x5A, dtype=np.uint8)
    dst = np.zeros(block * BATCH, dtype=np.uint8)
    np.copyto(dst, src)
    moved, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        for i in range(BATCH):
            np.copyto(dst[i * block : (i + 1) * block], src[i * block : (i + 1) * block])
        moved += block * BATCH
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"GBps": moved / wall / 1e9, "GB_per_cpu_s": moved / cpu / 1e9}


def memcpy_1gib() -> float:
    src = np.full(GiB, 1, dtype=np.uint8)
    dst = np.zeros(GiB, dtype=np.uint8)
    np.copyto(dst, src)
    best = []
    for _ in range(3):
        t = time.perf_counter()
        np.copyto(dst, src)
        best.append(GiB / (time.perf_counter() - t) / 1e9)
    return statistics.median(best)


# ---------------------------------------------------------------------------- namespaces


NETNS_CONFIG = {
    "protocol": "tcp",
    "connect_timeout_s": 1.0,
    "request_timeout_s": 10.0,
    "nic_pause_s": 0.5,
    "nic_pause_max_s": 1.0,
    "nic_failure_threshold": 1,
}


def netns_section(size: int, repeats: int) -> dict[str, Any]:
    """Two namespaces, two 1 Gbit/s veth NICs (tests/netns_util.py): one READ of ``size``
    bytes over one NIC, over both, and over both with link 1 cut 0.3 s in."""
    root = Path(__file__).resolve().parents[1]
    sys.path[:0] = [str(root), str(root / "tests" / "functional" / "transfer_netns")]
    from transfer_netns_agent import AgentClient  # type: ignore[import-not-found]

    from tests.netns_util import netns_pair  # type: ignore[import-not-found]

    res: dict[str, Any] = {"size": size, "single_s": [], "dual_s": [], "failover_s": []}
    with netns_pair(2, rate="1gbit") as rig:
        for key, nics in (("single_s", 1), ("dual_s", 2)):
            tgt = AgentClient(rig, "a", "target", rig.nics("a")[:nics], NETNS_CONFIG, size=size)
            seg = tgt.line()["segment"]
            ini = AgentClient(rig, "b", "initiator", rig.nics("b")[:nics], NETNS_CONFIG)
            for _ in range(repeats):
                r = ini.call(cmd="read", segment=seg, length=size)
                res[key].append(r["seconds"] if r["state"] == "COMPLETED" else None)
            if nics == 2:
                for _ in range(repeats):
                    ini.send(cmd="read", segment=seg, length=size, timeout=30)
                    ini.line()
                    time.sleep(0.3)
                    rig.link_down(1)
                    r = ini.line(timeout=60)
                    res["failover_s"].append(r["seconds"] if r["state"] == "COMPLETED" else None)
                    rig.link_up(1)
                    time.sleep(NETNS_CONFIG["nic_pause_max_s"] + 0.2)
            ini.stop()
            tgt.stop()
    log(f"netns: {res}")
    return res


# ---------------------------------------------------------------------------- report


def med(values: list[float | None]) -> float | None:
    good = [v for v in values if v is not None]
    return statistics.median(good) if good else None


def fmt(x: float | None, digits: int = 2) -> str:
    return "FAILED" if x is None else f"{x:.{digits}f}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| protocol | op | block | baseline | baseline GB/s | ours GB/s | ratio | target | met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        base, ours = r["baseline_GBps"], r["ours_GBps"]
        ratio = ours / base if base and ours else None
        target = TARGETS.get((r["protocol"], r["block"]))
        met = "-" if target is None or ratio is None else ("yes" if ratio >= target else "**no**")
        lines.append(
            f"| {r['protocol']} | {r['op']} | {human(r['block'])} | {r['baseline']} | "
            f"{fmt(base)} | {fmt(ours)} | {fmt(ratio)}x | "
            f"{'-' if target is None else f'>= {target}x'} | {met} |"
        )
    eff = [r for r in rows if r.get("baseline_cpu")]
    if eff:
        lines += [
            "",
            "| shm, CPU efficiency | block | memcpy GB per CPU-s | ours GB per CPU-s (initiator process) | ratio |",
            "|---|---|---|---|---|",
        ]
        for r in eff:
            ratio = r["ours_cpu"] / r["baseline_cpu"] if r["ours_cpu"] else None
            lines.append(
                f"| shm {r['op']} | {human(r['block'])} | {fmt(r['baseline_cpu'])} | "
                f"{fmt(r['ours_cpu'])} | {fmt(ratio)}x |"
            )
    iops = [r for r in rows if r["block"] == 4 * KiB]
    if iops:
        lines += [
            "",
            "| 4 KiB, batch 128 | upstream IOPS | ours IOPS | ratio |",
            "|---|---|---|---|",
        ]
        for r in iops:
            ratio = (
                r["ours_iops"] / r["baseline_iops"]
                if r["ours_iops"] and r["baseline_iops"]
                else None
            )
            lines.append(
                f"| tcp {r['op']} | {fmt(r['baseline_iops'], 0)} | {fmt(r['ours_iops'], 0)} | {fmt(ratio)}x |"
            )
    return "\n".join(lines)


def human(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--upstream-venv", type=Path, default=Path("/tmp/mooncake-upstream-venv"))
    ap.add_argument(
        "--out",
        type=Path,
        default=Path("bench/out") / time.strftime("transfer_%Y%m%dT%H%M%SZ", time.gmtime()),
    )
    ap.add_argument("--duration", type=int, default=3, help="seconds per point (upstream: 3)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--only",
        choices=["tcp", "sock", "shm", "netns"],
        action="append",
        help="run only these sections (default: all)",
    )
    ap.add_argument(
        "--netns-size-mib", type=int, default=256, help="netns section: one READ of this size"
    )
    ap.add_argument("--no-upstream", action="store_true", help="skip upstream (ours only)")
    args = ap.parse_args()
    sections = set(args.only or ["tcp", "sock", "shm", "netns"])
    args.out.mkdir(parents=True, exist_ok=True)
    raw: dict[str, list[Any]] = {}

    def record(key: str, value: dict[str, Any]) -> None:
        raw.setdefault(key, []).append(value)
        log(f"{key}: {fmt(value.get('GBps'), 3)} GB/s")

    load_start = os.getloadavg()[0]
    t_start = time.time()
    ours = Ours(args.out, buffer_size=520 * MiB)  # 128 x 4 MiB plus room for the check
    upstream = None
    rows: list[dict[str, Any]] = []
    try:
        if "tcp" in sections and not args.no_upstream:
            upstream = Upstream(args.upstream_venv, args.out)
        for rep in range(args.repeats):
            if "tcp" in sections:
                for block in (4 * KiB, 64 * KiB, MiB):
                    for op in ("read", "write"):
                        order = ("ours", "upstream") if rep % 2 == 0 else ("upstream", "ours")
                        for who in order:
                            if who == "ours":
                                record(
                                    f"ours/tcp/{op}/{block}",
                                    ours.point("tcp", op, block, args.duration),
                                )
                            elif upstream is not None:
                                record(
                                    f"upstream/tcp/{op}/{block}",
                                    upstream.point(op, block, args.duration),
                                )
            if "sock" in sections:
                record("socket/4MiB", {"GBps": python_socket(args.duration)})
                record("socket/4MiB/spread", {"GBps": python_socket(args.duration, spread=True)})
                for op in ("read", "write"):
                    record(
                        f"ours/tcp/{op}/{4 * MiB}", ours.point("tcp", op, 4 * MiB, args.duration)
                    )
            if "shm" in sections:
                for block in (MiB, 4 * MiB):
                    record(f"memcpy/{block}", memcpy_blocks(block, args.duration))
                    for op in ("read", "write"):
                        record(
                            f"ours/shm/{op}/{block}", ours.point("shm", op, block, args.duration)
                        )
        if "shm" in sections:
            raw["memcpy/1GiB"] = [{"GBps": memcpy_1gib()}]
        if "netns" in sections:
            raw["netns"] = [netns_section(args.netns_size_mib << 20, args.repeats)]
    finally:
        ours.close()
        if upstream is not None:
            upstream.close()

    def m(key: str, field: str = "GBps") -> float | None:
        return med([v.get(field) for v in raw.get(key, [])])

    for block in (4 * KiB, 64 * KiB, MiB):
        for op in ("read", "write"):
            if f"ours/tcp/{op}/{block}" in raw:
                rows.append(
                    {
                        "protocol": "tcp",
                        "op": op,
                        "block": block,
                        "baseline": "upstream TE bench tcp",
                        "baseline_GBps": m(f"upstream/tcp/{op}/{block}"),
                        "ours_GBps": m(f"ours/tcp/{op}/{block}"),
                        "baseline_iops": m(f"upstream/tcp/{op}/{block}", "iops"),
                        "ours_iops": m(f"ours/tcp/{op}/{block}", "iops"),
                    }
                )
    for op in ("read", "write"):
        if f"ours/tcp/{op}/{4 * MiB}" in raw:
            rows.append(
                {
                    "protocol": "tcp",
                    "op": op,
                    "block": 4 * MiB,
                    "baseline": "Python socket 4 MiB",
                    "baseline_GBps": m("socket/4MiB"),
                    "ours_GBps": m(f"ours/tcp/{op}/{4 * MiB}"),
                }
            )
            if "socket/4MiB/spread" in raw:
                rows.append(
                    {
                        "protocol": "tcp",
                        "op": op,
                        "block": 4 * MiB,
                        "baseline": "Python socket 4 MiB, 128 blocks",
                        "baseline_GBps": m("socket/4MiB/spread"),
                        "ours_GBps": m(f"ours/tcp/{op}/{4 * MiB}"),
                    }
                )
    for block in (MiB, 4 * MiB):
        for op in ("read", "write"):
            if f"ours/shm/{op}/{block}" in raw:
                rows.append(
                    {
                        "protocol": "shm",
                        "op": op,
                        "block": block,
                        "baseline": "memcpy 1 thread",
                        "baseline_GBps": m(f"memcpy/{block}"),
                        "ours_GBps": m(f"ours/shm/{op}/{block}"),
                        "baseline_cpu": m(f"memcpy/{block}", "GB_per_cpu_s"),
                        "ours_cpu": m(f"ours/shm/{op}/{block}", "GB_per_cpu_s"),
                    }
                )
    md = table(rows)
    if "netns" in raw:
        n = raw["netns"][0]
        single, dual, fail = med(n["single_s"]), med(n["dual_s"]), med(n["failover_s"])
        mb = n["size"] / 1e6
        md += (
            "\n\n| two namespaces, 2 x 1 Gbit/s veth (tc tbf) | seconds | MB/s | vs one NIC |\n"
            "|---|---|---|---|\n"
            f"| one {n['size'] >> 20} MiB READ, one NIC | {fmt(single)} | {fmt(mb / single if single else None, 0)} | 1.00x |\n"
            f"| the same over two NICs | {fmt(dual)} | {fmt(mb / dual if dual else None, 0)} | {fmt(single / dual if single and dual else None)}x |\n"
            f"| two NICs, link 1 cut 0.3 s in (failover) | {fmt(fail)} | {fmt(mb / fail if fail else None, 0)} | {fmt(single / fail if single and fail else None)}x |"
        )
    notes = [
        "",
        "",
        f"Medians of {args.repeats} runs of {args.duration} s per point; batch {BATCH}, 1 thread; GB = 1e9 bytes.",
        f"Run took {time.time() - t_start:.0f} s; 1-minute load average {load_start:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end ({os.cpu_count()} CPUs).",
    ]
    if "memcpy/1GiB" in raw:
        notes.append(
            f"Single-thread memcpy of one 1 GiB buffer in the same run: {raw['memcpy/1GiB'][0]['GBps']:.2f} GB/s."
        )
    if upstream is not None:
        notes += ["", "Upstream commands:", "```", *upstream.command_lines(), "```"]
    notes += [
        "",
        "Ours:",
        "```",
        "mooncake bench transfer --mode target --protocol {tcp|shm} --buffer-size 545259520 --json",
        "mooncake bench transfer --mode initiator --protocol {tcp|shm} --segment SEG --operation {read|write} "
        f"--block-size BLOCK --batch-size {BATCH} --threads 1 --duration D --buffer-size 545259520 --json",
        "```",
    ]
    md += "\n".join(notes) + "\n"
    (args.out / "results.json").write_text(json.dumps({"rows": rows, "raw": raw}, indent=1))
    (args.out / "table.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
