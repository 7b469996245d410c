"""mooncake_core never pulls in a front-end framework (STYLE.md: enforce the dependency direction)."""

import subprocess
import sys

FORBIDDEN = ("typer", "textual", "fastapi", "rich", "mooncake_cli", "mooncake_web")

_PROBE = """
import importlib, pkgutil, sys
import mooncake_core
failed = []
for mod in pkgutil.walk_packages(mooncake_core.__path__, "mooncake_core."):
    if mod.name.endswith("__main__"):
        continue
    importlib.import_module(mod.name)
print(",".join(m for m in {forbidden!r} if m in sys.modules))
"""


def test_core_modules_import_no_front_end() -> None:
    res = subprocess.run(
        [sys.executable, "-c", _PROBE.format(forbidden=FORBIDDEN)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "", f"mooncake_core imported: {res.stdout.strip()}"


def test_import_linter_contracts_hold() -> None:
    res = subprocess.run(["lint-imports"], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
