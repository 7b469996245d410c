#!/usr/bin/env python3
"""Journal overhead on PutEnd: the master with no journal vs each fsync policy.

One process: a ``MasterService`` on a free loopback port and a ``MasterClient`` on the
same event loop (so absolute latencies include both ends; compare the rows). For each
mode, interleaved per repeat:

  sequential   one writer: put_start + put_end, PutEnd latency p50 / p99
  concurrent   ``--writers`` writers at once: put pairs per second (group commit shows here)

Modes: ``off`` (no journal), ``none`` (written, never fsynced), ``batch`` (group commit
every ``--batch-ms``), ``always`` (fsync per reply). The journal lives in ``--dir``
(default: a temp dir on the same disk as /tmp).

    python bench/journal_bench.py --puts 2000 --writers 16 --repeats 3
    python bench/journal_bench.py --restart-objects 200000   # restart (replay) time only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mooncake_core.config.models import MasterConfig
from mooncake_core.store.client.async_master import MasterClient
from mooncake_core.store.ha.durable import restore_local
from mooncake_core.store.journal import JournalOptions
from mooncake_core.store.master_service import MasterService, ServiceOptions

MODES = ("off", "none", "batch", "always")


async def one(mode: str, base: Path, puts: int, writers: int, batch_ms: float) -> dict[str, float]:
    cfg = MasterConfig(max_object_size=1 << 20)
    opts = ServiceOptions(port=0, metrics_port=None)
    d = base / mode
    shutil.rmtree(d, ignore_errors=True)
    if mode == "off":
        svc = MasterService(cfg, opts)
    else:
        r = restore_local(d, cfg, JournalOptions(fsync=mode, batch_ms=batch_ms))  # type: ignore[arg-type]
        svc = MasterService(cfg, opts, state=r.state, sink=r.journal, image=r.image)
    await svc.start()
    try:
        async with MasterClient(f"127.0.0.1:{svc.port}", client_id="bench") as mc:
            await mc.mount_segment("bench/dram", 64 << 30)
            beat = asyncio.create_task(mc.keep_alive(1.0))
            lat = []
            for i in range(puts):
                await mc.put_start(f"s{i}", 4096)
                t0 = time.perf_counter()
                await mc.put_end(f"s{i}")
                lat.append(time.perf_counter() - t0)
            lat.sort()

            async def writer(w: int) -> None:
                for i in range(puts // writers):
                    await mc.put_start(f"c{w}/{i}", 4096)
                    await mc.put_end(f"c{w}/{i}")

            t0 = time.perf_counter()
            await asyncio.gather(*(writer(w) for w in range(writers)))
            rate = (puts // writers) * writers / (time.perf_counter() - t0)
            beat.cancel()
    finally:
        await svc.stop()
    fsyncs = getattr(svc.sink, "fsyncs", 0) if svc.sink is not None else 0
    return {
        "p50_ms": lat[len(lat) // 2] * 1e3,
        "p99_ms": lat[int(len(lat) * 0.99)] * 1e3,
        "puts_per_s": rate,
        "fsyncs": float(fsyncs),
    }


async def main_async(a: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    base = a.dir or Path(tempfile.mkdtemp(prefix="mc-journal-bench-"))
    out: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for _ in range(a.repeats):
        for m in MODES:
            out[m].append(await one(m, base, a.puts, a.writers, a.batch_ms))
    return out


def restart_time(base: Path, n: int) -> float:
    """Seconds ``restore_local`` takes on a log of ``n`` stored objects on 4 segments."""
    from mooncake_core.store.journal import Journal

    d = base / "restart"
    shutil.rmtree(d, ignore_errors=True)

    async def fill() -> None:
        j = Journal(d, 0, JournalOptions(fsync="none"))
        j.append(
            [
                {"t": "mount", "seg": f"s{i}", "client": f"c{i}", "cap": 1 << 40, "addr": "",
                 "loc": "cpu:0"}
                for i in range(4)
            ]
        )  # fmt: skip
        for b in range(0, n, 10_000):
            j.append(
                [
                    {"t": "stored", "key": f"model/layer/{i:012d}", "size": 65536,
                     "replicas": [[[f"s{i % 4}", (i // 4) * 65536, 65536]]]}
                    for i in range(b, min(n, b + 10_000))
                ]
            )  # fmt: skip
        await j.close()

    asyncio.run(fill())
    r = restore_local(d, MasterConfig())
    asyncio.run(r.journal.close())
    assert r.objects == n
    return r.seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--puts", type=int, default=2000)
    ap.add_argument("--writers", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-ms", type=float, default=2.0)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/out/journal"))
    ap.add_argument("--restart-objects", type=int, default=0, help="measure restart only")
    a = ap.parse_args()
    if a.restart_objects:
        base = a.dir or Path(tempfile.mkdtemp(prefix="mc-journal-bench-"))
        secs = restart_time(base, a.restart_objects)
        shutil.rmtree(base / "restart", ignore_errors=True)
        n = a.restart_objects
        print(f"restart: {n} objects in {secs:.2f} s ({n / secs:.0f} objects/s)")
        return 0
    res = asyncio.run(main_async(a))
    med = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for m, rs in res.items()}
    base = med["off"]
    print(f"{a.puts} puts, {a.writers} concurrent writers, {a.repeats} repeats (medians)\n")
    print("| journal | PutEnd p50 ms | p99 ms | p50 vs off | concurrent puts/s | vs off |")
    print("|---|---|---|---|---|---|")
    for m, r in med.items():
        print(
            f"| {m} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['p50_ms'] / base['p50_ms']:.2f}x "
            f"| {r['puts_per_s']:.0f} | {r['puts_per_s'] / base['puts_per_s']:.2f}x |"
        )
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(json.dumps({"runs": res, "median": med}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
