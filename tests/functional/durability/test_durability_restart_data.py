"""The data path across a master restart: real store nodes keep the bytes, the journal
keeps the metadata; after SIGKILL + restart every acknowledged object reads back exactly."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import yaml
from durability_proc_support import (
    free_port,
    get_retrying,
    remove_shm_of,
    start_master,
    start_node,
)

from mooncake_core.config.models import MasterConfig
from mooncake_core.store import ReplicateConfig
from mooncake_core.store.client import Client
from mooncake_core.store.client.options import ClientOptions

pytestmark = [pytest.mark.integration]

MASTER = {"client_ttl_s": 5.0, "heartbeat_interval_s": 0.5, "unmount_grace_s": 0.5}


def test_objects_read_back_byte_identical_after_master_sigkill(tmp_path: Path) -> None:
    cfg = tmp_path / "mooncake.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path), "master": MASTER}))
    port = free_port()
    flags = ["--data-dir", str(tmp_path / "journal")]
    master = start_master(tmp_path, MASTER, flags, port=port)
    address = master.address
    nodes = [start_node(cfg, address, n) for n in ("n0", "n1")]
    opts = ClientOptions(master=address, master_config=MasterConfig(**MASTER))  # type: ignore[arg-type]
    try:
        written: dict[str, bytes] = {}
        with Client(opts).setup() as c:
            for i in range(40):
                data = os.urandom(1000 + i * 4099)
                c.put(f"obj/{i:03d}", data, ReplicateConfig(replica_num=2))
                written[f"obj/{i:03d}"] = data
            master.stop(signal.SIGKILL)
            master = start_master(tmp_path, MASTER, flags, port=port)
            assert "restored 40 objects, 2 segments" in master.text()
            for key, data in written.items():
                assert get_retrying(c, key) == data, key
            # Longer than client_ttl_s: the nodes keep heartbeating the restarted master.
            time.sleep(6)
            for key, data in written.items():
                assert c.get(key) == data, key
    finally:
        for n in nodes:
            n.stop()
            remove_shm_of(n.proc.pid)
        master.stop()
