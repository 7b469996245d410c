"""Cost of the ``mooncake`` adapter: upstream's call shapes through
``mooncake.store.MooncakeDistributedStore`` vs the same calls on
``mooncake_core.store.Client`` directly, against one real ``mooncake_master``.

Shapes (upstream's stress/bench usage): ``put(bytes)`` / ``get`` of one value,
``batch_put_from`` / ``batch_get_into`` of a batch from a registered buffer, and 8
threads of ``put(bytes)`` / ``get`` (upstream's concurrent stress test). Each shape runs
on fresh keys; rounds alternate adapter and core so machine noise hits both.

    python bench/compat_overhead.py [--value-kib 1024] [--ops 200] [--batch 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import re
import select
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from mooncake.store import MooncakeDistributedStore
from mooncake_core.store.client import Client
from mooncake_core.store.client_options import ClientOptions, SegmentSpec

SEG = 1 << 30


def start_master() -> tuple[subprocess.Popen[bytes], str]:
    cmd = [sys.executable, "-m", "mooncake.master", "--port=0", "--metrics_port=0"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert proc.stderr is not None
    buf = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r, _, _ = select.select([proc.stderr], [], [], 0.2)
        if r:
            buf += os.read(proc.stderr.fileno(), 65536)
            m = re.search(rb"serving on ([\d.]+):(\d+)", buf)
            if m:
                return proc, f"127.0.0.1:{m.group(2).decode()}"
    proc.kill()
    raise SystemExit(f"master did not start: {buf.decode(errors='replace')}")


class Shapes:
    """The same calls on either side; ``put``/``get`` etc. take keys and return nothing."""

    def __init__(self, name: str, put: Callable[[str, bytes], object],
                 get: Callable[[str], object],
                 bput: Callable[[list[str], list[int], list[int]], object],
                 bget: Callable[[list[str], list[int], list[int]], object]) -> None:  # fmt: skip
        self.name, self.put, self.get, self.bput, self.bget = name, put, get, bput, bget


def rate(n: int, fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t)


def run_round(s: Shapes, tag: str, value: bytes, ops: int, batch: int,
              src: int, dst: int, vsize: int) -> dict[str, float]:  # fmt: skip
    out: dict[str, float] = {}
    keys = [f"{s.name}/{tag}/{i}" for i in range(ops)]
    out["put"] = rate(ops, lambda: [s.put(k, value) for k in keys])
    out["get"] = rate(ops, lambda: [s.get(k) for k in keys])
    nb = max(1, ops // batch)
    bkeys = [[f"{s.name}/{tag}/b{j}/{i}" for i in range(batch)] for j in range(nb)]
    ptrs = [src + i * vsize for i in range(batch)]
    dptrs = [dst + i * vsize for i in range(batch)]
    sizes = [vsize] * batch
    out["batch_put_from"] = rate(
        nb * batch, lambda: [s.bput(b, ptrs, sizes) for b in bkeys] and None
    )
    out["batch_get_into"] = rate(
        nb * batch, lambda: [s.bget(b, dptrs, sizes) for b in bkeys] and None
    )

    def threads(fn: Callable[[str], object], prefix: str) -> None:
        def work(t: int) -> None:
            for i in range(ops // 8):
                fn(f"{prefix}/{t}/{i}")

        ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()

    tkey = f"{s.name}/{tag}/t"
    out["put x8 threads"] = rate(ops // 8 * 8, lambda: threads(lambda k: s.put(k, value), tkey))
    out["get x8 threads"] = rate(ops // 8 * 8, lambda: threads(s.get, tkey))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--value-kib", type=int, default=1024)
    ap.add_argument("--ops", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    vsize = a.value_kib << 10
    value = os.urandom(vsize)
    proc, master = start_master()
    try:
        ad = MooncakeDistributedStore()
        assert ad.setup("localhost", "P2PHANDSHAKE", SEG, 64 << 20, "tcp", "", master) == 0
        core = Client(ClientOptions(master=master, segments=(SegmentSpec("core-seg", SEG),)))
        core.setup()
        bufs = {n: np.zeros(2 * a.batch * vsize, dtype=np.uint8) for n in ("ad", "core")}
        for b in bufs.values():
            b[: a.batch * vsize] = np.frombuffer(value * a.batch, dtype=np.uint8)
        base = {n: b.ctypes.data for n, b in bufs.items()}
        assert ad.register_buffer(base["ad"], bufs["ad"].nbytes) == 0
        core.register_buffer(base["core"], bufs["core"].nbytes)
        sides = {
            "mooncake": (Shapes("ad", ad.put, ad.get, ad.batch_put_from, ad.batch_get_into), "ad"),
            "core": (Shapes("core", core.put, core.get, core.batch_put_from, core.batch_get_into), "core"),
        }  # fmt: skip
        results: dict[str, list[dict[str, float]]] = {n: [] for n in sides}
        for r in range(a.rounds):
            for n, (s, side) in sides.items() if r % 2 == 0 else reversed(sides.items()):
                src, dst = base[side], base[side] + a.batch * vsize
                results[n].append(run_round(s, f"r{r}", value, a.ops, a.batch, src, dst, vsize))
        print(f"value {a.value_kib} KiB, {a.ops} ops per shape, batch {a.batch}, "
              f"{a.rounds} rounds (median ops/s)")  # fmt: skip
        print(f"{'shape':<18} {'mooncake':>10} {'core':>10} {'ratio':>7}")
        for shape in results["core"][0]:
            m = statistics.median(x[shape] for x in results["mooncake"])
            c = statistics.median(x[shape] for x in results["core"])
            print(f"{shape:<18} {m:>10.0f} {c:>10.0f} {m / c:>7.2f}")
        ad.close()
        core.close()
    finally:
        proc.terminate()
        proc.wait(15)


if __name__ == "__main__":
    main()
