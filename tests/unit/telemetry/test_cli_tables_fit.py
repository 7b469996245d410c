"""mooncake_cli.tables.fit: names and ids stay whole at any width; no ellipsis."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.table import Table

from mooncake_cli.tables import fit, print_table, table_width

IDS = ["cmpl-1a23375f9c0e-1", "cmpl-1a23375f9c0e-2"]


def _table() -> Table:
    t = Table("request", "prefill", "policy", "result")
    for rid in IDS:
        t.add_row(rid, "prefill-2", "kvcache_centric", "rejected: decode load predicted at 0.97")
    return t


def _render(width: int | None) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=200 if width is None else width, color_system=None)
    console.print(fit(_table(), ("request", "prefill"), width, console))
    return buf.getvalue()


def test_wide_enough_is_untouched() -> None:
    text = _render(120)
    assert "┏" in text  # the boxed style as built
    assert all(f"│ {rid} │ prefill-2" in text for rid in IDS)


def test_narrow_wraps_others_and_keeps_ids() -> None:
    text = _render(60)
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 60
    assert "…" not in text and "┏" not in text
    for rid in IDS:
        assert any(line.startswith(f"{rid}  prefill-2") for line in lines), text


def test_too_narrow_folds_rows_into_two_lines() -> None:
    text = _render(40)
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 40
    assert "…" not in text
    assert lines[0] == "request  prefill"
    assert lines[1] == f"{IDS[0]}  prefill-2"
    assert lines[2].startswith("    policy kvcache_centric")


def test_no_width_means_natural() -> None:
    assert "…" not in _render(None) and all(rid in _render(None) for rid in IDS)


def test_wrapped_columns_keep_every_word_whole() -> None:
    # The status table of an embedded cluster at 80 columns: rich, left to itself,
    # narrowed the widest wrapping columns below their longest word and folded the
    # address ("127.0.0." then "1").
    t = Table("component", "role", "host", "address", "health", "pid", "version", "ports")
    for name, ports in (("prefill-0", "50071 17101 9201"), ("conductor", "8000")):
        t.add_row(name, "prefill", "local", "127.0.0.1", "stopped", "", "", ports)
        t.add_row(name + "x", "decode", "local", "127.0.0.1", "not running", "", "", ports)
    buf = io.StringIO()
    console = Console(file=buf, width=60, color_system=None)
    console.print(fit(t, ("component",), 60, console))
    text = buf.getvalue()
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 60
    assert text.count("127.0.0.1") == 4, text
    assert "running" in text and "prefill-0" in text


def test_a_pipe_gets_80_columns_unless_columns_says(monkeypatch: pytest.MonkeyPatch) -> None:
    # A person reads piped output too (less, a log): without COLUMNS it fits 80
    # columns, whatever width rich guessed from another stream's terminal.
    monkeypatch.delenv("COLUMNS", raising=False)
    t = Table("request", "prefill", "policy", "result")
    for rid in IDS:
        t.add_row(rid, "prefill-2", "kvcache_centric", "rejected: " + "decode busy " * 8)
    buf = io.StringIO()
    print_table(Console(file=buf, width=200, color_system=None), t, ("request",))
    lines = buf.getvalue().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80, lines
    assert all(any(line.startswith(rid) for line in lines) for rid in IDS)
    monkeypatch.setenv("COLUMNS", "200")
    assert table_width(Console(file=io.StringIO(), color_system=None)) == 200
