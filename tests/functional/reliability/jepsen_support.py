"""History and checker of the randomized fault test (``test_rel_jepsen.py``).

Standard library only, and no processes: the checker is a pure function of a history, so
``tests/unit/reliability/test_jepsen_checker.py`` feeds it tiny exact histories.

History (one dict per line when dumped as JSONL), in real-time order:

- ``{"type": "invoke", "id", "proc", "f", "key", "t", ["write", "digest"]}``: an
  operation starts. ``f`` is ``put`` (create), ``upsert`` (replace), ``remove`` (force)
  or ``get``; writes name their unique write id and the sha256 of the value.
- ``{"type": "ok" | "fail" | "info", "id", "t", ...}``: it ended. ``ok``: acknowledged
  (a get carries ``digest`` of the bytes read, or ``null`` for NotFound; a remove that
  found nothing carries ``absent: true``). ``fail``: definitely had no effect (a put
  refused as OBJECT_ALREADY_EXISTS carries ``exists: true``: the key was there). ``info``:
  indeterminate (a timeout, the master gone mid-call): it may have taken effect, at any
  time after it was invoked, or never.
- ``{"type": "placement", "write", "segments"}``: where the master put that write
  (``stat`` right after the put was acknowledged; missing when that failed).
- ``{"type": "nemesis", "f", ...}``: a fault. Only ``f == "kill_node"`` (with
  ``segments``, the segments of the SIGKILLed node) matters to the checker.

Model (per key, a register: absent, or the value of one write):

- Operations on one key are issued by one client at a time (the workers own their keys),
  so the acknowledged operations of a key are totally ordered by completion.
- An indeterminate write or remove may apply at any later point, once, or never.
- An indeterminate upsert may also leave the key absent: the old value is dropped once
  the new one is allocated (docs/store.md), and a failed write revokes the new one.
- A store node's DRAM is the data: a write whose every recorded replica was on nodes
  that were SIGKILLed since may vanish (it becomes absent); such vanishings are reported
  as ``excused``, not anomalies. A write without a placement record never vanishes
  (with two replicas on distinct segments and one mortal node, none can).
- Nothing else may change a key: no eviction (the test keeps usage far below the
  watermark), no expiry of healthy nodes.

Anomalies: ``lost-write`` (a read found nothing where an acknowledged write must be),
``never-written`` (a read returned bytes no write of any key produced),
``cross-wired`` (bytes of another key's write), ``resurrected`` (a value where the key
must be absent after an acknowledged remove), ``stale-read`` (a value of this key that an
acknowledged later write replaced), ``impossible-ack`` (a put acknowledged while the key
must exist), ``unreadable`` (the final read kept failing).
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Event = dict[str, Any]
State = str | None  # write id, or None for absent
Config = tuple[State, frozenset[int]]  # (state, indeterminate ops not applied yet)

MAX_PENDING = 8  # indeterminate ops of one key kept open (the workers retire keys at one)


def make_value(key: str, write: str, size: int, rng: random.Random) -> bytes:
    """A value naming its key and write id, padded with seeded random bytes to ``size``."""
    head = f"{key}\0{write}\0".encode()
    return head + rng.randbytes(max(0, size - len(head)))


def digest(value: bytes) -> str:
    return hashlib.sha256(value).hexdigest()


def parse_head(value: bytes) -> tuple[str, str] | None:
    """(key, write id) a value names, or None when it is not one of ours."""
    parts = value.split(b"\0", 2)
    if len(parts) < 3:
        return None
    try:
        return parts[0].decode(), parts[1].decode()
    except UnicodeDecodeError:
        return None


class History:
    """Thread-safe, append-only operation history (real-time order = list order)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._next = 0

    def _add(self, ev: Event) -> None:
        with self._lock:
            ev["t"] = round(time.monotonic() - self.t0, 4)
            self.events.append(ev)

    def invoke(self, proc: str, f: str, key: str, **kw: Any) -> int:
        with self._lock:
            op = self._next
            self._next += 1
        self._add({"type": "invoke", "id": op, "proc": proc, "f": f, "key": key, **kw})
        return op

    def complete(self, op: int, kind: str, **kw: Any) -> None:
        assert kind in ("ok", "fail", "info"), kind
        self._add({"type": kind, "id": op, **kw})

    def record(self, kind: str, **kw: Any) -> None:
        self._add({"type": kind, **kw})

    def dump(self, path: Path) -> None:
        with self._lock, path.open("w") as f:
            for ev in self.events:
                f.write(json.dumps(ev) + "\n")


