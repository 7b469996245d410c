"""Bring the cluster up and down, report its status, restart one component.

The supervisor drives launchers (local subprocesses, SSH) from a plan of
:class:`~.spec.ComponentSpec` and keeps :class:`~.runstate.RunState` on disk, so every
command works from any shell: ``up`` in one terminal, ``status``/``down`` in another.
It prints nothing itself; progress goes to the ``report`` callback the front end passes.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from mooncake_core import __version__
from mooncake_core.config import ClusterConfig, dump_config

from .launcher import Launcher
from .local import LocalLauncher
from .ports import port_in_use
from .probes import ProbeResult, http_get_json, probe
from .runstate import ComponentRecord, RunState, prepare_state_dir, write_private
from .spec import ROLE_ORDER, ComponentSpec, Probe, plan
from .ssh import SshError, SshLauncher

Report = Callable[[str], None]


class ClusterError(RuntimeError):
    """A cluster operation failed; the message says what and how to fix it.

    ``log_tail`` holds the failing component's last log lines, when there is one.
    """

    def __init__(self, message: str, log_tail: list[str] | None = None) -> None:
        super().__init__(message)
        self.log_tail = log_tail or []


@dataclass(frozen=True, slots=True)
class ComponentStatus:
    """One row of ``cluster status``."""

    name: str
    role: str
    host: str
    address: str
    state: str
    """``healthy``, ``unhealthy`` (runs, probe fails), ``down`` (recorded, gone),
    ``stopped`` (never started or stopped cleanly) or ``skipped`` (command not built)."""
    pid: int | None = None
    version: str = ""
    uptime_s: float | None = None
    ports: dict[str, int] = field(default_factory=dict)
    detail: str = ""
    info: dict[str, object] = field(default_factory=dict)


def ensure_secret(path: Path) -> bool:
    """Create the cluster secret (32 random bytes, hex, mode 0600) unless it exists.

    Returns:
        True if it was created now.

    Raises:
        ClusterError: the file exists with a mode other readers could use.
    """
    if path.exists():
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            raise ClusterError(
                f"cluster secret {path} has mode {mode:o}; others can read it: chmod 600 {path}"
            )
        return False
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return True


def resolve_config_file(cfg: ClusterConfig, given: Path | None, state: RunState) -> Path:
    """The config file components are started with.

    The file the operator named (or ``$MOONCAKE_CONFIG`` / ``./mooncake.yaml``) when there
    is one; for the embedded default, the effective config written to ``run/config.yaml``.
    """
    from mooncake_core.config import CONFIG_ENV

    for cand in (given, os.environ.get(CONFIG_ENV), Path("mooncake.yaml")):
        if cand and Path(cand).is_file():
            return Path(cand).resolve()
    prepare_state_dir(state.state_dir)
    path = state.run_dir / "config.yaml"
    write_private(path, dump_config(cfg))
    return path


class Supervisor:
    """Starts, watches and stops the components of one cluster.

    Args:
        cfg: the cluster config.
        config_file: the resolved config file (see :func:`resolve_config_file`).
        available: the ``mooncake`` command paths this version has.
        report: receives one line per step (the CLI prints it on stderr).
        local: the local launcher (tests may pass one with another interpreter).
        ssh_options: extra keyword arguments for every :class:`SshLauncher`.
        ready_timeout_s: how long a component may take to become ready.
        grace_s: SIGTERM-to-SIGKILL grace when stopping.
    """

    def __init__(
        self,
        cfg: ClusterConfig,
        config_file: Path,
        available: Collection[tuple[str, ...]],
        report: Report = lambda line: None,
        local: LocalLauncher | None = None,
        ssh_options: dict[str, object] | None = None,
        ready_timeout_s: float = 60.0,
        grace_s: float = 10.0,
    ) -> None:
        self.cfg = cfg
        self.config_file = config_file
        self.available = available
        self.report = report
        self.state = RunState(cfg.state_path)
        self.local = local or LocalLauncher()
        self.ssh_options = ssh_options or {}
        self.ready_timeout_s = ready_timeout_s
        self.grace_s = grace_s
        self._ssh: dict[str, SshLauncher] = {}

    def close(self) -> None:
        """Close the SSH connections this supervisor opened."""
        for launcher in self._ssh.values():
            launcher.close()
        self._ssh.clear()

    def secret(self) -> bytes | None:
        """The cluster secret, or None before the first ``up`` created it."""
        try:
            return self.cfg.secret_path.read_bytes().strip() or None
        except OSError:
            return None

    def plan(self, only: Collection[str] = ()) -> list[ComponentSpec]:
        """The components to run, in start order (see :func:`~.spec.plan`)."""
        return plan(self.cfg, self.config_file, self.cfg.secret_path, self.available, only)

    def launcher(self, host_name: str) -> Launcher:
        """The launcher for components on ``host_name``."""
        host = self.cfg.host(host_name)
        if host.ssh_user is None:
            return self.local
        if host_name not in self._ssh:
            self._ssh[host_name] = SshLauncher(
                host,
                str(self.cfg.state_dir),
                config_file=self.config_file,
                secret_file=self.cfg.secret_path,
                **self.ssh_options,  # type: ignore[arg-type]
            )
        return self._ssh[host_name]

    def _launcher_of(self, rec: ComponentRecord) -> Launcher:
        try:
            return self.launcher(rec.host)
        except KeyError:
            # The host left the config since the start: stop it where it was started.
            return self.local

    # -- up -----------------------------------------------------------------------------

    def up(self, only: Collection[str] = ()) -> list[ComponentRecord]:
        """Start every planned component not already running, in dependency order.

        Components that do not depend on each other start together and are then waited
        for (the store nodes; the prefill and decode workers; the conductor and the
        dashboard, which polls it): a wave is ready before the next starts. etcd members and masters start one at a time (the first
        master to be ready leads).

        Returns:
            The records of the components started now.

        Raises:
            ClusterError: a port is taken, a start fails, or a component is not ready in
                time; whatever this call started has been stopped again.
        """
        try:
            prepare_state_dir(self.state.state_dir)
            created = ensure_secret(self.cfg.secret_path)
        except OSError as exc:
            raise ClusterError(exc.strerror or str(exc)) from None
        if created:
            self.report(f"generated the cluster secret {self.cfg.secret_path} (mode 0600)")
        started: list[ComponentRecord] = []
        try:
            for wave in _waves(self.plan(only)):
                launched: list[tuple[ComponentRecord, Launcher]] = []
                try:
                    for spec in wave:
                        got = self._launch(spec)
                        if got is not None:
                            launched.append(got)
                    for rec, launcher in launched:
                        self._ready(rec, launcher)
                except BaseException:
                    started.extend(rec for rec, _ in launched)
                    raise
                started.extend(rec for rec, _ in launched)
        except BaseException:
            for rec in reversed(started):
                self.report(f"stopping {rec.name} (pid {rec.pid})")
                self._launcher_of(rec).stop(rec, self.grace_s)
                self.state.remove(rec.name)
            raise
        return started

    def _up_one(self, spec: ComponentSpec) -> ComponentRecord | None:
        """Start one component and wait until it is ready (stopped again if it is not)."""
        got = self._launch(spec)
        if got is None:
            return None
        rec, launcher = got
        try:
            self._ready(rec, launcher)
        except ClusterError:
            launcher.stop(rec, self.grace_s)
            self.state.remove(rec.name)
            raise
        return rec

    def _launch(self, spec: ComponentSpec) -> tuple[ComponentRecord, Launcher] | None:
        """Start ``spec``'s process and record it (``None``: skipped or already running)."""
        if spec.skipped:
            self.report(f"{spec.name}: skipped ({spec.skipped})")
            return None
        launcher = self.launcher(spec.host)
        old = self.state.load(spec.name)
        if old is not None:
            if launcher.alive(old):
                self.report(f"{spec.name}: already running (pid {old.pid} on {old.host})")
                return None
            self.state.remove(spec.name)
        self._check_ports(spec, launcher)
        log_path = self.state.log_path(spec.name)
        try:
            st = launcher.start(spec, log_path)
        except (OSError, SshError) as exc:
            raise ClusterError(f"{spec.name}: cannot start: {exc}") from exc
        rec = ComponentRecord(
            name=spec.name,
            role=spec.role,
            host=spec.host,
            address=spec.address,
            pid=st.pid,
            pgid=st.pgid,
            ports=dict(spec.ports),
            argv=list(st.argv),
            log_path=str(log_path),
            started_at=time.time(),
            probe_kind=spec.probe.kind,
            probe_target=spec.probe.target,
            remote=spec.remote,
            proc_start=st.proc_start,
            # etcd is an external binary: it has no mooncake-py version to compare.
            version="" if spec.role == "etcd" else st.version or f"mooncake-py {__version__}",
            config_path=str(self.config_file),
            hashing=dict(spec.hashing),
        )
        self.state.save(rec)
        self.report(f"{spec.name}: started (pid {st.pid} on {spec.host}), waiting until ready")
        return rec, launcher

    def _ready(self, rec: ComponentRecord, launcher: Launcher) -> None:
        self._wait_ready(rec, launcher)
        self.report(f"{rec.name}: ready")

    def _check_ports(self, spec: ComponentSpec, launcher: Launcher) -> None:
        for label, port in spec.ports.items():
            if isinstance(launcher, SshLauncher):
                holder = launcher.port_in_use(spec.address, port)
                if holder:
                    raise ClusterError(
                        f"port {port} on {spec.address} ({label}) is in use on host "
                        f"{spec.host!r}: {holder}; stop that process or change {label}"
                    )
                continue
            try:
                use = port_in_use(spec.address, port)
            except OSError as exc:
                raise ClusterError(
                    f"{spec.name}: cannot bind {spec.address}:{port} ({label}): {exc}"
                ) from exc
            if use is not None:
                raise ClusterError(f"{use.describe(label)}; stop that process or change {label}")

    def _wait_ready(self, rec: ComponentRecord, launcher: Launcher) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        last = ProbeResult(False, "not probed yet")
        while time.monotonic() < deadline:
            last = probe(Probe(rec.probe_kind, rec.probe_target), secret=self.secret())
            if last.ok:
                return
            if not launcher.alive(rec):
                raise ClusterError(
                    f"{rec.name} exited before it was ready (log: {rec.log_path} on {rec.host})",
                    launcher.tail(rec, 30),
                )
            time.sleep(0.2)
        raise ClusterError(
            f"{rec.name} not ready after {self.ready_timeout_s:.0f} s ({last.detail}); "
            f"log: {rec.log_path} on {rec.host}",
            launcher.tail(rec, 30),
        )

    # -- down / restart -------------------------------------------------------------------

    def down(self, only: Collection[str] = ()) -> list[str]:
        """Stop recorded components in reverse dependency order and forget them.

        Returns:
            Names of the components that had to be killed (ignored SIGTERM).
        """
        recs = self.state.all()
        if only:
            recs = [r for r in recs if r.role in only or r.name in only]
        recs.sort(key=_start_order, reverse=True)
        killed = []
        for rec in recs:
            launcher = self._launcher_of(rec)
            self.report(f"{rec.name}: stopping (pid {rec.pid} on {rec.host})")
            if launcher.stop(rec, self.grace_s):
                killed.append(rec.name)
                self.report(f"{rec.name}: ignored SIGTERM for {self.grace_s:.0f} s, killed")
            self.state.remove(rec.name)
        return killed

    def restart(self, name: str) -> ComponentRecord:
        """Stop component ``name`` (if running) and start it again from the config.

        Raises:
            ClusterError: unknown component or it does not come back ready.
        """
        specs = [s for s in self.plan() if s.name == name]
        if not specs:
            raise ClusterError(f"no component named {name!r} in the config")
        rec = self.state.load(name)
        if rec is not None:
            self.report(f"{name}: stopping (pid {rec.pid})")
            self._launcher_of(rec).stop(rec, self.grace_s)
            self.state.remove(name)
            if rec.role == "store":
                self._wait_segment_released(name)
        new = self._up_one(specs[0])
        if new is None:
            raise ClusterError(f"{name} was not started ({specs[0].skipped or 'see above'})")
        return new

    def _wait_segment_released(self, node: str) -> None:
        # A stopped store node's segment stays UNMOUNTING for the master's unmount grace,
        # and the master refuses a re-mount under the same name until it is gone.
        grace = self.cfg.master.unmount_grace_s
        deadline = time.monotonic() + grace + 5.0
        told = False
        while time.monotonic() < deadline:
            snap = self.store_usage() or {}
            segs = snap.get("segments")
            names = (
                {str(s.get("name")) for s in segs if isinstance(s, dict)}
                if isinstance(segs, list)
                else set()
            )
            if not any(n == node or n.startswith(node + "/") for n in names):
                return
            if not told:
                self.report(
                    f"{node}: waiting for the master to release its segment (unmount grace {grace:g} s)"
                )
                told = True
            time.sleep(0.2)

    # -- status ------------------------------------------------------------------------------

    def status(self) -> list[ComponentStatus]:
        """Every planned component (and any recorded one no longer planned), probed now."""
        recs = {r.name: r for r in self.state.all()}
        rows: list[ComponentStatus] = []
        for spec in self.plan():
            rows.append(self._status_of(spec, recs.pop(spec.name, None)))
        for rec in sorted(recs.values(), key=_start_order):
            rows.append(self._status_of(None, rec))
        return rows

    def _status_of(
        self, spec: ComponentSpec | None, rec: ComponentRecord | None
    ) -> ComponentStatus:
        if rec is None:
            if spec is None:
                raise ValueError("status needs a spec or a record")
            return ComponentStatus(
                spec.name,
                spec.role,
                spec.host,
                spec.address,
                "skipped" if spec.skipped else "stopped",
                ports=dict(spec.ports),
                detail=spec.skipped or "not running",
            )
        launcher = self._launcher_of(rec)
        try:
            alive = launcher.alive(rec)
        except SshError as exc:
            return _row(rec, "down", f"host unreachable: {exc}")
        if not alive:
            return _row(rec, "down", f"pid {rec.pid} is gone (log: {rec.log_path})")
        res = probe(Probe(rec.probe_kind, rec.probe_target), secret=self.secret())
        detail = "ok" if res.ok else res.detail
        readiness = res.info.get("readiness") if res.ok and rec.role == "master" else None
        if isinstance(readiness, dict):
            detail = master_readiness(readiness)
        row = _row(rec, "healthy" if res.ok else "unhealthy", detail)
        version = str(res.info.get("version", "")) or rec.version
        return replace(row, version=version, info=res.info)

    def store_usage(self) -> dict[str, object] | None:
        """The serving master's ``/snapshot`` JSON, or None when no master answers.

        With ``etcd.enabled`` every master is asked in turn (``master.metrics_port + i``,
        as the spec starts them) and the one whose readiness says it serves (the leader)
        answers: a follower's snapshot is empty, and after a failover the first master is
        often one. Without a serving master, the first answer (e.g. mid-election)."""
        address = self.cfg.host(self.cfg.master.host).address
        count = self.cfg.etcd.masters if self.cfg.etcd.enabled else 1
        first: dict[str, object] | None = None
        for i in range(count):
            res = http_get_json(
                f"http://{address}:{self.cfg.master.metrics_port + i}/snapshot", 2.0
            )
            if not res.ok:
                continue
            readiness = res.info.get("readiness")
            if count == 1 or (isinstance(readiness, dict) and readiness.get("serving")):
                return res.info
            first = first or res.info
        return first


