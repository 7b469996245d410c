"""Render the configuration reference (``docs/configuration.md``) from the config models.

Run ``python -m mooncake_core.config.docgen > docs/configuration.md``; a test keeps the
committed file equal to this output, so the reference can never drift from the code.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from .models import ClusterConfig

RESERVED_KEYS: dict[str, str] = {
    "prefill_workers.max_batch": "Prefill workers do not batch: the key is there because "
    "prefill and decode workers share one entry type. A prefill worker reports it in its "
    "Health answer, but neither the worker nor the conductor acts on it.",
}
"""Keys that change nothing a process or a client can observe yet, with the reason. A
test (tests/unit/config/test_config_keys_behave.py) probes every other key."""

_BOUNDS = (
    ("ge", ">="),
    ("gt", ">"),
    ("le", "<="),
    ("lt", "<"),
    ("min_length", "len >="),
    ("max_length", "len <="),
    ("pattern", "matches"),
)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(tp))
    if origin is typing.Annotated:
        return _type_name(typing.get_args(tp)[0])
    if origin in (list, tuple):
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _bounds(info: FieldInfo) -> str:
    parts = []
    for meta in info.metadata:
        for attr, sym in _BOUNDS:
            value = getattr(meta, attr, None)
            if value is not None:
                parts.append(f"{sym} {value}")
    return ", ".join(parts)


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return "see below" if isinstance(info.default_factory(), (BaseModel, list)) else ""  # type: ignore[call-arg]
    if info.is_required():
        return "required"
    return f"`{info.default}`"


def _section(model: type[BaseModel], path: str, out: list[str], seen: set[str]) -> None:
    out.append(f"## `{path}`\n")
    out.append(f"{inspect.cleandoc(model.__doc__ or '')}\n")
    out.append("| key | type | default | bounds | meaning |")
    out.append("|---|---|---|---|---|")
    nested: list[tuple[str, type[BaseModel]]] = []
    for name, info in model.model_fields.items():
        tp = info.annotation
        inner = typing.get_args(tp)[0] if typing.get_origin(tp) is list else tp
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            suffix = "[]" if typing.get_origin(tp) is list else ""
            nested.append(
                (f"{path}.{name}{suffix}" if path != "(root)" else f"{name}{suffix}", inner)
            )
        desc = (info.description or "").replace("\n", " ").replace("|", "\\|")
        out.append(f"| `{name}` | {_type_name(tp)} | {_default(info)} | {_bounds(info)} | {desc} |")
    out.append("")
    for sub_path, sub in nested:
        if sub_path not in seen:
            seen.add(sub_path)
            _section(sub, sub_path, out, seen)


def render() -> str:
    """Return the configuration reference as Markdown."""
    out = [
        "# Configuration reference",
        "",
        "Generated from `mooncake_core/config/models.py` by",
        "`python -m mooncake_core.config.docgen > docs/configuration.md` (a test checks it is current).",
        "Unknown keys are rejected; sizes accept integers or strings like `256MiB`.",
        "",
    ]
    _section(ClusterConfig, "(root)", out, set())
    out += [
        "## Reserved keys",
        "",
        "Accepted, documented above, and without an effect anyone can observe yet; every",
        "other key is checked to change what a component runs with or how it behaves",
        "(`tests/unit/config/test_config_keys_behave.py`).",
        "",
        "| key | why |",
        "|---|---|",
        *(f"| `{k}` | {why} |" for k, why in RESERVED_KEYS.items()),
    ]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
