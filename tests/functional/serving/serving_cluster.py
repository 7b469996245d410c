"""Start a small real cluster (master, store nodes, conductor, workers) for serving tests.

Every component is a real ``mooncake ...`` process on 127.0.0.1 with free ports and a
temporary config (tiny model: 2 layers, hidden 64), so the tests exercise the same
commands ``mooncake cluster up`` runs.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

TINY_MODEL = {
    "name": "mooncake-test",
    "layers": 2,
    "hidden": 64,
    "heads": 4,
    "kv_heads": 2,
    "intermediate": 128,
    "max_seq_len": 1024,
    "seed": 7,
}


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1, below the kernel's ephemeral range.

    Components also bind port 0 (store clients' data servers); ports picked from the
    ephemeral range could be taken by those before the component meant to use them
    starts, so the fixed ports come from 20000-32767.
    """
    rng = random.Random()
    ports: list[int] = []
    while len(ports) < n:
        port = rng.randrange(20000, 32768)
        if port in ports:
            continue
        with contextlib.closing(socket.socket()) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def make_config(
    tmp: Path,
    *,
    prefill: int = 1,
    decode: int = 1,
    store_nodes: int = 2,
    block_size: int = 16,
    conductor: dict[str, Any] | None = None,
    max_batch: int = 8,
    model: dict[str, Any] | None = None,
    cache_blocks: int = 256,
    decode_cache_blocks: int | None = None,
) -> dict[str, Any]:
    """A cluster config dict with free ports, rooted in ``tmp``."""
    ports = iter(free_ports(5 + 3 * store_nodes + 2 * (prefill + decode)))
    cfg: dict[str, Any] = {
        "name": "serving-test",
        "state_dir": str(tmp / "state"),
        "hashing": {"block_size": block_size, "seed": 0},
        "model": model or TINY_MODEL,
        # fast_port too: its default (50151) is one fixed port every test cluster would share
        "master": {"port": next(ports), "metrics_port": next(ports), "fast_port": next(ports)},
        "store_nodes": [
            {
                "name": f"store-{i}",
                "segment_size": 64 << 20,
                "data_port": next(ports),
                "metrics_port": next(ports),
            }
            for i in range(store_nodes)
        ],
        "conductor": {
            "http_port": next(ports),
            **(conductor or {}),
        },
        "prefill_workers": [
            {
                "name": f"prefill-{i}",
                "rpc_port": next(ports),
                "data_port": next(ports),
                "local_cache_blocks": cache_blocks,
            }
            for i in range(prefill)
        ],
        "decode_workers": [
            {
                "name": f"decode-{i}",
                "rpc_port": next(ports),
                "data_port": next(ports),
                "local_cache_blocks": decode_cache_blocks or cache_blocks,
                "max_batch": max_batch,
            }
            for i in range(decode)
        ],
    }
    return cfg


@dataclass
class Cluster:
    """Handles of a running test cluster."""

    config: dict[str, Any]
    config_path: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.config['conductor']['http_port']}"

    def log(self, name: str) -> str:
        assert self.logs is not None
        p = self.logs / f"{name}.log"
        return p.read_text(errors="replace") if p.exists() else ""


def _wait(pred: Any, timeout: float, what: str, procs: dict[str, Any], logs: Path) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for name, p in procs.items():
            if p.poll() is not None:
                text = (logs / f"{name}.log").read_text(errors="replace")
                raise RuntimeError(
                    f"{name} exited with {p.returncode} while waiting for {what}:\n{text[-3000:]}"
                )
        if pred():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready after {timeout}s")


