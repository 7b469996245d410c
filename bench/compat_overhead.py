"""Cost of the ``mooncake`` adapter: upstream's call shapes through
``mooncake.store.MooncakeDistributedStore`` vs the same calls on the very
``mooncake_core.store.Client`` that adapter wraps, against one real ``mooncake_master``.

Both sides share one client (its segment, transport, master connection and placement),
so the only difference between a pair of calls is the adapter's own work. Calls are
paired and interleaved, adapter then core then core then adapter, each on a fresh key,
and timed one by one; the report gives each side's median latency per shape, the
ratio of medians (the issue's "within 10%") and the median of the paired differences
(the adapter's cost per call in microseconds). Machine noise hits both members of a
pair alike, so the ratio holds on a loaded machine where whole-loop rates swing.

Shapes (upstream's stress/bench usage): ``put(bytes)`` / ``get`` of one value,
``batch_put_from`` / ``batch_get_into`` of a batch from a registered buffer, and 8
threads calling ``put`` / ``get`` (upstream's concurrent stress test), timed as
blocks of 80 calls per side (throughput: wall time per call, see ``threaded``).

    python bench/compat_overhead.py [--value-kib 1024] [--pairs 200] [--batch 8]
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from mooncake.store import MooncakeDistributedStore
from mooncake_core.store.client import Client

LEASE_S = 5.0
"""The master's default read lease (``--default_kv_lease_ttl``)."""
SEG = 2 << 30
"""Room for the largest shape's objects (the keys of each shape are removed after it, untimed),
so no read meets an evicted key."""


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


Call = Callable[[str], object]
"""One call of a shape on one side, given a fresh key prefix."""


def timed(fn: Call, key: str) -> float:
    t = time.perf_counter()
    fn(key)
    return time.perf_counter() - t


def pairs(ad: Call, core: Call, n: int, tag: str) -> list[tuple[float, float]]:
    """``n`` interleaved (adapter, core) latencies; the order flips every pair."""
    out = []
    for i in range(n):
        ka, kc = f"ad/{tag}/{i}", f"core/{tag}/{i}"
        if i % 2:
            c = timed(core, kc)
            a = timed(ad, ka)
        else:
            a = timed(ad, ka)
            c = timed(core, kc)
        out.append((a, c))
    return out


def block(fn: Call, tag: str, per: int, threads: int) -> float:
    """Wall seconds for ``threads`` threads each making ``per`` calls of ``fn``."""

    def work(t: int) -> None:
        for i in range(per):
            fn(f"{tag}/{t}/{i}")

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    t0 = time.perf_counter()
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    return time.perf_counter() - t0


