#!/usr/bin/env python3
"""Store reads from DRAM vs from the SSD tier, through the real processes, in one run.

Starts a real ``mooncake master`` (journal in a temp dir, ``--fsync always``) and one real
``mooncake store node --ssd-dir --ssd-size``; this process is a pure store ``Client``
reading with ``get_into`` (one registered buffer) over the Transfer Engine on loopback.
Per object size it builds two sets of random objects on the node's segment:

  dram      B: 40% of the segment, written last, never evicted: plain DRAM reads
  staged    A: 30% of the segment, offloaded and then pushed out of DRAM by a filler
            (removed again afterwards): every read is ``GetReplicaList`` -> the master
            allocates a range and asks the node -> the node reads and verifies the file
            and copies it in -> TierStageDone (journaled) -> the Transfer Engine read.
            ``staged_cold`` drops the files from the page cache first (fsync +
            POSIX_FADV_DONTNEED), ``staged_warm`` reads them from the page cache.
            Between passes the 0.5 s read lease runs out and the stage copies go.
  promoted  A again after the ``promote_after``-th staging kept them in DRAM.

Passes are interleaved per repeat (dram, staged_cold, staged_warm), then, after the
promoting pass, (dram, promoted); the dram column is the median of all its passes. Prints a markdown table (MB/s and ops/s, median of repeats, ratio to dram) and
writes ``results.json`` under ``--out``. Every byte read is checked after timing.

    python bench/store_ssd_tier.py                      # 256KiB and 4MiB, 3 repeats
    python bench/store_ssd_tier.py --sizes 256KiB --repeats 1 --segment 64MiB
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

import xxhash
import yaml

from mooncake_core.config.models import MasterConfig
from mooncake_core.store.client import Client
from mooncake_core.store.client.options import ClientOptions

MASTER_READY = re.compile(r"serving on ([\d.]+):(\d+) \(metrics on")
NODE_READY = re.compile(r"serving segment \S+ .* at [\d.]+:\d+")
WATERMARK_SLACK = 0.02


def _size(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if text.endswith(u):
            return int(float(text[: -len(u)]) * m)
    return int(text)


def _start(
    cmd: list[str], ready: re.Pattern[str], log: Path
) -> tuple[subprocess.Popen[bytes], str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    out = open(log, "wb")  # noqa: SIM115 (kept open for the process's life)
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    assert p.stderr is not None
    buf = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and p.poll() is None:
        if select.select([p.stderr], [], [], 0.2)[0]:
            chunk = os.read(p.stderr.fileno(), 65536)
            buf += chunk
            text = buf.decode(errors="replace").replace("\n", " ")
            m = ready.search(text)
            if m:
                out.write(buf)
                # Keep draining stderr into the log so the child never blocks on it.
                threading.Thread(target=_copy, args=(p.stderr, out), daemon=True).start()
                return p, m.group(0)
    p.kill()
    raise SystemExit(f"{cmd[3]} did not start: {buf.decode(errors='replace')[-2000:]}")


def _copy(src: IO[bytes], dst: IO[bytes]) -> None:
    for line in src:
        dst.write(line)
        dst.flush()


def _stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def _drop_cache(ssd_dir: Path, keys: list[str]) -> None:
    for k in keys:
        h = f"{xxhash.xxh3_64_intdigest(k.encode()):016x}"
        fd = os.open(ssd_dir / h[:2] / f"{h}.obj", os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _wait_offloaded(c: Client, wm: float, timeout: float = 60.0) -> None:
    """Until every DRAM object of a segment at/above the offload watermark has an SSD
    copy (one node: SSD copies in DRAM = ssd_keys - SSD-only objects)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snap = c._m.get_snapshot()
        (seg,) = snap.segments
        if seg.used < wm * seg.capacity or seg.keys <= seg.ssd_keys - snap.ssd_only_count:
            return
        time.sleep(0.005)
    raise SystemExit("offloads did not keep up")


def _pass(c: Client, keys: list[str], addr: int, cap: int) -> float:
    t0 = time.perf_counter()
    for k in keys:
        c.get_into(k, addr, cap)
    return time.perf_counter() - t0