def _tcp_open(port: int) -> bool:
    with contextlib.closing(socket.socket()) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def run_cluster(
    tmp: Path,
    *,
    with_store: bool = True,
    conductor_args: tuple[str, ...] = (),
    secret: bytes | None = None,
    ready_timeout_s: float = 60.0,
    **kwargs: Any,
) -> Iterator[Cluster]:
    """Start the cluster described by :func:`make_config` and stop it afterwards.

    With ``secret``, the config names a 0600 secret file and every component uses it.
    ``ready_timeout_s`` bounds each worker's and the conductor's start (a real model
    loads and self-profiles first).
    """
    from mooncake_core.worker.service import probe_worker

    cfg = make_config(tmp, **kwargs)
    if secret is not None:
        sf = tmp / "secret"
        sf.write_bytes(secret)
        sf.chmod(0o600)
        cfg["secret_file"] = str(sf)
    path = tmp / "mooncake.yaml"
    path.write_text(yaml.safe_dump(cfg))
    logs = tmp / "logs"
    logs.mkdir(exist_ok=True)
    cl = Cluster(cfg, path, logs=logs)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")

    def start(name: str, *args: str) -> None:
        out = open(logs / f"{name}.log", "wb")  # noqa: SIM115
        cl.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "mooncake_cli", *args, "--config", str(path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )

    try:
        if with_store:
            start("master", "master")
            _wait(lambda: _tcp_open(cfg["master"]["port"]), 30, "master", cl.procs, logs)
            for s in cfg["store_nodes"]:
                start(s["name"], "store", "node", "--name", s["name"])
        for w in cfg["prefill_workers"]:
            extra = () if with_store else ("--no-store",)
            start(w["name"], "worker", "prefill", "--name", w["name"], *extra)
        for w in cfg["decode_workers"]:
            start(w["name"], "worker", "decode", "--name", w["name"])
        for w in cfg["prefill_workers"] + cfg["decode_workers"]:
            addr = f"127.0.0.1:{w['rpc_port']}"
            ready = ready_timeout_s
            _wait(lambda a=addr: probe_worker(a, 0.5, secret), ready, w["name"], cl.procs, logs)
        start("conductor", "conductor", "serve", *conductor_args)

        def healthy() -> bool:
            try:
                return httpx.get(cl.url + "/health", timeout=0.5).status_code == 200
            except httpx.HTTPError:
                return False

        _wait(healthy, ready_timeout_s, "conductor", cl.procs, logs)
        yield cl
    finally:
        for name in reversed(list(cl.procs)):
            p = cl.procs[name]
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in cl.procs.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


async def prefill_and_decode(
    cfg: dict[str, Any], prefill: int, rid: str, tokens: list[int], fetch: list[int], n: int
) -> tuple[Any, list[int]]:
    """Act as the conductor by hand for one request: prefill worker ``prefill`` (fetching
    the Store blocks ``fetch`` first, storing its new blocks) writes the KV into
    decode-0's pool, which decodes ``n`` tokens.

    Returns:
        The prefill reply and every output token (the prefill's first, then decode's).
    """
    import grpc

    from mooncake_core.rpc import worker_pb2 as pb
    from mooncake_core.rpc import worker_pb2_grpc as pbg

    def stub(port: int) -> Any:
        return pbg.WorkerStub(grpc.aio.insecure_channel(f"127.0.0.1:{port}"))

    pre = stub(cfg["prefill_workers"][prefill]["rpc_port"])
    dec = stub(cfg["decode_workers"][0]["rpc_port"])
    sampling = pb.Sampling(max_tokens=n)
    prep = await dec.Prepare(pb.PrepareRequest(request_id=rid, num_tokens=len(tokens)))
    target = pb.DecodeTarget(
        segment=prep.segment,
        seq_id=prep.seq_id,
        blocks=list(prep.blocks),
        block_nbytes=prep.block_nbytes,
        layer_nbytes=prep.layer_nbytes,
    )
    rep = await pre.Prefill(
        pb.PrefillRequest(
            request_id=rid,
            tokens=tokens,
            sampling=sampling,
            fetch_keys=fetch,
            target=target,
            store_kv=True,
        )
    )
    out = [rep.first_token]
    admit = pb.AdmitRequest(
        request_id=rid,
        seq_id=prep.seq_id,
        tokens=tokens,
        next_token=rep.first_token,
        sampling=sampling,
    )
    async for ev in dec.Admit(admit):
        out.append(ev.token)
    return rep, out
