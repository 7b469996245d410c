"""Randomized fault test (Jepsen-style): clients put/get/remove while a nemesis breaks things.

A real master with its journal on a small tmpfs (``SmallDisk``), two *stable* store
nodes (``s0``, ``s1``) and one *mortal* node (``m0``, restarted as ``m1``, ``m2`` ...),
and ``MOONCAKE_JEPSEN_WORKERS`` (4) client threads, each owning its keys, doing put /
upsert / get / remove (force) of unique values (each value names its key and write id;
the history keeps its sha256). Every write asks for ``replica_num=2``.

The nemesis (seeded: ``MOONCAKE_JEPSEN_SEED``, printed) runs one fault at a time, with
quiet gaps, for ``MOONCAKE_JEPSEN_SECONDS`` (40):

- ``pause_master``: SIGSTOP the master for 0.5 s .. 2.2 x ``client_ttl_s``, SIGCONT;
- ``kill_master``: SIGKILL, restart on the same port and journal;
- ``pause_node``: SIGSTOP a node (stable or mortal) for at most 0.4 x ``client_ttl_s``
  (cut from everyone: master and clients);
- ``partition_node``: cut one node's link to the master (each node dials the master
  through its own ``CutProxy``) for at most 0.4 x ``client_ttl_s``, while the clients
  still reach both (``test_rel_partition.py`` does a netns partition past the TTL);
- ``kill_node``: SIGKILL the mortal node, start the next one under a new name;
- ``fill_disk``: fill the journal disk, hold, free it;
- ``fill_free_kill``: fill, free, let writes be acknowledged, SIGKILL + restart the master.

Model (what the checker may expect; ``jepsen_support.py`` has the exact rules):

- The master's metadata is durable (journal, ``fsync: always``): a master pause, kill or
  full disk loses nothing acknowledged and never cross-wires an object.
- A node's DRAM is the data: a node SIGKILL loses the replicas on it. Only the mortal
  node is ever killed, and each write has two replicas on distinct segments, so an
  acknowledged object keeps a replica on a stable node. A write whose recorded placement
  (``stat`` after the put) lies only on killed nodes may vanish (reported as excused).
- Node pauses stay well under ``client_ttl_s``: the master must not expire a paused node.
  A paused *master* must not expire healthy nodes either (issue 16, item 1).
- Indeterminate operations (timeouts, master gone) may or may not take effect; the
  worker stops using a key after one (so each key has at most one open operation).
- No eviction: live data stays far below the 0.90 watermark.

After the run everything is healed (disk freed, every process resumed and alive), the
test waits ``put_timeout_s`` + 1 s, then reads every key ever touched. The checker then
verifies: every acknowledged write not later replaced or removed is readable with its
exact bytes; no read ever returned bytes that were never written to that key; a key
whose remove was acknowledged stays absent unless re-put. And the healed cluster must
take a new write.

HA mode (``test_rel_jepsen_ha_leader_faults_lose_nothing``) runs the same workers and
checker against real etcd and three ``--ha`` masters, everyone on ``etcd://``; its
nemesis pauses the leader (shorter than and past its lease), kills it, partitions one
master (mostly the leader) from etcd while clients still reach it, pauses etcd, and
pauses or kills nodes (``HaNemesis``).

On failure the history (``history.jsonl``), every process's log and a summary are kept
in a directory named in the assertion message, with the command that replays the same
fault schedule (timing still differs run to run: the schedule is seeded, the interleaving
is not).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from durability_proc_support import ETCD, start_etcd
from faults import CutProxy, SmallDisk, kill9, pause_for
from jepsen_support import History, check, digest, make_value, parse_head
from store_client_procs import (
    MASTER_READY,
    Cluster,
    Proc,
    free_port,
    remove_shm_of,
    spawn,
    stop,
)

from mooncake_core.config.models import MasterConfig
from mooncake_core.store import ReplicateConfig
from mooncake_core.store.client import Client
from mooncake_core.store.client.options import ClientOptions
from mooncake_core.store.errors import (
    ConflictError,
    ErrorCode,
    InvalidArgumentError,
    NotFoundError,
    StoreError,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SECONDS = float(os.environ.get("MOONCAKE_JEPSEN_SECONDS", "40"))
WORKERS = int(os.environ.get("MOONCAKE_JEPSEN_WORKERS", "4"))
SEED = int(os.environ.get("MOONCAKE_JEPSEN_SEED") or random.SystemRandom().randrange(1 << 31))
LIVE = 10  # present keys per worker: 4 x 10 x 64 KiB x 2 replicas, far below 3 x 64 MiB
SIZES = (300, 4096, 20_000, 65_536)
DISK = 16 << 20

MASTER: dict[str, Any] = {
    "client_ttl_s": 4.0,
    "heartbeat_interval_s": 0.5,
    "unmount_grace_s": 0.5,
    "put_timeout_s": 5.0,
    "lease_ttl_s": 2.0,  # reads lease for 2 s (10 by default): upserts are refused less
    "max_slice_size": 16 << 20,
    "max_object_size": 100 << 20,
    "snapshot_every": 1000,  # snapshots happen, on a disk that fills up
    "fsync": "always",
}
TTL = MASTER["client_ttl_s"]
REFUSED = (ErrorCode.OBJECT_LEASED, ErrorCode.OBJECT_ALREADY_EXISTS)
"""Refusals of PutStart/Upsert itself: the write definitely had no effect."""
RPC_TIMEOUT = 3.0


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:300]


class RigBase:
    """What both rigs share: the store nodes (two stable, one mortal), logs, counters.

    ``address`` is the master target every node and client is given.
    """

    cluster: Cluster  # set by the subclass once its first master runs

    def __init__(self, cfg: Path, address: str) -> None:
        self.cfg = cfg
        self.address = address
        self.procs: list[tuple[str, Any]] = []  # every process started, for the logs
        self.masters = 0  # master incarnations started
        self.mortal_seq = 0
        self.mortal = "m0"
        self.counters: Counter[str] = Counter()  # summed over master incarnations

    def start_nodes(self) -> None:
        names = ["s0", "s1", self.mortal]
        threads = [threading.Thread(target=self.start_node, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        missing = set(names) - set(self.cluster.nodes)
        assert not missing, f"nodes {sorted(missing)} did not start"

    def start_node(self, name: str) -> Proc:
        p = self.cluster.start_node(name)
        self.procs.append((name, p))
        return p

    def _scrape(self, metrics_port: int | str) -> None:
        """Add one master's counters to ``counters`` (they restart at 0 with the master)."""
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        with contextlib.suppress(OSError):
            text = urllib.request.urlopen(url, timeout=2).read().decode()
            for line in text.splitlines():
                for name in ("master_lost_objects_total", "master_evicted_objects_total"):
                    if line.startswith(name + " "):
                        self.counters[name] += int(float(line.split()[1]))

    def scrape(self) -> None:
        """Add the live masters' counters to ``counters``."""
        raise NotImplementedError

    def heal(self, history: History) -> None:
        """End every fault: every process resumed and alive, a master serving."""
        raise NotImplementedError

    def _close_nodes(self) -> None:
        for p in self.cluster.nodes.values():
            with contextlib.suppress(Exception):
                stop(p)
            remove_shm_of(p.proc.pid)

    def dump_logs(self, out: Path) -> None:
        (out / "logs").mkdir(exist_ok=True)
        for name, p in self.procs:
            (out / "logs" / f"{name}.log").write_text("".join(p.log))


