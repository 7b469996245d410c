"""What to run: one :class:`ComponentSpec` per process of the cluster, in start order.

The plan is pure: it turns a :class:`~mooncake_core.config.ClusterConfig` into specs and
does no I/O. Which role commands exist is passed in (the CLI knows its own commands;
the core never imports typer), so a component whose command is not built in this
version is planned as *skipped* with a note instead of failing at start::

    etcd (if enabled) -> master -> store nodes -> prefill, decode -> conductor -> dashboard

Workers come before the conductor: the conductor's start waits for every configured
worker's first Health answer, while workers need only the master and the store.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mooncake_core.config import ClusterConfig

ROLE_ORDER: tuple[str, ...] = (
    "etcd",
    "master",
    "store",
    "prefill",
    "decode",
    "conductor",
    "dashboard",
)
"""Roles in dependency order; ``down`` stops them in reverse."""

ROLE_COMMANDS: Mapping[str, tuple[str, ...]] = {
    "master": ("master",),
    "store": ("store", "node"),
    "conductor": ("conductor", "serve"),
    "prefill": ("worker", "prefill"),
    "decode": ("worker", "decode"),
    "dashboard": ("web",),
}
"""The ``mooncake`` sub-command each role runs (etcd is the external ``etcd`` binary)."""


@dataclass(frozen=True, slots=True)
class Probe:
    """How to tell that a component is ready.

    ``kind`` is ``http`` (GET ``target`` answers 200), ``worker`` (the worker RPC probe
    answers at ``target`` = ``host:port``) or ``tcp`` (``target`` = ``host:port`` accepts).
    """

    kind: str
    target: str


@dataclass(frozen=True, slots=True)
class ComponentSpec:
    """One process of the cluster, as the launcher needs it.

    ``argv`` starts with the literal ``mooncake`` for role commands; the launcher replaces
    it with the local interpreter or the remote host's command. ``ports`` maps the config
    field (``"master.port"``) to the port, for clear port-in-use messages.
    """

    name: str
    role: str
    host: str
    address: str
    argv: tuple[str, ...]
    ports: Mapping[str, int]
    probe: Probe
    remote: bool = False
    skipped: str | None = None
    """Why this component is not started (e.g. its command is not built yet)."""
    hashing: Mapping[str, object] = field(default_factory=dict)
    """Block-hashing settings the component will run with (compared by ``check``)."""


def hashing_of(cfg: ClusterConfig) -> dict[str, object]:
    """The settings that must match on every component for block keys to agree.

    Returns:
        ``{"block_size", "seed", "model"}`` and the model's ``"checkpoint"``, or for the
        random model its ``"layers", "kv_heads", "hidden"`` (a checkpoint's shapes are
        the file's, not the config's).
    """
    m = cfg.model
    out: dict[str, object] = {
        "block_size": cfg.hashing.block_size,
        "seed": cfg.hashing.seed,
        "model": m.name,
    }
    if m.checkpoint is not None:
        out["checkpoint"] = m.checkpoint
    else:
        out.update(layers=m.layers, kv_heads=m.kv_heads, hidden=m.hidden)
    return out


def plan(
    cfg: ClusterConfig,
    config_path: Path,
    secret_path: Path,
    available: Collection[tuple[str, ...]],
    only: Collection[str] = (),
) -> list[ComponentSpec]:
    """Every component of ``cfg`` in dependency order.

    Args:
        cfg: the cluster config.
        config_path: the resolved config file every component is started with.
        secret_path: the cluster secret file.
        available: the ``mooncake`` sub-command paths this version has, e.g.
            ``{("master",), ("store", "node")}``.
        only: restrict to these roles or component names (empty: all).

    Returns:
        The specs; components whose command is missing carry ``skipped``.

    Raises:
        ValueError: ``only`` names neither a role nor a component.
    """
    specs: list[ComponentSpec] = []
    hashing = hashing_of(cfg)
    common = ("--config", str(config_path), "--secret-file", str(secret_path))

    def add(
        name: str, role: str, host_name: str, extra: tuple[str, ...], ports: dict[str, int]
    ) -> None:
        host = cfg.host(host_name)
        address = host.address
        skipped = None
        if role == "etcd":
            argv: tuple[str, ...] = (
                "etcd",
                "--name",
                name,
                "--data-dir",
                str(cfg.state_path / "etcd"),
                "--listen-client-urls",
                f"http://{address}:{cfg.etcd.client_port}",
                "--advertise-client-urls",
                f"http://{address}:{cfg.etcd.client_port}",
                "--listen-peer-urls",
                f"http://{address}:{cfg.etcd.peer_port}",
            )
        else:
            cmd = ROLE_COMMANDS[role]
            argv = ("mooncake", *cmd, *extra, *common)
            if cmd not in available:
                skipped = f"`mooncake {' '.join(cmd)}` is not available in this version"
        specs.append(
            ComponentSpec(
                name=name,
                role=role,
                host=host.name,
                address=address,
                argv=argv,
                ports=ports,
                probe=_probe(role, address, ports),
                remote=host.ssh_user is not None,
                skipped=skipped,
                hashing=hashing,
            )
        )

    if cfg.etcd.enabled:
        add(
            "etcd",
            "etcd",
            cfg.master.host,
            (),
            {"etcd.client_port": cfg.etcd.client_port, "etcd.peer_port": cfg.etcd.peer_port},
        )
    if cfg.etcd.enabled:
        # HA: etcd.masters masters elect a leader through etcd. The first uses the
        # configured ports, the others the next ports up (master.port + i,
        # master.metrics_port + i): the config has one port pair for the master role.
        maddr = cfg.host(cfg.master.host).address
        # Each runs under a keeper (--respawn): a crashed, killed or deposed master is
        # started again at once and rejoins as a follower.
        ha = (
            "--ha",
            f"etcd://{maddr}:{cfg.etcd.client_port}",
            "--ha-cluster",
            cfg.name,
            "--respawn",
        )
        for i in range(cfg.etcd.masters):
            name = "master" if i == 0 else f"master-{i}"
            port, metrics = cfg.master.port + i, cfg.master.metrics_port + i
            ports = {f"{name}.port": port, f"{name}.metrics_port": metrics}
            fast: tuple[str, ...] = ()
            if cfg.master.fast_port is not None:
                ports[f"{name}.fast_port"] = cfg.master.fast_port + i
                fast = ("--fast-port", str(cfg.master.fast_port + i))
            add(
                name,
                "master",
                cfg.master.host,
                (*ha, "--id", name, "--port", str(port), "--metrics-port", str(metrics), *fast),
                ports,
            )
    else:
        ports = {"master.port": cfg.master.port, "master.metrics_port": cfg.master.metrics_port}
        if cfg.master.fast_port is not None:
            ports["master.fast_port"] = cfg.master.fast_port
        add("master", "master", cfg.master.host, (), ports)
    for i, node in enumerate(cfg.store_nodes):
        add(
            node.name,
            "store",
            node.host,
            (
                "--name",
                node.name,
                "--size",
                str(int(node.segment_size)),
                "--host",
                cfg.host(node.host).address,
                "--data-port",
                str(node.data_port),
                "--metrics-port",
                str(node.metrics_port),
                *(
                    ("--ssd-dir", str(node.ssd_dir), "--ssd-size", str(int(node.ssd_size)))
                    if node.ssd_dir is not None
                    else ()
                ),
            ),
            {
                f"store_nodes.{i}.data_port": node.data_port,
                f"store_nodes.{i}.metrics_port": node.metrics_port,
            },
        )
    for role, workers in (("prefill", cfg.prefill_workers), ("decode", cfg.decode_workers)):
        for i, w in enumerate(workers):
            add(
                w.name,
                role,
                w.host,
                ("--name", w.name),
                {
                    f"{role}_workers.{i}.rpc_port": w.rpc_port,
                    f"{role}_workers.{i}.data_port": w.data_port,
                    **(
                        {f"{role}_workers.{i}.metrics_port": w.metrics_port}
                        if w.metrics_port is not None
                        else {}
                    ),
                },
            )
    add(
        "conductor",
        "conductor",
        cfg.conductor.host,
        conductor_args(cfg),
        {"conductor.http_port": cfg.conductor.http_port},
    )
    # The dashboard binds its host's address: the probe and the operator reach it there.
    add(
        "dashboard",
        "dashboard",
        cfg.dashboard.host,
        ("--host", cfg.host(cfg.dashboard.host).address),
        {"dashboard.port": cfg.dashboard.port},
    )
    _check_clashes(specs)
    return select(specs, only)


def conductor_args(cfg: ClusterConfig) -> tuple[str, ...]:
    """The conductor's behaviour settings of ``cfg`` as ``mooncake conductor serve`` flags.

    Spelled out on the command line (the conductor would read the same from the config)
    so ``cluster status``, the run records and ``ps`` show what the conductor runs with.
    Predictor paths go as written: ``~`` is expanded on the conductor's host.
    """
    cc = cfg.conductor
    models: tuple[str, ...] = ()
    if cc.prefill_model is not None and cc.decode_model is not None:
        models = ("--prefill-model", str(cc.prefill_model), "--decode-model", str(cc.decode_model))
    return (
        "--cpp-threshold",
        str(cc.cpp_threshold),
        "--cpp-chunk",
        str(cc.cpp_chunk_tokens),
        "--store-kv" if cc.store_kv else "--no-store-kv",
        "--profile" if cc.profile else "--no-profile",
        "--profile-device",
        cfg.profile_device or "auto",
        *models,
    )


def _check_clashes(specs: list[ComponentSpec]) -> None:
    # The config validates its own ports; derived ones (extra HA masters) are checked here.
    used: dict[tuple[str, int], str] = {}
    for spec in specs:
        for label, port in spec.ports.items():
            owner = used.setdefault((spec.host, port), label)
            if owner != label:
                raise ValueError(
                    f"{label}: port {port} on host {spec.host!r} already used by {owner}"
                )


def select(specs: list[ComponentSpec], only: Collection[str]) -> list[ComponentSpec]:
    """Keep the specs whose role or name is in ``only`` (all when empty).

    Raises:
        ValueError: an entry of ``only`` matches nothing.
    """
    if not only:
        return specs
    known = {s.role for s in specs} | {s.name for s in specs}
    unknown = sorted(set(only) - known)
    if unknown:
        raise ValueError(
            f"unknown role or component {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )
    return [s for s in specs if s.role in only or s.name in only]


def _probe(role: str, address: str, ports: Mapping[str, int]) -> Probe:
    port_of = {key.rsplit(".", 1)[1]: port for key, port in ports.items()}
    if role == "etcd":
        return Probe("http", f"http://{address}:{port_of['client_port']}/health")
    if role in ("master", "store"):
        return Probe("http", f"http://{address}:{port_of['metrics_port']}/health")
    if role == "conductor":
        return Probe("http", f"http://{address}:{port_of['http_port']}/health")
    if role in ("prefill", "decode"):
        return Probe("worker", f"{address}:{port_of['rpc_port']}")
    return Probe("http", f"http://{address}:{port_of['port']}/health")
