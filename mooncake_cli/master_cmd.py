"""`mooncake master`: run the store master in the foreground."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .common import ConfigOption, err, fail, load
from .serve import cluster_secret, serve

if TYPE_CHECKING:
    import asyncio

    from mooncake_core.config.models import ClusterConfig, MasterConfig
    from mooncake_core.store.ha.election import HaController
    from mooncake_core.store.journal import JournalOptions
    from mooncake_core.store.master_service import MasterService, ServiceOptions

app = typer.Typer(
    help="Run the store master (metadata, allocation, leases, pins, eviction).",
    invoke_without_command=True,
)


@app.callback(invoke_without_command=True)
def master(
    config: ConfigOption = None,
    host: Annotated[
        str | None,
        typer.Option("--host", help="Bind address (default: the master host's address)."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", min=0, max=65535, help="gRPC port (0: any free port)."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port", min=0, max=65535, help="/metrics, /health, /snapshot port (0: any)."
        ),
    ] = None,
    fast_port: Annotated[
        int | None,
        typer.Option(
            "--fast-port",
            min=0,
            max=65535,
            help="Fast control channel port (0: any; default master.fast_port, or any free "
            "one when --port is given).",
        ),
    ] = None,
    secret_file: Annotated[
        Path | None,
        typer.Option(
            "--secret-file",
            help="Cluster secret; every RPC then needs its token (default: the config's "
            "secret_file if set, else no authentication).",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            help="Journal + snapshots here; committed metadata survives a restart "
            "(default: master.data_dir; unset: nothing is kept).",
        ),
    ] = None,
    fsync: Annotated[
        str | None,
        typer.Option(
            "--fsync",
            help="Journal sync: always (fsync before each reply, shared by concurrent "
            "replies) | batch (each fsync waits --fsync-batch-ms to gather more) "
            "| none (page cache only: survives a master crash, not a machine crash) "
            "(default: master.fsync, always).",
        ),
    ] = None,
    fsync_batch_ms: Annotated[
        float | None,
        typer.Option(
            "--fsync-batch-ms",
            min=0.1,
            help="Delay of each batch fsync (default: master.fsync_batch_ms, 2).",
        ),
    ] = None,
    ha: Annotated[
        str | None,
        typer.Option(
            "--ha",
            help="etcd://HOST:PORT: run as one of several masters; the leader is elected "
            "through etcd and the metadata is replicated there.",
        ),
    ] = None,
    member_id: Annotated[
        str | None,
        typer.Option("--id", help="This master's name under --ha (default: host-pid)."),
    ] = None,
    ha_cluster: Annotated[
        str, typer.Option("--ha-cluster", help="Cluster name in etcd (masters sharing it).")
    ] = "default",
    lease_ttl: Annotated[
        int | None,
        typer.Option(
            "--lease-ttl",
            min=1,
            max=60,
            help="Leader lease TTL, seconds (default: etcd.lease_ttl_s, 3).",
        ),
    ] = None,
    respawn: Annotated[
        bool,
        typer.Option(
            "--respawn",
            help="Keep this master running: start it again whenever it exits unasked "
            "(a crash, a kill, a lost lease); under --ha it rejoins as a follower. "
            "`cluster up` sets it for HA masters.",
        ),
    ] = False,
) -> None:
    """Serve until SIGINT/SIGTERM; prints one 'serving on' line on stderr when ready."""
    cfg = load(config)
    if respawn:
        _keep(member_id or "master")
    secret = cluster_secret(cfg, secret_file)
    try:
        settings = master_settings(
            cfg,
            host=host,
            port=port,
            metrics_port=metrics_port,
            fast_port=fast_port,
            secret=secret,
            data_dir=data_dir,
            fsync=fsync,
            fsync_batch_ms=fsync_batch_ms,
            ha=ha,
            lease_ttl=lease_ttl,
        )
    except ValueError as exc:
        fail(str(exc))
    serve(
        lambda: MasterProcess(cfg.master, settings, member_id, ha_cluster),
        ready=MasterProcess.ready_line,
        stopping="mooncake master: shutting down",
        start_errors=(),
        ended=lambda m: m.deposed,
        ended_line="mooncake master: lost leadership; exiting",
    )


class MasterProcess:
    """The master service and, under ``--ha``, its leader election: one component for
    :func:`mooncake_cli.serve.serve` (it ends by itself when deposed).

    Args:
        mcfg: the config's master section.
        settings: what the command runs with (:func:`master_settings`).
        member_id: this master's name under HA (default host-pid).
        ha_cluster: the cluster name in etcd.
    """

    def __init__(
        self,
        mcfg: MasterConfig,
        settings: MasterSettings,
        member_id: str | None,
        ha_cluster: str,
    ) -> None:
        self.settings = settings
        self.service, self.note = _make_service(mcfg, settings)
        self.controller: HaController | None = None
        self._member_id = member_id
        self._ha_cluster = ha_cluster

    async def start(self) -> None:
        """Start the service, then (under HA) join the election.

        Raises:
            StartFailed: the service could not start, or etcd is unreachable.
        """
        from mooncake_core.lifecycle import StartFailed

        service, settings = self.service, self.settings
        try:
            await service.start()
        except RuntimeError as exc:
            raise StartFailed(str(exc)) from None
        if settings.ha is None:
            return
        import os
        import socket

        from mooncake_core.store.ha.election import HaController, HaOptions, parse_ha_url

        bind = settings.options.host
        hopts = HaOptions(
            endpoint=parse_ha_url(settings.ha),
            member_id=self._member_id or f"{socket.gethostname()}-{os.getpid()}",
            cluster=self._ha_cluster,
            lease_ttl_s=settings.lease_ttl_s,
            # under HA the records live in etcd's log; compacted like the journal
            snapshot_every=settings.journal.snapshot_every,
        )
        controller = HaController(
            service, hopts, f"{bind}:{service.port}", f"{bind}:{service.metrics_port}"
        )
        try:
            await controller.start()
        except Exception as exc:
            await service.stop()
            raise StartFailed(f"cannot reach etcd at {hopts.endpoint}: {exc}") from None
        self.controller = controller
        self.note = f"ha member {hopts.member_id} via {hopts.endpoint}"

    async def stop(self) -> None:
        """Leave the election (under HA), then stop the service."""
        if self.controller is not None:
            await self.controller.stop()
        await self.service.stop()

    @property
    def deposed(self) -> asyncio.Event | None:
        """Set when this master lost its leadership (None: not under HA)."""
        return None if self.controller is None else self.controller.deposed

    def ready_line(self) -> str:
        """The 'serving on' line (tests and ``cluster up`` parse it)."""
        bind, service = self.settings.options.host, self.service
        auth = "on" if self.settings.options.secret is not None else "off (no cluster secret)"
        return (
            f"mooncake master: serving on {bind}:{service.port} "
            f"(metrics on {bind}:{service.metrics_port}, fast control on "
            f"{service.fast_port or 'none'}, auth {auth}; {self.note})"
        )


def _keep(name: str) -> None:
    """Run this same command without ``--respawn`` under a keeper; exit with it."""
    import sys

    from mooncake_core.cluster.keeper import keep_running

    argv = [sys.executable, "-m", "mooncake_cli", *(a for a in sys.argv[1:] if a != "--respawn")]

    def report(line: str) -> None:
        err.print(f"mooncake master keeper: {line}", highlight=False, markup=False)

    raise typer.Exit(keep_running(argv, report=report, what=name))


@dataclass(frozen=True)
class MasterSettings:
    """Everything ``mooncake master`` runs with: the config's master settings with the
    command's flags applied (tests compare these for each config key)."""

    options: ServiceOptions
    """Bind addresses, ports, secret and the hashing reported on /health."""
    data_dir: Path | None
    """Journal directory (``~`` not yet expanded); None: no journal."""
    journal: JournalOptions
    """Sync policy and snapshot interval of the journal."""
    ha: str | None
    """``etcd://HOST:PORT`` under HA, else None."""
    lease_ttl_s: int
    """Leader lease TTL under HA."""


