"""The master's journal disk fills up, gets room again, then the master is SIGKILLed.

Real processes: a `mooncake master` journaling to a small tmpfs (``SmallDisk``), two
store nodes, one client. While the disk is full, writes are refused with a clean error,
``/health`` says ``durable: false`` with the reason, nothing the failed writes reserved
stays reserved, reads keep working; once the disk has room the master takes writes
again by itself; after SIGKILL + restart every acknowledged object reads back
byte-exact, acknowledged removes stay removed, and a key whose remove failed is either
intact or cleanly gone, never another object's bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

# The master/node launchers with a journal live with the durability tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "durability"))
from durability_proc_support import (
    get_retrying,
    health,
    remove_shm_of,
    start_master,
    start_node,
)
from faults import SmallDisk, kill9

from mooncake_core.config.models import MasterConfig
from mooncake_core.store import ReplicateConfig
from mooncake_core.store.client import Client
from mooncake_core.store.client.options import ClientOptions
from mooncake_core.store.errors import NotFoundError, StoreError

pytestmark = [pytest.mark.integration]

MASTER = {"client_ttl_s": 5.0, "heartbeat_interval_s": 0.5, "unmount_grace_s": 0.5}
SIZE = 4096
ONE = ReplicateConfig(replica_num=1)


def _value(key: str, n: int = SIZE) -> bytes:
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (n // len(seed) + 1))[:n]


def _snapshot(master: Any) -> dict[str, Any]:
    with urllib.request.urlopen(master.metrics_url + "/snapshot", timeout=5) as r:
        data: dict[str, Any] = json.loads(r.read())
        return data


def test_rel_journal_disk_full_then_room_then_sigkill(tmp_path: Path) -> None:
    disk = SmallDisk(8 << 20)
    cfg = tmp_path / "mooncake.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path), "master": MASTER}))
    flags = ["--data-dir", str(disk.path / "journal")]
    master = start_master(tmp_path, MASTER, flags)
    port = int(master.address.rsplit(":", 1)[1])
    nodes = [start_node(cfg, master.address, n, "64MiB") for n in ("n0", "n1")]
    opts = ClientOptions(master=master.address, master_config=MasterConfig(**MASTER))  # type: ignore[arg-type]
    acked: set[str] = set()  # acknowledged puts still expected present
    removed_ok: set[str] = set()
    remove_failed: set[str] = set()
    outcome: dict[str, Any] = {}
    try:
        with Client(opts).setup() as c:
            for i in range(300):
                key = f"before/{i:04d}"
                c.put(key, _value(key), ONE)
                acked.add(key)
            for i in range(0, 300, 10):
                key = f"before/{i:04d}"
                c.remove(key)
                acked.discard(key)
                removed_ok.add(key)

            # ---- the disk fills up
            disk.fill()
            failed_puts = 0
            other_errors: list[str] = []
            t_full = time.monotonic()
            for i in range(400):
                key = f"full/{i:04d}"
                try:
                    c.put(key, _value(key), ONE)
                    acked.add(key)  # the last page of the log may still have had room
                except StoreError as e:
                    failed_puts += 1
                    if failed_puts == 1:
                        outcome["put_error"] = str(e)
                except Exception as e:  # not a clean, typed error
                    other_errors.append(f"{type(e).__name__}: {e}")
            outcome["put_s"] = (time.monotonic() - t_full) / 400
            for i in range(1, 300, 10):
                key = f"before/{i:04d}"
                try:
                    c.remove(key)
                    acked.discard(key)
                    removed_ok.add(key)
                except StoreError:
                    acked.discard(key)
                    remove_failed.add(key)
            assert not other_errors, other_errors[:3]
            assert failed_puts >= 300, f"only {failed_puts} of 400 puts failed on a full disk"
            assert len(remove_failed) >= 20, remove_failed
            ready = health(master)["readiness"]
            outcome["health_full"] = ready
            assert ready["durable"] is False, ready
            assert "space" in str(ready.get("journal_error", "")).lower(), ready
            # Reads keep working while writes are refused.
            for key in sorted(acked)[:20]:
                assert c.get(key) == _value(key), key
            # Nothing the refused writes reserved stays reserved.
            present_failed = {k for k in remove_failed if c.is_exist(k)}
            snap = _snapshot(master)
            used = sum(s["used"] for s in snap["segments"])
            outcome["used_full"] = used
            outcome["keys_full"] = snap["key_count"]
            expect = len(acked) + len(present_failed)
            listed = {e.key: e.state for e in c.list_keys(limit=1000).entries}
            extra = {k: v for k, v in listed.items() if k not in acked | present_failed}
            assert snap["key_count"] == expect, (
                snap["key_count"],
                expect,
                extra,
                master.text()[-3000:],
            )
            # Only the one grant this client may hold for its next put on top.
            assert snap["grant_count"] <= 1, snap["grant_count"]
            granted = int(snap["granted_bytes"])
            assert used == SIZE * expect + granted, (used, SIZE * expect, granted)

            # ---- the disk has room again: writes succeed without a restart
            disk.free()
            t_free = time.monotonic()
            while True:
                try:
                    c.put("probe/0", _value("probe/0"), ONE)
                    acked.add("probe/0")
                    break
                except StoreError:
                    assert time.monotonic() - t_free < 10, "writes never recovered"
                    time.sleep(0.1)
            outcome["recovered_s"] = time.monotonic() - t_free
            for i in range(300):
                key = f"after/{i:04d}"
                c.put(key, _value(key), ONE)
                acked.add(key)
            for i in range(0, 300, 15):
                key = f"after/{i:04d}"
                c.remove(key)
                acked.discard(key)
                removed_ok.add(key)
            assert health(master)["readiness"]["durable"] is True

            # ---- SIGKILL + restart on the same journal
            tracebacks = master.text().count("Traceback")
            outcome["log_lines"] = [ln for ln in master.text().splitlines() if "journal" in ln]
            kill9(master.proc)
            master = start_master(tmp_path, MASTER, flags, port=port)
            wrong = missing = 0
            for key in sorted(acked):
                try:
                    got = get_retrying(c, key, timeout=20.0)
                except NotFoundError:
                    missing += 1
                    continue
                if got != _value(key):
                    wrong += 1
            resurrected = [k for k in removed_ok if c.is_exist(k)]
            failed_state: dict[str, int] = {"intact": 0, "gone": 0, "wrong": 0}
            for key in remove_failed:
                try:
                    got = get_retrying(c, key, timeout=20.0)
                    failed_state["intact" if got == _value(key) else "wrong"] += 1
                except NotFoundError:
                    failed_state["gone"] += 1
            outcome.update(
                acked=len(acked),
                wrong=wrong,
                missing=missing,
                resurrected=len(resurrected),
                remove_failed=failed_state,
                tracebacks=tracebacks,
                failed_puts=failed_puts,
            )
            print("journal disk full outcome:", json.dumps(outcome, default=str))
            assert wrong == 0 and missing == 0, outcome
            assert not resurrected, resurrected[:5]
            assert failed_state["wrong"] == 0, failed_state
            assert tracebacks == 0, master.text()[-3000:]
            # Each outage is logged once when it starts and once when it ends, not per
            # refused call (hundreds). A small record can still fit the disk's last
            # block between two refusals: a second, short outage is a real one.
            down = sum(1 for ln in outcome["log_lines"] if "cannot be written" in ln)
            up = sum(1 for ln in outcome["log_lines"] if "writable again" in ln)
            assert down == up and 1 <= down <= 3, outcome["log_lines"]
    finally:
        for n in nodes:
            n.stop()
            remove_shm_of(n.proc.pid)
        master.stop(signal.SIGKILL)
        disk.close()
        os.sync()
