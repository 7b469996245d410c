"""mooncake_core never needs a front-end framework (STYLE.md: enforce the dependency direction).

Two checks:
- every core module imports in a fresh interpreter in which typer, textual, fastapi, rich
  and our own front ends are made unimportable (a meta-path finder raises ImportError for
  them), so the core works on a machine that has none of them. Libraries that pull one of
  them in only optionally (httpx loads rich for its own CLI when rich is present) pass;
  a hard dependency fails;
- import-linter's contract in pyproject.toml: no core module imports them directly.
"""

import subprocess
import sys

FORBIDDEN = ("typer", "textual", "fastapi", "rich", "mooncake_cli", "mooncake_web")
OPTIONAL = ("pyverbs",)  # the `rdma` extra: modules that need it are loaded only when present

_PROBE = """
import importlib, importlib.abc, pkgutil, sys

FORBIDDEN = {forbidden!r}

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in FORBIDDEN:
            raise ImportError(f"{{name}} is blocked: mooncake_core must not need it")
        return None

sys.meta_path.insert(0, Block())
import mooncake_core
for mod in pkgutil.walk_packages(mooncake_core.__path__, "mooncake_core."):
    if mod.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(mod.name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in {optional!r}:
            raise
print(",".join(m for m in FORBIDDEN if m in sys.modules))
"""


def test_core_modules_import_without_front_ends() -> None:
    res = subprocess.run(
        [sys.executable, "-c", _PROBE.format(forbidden=FORBIDDEN, optional=OPTIONAL)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "", f"mooncake_core imported: {res.stdout.strip()}"


def test_import_linter_contracts_hold() -> None:
    res = subprocess.run(["lint-imports"], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