def master_readiness(r: Mapping[str, object]) -> str:
    """One line for ``cluster status``: a master's role and whether it could take over.

    Args:
        r: the ``readiness`` object of the master's ``/health`` (docs/durability.md).

    Returns:
        e.g. ``leader (journal seq 812)``, ``follower, caught up (seq 812; leader m1)``,
        ``follower, catching up (seq 640; leader m1)``, ``standalone, no journal``,
        ``recovering``.
    """
    state = str(r.get("state", "unknown"))
    seq = r.get("applied_seq", r.get("journal_seq"))
    leader = r.get("leader_id")
    if state == "follower":
        ready = "caught up" if r.get("caught_up") else "catching up"
        where = f"seq {seq}" if seq is not None else "no seq yet"
        return f"follower, {ready} ({where}" + (f"; leader {leader})" if leader else ")")
    if state in ("leader", "standalone"):
        if r.get("ha"):
            return f"{state} (ha, seq {seq})" if seq is not None else f"{state} (ha)"
        if r.get("durable"):
            return f"{state} (journal seq {seq})"
        return f"{state}, no journal"
    return state + (f" (leader {leader})" if leader else "")


def _row(rec: ComponentRecord, state: str, detail: str) -> ComponentStatus:
    return ComponentStatus(
        name=rec.name,
        role=rec.role,
        host=rec.host,
        address=rec.address,
        state=state,
        pid=rec.pid,
        version=rec.version,
        uptime_s=max(0.0, time.time() - rec.started_at) if state != "down" else None,
        ports=dict(rec.ports),
        detail=detail,
    )


def _start_order(rec: ComponentRecord) -> tuple[int, float]:
    role = ROLE_ORDER.index(rec.role) if rec.role in ROLE_ORDER else len(ROLE_ORDER)
    return role, rec.started_at


_TOGETHER = {
    "store": "store",
    "prefill": "workers",
    "decode": "workers",
    "conductor": "front",
    "dashboard": "front",
}
"""Roles whose components start together (the key names the wave); any other role's
components start one at a time."""


def _waves(specs: list[ComponentSpec]) -> list[list[ComponentSpec]]:
    """``specs`` (in dependency order) cut into waves: consecutive components of roles
    that start together, every other component alone."""
    waves: list[list[ComponentSpec]] = []
    key = None
    for spec in specs:
        k = _TOGETHER.get(spec.role)
        if k is not None and k == key:
            waves[-1].append(spec)
        else:
            waves.append([spec])
        key = k
    return waves