def load(path: Path) -> list[Event]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@dataclass
class CheckResult:
    anomalies: list[Event] = field(default_factory=list)
    excused: list[Event] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def summary(self, limit: int = 8) -> str:
        kinds: dict[str, int] = {}
        for a in self.anomalies:
            kinds[a["kind"]] = kinds.get(a["kind"], 0) + 1
        lines = [f"anomalies {kinds or 'none'}; excused {len(self.excused)}; ops {self.counts}"]
        lines += [json.dumps(a) for a in self.anomalies[:limit]]
        if len(self.anomalies) > limit:
            lines.append(f"... and {len(self.anomalies) - limit} more")
        return "\n".join(lines)


def _apply(f: str, write: str | None, state: State) -> State:
    """The state after an acknowledged ``f``."""
    if f == "put":
        return write if state is None else state
    if f == "upsert":
        return write
    return None  # remove


def _effects(f: str, write: str | None, state: State) -> tuple[State, ...]:
    """The states an indeterminate ``f`` may leave when it applies.

    An upsert that fails after its allocation leaves the key absent: the old value is
    dropped once the new one is allocated (docs/store.md), and the revoke drops the new.
    """
    if f == "upsert":
        return (write, None)
    return (_apply(f, write, state),)


class _Checker:
    def __init__(self, events: list[Event]) -> None:
        self.events = events
        self.invokes: dict[int, Event] = {}
        self.writes: dict[str, tuple[str, str]] = {}  # write -> (key, digest)
        self.by_digest: dict[str, str] = {}  # digest -> write
        self.placement: dict[str, set[str]] = {}
        for ev in events:
            if ev["type"] == "invoke" and ev.get("write"):
                self.writes[ev["write"]] = (ev["key"], ev["digest"])
                self.by_digest[ev["digest"]] = ev["write"]
            elif ev["type"] == "placement":
                self.placement[ev["write"]] = set(ev["segments"])
        self.configs: dict[str, set[Config]] = {}
        self.killed: set[str] = set()
        self.res = CheckResult()

    # -- configurations ------------------------------------------------------------
    def _closure(self, configs: Iterable[Config]) -> set[Config]:
        out = set(configs)
        todo = list(out)
        while todo:
            state, pending = todo.pop()
            for p in pending:
                inv = self.invokes[p]
                for after in _effects(inv["f"], inv.get("write"), state):
                    nxt = (after, pending - {p})
                    if nxt not in out:
                        out.add(nxt)
                        todo.append(nxt)
        return out

    def _may_vanish(self, write: str) -> bool:
        where = self.placement.get(write)
        return where is not None and bool(where) and where <= self.killed

    def _states(self, key: str) -> tuple[set[Config], set[Config]]:
        """(reachable configs, the extra ones where a write vanished with its nodes)."""
        base = self._closure(self.configs.get(key, {(None, frozenset())}))
        lost = {(None, p) for s, p in base if s is not None and self._may_vanish(s)}
        return base, self._closure(lost) - base

    def _anomaly(self, kind: str, ev: Event, inv: Event, **kw: Any) -> None:
        self.res.anomalies.append(
            {
                "kind": kind,
                "key": inv["key"],
                "op": inv["id"],
                "proc": inv["proc"],
                "f": inv["f"],
                "t": ev["t"],
                **kw,
            }
        )

    # -- observations --------------------------------------------------------------
    def _observe(self, ev: Event, inv: Event, seen: State, foreign: str | None) -> None:
        """A read (or a remove that found nothing) saw ``seen``; keep configs that agree."""
        key = inv["key"]
        base, lost = self._states(key)
        keep = {c for c in base if c[0] == seen}
        if not keep:
            keep = {c for c in lost if c[0] == seen}
            if keep:
                gone = sorted({s for s, _ in base if s is not None and self._may_vanish(s)})
                where = {w: sorted(self.placement.get(w, ["?"])) for w in gone}
                self.res.excused.append(
                    {
                        "key": key,
                        "op": inv["id"],
                        "t": ev["t"],
                        "vanished": gone,
                        "placement": where,
                    }
                )
        if keep:
            self.configs[key] = keep
            return
        expected = sorted({str(s) if s is not None else "absent" for s, _ in base})
        detail: dict[str, Any] = {"expected": expected}
        if foreign is not None:
            kind = "never-written"
            detail["digest"] = foreign
            detail["head"] = ev.get("head")
        elif seen is None:
            kind = "lost-write"
            detail["placement"] = {w: sorted(self.placement.get(w, ["?"])) for w in expected}
        elif self.writes[seen][0] != key:
            kind = "cross-wired"
            detail["got"] = seen
            detail["got_key"] = self.writes[seen][0]
        elif expected == ["absent"]:
            kind = "resurrected"
            detail["got"] = seen
        else:
            kind = "stale-read"
            detail["got"] = seen
        self._anomaly(kind, ev, inv, **detail)
        if foreign is None:
            self.configs[key] = {(seen, frozenset())}

    def _acked_write(self, ev: Event, inv: Event) -> None:
        key, f, write = inv["key"], inv["f"], inv.get("write")
        base, lost = self._states(key)
        if f == "put":
            nxt = {(write, p) for s, p in base if s is None}
            if not nxt:
                nxt = {(write, p) for s, p in lost if s is None}
                if nxt:
                    self.res.excused.append(
                        {"key": key, "op": inv["id"], "t": ev["t"], "vanished": "before put"}
                    )
            if not nxt:
                self._anomaly("impossible-ack", ev, inv, expected=sorted(str(s) for s, _ in base))
                nxt = {(write, frozenset())}
        else:
            nxt = {(_apply(f, write, s), p) for s, p in base}
        self.configs[key] = nxt

    def run(self) -> CheckResult:
        counts = self.res.counts
        for ev in self.events:
            kind = ev["type"]
            if kind == "invoke":
                self.invokes[ev["id"]] = ev
                continue
            if kind == "nemesis":
                if ev.get("f") == "kill_node":
                    self.killed |= set(ev.get("segments", []))
                continue
            if kind not in ("ok", "fail", "info"):
                continue
            inv = self.invokes[ev["id"]]
            f, key = inv["f"], inv["key"]
            counts[f"{f}:{kind}"] = counts.get(f"{f}:{kind}", 0) + 1
            if kind == "fail":
                if inv.get("final"):
                    self._anomaly("unreadable", ev, inv, err=ev.get("err", ""))
                elif ev.get("exists"):  # a put refused: OBJECT_ALREADY_EXISTS
                    present = {c for c in self._states(key)[0] if c[0] is not None}
                    if not present:
                        self._anomaly("resurrected", ev, inv, expected=["absent"], got="exists")
                    else:
                        self.configs[key] = present
                continue
            if kind == "info":
                if f != "get":
                    base = self._closure(self.configs.get(key, {(None, frozenset())}))
                    if any(len(p) >= MAX_PENDING for _, p in base):
                        raise AssertionError(f"key {key}: more than {MAX_PENDING} open ops")
                    self.configs[key] = {(s, p | {inv["id"]}) for s, p in base}
                continue
            if f == "get":
                d = ev.get("digest")
                if d is None:
                    self._observe(ev, inv, None, None)
                elif d in self.by_digest:
                    self._observe(ev, inv, self.by_digest[d], None)
                else:
                    self._observe(ev, inv, "?", d)
            elif f == "remove":
                if ev.get("absent"):
                    self._observe(ev, inv, None, None)
                else:
                    # Acknowledged: the key existed (else NotFound), and is gone now.
                    present = {c for c in self._states(key)[0] if c[0] is not None}
                    if not present:
                        self._anomaly("resurrected", ev, inv, expected=["absent"], got="remove ok")
                    self.configs[key] = {(None, p) for _, p in present} or {(None, frozenset())}
            else:
                self._acked_write(ev, inv)
        return self.res


def check(events: list[Event]) -> CheckResult:
    """Check a history against the model above (see the module docstring)."""
    return _Checker(events).run()