def master_settings(
    cfg: ClusterConfig,
    *,
    host: str | None = None,
    port: int | None = None,
    metrics_port: int | None = None,
    fast_port: int | None = None,
    secret: bytes | None = None,
    data_dir: Path | None = None,
    fsync: str | None = None,
    fsync_batch_ms: float | None = None,
    ha: str | None = None,
    lease_ttl: int | None = None,
) -> MasterSettings:
    """The master's settings from ``cfg`` and the flags given (None: the config's).

    Raises:
        ValueError: ``master.host`` is not a configured host, a bad ``fsync``, or a
            journal directory together with ``ha``.
    """
    from mooncake_core.store.journal import JournalOptions
    from mooncake_core.store.master_service import ServiceOptions

    mcfg = cfg.master
    try:
        bind = host or cfg.host(mcfg.host).address
    except KeyError:
        raise ValueError(f"master.host {mcfg.host!r} is not one of the configured hosts") from None
    fsync = mcfg.fsync if fsync is None else fsync
    if fsync not in ("always", "batch", "none"):
        raise ValueError(f"--fsync must be always, batch or none, got {fsync!r}")
    if ha is not None and (data_dir is not None or mcfg.data_dir is not None):
        raise ValueError("--ha keeps the metadata in etcd; do not combine it with --data-dir")
    if fast_port is None:
        # A master placed by hand with --port (tests, several masters on one host) takes
        # any free fast port: clients learn it from the master itself.
        fast_port = 0 if port is not None and mcfg.fast_port is not None else mcfg.fast_port
    opts = ServiceOptions(
        host=bind,
        port=mcfg.port if port is None else port,
        fast_port=fast_port,
        fast_unix=mcfg.fast_unix,
        metrics_host=bind,
        metrics_port=mcfg.metrics_port if metrics_port is None else metrics_port,
        secret=secret,
        # reported on /health so `cluster check` can compare every component's hashing
        hashing={"block_size": cfg.hashing.block_size, "seed": cfg.hashing.seed},
    )
    journal = JournalOptions(
        fsync=fsync,  # type: ignore[arg-type]
        batch_ms=mcfg.fsync_batch_ms if fsync_batch_ms is None else fsync_batch_ms,
        snapshot_every=mcfg.snapshot_every,
    )
    return MasterSettings(
        options=opts,
        data_dir=data_dir or mcfg.data_dir,
        journal=journal,
        ha=ha,
        lease_ttl_s=cfg.etcd.lease_ttl_s if lease_ttl is None else lease_ttl,
    )


def _make_service(mcfg: MasterConfig, settings: MasterSettings) -> tuple[MasterService, str]:
    """The service, restored from the journal directory when there is one; plus a note
    for the ready line."""
    from mooncake_core.store.master_service import MasterService

    opts, directory, journal = settings.options, settings.data_dir, settings.journal
    if settings.ha is not None:
        return MasterService(mcfg, opts, role="recovering"), "ha"
    if directory is None:
        return MasterService(mcfg, opts), "no journal: metadata is lost on restart"
    from mooncake_core.store.ha.durable import restore_local

    try:
        r = restore_local(directory.expanduser(), mcfg, journal)
    except (OSError, ValueError, RuntimeError) as exc:
        fail(f"cannot recover the journal in {directory}: {exc}")
    service = MasterService(mcfg, opts, state=r.state, sink=r.journal, image=r.image)
    note = (
        f"journal {directory} fsync={journal.fsync}: restored {r.objects} objects, "
        f"{r.segments} segments from {r.records} records in {r.seconds:.3f} s"
    )
    return service, note
