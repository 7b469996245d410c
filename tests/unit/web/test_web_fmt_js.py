"""The dashboard's formatter (``static/js/fmt.js``, run with node) prints what
``mooncake_core.fmt`` prints, on a table of edge values. Skipped when node is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from importlib import resources

import pytest

from mooncake_core import fmt

NODE = shutil.which("node") or shutil.which("nodejs")

SIZES = [None, 0, 1, 1.5, 999, 1000, 1023, 1023.5, 1024, 1280, 1536, -1536, (1 << 20) - 60, (1 << 20) - 600, 99.94 * 1024, 99.95 * 1024, 150 * 1024,
         (1 << 20) - 1, 16 << 20, 3.7e9, 1 << 50, 1 << 60, 1 << 70]  # fmt: skip
RATES = [None, 0, 0.4, 512, 999, 999.4, 999.5, 1000, 9.994e3, 9.995e3, 47_400, 99.95e3,
         980_000, 4.7e6, 2e9, 12.34e9, 999.6e9, 1e21, -4.7e6]  # fmt: skip
SECONDS = [None, 0, 0.0004, -0.0004, 0.0005, 0.017, -0.017, 0.0451, 0.0994, 0.0995, 0.1,
           0.125, 0.3, 1.234, -2.5, 9.994, 9.995, 12.34, 99.95, 123.4, 86400.0]  # fmt: skip
DURATIONS = [None, 0, 0.9, -0.5, 42, 59.99, 60, 185, -185, 3600, 7620, 86399, 90000, 1e9]
RATIOS = [None, 0, 0.291, 0.2914, 0.995, 0.125, 1, 12.5]


def _table() -> list[tuple[str, str]]:
    """(expected from Python, JS expression) for every case."""
    rows: list[tuple[str, str]] = []

    def j(x: object) -> str:
        return json.dumps(x)

    for n in SIZES:
        for c in (False, True):
            rows.append((fmt.size(n, compact=c), f"FMT.size({j(n)}, {{compact: {j(c)}}})"))
    for r in RATES:
        rows.append((fmt.si(r), f"FMT.si({j(r)})"))
        for c in (False, True):
            rows.append((fmt.byte_rate(r, compact=c), f"FMT.byteRate({j(r)}, {{compact: {j(c)}}})"))
    for s in SECONDS:
        for c in (False, True):
            opts = f"{{compact: {j(c)}}}"
            rows.append((fmt.seconds(s, compact=c), f"FMT.seconds({j(s)}, {opts})"))
            rows.append((fmt.signed_seconds(s, compact=c), f"FMT.signedSeconds({j(s)}, {opts})"))
    for d in DURATIONS:
        rows.append((fmt.duration(d), f"FMT.duration({j(d)})"))
        if d is not None:
            rows.append((fmt.ago(1000.0, 1000.0 + d), f"FMT.ago(1000, {j(1000.0 + d)})"))
    rows.append((fmt.ago(None), "FMT.ago(null)"))
    for x in RATIOS:
        for digits in (0, 1):
            rows.append((fmt.pct(x, digits), f"FMT.pct({j(x)}, {digits})"))
        rows.append((fmt.per_s(x), f"FMT.perS({j(x)})"))
        rows.append((fmt.per_s(x, 2), f"FMT.perS({j(x)}, 2)"))
    rows.append((fmt.size(None, missing="?"), 'FMT.size(null, {missing: "?"})'))
    return rows


@pytest.mark.skipif(NODE is None, reason="node is not installed: apt-get install nodejs")
def test_js_formatter_agrees_with_python() -> None:
    path = resources.files("mooncake_web").joinpath("static/js/fmt.js")
    rows = _table()
    script = (
        f"const FMT = require({json.dumps(str(path))});\n"
        f"console.log(JSON.stringify([{', '.join(js for _, js in rows)}]));\n"
    )
    assert NODE is not None
    out = subprocess.run(
        [NODE, "-e", script], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    got = json.loads(out)
    diffs = [(js, want, have) for (want, js), have in zip(rows, got, strict=True) if want != have]
    assert not diffs, diffs
    assert len(rows) > 150