class Rig(RigBase):
    """The real processes: master (journal on ``disk``), stable nodes, one mortal node."""

    def __init__(self, tmp: Path, disk: SmallDisk) -> None:
        self.disk = disk
        cfg = tmp / "mooncake.yaml"
        master = {**MASTER, "data_dir": str(disk.path / "journal")}
        cfg.write_text(yaml.safe_dump({"state_dir": str(tmp), "master": master}))
        self.port = free_port()
        super().__init__(cfg, f"127.0.0.1:{self.port}")
        self.links: dict[str, CutProxy] = {}  # node name -> its link to the master
        self.cluster = Cluster(cfg, self._spawn_master(), self.address, {})

    def start_node(self, name: str) -> Proc:
        link = self.links[name] = CutProxy(self.port)
        p = self.cluster.start_node(name, master=f"127.0.0.1:{link.port}")
        self.procs.append((name, p))
        return p

    def _spawn_master(self) -> Proc:
        cmd = ["master", "--config", str(self.cfg), "--port", str(self.port)]
        p = spawn([*cmd, "--metrics-port", "0"], MASTER_READY)
        self.masters += 1
        self.procs.append((f"master-{self.masters}", p))
        return p

    @property
    def master(self) -> Proc:
        return self.cluster.master

    def scrape(self) -> None:
        self._scrape(self.master.match[3])

    def restart_master(self, history: History) -> None:
        """Start the master again on its port and journal; a refusal is recorded, retried."""
        for attempt in range(4):
            try:
                self.cluster.master = self._spawn_master()
                return
            except AssertionError as e:
                tail = str(e).strip().splitlines()[-1:] or [""]
                history.record("nemesis", f="master_start_failed", attempt=attempt, err=tail[0])
                self.disk.free()
                time.sleep(1.0)
        raise AssertionError("the master did not start again after 4 attempts")

    def heal(self, history: History) -> None:
        self.disk.free()
        for link in self.links.values():
            link.heal()
        for _, p in [("master", self.master), *self.cluster.nodes.items()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.proc.pid, signal.SIGCONT)
        if self.master.proc.poll() is not None:
            history.record("nemesis", f="heal_master_restart")
            self.restart_master(history)

    def close(self) -> None:
        self._close_nodes()
        with contextlib.suppress(Exception):
            stop(self.master)
        for link in self.links.values():
            link.close()