def run_size(size: int, a: argparse.Namespace, base: Path) -> dict[str, object]:
    seg_bytes = _size(a.segment)
    work = base / f"s{size}"
    work.mkdir()
    ssd_dir = work / "ssd"
    staged_passes = 2 * a.repeats
    master_cfg = {
        "lease_ttl_s": 0.5,
        "heartbeat_interval_s": 0.5,
        "client_ttl_s": 10.0,
        "promote_after": staged_passes + 1,
        "max_slice_size": max(size, 4096),
    }
    cfg = work / "mooncake.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(work), "master": master_cfg}))
    py = [sys.executable, "-m", "mooncake_cli"]
    master, line = _start(
        [*py, "master", "--config", str(cfg), "--port", "0", "--metrics-port", "0",
         "--data-dir", str(work / "journal")],
        MASTER_READY,
        work / "master.log",
    )  # fmt: skip
    m = MASTER_READY.search(line)
    assert m is not None
    address = f"{m[1]}:{m[2]}"
    node, _ = _start(
        [*py, "store", "node", "--name", "n0", "--size", str(seg_bytes), "--master", address,
         "--config", str(cfg), "--ssd-dir", str(ssd_dir), "--ssd-size", str(4 * seg_bytes),
         "--metrics-port", "0"],
        NODE_READY,
        work / "node.log",
    )  # fmt: skip
    mc = MasterConfig(**master_cfg)
    wm = mc.effective_offload_watermark
    opts = ClientOptions(master=address, master_config=mc, transport=a.transport)
    try:
        with Client(opts).setup() as c:
            n_a = max(2, int(0.30 * seg_bytes) // size)
            n_b = max(2, int(0.40 * seg_bytes) // size)
            values = {f"A/{i:05d}": os.urandom(size) for i in range(n_a)}
            values |= {f"B/{i:05d}": os.urandom(size) for i in range(n_b)}
            keys_a = [k for k in values if k.startswith("A/")]
            keys_b = [k for k in values if k.startswith("B/")]
            for k in keys_a:
                c.put(k, values[k])
                _wait_offloaded(c, wm)
            # Filler until every A object is SSD-only, then the filler goes.
            filler: list[str] = []
            while any(c.stat(k).replicas for k in keys_a):
                k = f"F/{len(filler):05d}"
                c.put(k, os.urandom(size))
                filler.append(k)
                _wait_offloaded(c, wm)
                if len(filler) > 20 * (n_a + n_b):
                    raise SystemExit("A objects never left DRAM")
            for k in filler:
                c.remove(k, force=True)
            for k in keys_b:
                c.put(k, values[k])
            lost = c._m.get_snapshot().evicted_objects_total
            if lost:
                raise SystemExit(f"{lost} objects were evicted without an SSD copy")
            buf = bytearray(size)
            addr = c.register_buffer(buf)
            res: dict[str, list[float]] = {
                "dram": [], "staged_cold": [], "staged_warm": [], "promoted": []
            }  # fmt: skip
            lease_wait = mc.lease_ttl_s + 0.5
            for _ in range(a.repeats):
                res["dram"].append(_pass(c, keys_b, addr, size))
                time.sleep(lease_wait)  # stage copies of the last pass are dropped
                _drop_cache(ssd_dir, keys_a)
                res["staged_cold"].append(_pass(c, keys_a, addr, size))
                time.sleep(lease_wait)
                res["staged_warm"].append(_pass(c, keys_a, addr, size))
                time.sleep(lease_wait)
            # The (2 * repeats + 1)-th staging promotes; then plain DRAM reads.
            _pass(c, keys_a, addr, size)
            time.sleep(lease_wait)
            for _ in range(a.repeats):  # interleaved with DRAM reads again
                res["dram"].append(_pass(c, keys_b, addr, size))
                res["promoted"].append(_pass(c, keys_a, addr, size))
            snap = c._m.get_snapshot()
            still_ssd_only = sum(1 for k in keys_a if not c.stat(k).replicas)
            for k, v in values.items():  # untimed: every byte right
                n = c.get_into(k, addr, size)
                if n != size or bytes(buf) != v:
                    raise SystemExit(f"{k}: wrong bytes")
            c.unregister_buffer(addr)
    finally:
        _stop(node)
        _stop(master)
    counts = {"dram": n_b, "staged_cold": n_a, "staged_warm": n_a, "promoted": n_a}
    return {
        "size": size,
        "objects": counts,
        "seconds": res,
        "master": {
            "ssd_stages_total": snap.ssd_stages_total,
            "ssd_promotions_total": snap.ssd_promotions_total,
            "offloaded_evictions_total": snap.offloaded_evictions_total,
            "ssd_only_after_promotion": still_ssd_only,
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="256KiB,4MiB", help="object sizes, comma separated")
    ap.add_argument("--segment", default="256MiB", help="the node's DRAM segment")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--transport", default="tcp", choices=("tcp", "shm", "auto"))
    ap.add_argument("--out", type=Path, default=Path("bench/out/store_ssd_tier"))
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="mc-store-ssd-"))
    load = os.getloadavg()
    runs = []
    try:
        for text in a.sizes.split(","):
            runs.append(run_size(_size(text.strip()), a, base))
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(base)
    print(
        f"segment {a.segment}, transport {a.transport}, {a.repeats} repeats, "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n"
    )
    print("| object | read | objects | MB/s (median) | ops/s | vs dram |")
    print("|---|---|---|---|---|---|")
    for r in runs:
        size = int(r["size"])  # type: ignore[call-overload]
        secs: dict[str, list[float]] = r["seconds"]  # type: ignore[assignment]
        objs: dict[str, int] = r["objects"]  # type: ignore[assignment]
        med = {k: statistics.median(v) for k, v in secs.items()}
        base_mbs = objs["dram"] * size / med["dram"] / 1e6
        for k, s in med.items():
            mbs = objs[k] * size / s / 1e6
            label = f"{size >> 10} KiB" if size < 1 << 20 else f"{size >> 20} MiB"
            print(
                f"| {label} | {k} | {objs[k]} | {mbs:.0f} | {objs[k] / s:.0f} | "
                f"{mbs / base_mbs:.2f}x |"
            )
        print(f"\nmaster counters ({size} B): {json.dumps(r['master'])}")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(
        json.dumps({"args": vars(a) | {"out": str(a.out)}, "load": load, "runs": runs}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
