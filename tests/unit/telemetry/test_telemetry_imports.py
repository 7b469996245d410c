"""The telemetry package stays a core package: no front-end library gets imported."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import mooncake_core.telemetry
bad = [m for m in ("typer", "textual", "fastapi", "rich", "mooncake_cli") if m in sys.modules]
print(",".join(bad))
"""


def test_telemetry_imports_no_front_end():
    res = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == ""
