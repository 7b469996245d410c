"""What each process ``cluster up`` starts would run with, without starting it.

The plan's command line is parsed by the real ``mooncake`` CLI (nothing is run) and fed,
with the config reloaded from the file ``--config`` names, to the settings function the
command itself calls: ``master_settings``, ``node_options``, ``conductor_settings``,
``web_settings`` and ``WorkerServiceOptions.from_cluster``. Used by the config-key probes
(tests/unit/config/test_config_keys_behave.py) and the plan tests
(tests/unit/cluster/test_cluster_spec.py).
"""

from __future__ import annotations

import inspect
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer.main

from mooncake_core.cluster import ROLE_COMMANDS
from mooncake_core.cluster.supervisor import Supervisor
from mooncake_core.config import ClusterConfig, dump_config, load_config

ALL_COMMANDS = set(ROLE_COMMANDS.values())
_ROOT: Any = None


@dataclass(frozen=True)
class Launched:
    """One component as ``cluster up`` would start it."""

    command: tuple[str, ...]
    """The ``mooncake`` sub-command (``("store", "node")``); ``("etcd",)`` for etcd."""
    params: dict[str, Any]
    """The parameters the CLI parsed from the command line (etcd: its argv)."""
    config: ClusterConfig | None
    """The config the component loads from its ``--config`` file (etcd: None)."""
    settings: Any
    """What its settings function returns (etcd: None)."""


def parse_argv(argv: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The sub-command path and the parameters ``mooncake`` parses from ``argv``."""
    global _ROOT
    if _ROOT is None:
        from mooncake_cli.main import app

        _ROOT = typer.main.get_command(app)
    cmd: Any = _ROOT
    ctx = cmd.make_context("mooncake", list(argv[1:]))
    path: list[str] = []
    while hasattr(cmd, "resolve_command"):
        rest = [*ctx._protected_args, *ctx.args]
        if not rest:
            break
        name, cmd, args = cmd.resolve_command(ctx, rest)
        path.append(name)
        ctx = cmd.make_context(name, args, parent=ctx)
    return tuple(path), dict(ctx.params)


def launch(argv: tuple[str, ...]) -> Launched:
    """What the component started with ``argv`` runs with."""
    from mooncake_cli.conductor_cmd import conductor_settings
    from mooncake_cli.master_cmd import master_settings
    from mooncake_cli.store_cmd import node_options
    from mooncake_cli.web_cmd import web_settings
    from mooncake_core.worker.service import WorkerServiceOptions

    if argv[0] == "etcd":
        return Launched(("etcd",), {"argv": argv}, None, None)
    cmd, p = parse_argv(argv)
    cfg = load_config(p["config"])
    settings: Any
    if cmd == ("master",):
        settings = _settings(master_settings, p, cfg)
    elif cmd == ("store", "node"):
        settings = _settings(node_options, p, cfg, p["name"])
    elif cmd in (("worker", "prefill"), ("worker", "decode")):
        settings = WorkerServiceOptions.from_cluster(cfg, cmd[1], p["name"])  # type: ignore[arg-type]
    elif cmd == ("conductor", "serve"):
        settings = _settings(conductor_settings, p, cfg)
    elif cmd == ("web",):
        settings = _settings(web_settings, p, cfg)
    else:
        raise AssertionError(f"cluster up starts `mooncake {' '.join(cmd)}`: no settings for it")
    return Launched(cmd, p, cfg, settings)


def _settings(fn: Any, params: dict[str, Any], *args: Any) -> Any:
    """``fn(*args, **flags)``, with every parsed flag ``fn`` takes a keyword of: the
    commands pass their flags under the same names, so none can be left out here."""
    names = inspect.signature(fn).parameters
    return fn(*args, **{k: v for k, v in params.items() if k in names and k != "name"})


def launched(cfg: ClusterConfig) -> dict[str, Launched]:
    """Component name -> how it runs when ``cluster up`` starts it with ``cfg``."""
    with tempfile.TemporaryDirectory(prefix="mooncake-launch-") as tmp:
        path = Path(tmp) / "mooncake.yaml"
        path.write_text(dump_config(cfg))
        return {s.name: launch(s.argv) for s in Supervisor(cfg, path, ALL_COMMANDS).plan()}
