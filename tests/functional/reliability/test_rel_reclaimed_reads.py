"""Readers never see reclaimed bytes (issue 16, item 4).

Real master + node processes, a tiny read lease (0.2 s). A churn thread removes keys
(forced half the time, so under a live lease too) and puts new keys of the same size,
which the allocator places on the ranges just freed. Reader threads get whatever keys
are live. Every value names its key in every 64-byte row, so a read that raced with a
reuse of its range is caught: each read must be exactly its own key's bytes or a clean
StoreError (removed meanwhile, lease outlasted), never another key's bytes. Two
reader processes (one getting over tcp, one batch-reading over shm) are stopped
(SIGSTOP) at random moments for 3 leases, so some of their transfers end long after
their lease, while plain removes free the ranges they read.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from faults import pause_for
from store_client_procs import (
    MASTER_READY,
    TEST_MASTER,
    Cluster,
    free_port,
    spawn,
)

from mooncake_core.config.models import MasterConfig
from mooncake_core.store import Client, ClientOptions
from mooncake_core.store.errors import NotFoundError, StoreError

pytestmark = pytest.mark.integration

LEASE_S = 0.2
SIZE = 1 << 20
ROW = 64
LIVE = 6  # keys alive at a time
READERS = 6
RUN_S = float(os.environ.get("MOONCAKE_REL_RECLAIM_S", "12"))
MASTER = {**TEST_MASTER, "lease_ttl_s": LEASE_S}


def value_of(key: str) -> bytes:
    row = key.encode().ljust(ROW, b".")
    return row * (SIZE // ROW)


def whose(got: bytes) -> set[bytes]:
    """The key names found in the rows of a value."""
    return {got[i : i + ROW].rstrip(b".") for i in range(0, len(got), ROW)}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    cfg = tmp_path / "mooncake.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path), "master": MASTER}))
    port = free_port()
    master = spawn(
        ["master", "--config", str(cfg), "--port", str(port), "--metrics-port", "0"],
        MASTER_READY,
    )
    c = Cluster(cfg, master, f"127.0.0.1:{port}", {})
    try:
        c.start_node("n0", size="32MiB")
        yield c
    finally:
        c.close()


def start_reader(c: Cluster, mode: str) -> subprocess.Popen[str]:
    repo = Path(__file__).resolve().parents[3]
    script = str(Path(__file__).with_name("reclaim_reader.py"))
    p = subprocess.Popen(
        [sys.executable, script, c.address, str(LEASE_S), str(SIZE), str(ROW), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "ready"
    return p


def client(c: Cluster) -> Client:
    opts = ClientOptions(master=c.address, master_config=MasterConfig(**MASTER), transport="tcp")
    return Client(opts).setup()


def test_rel_reads_racing_removal_and_reuse_never_return_other_bytes(cluster: Cluster) -> None:
    stop = threading.Event()
    live: list[str] = []
    lock = threading.Lock()
    tally: Counter[str] = Counter()
    stalled: Counter[str] = Counter()
    wrong: list[str] = []
    churned = [0]

    with client(cluster) as w:
        for i in range(LIVE):
            w.put(f"obj-{i:06d}", value_of(f"obj-{i:06d}"))
            live.append(f"obj-{i:06d}")

    def churn() -> None:
        rng = random.Random(1)
        n = LIVE
        with client(cluster) as c:
            while not stop.is_set():
                with lock:
                    old = live.pop(0)
                try:
                    c.remove(old, force=rng.random() < 0.5)
                except NotFoundError:  # evicted: held ranges filled the segment
                    tally["remove OBJECT_NOT_FOUND"] += 1
                except StoreError:
                    c.remove(old, force=True)  # leased: the forced path, under the lease
                key = f"obj-{n:06d}"
                n += 1
                while not stop.is_set():
                    try:
                        c.put(key, value_of(key))
                        break
                    except StoreError as e:  # STORE_FULL: removed ranges still held
                        tally[f"put {e.code.name}"] += 1
                        time.sleep(0.02)
                with lock:
                    live.append(key)
                churned[0] += 1

    def reader(c: Client, seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            with lock:
                key = rng.choice(live)
            try:
                got = c.get(key)
            except StoreError as e:
                tally[e.code.name] += 1
                continue
            if got == value_of(key):
                tally["exact"] += 1
            else:
                tally["WRONG"] += 1
                names = sorted(n.decode(errors="replace") for n in whose(got))[:4]
                wrong.append(f"{key}: {len(got)} bytes naming {names}")

    # Readers share one client: a get waits for the others' transfers between its
    # GetReplicaList and its own transfer, as a busy client does.
    with client(cluster) as rc:
        threads = [threading.Thread(target=churn)]
        threads += [threading.Thread(target=reader, args=(rc, s)) for s in range(READERS)]
        for t in threads:
            t.start()
        # Reader processes stall (SIGSTOP) at random moments for 3 leases, as a process
        # does in a GC pause or under VM steal: some stall between their GetReplicaList
        # and the end of their transfer, while plain removes free the ranges they read.
        # One gets over tcp, one batch-reads over shm (copies made in the reader).
        procs = [start_reader(cluster, mode) for mode in ("get", "batch")]
        end = time.monotonic() + RUN_S
        prng = random.Random(3)
        pauses = 0
        while time.monotonic() < end:
            time.sleep(prng.uniform(0.1, 0.4))
            pause_for(prng.choice(procs), 3 * LEASE_S)
            pauses += 1
        stop.set()
        for t in threads:
            t.join(30)
    for p in procs:
        out, _ = p.communicate("", timeout=60)  # closing stdin ends it
        for line in out.splitlines():
            word = line.split(" ", 1)[0]
            if word == "WRONG":
                wrong.append(f"(stalled reader) {line[6:]}")
            if word != "ready":
                stalled[word] += 1
    checked = sum(n for k, n in tally.items() if not k.startswith(("put ", "remove ")))
    print(f"stalled readers: {dict(stalled)}")
    checked += sum(stalled.values())
    print(f"reads: {dict(tally)}; {checked} checked; churned {churned[0]} keys in {RUN_S:.0f} s")
    print(f"readers stalled {pauses} x {3 * LEASE_S:.1f} s")
    assert not wrong, f"{len(wrong)} of {checked} reads returned other bytes: {wrong[:5]}"
    assert tally["exact"] >= 50, tally  # the run really read
    assert stalled["exact"] >= 20, stalled
    assert churned[0] >= 20, churned