class NemesisBase:
    """Seeded faults, one at a time, each recorded in the history (start and end).

    A subclass names its faults (method, weight) in ``FAULTS``; the node faults are here.
    """

    FAULTS: tuple[tuple[str, float], ...] = ()

    def __init__(self, rig: RigBase, history: History, seed: int) -> None:
        self.rig = rig
        self.h = history
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.done: Counter[str] = Counter()
        self.error: str | None = None

    def run(self) -> None:
        try:
            names = [f for f, _ in self.FAULTS]
            weights = [w for _, w in self.FAULTS]
            while not self.stop.wait(self.rng.uniform(0.5, 2.0)):
                f = self.rng.choices(names, weights)[0]
                getattr(self, f)()
                self.done[f] += 1
        except BaseException as e:
            self.error = _err(e)
            self.h.record("nemesis", f="error", err=self.error)

    def pause_node(self) -> None:
        name = self.rng.choice(["s0", "s1", self.rig.mortal])
        s = round(self.rng.uniform(0.2, 0.4 * TTL), 2)
        self.h.record("nemesis", f="pause_node", phase="start", node=name, seconds=s)
        pause_for(self.rig.cluster.nodes[name].proc, s)
        self.h.record("nemesis", f="pause_node", phase="end", node=name)

    def kill_node(self) -> None:
        old = self.rig.mortal
        p = self.rig.cluster.nodes.pop(old)
        # Recorded before the signal: a read after this line may find the replicas gone.
        self.h.record("nemesis", f="kill_node", node=old, segments=[p.match[1]])
        kill9(p.proc)
        remove_shm_of(p.proc.pid)
        self.rig.mortal_seq += 1
        self.rig.mortal = f"m{self.rig.mortal_seq}"
        self.rig.start_node(self.rig.mortal)
        self.h.record("nemesis", f="node_started", node=self.rig.mortal)


