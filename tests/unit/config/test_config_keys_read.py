"""Every key of ``mooncake.yaml`` is read by some code (issue 23: a documented key that
nothing reads, like the old ``conductor.rpc_port``, is a setting that silently does
nothing).

Static and deliberately simple: each leaf field of :class:`ClusterConfig` must appear as
an attribute read (``cfg.master.port``), or a string (a ``getattr``/dict key), somewhere
in the packages outside the config's own field definitions; properties and validators
of the config models count (``effective_offload_watermark`` reads ``offload_watermark``).
Whether each key then changes behaviour is what the feature tests check.
"""

from __future__ import annotations

import ast
import typing
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from mooncake_core.config.models import ClusterConfig

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("mooncake_core", "mooncake_cli", "mooncake_web", "mooncake")
MODELS = ROOT / "mooncake_core" / "config" / "models.py"


def _leaves(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    for name, field in model.model_fields.items():
        subs = [
            a
            for a in (field.annotation, *typing.get_args(field.annotation))
            for a in (a, *typing.get_args(a))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if subs:
            yield from _leaves(subs[0], f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}"


def _names_read() -> set[str]:
    seen: set[str] = set()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            tree = ast.parse(path.read_text())
            if path == MODELS:  # only the models' methods, not their field definitions
                nodes = [
                    n for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for n in ast.walk(f)
                ]
            else:
                nodes = list(ast.walk(tree))
            for n in nodes:
                if isinstance(n, ast.Attribute):
                    seen.add(n.attr)
                elif isinstance(n, ast.Constant) and isinstance(n.value, str):
                    seen.add(n.value)
    return seen


def test_every_config_key_is_read_somewhere() -> None:
    leaves = list(_leaves(ClusterConfig))
    assert len(leaves) > 100  # the walk reaches every section
    read = _names_read()
    assert [k for k in leaves if k.rsplit(".", 1)[-1] not in read] == []
