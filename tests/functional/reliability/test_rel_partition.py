"""Partition a store node from the master (link down, then up): it re-mounts exactly once."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
import yaml
from store_client_procs import NODE_READY, TEST_MASTER

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from tests.netns_util import NetnsPair, netns_pair, netns_unavailable_reason  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.privileged]

MASTER_READY = re.compile(r"serving on ([\d.]+):(\d+)")
PORT = 50561  # inside the test's own namespace: nothing else binds there

_SNAPSHOT = """
import asyncio, json, sys
from mooncake_core.store.client.async_master import MasterClient
async def main():
    async with MasterClient(sys.argv[1], timeout_s=5) as mc:
        s = await mc.get_snapshot()
        print(json.dumps({"clients": s.client_count,
                          "segments": sorted(f"{g.name}@{g.client_id}" for g in s.segments)}))
asyncio.run(main())
"""


@pytest.fixture
def rig() -> Iterator[NetnsPair]:
    reason = netns_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with netns_pair(1) as pair:
        yield pair


def _start(pair: NetnsPair, side: str, args: list[str], ready: re.Pattern[str]) -> list[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = pair.python(side, "-m", "mooncake_cli", *args, stderr=subprocess.PIPE, env=env)  # type: ignore[arg-type]
    assert p.stderr is not None
    buf = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and p.poll() is None:
        if select.select([p.stderr], [], [], 0.2)[0]:
            buf += os.read(p.stderr.fileno(), 65536)
            if ready.search(re.sub(r"\s+", " ", buf.decode(errors="replace"))):
                log = [buf.decode(errors="replace")]
                # Keep draining so a chatty process never blocks on a full pipe.
                threading.Thread(target=_drain, args=(p.stderr, log), daemon=True).start()
                return log
    raise AssertionError(f"{args[:2]} did not start: {buf.decode(errors='replace')[-2000:]}")


def _drain(stream: IO[bytes], log: list[str]) -> None:
    for line in stream:
        log.append(line.decode(errors="replace"))


def _snapshot(pair: NetnsPair, master: str) -> dict[str, object]:
    r = pair.run(
        "a", [sys.executable, "-c", _SNAPSHOT, master], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return dict(json.loads(r.stdout))


def _wait(pair: NetnsPair, master: str, want: list[str], timeout: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        snap = _snapshot(pair, master)
        if [s.split("@")[0] for s in snap["segments"]] == want:  # type: ignore[attr-defined]
            return snap
        if time.monotonic() > deadline:
            raise AssertionError(f"segments {snap} never became {want}")
        time.sleep(0.5)


def test_rel_partitioned_node_reconnects_and_mounts_once(rig: NetnsPair, tmp_path: Path) -> None:
    cfg = tmp_path / "mooncake.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path), "master": TEST_MASTER}))
    a, b = rig.links[0].addr_a, rig.links[0].addr_b
    master = f"{a}:{PORT}"
    _start(
        rig,
        "a",
        ["master", "--config", str(cfg), "--host", a, "--port", str(PORT), "--metrics-port", "0"],
        MASTER_READY,
    )
    node = ["store", "node", "--name", "n0", "--size", "16MiB", "--master", master]
    node_log = _start(
        rig, "b", [*node, "--host", b, "--config", str(cfg), "--metrics-port", "0"], NODE_READY
    )
    before = _wait(rig, master, ["n0"], 10)
    assert before["clients"] == 1

    rig.link_down(0)
    # The master expires the silent node after client_ttl_s (2 s in TEST_MASTER).
    _wait(rig, master, [], TEST_MASTER["client_ttl_s"] + 10)
    rig.link_up(0)
    after = _wait(rig, master, ["n0"], 20)
    time.sleep(2 * TEST_MASTER["heartbeat_interval_s"] + 1)  # a duplicate would show by now
    final = _snapshot(rig, master)
    assert final == after, (after, final)
    assert "remounted n0" in "".join(node_log), "".join(node_log)[-1500:]
    assert final["clients"] == 1 and len(final["segments"]) == 1, final  # type: ignore[arg-type]
