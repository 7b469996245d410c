"""Store modules use each other's public APIs, never each other's private fields.

STYLE.md: "A facade whose helper modules reach into its private fields (`ms._segments`
...): split state into objects that own their data and expose small methods". This test
reads the AST of every module under ``mooncake_core/store/`` and fails on each attribute
access ``x._name`` (single leading underscore, not a dunder) where ``x`` is anything other
than ``self`` or ``cls``. A private name is private to the class that defines it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mooncake_core.store

STORE = Path(mooncake_core.store.__file__).parent
ROOT = STORE.parents[1]

# (path relative to the project root, expression) -> why it is allowed. Keep it empty if
# you can: an entry here is a private field some other object depends on.
ALLOWED: dict[tuple[str, str], str] = {}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_accesses(path: Path) -> list[tuple[int, str]]:
    """Return ``(line, expression)`` for each ``x._name`` in ``path`` with ``x`` not self/cls."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_private_accesses_detects_foreign_fields(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "class A:\n"
        "    def f(self, ms):\n"
        "        self._own = 1\n"
        "        self.__dunder__ = 2\n"
        "        return ms._tier.total + ms.__class__.__name__\n"
    )
    assert private_accesses(src) == [(5, "ms._tier")]


def test_store_modules_use_no_foreign_private_fields() -> None:
    offenders = []
    for path in sorted(STORE.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        for line, expr in private_accesses(path):
            if (rel, expr) not in ALLOWED:
                offenders.append(f"{rel}:{line}: {expr}")
    assert not offenders, f"{len(offenders)} foreign private field accesses:\n" + "\n".join(
        offenders
    )
