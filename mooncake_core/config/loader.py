"""Load ``mooncake.yaml`` into :class:`ClusterConfig`, with errors that name the key."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .models import ClusterConfig

CONFIG_ENV = "MOONCAKE_CONFIG"
"""Environment variable naming the config file when none is given explicitly."""


class ConfigError(ValueError):
    """A config file that cannot be used; ``problems`` has one line per bad key."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: invalid configuration:\n  " + "\n  ".join(problems))


MAX_CONFIG_BYTES = 1 << 20
"""Largest config file read (a cluster description is a few KiB)."""
MAX_DEPTH = 32
"""Deepest nesting of mappings and lists accepted (the schema needs 4)."""
MAX_NODES = 100_000
"""Most YAML nodes a file may stand for once every alias is expanded (billion laughs)."""


class _Limit(Exception):
    """A YAML document over one of the bounds above; the message says which, and where."""


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that counts as it composes: nesting depth (the composer is
    recursive, so a deep file would otherwise end in ``RecursionError``) and the size the
    document has with aliases expanded (consumers such as validation and error messages
    walk the expanded form: ten aliases of ten aliases of ... is exponential)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._expanded = 0
        self._weight: dict[int, int] = {}

    def _grow(self, n: int) -> None:
        self._expanded += n
        if self._expanded > MAX_NODES:
            raise _Limit(
                f"more than {MAX_NODES} values once aliases are expanded "
                f"(line {self._line()}); is it an alias bomb?"
            )

    def _line(self) -> int:
        return int(self.peek_event().start_mark.line) + 1

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            target = self.anchors.get(self.peek_event().anchor)
            if target is not None:
                if id(target) not in self._weight:
                    raise _Limit(f"alias to an enclosing node (line {self._line()})")
                self._grow(self._weight[id(target)])
            return super().compose_node(parent, index)
        if self._depth >= MAX_DEPTH:
            raise _Limit(f"nested deeper than {MAX_DEPTH} levels (line {self._line()})")
        self._depth += 1
        start = self._expanded
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._grow(1)
        self._weight[id(node)] = self._expanded - start
        return node


def _first_line(exc: yaml.YAMLError) -> str:
    """One line for a YAML error: the problem and where, without the quoted snippet."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def parse_yaml(text: str) -> Any:
    """Parse one YAML document within the bounds (depth, expanded size).

    Raises:
        ValueError: the first problem, in one line.
    """
    try:
        # The reader checks the characters already when the loader is built.
        loader = _BoundedLoader(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"not valid YAML: {_first_line(exc)}") from None
    try:
        return loader.get_single_data()
    except _Limit as exc:
        raise ValueError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise ValueError(f"not valid YAML: {_first_line(exc)}") from None
    finally:
        loader.dispose()


MAX_PROBLEMS = 20
"""Problems listed per file; the rest are counted."""
_MAX_SHOWN = 80
"""Characters of a bad value quoted in a problem line."""


def _format_errors(exc: ValidationError) -> list[str]:
    lines = []
    errors = exc.errors()
    for err in errors[:MAX_PROBLEMS]:
        key = ".".join(str(p) for p in err["loc"]) or "<root>"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        msg = msg.removeprefix("Value error, ")
        value = err.get("input")
        if isinstance(value, dict | list):
            # A check across keys (a port clash): its message names the keys; quoting
            # the section it was given would print the config back.
            head, sep, _ = msg.partition(": ")
            lines.append(msg if key == "<root>" and sep and " " not in head else f"{key}: {msg}")
            continue
        got = repr(value)
        if len(got) > _MAX_SHOWN:
            got = got[: _MAX_SHOWN - 3] + "..."
        lines.append(f"{key}: {msg} (got {got})")
    if len(errors) > MAX_PROBLEMS:
        lines.append(f"... and {len(errors) - MAX_PROBLEMS} more problems")
    return lines


def parse_config(data: Any, source: str = "<config>") -> ClusterConfig:
    """Validate an already-parsed mapping.

    Raises:
        ConfigError: the mapping does not describe a valid cluster.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, [f"<root>: expected a mapping, got {type(data).__name__}"])
    try:
        return ClusterConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, _format_errors(exc)) from None


def config_path(path: str | os.PathLike[str] | None = None) -> Path | None:
    """The file :func:`load_config` reads for ``path`` (``None``: the embedded default)."""
    if path is not None:
        return Path(path)
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env)
    return Path("mooncake.yaml") if Path("mooncake.yaml").is_file() else None


def config_source(path: str | os.PathLike[str] | None = None) -> str:
    """Where the effective config comes from, in words (for ``config show``)."""
    p = config_path(path)
    if p is None:
        return "the embedded default (no --config, no $MOONCAKE_CONFIG, no ./mooncake.yaml)"
    via = f" (from ${CONFIG_ENV})" if path is None and os.environ.get(CONFIG_ENV) else ""
    return f"{p.resolve()}{via}"


def load_config(path: str | os.PathLike[str] | None = None) -> ClusterConfig:
    """Load the effective cluster configuration.

    Args:
        path: a YAML file; when ``None``, ``$MOONCAKE_CONFIG`` if set, else
            ``./mooncake.yaml`` if it exists, else the embedded default.

    Raises:
        ConfigError: the file is missing, not YAML, or not a valid cluster.
    """
    p = config_path(path)
    if p is None:
        return ClusterConfig()
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(str(p), [f"<file>: cannot read: {exc.strerror or exc}"]) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            str(p), [f"<file>: larger than {MAX_CONFIG_BYTES} bytes; not a cluster config"]
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            str(p), [f"<file>: not UTF-8 (byte {exc.start} is {raw[exc.start]:#04x})"]
        ) from None
    try:
        data = parse_yaml(text)
    except ValueError as exc:
        raise ConfigError(str(p), [f"<file>: {exc}"]) from None
    return parse_config(data, str(p))


def dump_config(cfg: ClusterConfig) -> str:
    """Render a config as YAML (the form ``mooncake config show`` prints)."""
    data = cfg.model_dump(mode="json")
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