class Nemesis(NemesisBase):
    """The single journaled master's faults, the node faults and a full journal disk."""

    rig: Rig

    FAULTS = (
        ("pause_master", 2.0),
        ("kill_master", 2.0),
        ("pause_node", 1.5),
        ("partition_node", 1.5),
        ("kill_node", 1.5),
        ("fill_disk", 1.5),
        ("fill_free_kill", 1.0),
    )

    def __init__(self, rig: Rig, history: History, seed: int) -> None:
        super().__init__(rig, history, seed)
        self.rig = rig

    def partition_node(self) -> None:
        name = self.rng.choice(["s0", "s1", self.rig.mortal])
        s = round(self.rng.uniform(0.2, 0.4 * TTL), 2)
        link = self.rig.links[name]
        self.h.record("nemesis", f="partition_node", phase="start", node=name, seconds=s)
        link.cut()
        try:
            time.sleep(s)
        finally:
            link.heal()
        self.h.record("nemesis", f="partition_node", phase="end", node=name)

    def pause_master(self) -> None:
        s = round(self.rng.uniform(0.5, 2.2 * TTL), 2)
        self.h.record("nemesis", f="pause_master", phase="start", seconds=s)
        pause_for(self.rig.master.proc, s)
        self.h.record("nemesis", f="pause_master", phase="end")

    def _kill_master(self) -> None:
        self.rig.scrape()
        self.h.record("nemesis", f="kill_master", phase="start")
        kill9(self.rig.master.proc)
        time.sleep(self.rng.uniform(0.0, 1.5))
        self.rig.restart_master(self.h)
        self.h.record("nemesis", f="kill_master", phase="end")

    def kill_master(self) -> None:
        self._kill_master()

    def fill_disk(self) -> None:
        s = round(self.rng.uniform(1.0, 4.0), 2)
        n = self.rig.disk.fill()
        self.h.record("nemesis", f="fill_disk", phase="start", bytes=n, seconds=s)
        time.sleep(s)
        self.rig.disk.free()
        self.h.record("nemesis", f="fill_disk", phase="end")

    def fill_free_kill(self) -> None:
        self.fill_disk()
        time.sleep(self.rng.uniform(0.5, 2.0))  # writes are acknowledged again (or not)
        self._kill_master()


@dataclass
class Worker:
    """One client thread owning keys ``j/<wid>/<n>``; a key is retired after an open op."""

    wid: int
    rig: RigBase
    h: History
    seed: int
    live: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    own: set[str] = field(default_factory=set)  # digests of this worker's writes
    errors: Counter[str] = field(default_factory=Counter)
    seq: int = 0
    crashed: str | None = None

    def run(self, deadline: float) -> None:
        rng = random.Random(f"{self.seed}-{self.wid}")
        opts = ClientOptions(
            master=self.rig.address,
            master_config=MasterConfig(**MASTER),
            rpc_timeout_s=RPC_TIMEOUT,
            transport="tcp" if self.wid % 2 else "auto",
        )
        try:
            with Client(opts).setup() as cl:
                while time.monotonic() < deadline:
                    if not self.step(cl, rng):
                        time.sleep(0.05)
        except BaseException as e:
            self.crashed = _err(e)

    def _key(self) -> str:
        self.seq += 1
        return f"j/{self.wid}/{self.seq}"

    def _retire(self, key: str) -> None:
        for keys in (self.live, self.removed):
            if key in keys:
                keys.remove(key)

    def step(self, cl: Client, rng: random.Random) -> bool:
        r = rng.random()
        if not self.live or (r < 0.30 and len(self.live) < LIVE):
            return self.write(cl, rng, self._key(), "put")
        if r < 0.38 and self.removed:
            return self.write(cl, rng, self.removed[-1], "put")
        if r < 0.72:
            pool = self.removed if self.removed and rng.random() < 0.15 else self.live
            return self.get(cl, rng.choice(pool))
        if r < 0.84:
            return self.write(cl, rng, rng.choice(self.live), "upsert")
        return self.remove(cl, rng.choice(self.live))

    def write(self, cl: Client, rng: random.Random, key: str, f: str) -> bool:
        self.seq += 1
        write = f"w{self.wid}-{self.seq}"
        value = make_value(key, write, rng.choice(SIZES), rng)
        d = digest(value)
        self.own.add(d)
        op = self.h.invoke(f"w{self.wid}", f, key, write=write, digest=d)
        try:
            (cl.put if f == "put" else cl.upsert)(key, value, ReplicateConfig(replica_num=2))
        except (InvalidArgumentError, ConflictError) as e:
            if isinstance(e, InvalidArgumentError) or e.code in REFUSED:
                exists = {"exists": True} if e.code == ErrorCode.OBJECT_ALREADY_EXISTS else {}
                self.h.complete(op, "fail", err=_err(e), **exists)  # refused: no change
                self.errors[f"{f}:{e.code.name}"] += 1
                return False
            self.h.complete(op, "info", err=_err(e))
            self.errors[f"{f}:{e.code.name}"] += 1
            self._retire(key)
            return False
        except Exception as e:  # the write may or may not have happened
            self.h.complete(op, "info", err=_err(e))
            self.errors[f"{f}:{type(e).__name__}"] += 1
            self._retire(key)
            return False
        self.h.complete(op, "ok")
        self._retire(key)
        self.live.append(key)
        with contextlib.suppress(StoreError):
            segs = {s.segment for r in cl.stat(key).replicas for s in r}
            self.h.record("placement", write=write, segments=sorted(segs))
        return True

    def get(self, cl: Client, key: str) -> bool:
        op = self.h.invoke(f"w{self.wid}", "get", key)
        try:
            value = cl.get(key)
        except NotFoundError:
            self.h.complete(op, "ok", digest=None)
            return True
        except Exception as e:
            self.h.complete(op, "fail", err=_err(e))
            self.errors[f"get:{type(e).__name__}"] += 1
            return False
        d = digest(value)
        extra = {} if d in self.own else {"head": parse_head(value[:512]), "size": len(value)}
        self.h.complete(op, "ok", digest=d, **extra)
        return True

    def remove(self, cl: Client, key: str) -> bool:
        op = self.h.invoke(f"w{self.wid}", "remove", key)
        try:
            cl.remove(key, force=True)
        except NotFoundError:
            self.h.complete(op, "ok", absent=True)
            return True
        except InvalidArgumentError as e:
            self.h.complete(op, "fail", err=_err(e))
            return False
        except Exception as e:
            self.h.complete(op, "info", err=_err(e))
            self.errors[f"remove:{type(e).__name__}"] += 1
            self._retire(key)
            return False
        self.h.complete(op, "ok")
        self._retire(key)
        self.removed = [*self.removed[-9:], key]
        return True


