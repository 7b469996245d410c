"""Retention against a plain-Python model, over random histories (hypothesis)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mooncake_core.conductor.audit import (
    AuditWriter,
    CandidateRecord,
    DecisionRecord,
    WriterOptions,
    make_engine,
    upgrade,
)
from mooncake_core.conductor.audit import inserts as inserts_mod
from mooncake_core.conductor.audit.retention import apply_retention

T0 = 1_800_000_000.0


def _fill(url: str, times: list[float], ncands: list[int]) -> None:
    with AuditWriter.open(url, WriterOptions(batch_size=7)) as w:
        for i, (t, n) in enumerate(zip(times, ncands, strict=True)):
            d = DecisionRecord(
                time=t, request_id=f"r{i}", prompt_tokens=1, prompt_blocks=0, policy="random"
            )
            w.submit(d, tuple(CandidateRecord(instance=f"i{k}", role="decode") for k in range(n)))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(st.tuples(st.integers(0, 100), st.integers(0, 3)), min_size=0, max_size=30),
    max_age=st.integers(1, 120),
    max_rows=st.integers(1, 35),
)
def test_retention_matches_model(
    tmp_path_factory: object, rows: list[tuple[int, int]], max_age: int, max_rows: int
) -> None:
    folder: Path = tmp_path_factory.mktemp("ret")  # type: ignore[attr-defined]
    url = f"sqlite:///{folder / 'a.db'}"
    upgrade(url)
    times = [T0 + t for t, _ in rows]
    _fill(url, times, [n for _, n in rows])
    now = T0 + 100
    engine = make_engine(url)
    with engine.begin() as conn:
        res = apply_retention(conn, now=now, max_age_s=max_age, max_rows=max_rows)
    engine.dispose()

    # Model: ids 1..n in order; drop by age, then keep the newest max_rows ids.
    ids = list(range(1, len(rows) + 1))
    young = [i for i in ids if times[i - 1] >= now - max_age]
    kept = young[-max_rows:]
    con = sqlite3.connect(folder / "a.db")
    got = [r[0] for r in con.execute("SELECT id FROM decisions ORDER BY id")]
    cands = con.execute("SELECT decision_id, count(*) FROM candidates GROUP BY 1").fetchall()
    con.close()
    assert got == kept
    assert (res.by_age, res.by_rows) == (len(ids) - len(young), len(young) - len(kept))
    assert dict(cands) == {i: rows[i - 1][1] for i in kept if rows[i - 1][1]}


def test_generic_insert_path_stores_the_same_rows(tmp_path: Path, monkeypatch: object) -> None:
    # Non-SQLite databases get SQLAlchemy Core executemany instead of multi-row VALUES;
    # run that path on SQLite and compare the stored rows with the fast path.
    def stored(name: str) -> list[tuple[object, ...]]:
        url = f"sqlite:///{tmp_path / name}"
        upgrade(url)
        _fill(url, [T0 + i for i in range(300)], [i % 4 for i in range(300)])
        con = sqlite3.connect(tmp_path / name)
        out = con.execute(
            "SELECT d.id, d.request_id, d.time, c.instance FROM decisions d "
            "LEFT JOIN candidates c ON c.decision_id = d.id ORDER BY d.id, c.id"
        ).fetchall()
        con.close()
        return out

    fast = stored("fast.db")
    monkeypatch.setattr(inserts_mod, "_multirow_values", lambda conn: False)  # type: ignore[attr-defined]
    generic = stored("generic.db")
    assert fast == generic
    assert len({r[0] for r in fast}) == 300