def threaded(
    ad: Call, core: Call, n: int, tag: str, threads: int = 8, per: int = 10
) -> list[tuple[float, float]]:
    """Throughput of ``threads`` threads, as (adapter, core) wall time per call.

    Each side runs alone in a block of ``threads x per`` calls, blocks paired and
    interleaved like :func:`pairs`. Not per-call latency: the client serializes its
    staging copy under one lock, and whether a thread that just released it takes it
    again before a woken waiter does turns on a few microseconds of Python before the
    call reaches the lock, so per-call medians swing between about one and about eight
    solo calls for either side alike (measured: the core against itself 0.9-6x).
    """
    out = []
    ops = threads * per
    for i in range(max(4, n // 20)):
        ka, kc = f"ad/{tag}/{i}", f"core/{tag}/{i}"
        if i % 2:
            c = block(core, kc, per, threads)
            a = block(ad, ka, per, threads)
        else:
            a = block(ad, ka, per, threads)
            c = block(core, kc, per, threads)
        out.append((a / ops, c / ops))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--value-kib", type=int, default=1024)
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    vsize, nb = a.value_kib << 10, a.batch
    value = os.urandom(vsize)
    proc, master = start_master()
    try:
        store = MooncakeDistributedStore()
        assert store.setup("localhost", "P2PHANDSHAKE", SEG, 64 << 20, "tcp", "", master) == 0
        core: Client = store._client  # type: ignore[assignment]  # the client it wraps
        bufs = {n: np.zeros(2 * nb * vsize, dtype=np.uint8) for n in ("ad", "core")}
        for b in bufs.values():
            b[: nb * vsize] = np.frombuffer(value * nb, dtype=np.uint8)
        base = {n: b.ctypes.data for n, b in bufs.items()}
        assert store.register_buffer(base["ad"], bufs["ad"].nbytes) == 0
        core.register_buffer(base["core"], bufs["core"].nbytes)
        src = {n: [base[n] + i * vsize for i in range(nb)] for n in base}
        dst = {n: [base[n] + (nb + i) * vsize for i in range(nb)] for n in base}
        sizes = [vsize] * nb

        def batch(k: str) -> list[str]:
            return [f"{k}/{i}" for i in range(nb)]

        def bput(side: str, fn: Any) -> Call:
            def call(k: str) -> None:
                got = fn(batch(k), src[side], sizes)
                if any(got):
                    raise SystemExit(f"batch put of {k!r}: {got}")

            return call

        def bget(side: str, fn: Any) -> Call:
            return lambda k: fn(batch(k), dst[side], sizes)

        def whole(fn: Callable[[str], Any], put: str, get: str) -> Call:
            # a read of the key the put shape wrote; a short or failed read ends the run
            def call(k: str) -> None:
                got = fn(k.replace(get, put))
                if len(got) != vsize:
                    raise SystemExit(f"read of {k.replace(get, put)!r}: {len(got)} bytes")

            return call

        def whole_batch(fn: Callable[[str], Any]) -> Call:
            def call(k: str) -> None:
                got = fn(k.replace("/bg/", "/b/"))
                if got != sizes:
                    raise SystemExit(f"batch read of {k!r}: {got}")

            return call

        def clear() -> None:
            # a forced remove holds a just-read object's range until its read lease
            # (the master's default 5 s) ends; wait so the next shape has the room
            assert store.remove_all(True) >= 0
            time.sleep(LEASE_S + 0.5)

        n = a.pairs
        results: dict[str, list[tuple[float, float]]] = {}
        results["put"] = pairs(lambda k: store.put(k, value), lambda k: core.put(k, value), n, "p")
        results["get"] = pairs(
            whole(store.get, "/p/", "/g/"), whole(core.get, "/p/", "/g/"), n, "g"
        )
        clear()
        results["batch_put_from"] = pairs(
            bput("ad", store.batch_put_from), bput("core", core.batch_put_from), n // 2, "b"
        )
        results["batch_get_into"] = pairs(
            whole_batch(bget("ad", store.batch_get_into)),
            whole_batch(bget("core", core.batch_get_into)),
            n // 2,
            "bg",
        )
        clear()
        results["put x8 threads"] = threaded(
            lambda k: store.put(k, value), lambda k: core.put(k, value), n, "t"
        )
        results["get x8 threads"] = threaded(
            whole(store.get, "/t/", "/tg/"), whole(core.get, "/t/", "/tg/"), n, "tg"
        )
        clear()
        print(f"value {a.value_kib} KiB, {n} pairs per single shape, batch {nb}; "
              "one client, adapter vs the core client it wraps")  # fmt: skip
        print(f"{'shape':<16} {'mooncake ms':>11} {'core ms':>8} {'ratio':>6} {'adapter us':>10}")
        for shape, got in results.items():
            m = statistics.median(x for x, _ in got) * 1e3
            c = statistics.median(y for _, y in got) * 1e3
            d = statistics.median(x - y for x, y in got) * 1e6
            print(f"{shape:<16} {m:>11.3f} {c:>8.3f} {m / c:>6.3f} {d:>10.1f}")
        store.close()
    finally:
        proc.terminate()
        proc.wait(15)


if __name__ == "__main__":
    main()