def _final_reads(rig: RigBase, h: History, keys: list[str], budget_s: float) -> None:
    """Read every key once more, retrying transient errors; the last error is a fail."""
    opts = ClientOptions(
        master=rig.address, master_config=MasterConfig(**MASTER), rpc_timeout_s=5.0
    )
    deadline = time.monotonic() + budget_s
    with Client(opts).setup() as cl:
        for key in keys:
            op = h.invoke("final", "get", key, final=True)
            key_deadline = min(deadline, time.monotonic() + 10.0)
            while True:
                try:
                    value = cl.get(key)
                except NotFoundError:
                    h.complete(op, "ok", digest=None)
                    break
                except Exception as e:
                    if time.monotonic() < key_deadline:
                        time.sleep(0.2)
                        continue
                    h.complete(op, "fail", err=_err(e))
                    break
                d = digest(value)
                h.complete(op, "ok", digest=d, head=parse_head(value[:512]), size=len(value))
                break


def _probe_write(rig: RigBase, timeout_s: float) -> str | None:
    """The healed cluster takes a new write and reads it back; None, or the last error."""
    opts = ClientOptions(
        master=rig.address, master_config=MasterConfig(**MASTER), rpc_timeout_s=5.0
    )
    deadline = time.monotonic() + timeout_s
    last = "no attempt"
    with Client(opts).setup() as cl:
        while time.monotonic() < deadline:
            key = f"probe/{time.monotonic_ns()}"
            try:
                cl.put(key, b"probe" * 100, ReplicateConfig(replica_num=2))
                if cl.get(key) == b"probe" * 100:
                    return None
                last = "read back other bytes"
            except Exception as e:
                last = _err(e)
            time.sleep(0.5)
    return last


def test_rel_jepsen_acknowledged_writes_survive_random_faults(tmp_path: Path) -> None:
    print(f"jepsen seed {SEED} ({SECONDS:.0f} s, {WORKERS} workers)")
    h = History()
    with SmallDisk(DISK) as disk:
        rig = Rig(tmp_path, disk)
        try:
            rig.start_nodes()
            _run(rig, h, Nemesis(rig, h, SEED), SECONDS, "test_rel_jepsen_acknowledged")
        finally:
            rig.close()


