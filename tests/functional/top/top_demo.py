"""A live demo cluster for checking ``mooncake top`` by hand (docs/tui.md).

    python tests/functional/top/top_demo.py            # prints the top command, runs until Enter
    python tests/functional/top/top_demo.py --screenshots docs/screenshots

Starts top_live_procs' processes (master, two store nodes, a TE pair moving data) plus a
real Conductor scheduling a request every 0.3 s, its decisions written to an audit DB and
its snapshot served on /telemetry. With ``--screenshots`` it drives the app with textual's
pilot instead and saves one SVG per screen at 80x24 and 200x50.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import threading
import time
from pathlib import Path

from top_live_procs import LiveCluster, start_live, stop_live

from mooncake_core.conductor import BlockStored, Conductor, ScheduleRequest, Tier
from mooncake_core.conductor.audit import AuditWriter, WriterOptions, upgrade
from mooncake_core.config import ClusterConfig
from mooncake_core.telemetry import (
    Collector,
    ComponentInfo,
    Target,
    TelemetryRegistry,
    TelemetryServer,
    serve_telemetry,
)


def start_conductor(tmp: Path, stop: threading.Event) -> tuple[TelemetryServer, str]:
    """A Conductor fed with requests in a thread; returns its server and the audit URL."""
    url = f"sqlite:///{tmp / 'audit.db'}"
    upgrade(url)
    cluster = ClusterConfig()
    conductor = Conductor.from_cluster(cluster)
    lock = threading.Lock()
    prefix = tuple(range(1, 11))
    conductor.apply(BlockStored(cluster.prefill_workers[0].name, Tier.HBM, prefix))
    writer = AuditWriter.open(url, WriterOptions(batch_size=16, flush_interval_s=0.2))
    writer.start()
    bs = cluster.hashing.block_size
    rng = random.Random(7)

    # Request ids as the front door makes them: a long shared prefix (cmpl-<boot>-<n>).
    boot = f"cmpl-{int(time.time() * 1000):x}"

    def feed() -> None:
        i = 0
        while not stop.is_set():
            keys = (
                *prefix[: rng.randint(0, 10)],
                *(1000 * i + k for k in range(rng.randint(1, 30))),
            )
            with lock:
                d = conductor.schedule(
                    ScheduleRequest(f"{boot}-{i}", keys, len(keys) * bs + 3, 16), time.time()
                )
            writer.submit_source(d)
            if i % 2 == 0 and d.admitted:
                writer.update_actual(d.request_id, rng.uniform(0.05, 0.6), 0.02)
            i += 1
            stop.wait(0.3)
        writer.close()

    threading.Thread(target=feed, daemon=True).start()
    reg = TelemetryRegistry(ComponentInfo("conductor", "conductor", version="demo"))

    def snap() -> object:
        with lock:
            return conductor.snapshot()

    reg.register("conductor", snap)
    reg.register("audit", writer.snapshot, kind="audit_writer")
    return serve_telemetry(reg), url


def targets_of(live: LiveCluster, conductor_url: str) -> list[Target]:
    return [*live.targets, Target("conductor", "conductor", conductor_url)]


async def screenshots(targets: list[Target], audit: str, out: Path) -> None:
    from mooncake_cli.top import TopApp

    out.mkdir(parents=True, exist_ok=True)
    for size in ((80, 24), (200, 50)):
        app = TopApp(Collector(targets, timeout_s=0.8, audit_url=audit), interval_s=1.0)
        async with app.run_test(size=size) as pilot:
            await pilot.pause(6)  # a few polls so rates and sparklines have history
            for key, name in (("1", "nics"), ("2", "store"), ("3", "scheduler"), ("4", "nodes")):
                await pilot.press(key)
                await pilot.pause(1.5)
                path = out / f"top-{name}-{size[0]}x{size[1]}.svg"
                app.save_screenshot(filename=path.name, path=str(out))
                print("wrote", path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--screenshots", type=Path, default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="top-demo-"))
    stop = threading.Event()
    live = start_live(tmp)
    srv, audit = start_conductor(tmp, stop)
    targets = targets_of(live, srv.url)
    try:
        if args.screenshots:
            asyncio.run(screenshots(targets, audit, args.screenshots))
        else:
            opts = " ".join(f"--target {t.name}:{t.role}={t.url}" for t in targets)
            print(f"mooncake top --targets-only --audit-db {audit} {opts}", flush=True)
            input()
    finally:
        stop.set()
        srv.close()
        stop_live(live)


if __name__ == "__main__":
    main()
