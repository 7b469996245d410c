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


def _format_errors(exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "<root>"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"{key}: {msg} (got {err.get('input')!r})")
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


def load_config(path: str | os.PathLike[str] | None = None) -> ClusterConfig:
    """Load the effective cluster configuration.

    Args:
        path: a YAML file; when ``None``, ``$MOONCAKE_CONFIG`` if set, else
            ``./mooncake.yaml`` if it exists, else the embedded default.

    Raises:
        ConfigError: the file is missing, not YAML, or not a valid cluster.
    """
    if path is None:
        env = os.environ.get(CONFIG_ENV)
        if env:
            path = env
        elif Path("mooncake.yaml").is_file():
            path = "mooncake.yaml"
        else:
            return ClusterConfig()
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(p), [f"<file>: cannot read: {exc.strerror or exc}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(str(p), [f"<file>: not valid YAML: {exc}"]) from None
    return parse_config(data, str(p))


def dump_config(cfg: ClusterConfig) -> str:
    """Render a config as YAML (the form ``mooncake config show`` prints)."""
    data = cfg.model_dump(mode="json")
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