def _run(rig: RigBase, h: History, nemesis: NemesisBase, seconds: float, test: str) -> None:
    """Workers and ``nemesis`` for ``seconds``, heal, final reads, probe write, check."""
    h.record("meta", seed=SEED, seconds=seconds, workers=WORKERS, master=MASTER, test=test)
    deadline = time.monotonic() + seconds
    workers = [Worker(i, rig, h, SEED) for i in range(WORKERS)]
    threads = [threading.Thread(target=w.run, args=(deadline,)) for w in workers]
    for t in threads:
        t.start()
    nt = threading.Thread(target=nemesis.run)
    nt.start()
    while time.monotonic() < deadline and nt.is_alive():
        time.sleep(0.2)
    nemesis.stop.set()
    nt.join(60)
    for t in threads:
        t.join(60)
    h.record("nemesis", f="heal")
    rig.heal(h)
    time.sleep(MASTER["put_timeout_s"] + 1.0)  # abandoned writes are discarded by now
    keys = sorted({ev["key"] for ev in h.events if ev["type"] == "invoke"})
    t_final = time.monotonic()
    _final_reads(rig, h, keys, budget_s=120.0)
    final_s = time.monotonic() - t_final
    probe = _probe_write(rig, 30.0)
    rig.scrape()

    res = check(h.events)
    summary = {
        "test": test,
        "seed": SEED,
        "seconds": seconds,
        "workers": WORKERS,
        "keys": len(keys),
        "ops": res.counts,
        "faults": dict(nemesis.done),
        "client_errors": dict(sum((w.errors for w in workers), Counter())),
        "anomalies": dict(Counter(a["kind"] for a in res.anomalies)),
        "excused": len(res.excused),
        "master_counters": dict(rig.counters),
        "master_incarnations": rig.masters,
        "final_read_s": round(final_s, 1),
        "probe_write": probe or "ok",
    }
    print(json.dumps(summary))
    problems = []
    if not res.ok:
        problems.append(res.summary())
    if nemesis.error:
        problems.append(f"nemesis failed: {nemesis.error}")
    crashed = [f"w{w.wid}: {w.crashed}" for w in workers if w.crashed]
    if crashed:
        problems.append(f"workers crashed: {crashed}")
    if probe is not None:
        problems.append(f"the healed cluster refused a new write: {probe}")
    if res.counts.get("put:ok", 0) < 20:
        problems.append(f"only {res.counts.get('put:ok', 0)} puts acknowledged")
    if rig.counters["master_evicted_objects_total"]:
        problems.append("objects were evicted: the model (no eviction) does not hold")
    if not problems:
        return
    out = Path(os.environ.get("MOONCAKE_JEPSEN_DIR") or tempfile.mkdtemp(prefix="mc-jepsen-"))
    out.mkdir(parents=True, exist_ok=True)
    h.dump(out / "history.jsonl")
    rig.dump_logs(out)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "anomalies.json").write_text(json.dumps(res.anomalies, indent=2))
    replay = (
        f"MOONCAKE_JEPSEN_SEED={SEED} MOONCAKE_JEPSEN_SECONDS={seconds:g} "
        f"MOONCAKE_JEPSEN_WORKERS={WORKERS} python3 -m pytest -q "
        f"tests/functional/reliability/test_rel_jepsen.py -k {test}"
    )
    raise AssertionError(
        f"jepsen seed {SEED}: " + "\n".join(problems) + f"\nhistory and logs kept in {out}"
        f"\nreplay (same fault schedule): {replay}\nsummary: {json.dumps(summary)}"
    )


# -- HA mode: etcd + three masters -------------------------------------------------------

HA_SECONDS = float(os.environ.get("MOONCAKE_JEPSEN_SECONDS", "30"))
HA_MASTERS = 3
HA_LEASE_S = 2  # the leader's etcd lease (--lease-ttl): a dead leader is replaced in ~2 s
HA_MASTER = {k: v for k, v in MASTER.items() if k not in ("fsync", "snapshot_every")}


