"""A live backend for the dashboard tests: the top tests' processes (master, two store
nodes, a Transfer Engine pair serving /telemetry), a cluster secret, objects in the
store, a real Conductor serving /telemetry and a real audit DB filled by its decisions."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOP = Path(__file__).resolve().parent.parent / "top"
if str(TOP) not in sys.path:
    sys.path.insert(0, str(TOP))

from top_live_procs import LiveCluster, start_live, stop_live  # noqa: E402

from mooncake_core.conductor import BlockStored, Conductor, ScheduleRequest, Tier  # noqa: E402
from mooncake_core.conductor.audit import AuditWriter, WriterOptions, upgrade  # noqa: E402
from mooncake_core.config import ClusterConfig, load_config  # noqa: E402
from mooncake_core.store.auth import control_token  # noqa: E402
from mooncake_core.telemetry import (  # noqa: E402
    ComponentInfo,
    Target,
    TelemetryRegistry,
    serve_telemetry,
)

SECRET = b"web-test-secret-0123456789"
TOKEN = control_token(SECRET)
OBJECTS = [f"web/obj-{i:03d}" for i in range(30)] + ["other/x", "other/y"]
REQUESTS = 8


@dataclass
class WebBackend:
    """Everything the dashboard tests need to build an app and check results."""

    tmp: Path
    live: LiveCluster
    cfg: ClusterConfig
    master: str
    audit_url: str
    targets: list[Target]
    conductor_srv: Any

    def target_args(self) -> tuple[str, ...]:
        return tuple(f"{t.name}:{t.role}={t.url}" for t in self.targets)


def value_of(key: str) -> bytes:
    """The bytes the backend stored under ``key`` (one of ``OBJECTS``)."""
    i = OBJECTS.index(key)
    return bytes([i % 251]) * (4096 * (1 + i % 4))


def read_back(master: str, cfg: ClusterConfig, keys: list[str]) -> dict[str, bytes]:
    """Read ``keys`` through a real store client (the data path, not the master)."""
    from mooncake_core.store.client import Client
    from mooncake_core.store.client.options import ClientOptions

    opts = ClientOptions.from_cluster(cfg, master=master, connect_timeout_s=5.0)
    with Client(opts) as c:
        return {k: c.get(k) for k in keys}


def _fill_store(master: str, cfg: ClusterConfig) -> None:
    from mooncake_core.store.client import Client
    from mooncake_core.store.client.options import ClientOptions

    opts = ClientOptions.from_cluster(cfg, master=master, connect_timeout_s=5.0)
    with Client(opts) as c:
        for key in OBJECTS:
            c.put(key, value_of(key))


def _fill_audit(url: str) -> tuple[Conductor, Any]:
    upgrade(url)
    cluster = ClusterConfig()
    conductor = Conductor.from_cluster(cluster)
    prefix = tuple(range(1, 11))
    conductor.apply(BlockStored(cluster.prefill_workers[0].name, Tier.HBM, prefix))
    bs = cluster.hashing.block_size
    writer = AuditWriter.open(url, WriterOptions(batch_size=4))
    writer.start()
    now = time.time()
    for i in range(REQUESTS):
        keys = (*prefix, 100 + i, 200 + i)
        d = conductor.schedule(ScheduleRequest(f"req-{i}", keys, len(keys) * bs + 3, 16), now)
        writer.submit_source(d)
    for i in range(0, REQUESTS, 2):
        writer.update_actual(f"req-{i}", 0.2 + 0.05 * i, 0.02)
    writer.close()
    return conductor, writer


def start_backend(tmp: Path) -> WebBackend:
    """Start every process and fill the store and the audit DB."""
    (tmp / "secret").write_bytes(SECRET)
    live = start_live(tmp)
    try:
        argv = list(live.procs["master"].args)  # type: ignore[arg-type]
        master = f"127.0.0.1:{argv[argv.index('--port') + 1]}"
        cfg = load_config(live.config)
        _fill_store(master, cfg)
        url = f"sqlite:///{tmp / 'audit.db'}"
        conductor, writer = _fill_audit(url)
        reg = TelemetryRegistry(ComponentInfo("conductor", "conductor"))
        reg.register("conductor", conductor.snapshot)
        reg.register("audit", writer.snapshot, kind="audit_writer")
        srv = serve_telemetry(reg, "127.0.0.1", 0)
        targets = [*live.targets, Target("conductor", "conductor", srv.url)]
    except BaseException:
        stop_live(live)
        raise
    return WebBackend(tmp, live, cfg, master, url, targets, srv)


def stop_backend(b: WebBackend) -> None:
    b.conductor_srv.close()
    stop_live(b.live)


def login(c: Any) -> str:
    """Log TestClient ``c`` in; returns the CSRF token."""
    r = c.post("/api/auth/login", json={"token": TOKEN})
    assert r.status_code == 200, r.text
    return str(r.json()["csrf"])
