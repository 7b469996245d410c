"""The randomized fault test's checker catches each anomaly it claims to (tiny exact histories)."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

_REL = Path(__file__).resolve().parents[2] / "functional" / "reliability"
if str(_REL) not in sys.path:
    sys.path.insert(0, str(_REL))

from jepsen_support import check, digest, make_value, parse_head  # noqa: E402


class H:
    """Builds a history by hand: one line per operation, sequential unless said."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.values: dict[str, bytes] = {}
        self._id = 0
        self._t = 0.0

    def _ev(self, **kw: Any) -> dict[str, Any]:
        self._t += 1.0
        ev = {"t": self._t, **kw}
        self.events.append(ev)
        return ev

    def op(self, f: str, key: str, end: str = "ok", write: str | None = None, **done: Any) -> None:
        op = self._id
        self._id += 1
        inv: dict[str, Any] = {"type": "invoke", "id": op, "proc": "w0", "f": f, "key": key}
        if write is not None:
            value = make_value(key, write, 64, random.Random(write))
            self.values[write] = value
            inv |= {"write": write, "digest": digest(value)}
        self.events.append({"t": self._t, **inv})
        self._ev(type=end, id=op, **done)

    def put(self, key: str, write: str, end: str = "ok") -> None:
        self.op("put", key, end, write)

    def upsert(self, key: str, write: str, end: str = "ok") -> None:
        self.op("upsert", key, end, write)

    def remove(self, key: str, end: str = "ok", **done: Any) -> None:
        self.op("remove", key, end, **done)

    def get(self, key: str, write: str | None, raw: bytes | None = None) -> None:
        d = digest(raw) if raw is not None else (digest(self.values[write]) if write else None)
        self.op("get", key, "ok", digest=d)

    def kill(self, *segments: str) -> None:
        self._ev(type="nemesis", f="kill_node", segments=list(segments))

    def placed(self, write: str, *segments: str) -> None:
        self._ev(type="placement", write=write, segments=list(segments))


def kinds(h: H) -> list[str]:
    return [a["kind"] for a in check(h.events).anomalies]


def test_values_name_their_key_and_write() -> None:
    v = make_value("k/1", "w0-7", 100, random.Random(1))
    assert len(v) == 100 and parse_head(v) == ("k/1", "w0-7")
    assert parse_head(b"\xff\xfe") is None


def test_a_clean_history_has_no_anomaly() -> None:
    h = H()
    h.get("a", None)
    h.put("a", "w1")
    h.get("a", "w1")
    h.upsert("a", "w2")
    h.get("a", "w2")
    h.remove("a")
    h.get("a", None)
    h.put("a", "w3")  # re-put after a remove
    h.get("a", "w3")
    res = check(h.events)
    assert res.ok and not res.excused, res.summary()
    assert res.counts["get:ok"] == 5 and res.counts["put:ok"] == 2


def test_a_lost_write_is_caught() -> None:
    h = H()
    h.put("a", "w1")
    h.get("a", None)
    res = check(h.events)
    assert kinds(h) == ["lost-write"]
    assert res.anomalies[0]["expected"] == ["w1"]


def test_wrong_bytes_are_caught() -> None:
    h = H()
    h.put("a", "w1")
    h.put("b", "w2")
    h.get("a", None, raw=h.values["w1"][:-1] + b"X")  # one byte off: never written
    h.get("a", "w2")  # another key's object
    assert kinds(h) == ["never-written", "cross-wired"]
    assert check(h.events).anomalies[1]["got_key"] == "b"


def test_a_stale_read_is_caught() -> None:
    h = H()
    h.put("a", "w1")
    h.upsert("a", "w2")
    h.get("a", "w1")
    assert kinds(h) == ["stale-read"]


def test_a_resurrected_removed_key_is_caught() -> None:
    h = H()
    h.put("a", "w1")
    h.remove("a")
    h.get("a", "w1")
    assert kinds(h) == ["resurrected"]
    h2 = H()
    h2.put("a", "w1")
    h2.remove("a")
    h2.remove("a")  # acknowledged again: the store still had it
    assert kinds(h2) == ["resurrected"]
    h3 = H()
    h3.put("a", "w1")
    h3.remove("a")
    h3.op("put", "a", "fail", "w2", exists=True)  # refused: the key is still there
    assert kinds(h3) == ["resurrected"]


def test_an_indeterminate_write_may_or_may_not_have_happened() -> None:
    for seen in ("w1", None):
        h = H()
        h.put("a", "w1", end="info")
        h.get("a", seen)
        assert kinds(h) == [], seen
    h = H()
    h.put("a", "w1", end="info")
    h.get("a", "w1")
    h.get("a", None)  # once seen, it stays (nothing else touches the key)
    assert kinds(h) == ["lost-write"]


def test_an_indeterminate_upsert_may_leave_old_new_or_nothing() -> None:
    for seen in ("w1", "w2", None):
        h = H()
        h.put("a", "w1")
        h.upsert("a", "w2", end="info")
        h.get("a", seen)
        assert kinds(h) == [], seen


def test_an_indeterminate_remove_may_apply_later() -> None:
    h = H()
    h.put("a", "w1")
    h.remove("a", end="info")
    h.get("a", "w1")
    h.get("a", None)
    assert kinds(h) == []


def test_a_failed_write_never_happened() -> None:
    h = H()
    h.put("a", "w1", end="fail")
    h.get("a", "w1")
    assert kinds(h) == ["resurrected"]


def test_a_write_on_killed_nodes_only_may_vanish() -> None:
    h = H()
    h.put("a", "w1")
    h.placed("w1", "m0")
    h.put("b", "w2")
    h.placed("w2", "m0", "s0")
    h.put("c", "w3")  # no placement recorded: never excused
    h.kill("m0")
    h.get("a", None)
    h.get("b", None)
    h.get("c", None)
    res = check(h.events)
    assert [(a["kind"], a["key"]) for a in res.anomalies] == [
        ("lost-write", "b"),
        ("lost-write", "c"),
    ]
    assert [e["vanished"] for e in res.excused] == [["w1"]]


def test_a_final_read_that_keeps_failing_is_an_anomaly() -> None:
    h = H()
    h.put("a", "w1")
    h.events.append({"type": "invoke", "id": 99, "proc": "final", "f": "get", "key": "a",
                     "final": True, "t": 9.0})  # fmt: skip
    h.events.append({"type": "fail", "id": 99, "t": 10.0, "err": "UnavailableError: x"})
    assert kinds(h) == ["unreadable"]