def _health(metrics_port: int) -> dict[str, Any]:
    """A master's /health JSON ({} when it does not answer within 0.5 s)."""
    url = f"http://127.0.0.1:{metrics_port}/health"
    try:
        with urllib.request.urlopen(url, timeout=0.5) as r:
            data: dict[str, Any] = json.loads(r.read())
            return data
    except (OSError, ValueError):
        return {}


class HaRig(RigBase):
    """Real etcd, three ``--ha`` masters on fixed ports, the nodes and clients on etcd://.

    Each master reaches etcd through its own :class:`CutProxy`, so one master can be
    partitioned from etcd while its clients and nodes still reach it (and etcd).

    A keeper thread (this rig's own, standing in for ``--respawn`` so the nemesis signals
    the master itself, not a keeper) starts a master again on its ports whenever it has
    exited: SIGKILLed by the nemesis (after the down time it chose) or deposed (a leader
    paused past its lease exits when it resumes).
    """

    def __init__(self, tmp: Path) -> None:
        self.etcd, url = start_etcd(tmp)
        cfg = tmp / "mooncake.yaml"
        cfg.write_text(yaml.safe_dump({"state_dir": str(tmp), "master": HA_MASTER}))
        super().__init__(cfg, url.replace("http://", "etcd://"))
        self.procs.append(("etcd", self.etcd))
        etcd_port = int(url.rsplit(":", 1)[1])
        self.proxies = [CutProxy(etcd_port) for _ in range(HA_MASTERS)]
        self.ports = [(free_port(), free_port()) for _ in range(HA_MASTERS)]
        self.members: list[Proc | None] = [None] * HA_MASTERS
        self.down_until = [0.0] * HA_MASTERS  # the keeper leaves member i down until then
        self.restarts: Counter[str] = Counter()
        self.start_errors: list[str] = []
        self.lock = threading.Lock()
        threads = [threading.Thread(target=self._start, args=(i,)) for i in range(HA_MASTERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        first = [m for m in self.members if m is not None]
        assert len(first) == HA_MASTERS, f"masters did not start: {self.start_errors}"
        self.cluster = Cluster(cfg, first[0], self.address, {})
        self._wait_leader(30.0)
        self.halt = threading.Event()
        self.keeper = threading.Thread(target=self._keep, daemon=True)
        self.keeper.start()

    def _start(self, i: int) -> None:
        port, metrics = self.ports[i]
        cmd = ["master", "--config", str(self.cfg), "--port", str(port)]
        cmd += ["--metrics-port", str(metrics), "--ha", f"etcd://127.0.0.1:{self.proxies[i].port}"]
        cmd += ["--lease-ttl", str(HA_LEASE_S), "--id", f"m{i}"]
        try:
            p = spawn(cmd, MASTER_READY, timeout=30.0)
        except AssertionError as e:
            with self.lock:
                self.start_errors.append(f"m{i}: " + (str(e).strip().splitlines() or [""])[-1])
            return
        with self.lock:
            self.masters += 1
            self.procs.append((f"master-m{i}-{self.masters}", p))
            self.members[i] = p

    def _keep(self) -> None:
        while not self.halt.wait(0.2):
            for i, m in enumerate(self.members):
                if m is None or m.proc.poll() is None or time.monotonic() < self.down_until[i]:
                    continue
                self.restarts[f"m{i} exit {m.proc.returncode}"] += 1
                self._start(i)  # a failed start (etcd paused) is tried again next round

    def leader(self) -> tuple[int, Proc] | None:
        """The one live member whose /health readiness state is ``leader``."""
        found = []
        for i, m in enumerate(self.members):
            if m is None or m.proc.poll() is not None:
                continue
            if _health(self.ports[i][1]).get("readiness", {}).get("state") == "leader":
                found.append((i, m))
        return found[0] if len(found) == 1 else None

    def _wait_leader(self, timeout: float) -> tuple[int, Proc] | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.leader()
            if got is not None:
                return got
            time.sleep(0.2)
        return None

    def scrape(self) -> None:
        for i, m in enumerate(self.members):
            if m is not None and m.proc.poll() is None:
                self._scrape(self.ports[i][1])

    def heal(self, history: History) -> None:
        for proxy in self.proxies:
            proxy.heal()
        for _, p in [("etcd", self.etcd), *self.procs]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.proc.pid, signal.SIGCONT)
        self.down_until = [0.0] * HA_MASTERS
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            alive = sum(m is not None and m.proc.poll() is None for m in self.members)
            if alive == HA_MASTERS and self.leader() is not None:
                return
            time.sleep(0.25)
        raise AssertionError(f"not healed in 60 s: members {self.members}, {self.start_errors}")

    def close(self) -> None:
        self.halt.set()
        self.keeper.join(40)
        self._close_nodes()
        for m in self.members:
            if m is not None:
                with contextlib.suppress(Exception):
                    stop(m)
        for proxy in self.proxies:
            proxy.close()
        self.etcd.stop()


class HaNemesis(NemesisBase):
    """Leader pauses (shorter than and past the lease), leader kills, one master
    partitioned from etcd (the leader mostly, shorter than and past the lease) while
    clients and nodes still reach it, etcd paused (every master cut off at once, less
    than the lease), node pauses and kills.
    """

    rig: HaRig

    FAULTS = (
        ("pause_leader", 2.0),
        ("kill_leader", 2.0),
        ("partition_master", 2.0),
        ("pause_etcd", 1.0),
        ("pause_node", 1.0),
        ("kill_node", 1.0),
    )

    def __init__(self, rig: HaRig, history: History, seed: int) -> None:
        super().__init__(rig, history, seed)
        self.rig = rig

    def _leader(self, f: str) -> tuple[int, Proc] | None:
        got = self.rig._wait_leader(10.0)
        if got is None:
            self.h.record("nemesis", f=f, phase="skipped", why="no leader for 10 s")
        return got

    def pause_leader(self) -> None:
        s = round(self.rng.uniform(0.3, 3.0 * HA_LEASE_S), 2)
        got = self._leader("pause_leader")
        if got is None:
            return
        i, m = got
        self.h.record("nemesis", f="pause_leader", phase="start", member=f"m{i}", seconds=s)
        pause_for(m.proc, s)
        self.h.record("nemesis", f="pause_leader", phase="end", member=f"m{i}")

    def kill_leader(self) -> None:
        down = round(self.rng.uniform(0.0, 2.0), 2)
        got = self._leader("kill_leader")
        if got is None:
            return
        i, m = got
        self.rig.scrape()
        self.rig.down_until[i] = time.monotonic() + down
        self.h.record("nemesis", f="kill_leader", member=f"m{i}", down_s=down)
        kill9(m.proc)

    def partition_master(self) -> None:
        s = round(self.rng.uniform(0.3, 3.0 * HA_LEASE_S), 2)
        if self.rng.random() < 0.7:
            got = self._leader("partition_master")
            if got is None:
                return
            i = got[0]
        else:
            i = self.rng.randrange(HA_MASTERS)
        proxy = self.rig.proxies[i]
        self.h.record("nemesis", f="partition_master", phase="start", member=f"m{i}", seconds=s)
        proxy.cut()
        try:
            time.sleep(s)
        finally:
            proxy.heal()
        self.h.record("nemesis", f="partition_master", phase="end", member=f"m{i}")

    def pause_etcd(self) -> None:
        s = round(self.rng.uniform(0.3, 0.8 * HA_LEASE_S), 2)
        self.h.record("nemesis", f="pause_etcd", phase="start", seconds=s)
        pause_for(self.rig.etcd.proc, s)
        self.h.record("nemesis", f="pause_etcd", phase="end")


@pytest.mark.skipif(ETCD is None, reason="etcd binary not installed (Debian etcd-server)")
def test_rel_jepsen_ha_leader_faults_lose_nothing(tmp_path: Path) -> None:
    print(f"jepsen HA seed {SEED} ({HA_SECONDS:.0f} s, {WORKERS} workers)")
    h = History()
    rig = HaRig(tmp_path)
    try:
        rig.start_nodes()
        _run(rig, h, HaNemesis(rig, h, SEED), HA_SECONDS, "test_rel_jepsen_ha")
        print("master restarts:", json.dumps(dict(rig.restarts)))
    finally:
        rig.close()
