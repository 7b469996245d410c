"""SSH launcher: the same ``mooncake`` role commands, started on another host (asyncssh).

On the remote host, under the cluster's ``state_dir`` (``~`` is the remote user's home)::

    run/config.yaml        copy of the config the cluster was started with
    run/secret             copy of the cluster secret (0600)
    run/<component>.pid    pid of the component (leader of its own session: setsid)
    logs/<component>.log   its output

A component is started with ``setsid nohup ... &`` so it survives the SSH session and
owns a process group that ``stop`` signals as a whole. A launcher keeps one connection
(on its own event loop thread) for the life of the command that uses it.
"""

from __future__ import annotations

import asyncio
import shlex
import threading
import time
import warnings
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

from mooncake_core.config import HostConfig

from .launcher import Started
from .runstate import LOG_DIR, RUN_DIR, ComponentRecord
from .spec import ComponentSpec

with warnings.catch_warnings():
    # cryptography 51 warns, on asyncssh's import, that DSA keys are deprecated: every
    # command that imports the cluster package (cluster up, web, ...) printed it on
    # stderr. The launcher never offers DSA keys itself; a user's DSA key still works.
    warnings.filterwarnings("ignore", message="DSA is deprecated", module="asyncssh")
    import asyncssh

T = TypeVar("T")


class SshError(RuntimeError):
    """An SSH connection or remote command failed; the message says which host and why."""


class SshLauncher:
    """Start, probe and stop components on one remote host.

    Args:
        host: the host (``ssh_user`` set).
        state_dir: the cluster's ``state_dir`` as written in the config (``~`` allowed).
        mooncake: remote command that replaces the literal ``mooncake``.
        known_hosts: asyncssh ``known_hosts`` argument; ``None`` disables host key checks
            (only for test rigs that generate their own keys).
        connect_timeout_s: SSH connect timeout.
        config_file: local config copied to the host before each start.
        secret_file: local cluster secret copied (0600) before each start.
    """

    def __init__(
        self,
        host: HostConfig,
        state_dir: str,
        mooncake: tuple[str, ...] = ("mooncake",),
        known_hosts: object = (),
        connect_timeout_s: float = 10.0,
        config_file: Path | None = None,
        secret_file: Path | None = None,
    ) -> None:
        if host.ssh_user is None:
            raise ValueError(f"host {host.name!r} has no ssh_user; it is started locally")
        self.host = host
        self.mooncake = mooncake
        self._state = _shell_path(state_dir)
        self._known_hosts = known_hosts
        self._timeout = connect_timeout_s
        self.config_file = config_file
        self.secret_file = secret_file
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: asyncssh.SSHClientConnection | None = None
        self._version: str | None = None

    # -- plumbing ---------------------------------------------------------------------

    def connect_options(self) -> dict[str, object]:
        """Keyword arguments of ``asyncssh.connect(host.address, ...)`` for this host."""
        kw: dict[str, object] = {
            "port": self.host.ssh_port,
            "username": self.host.ssh_user,
            "connect_timeout": self._timeout,
        }
        if self._known_hosts != ():
            kw["known_hosts"] = self._known_hosts
        if self.host.ssh_key is not None:
            kw["client_keys"] = [str(self.host.ssh_key.expanduser())]
        return kw

    async def _connect(self) -> asyncssh.SSHClientConnection:
        try:
            return await asyncssh.connect(self.host.address, **self.connect_options())
        except (TimeoutError, OSError, asyncssh.Error) as exc:
            raise SshError(
                f"cannot reach host {self.host.name!r} over SSH "
                f"({self.host.ssh_user}@{self.host.address}:{self.host.ssh_port}): {exc}"
            ) from exc

    async def _run(self, command: str, stdin: str | None) -> asyncssh.SSHCompletedProcess:
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = await self._connect()
            try:
                return await self._conn.run(command, input=stdin, check=False)
            except (OSError, asyncssh.Error) as exc:
                # A dropped connection (sshd restarted, idle timeout): reconnect once.
                self._conn.abort()
                self._conn = None
                if attempt:
                    raise SshError(f"host {self.host.name!r}: `{command}` failed: {exc}") from exc
        raise AssertionError("unreachable")

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        # One event loop thread and one connection per launcher: a command is a new
        # channel on the open connection (milliseconds), not a new SSH handshake.
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(
                target=self._loop.run_forever, name=f"ssh-{self.host.name}", daemon=True
            ).start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        """Close the connection and stop the launcher's event loop (idempotent)."""
        loop, self._loop = self._loop, None
        if loop is None:
            return

        async def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                await self._conn.wait_closed()
                self._conn = None

        asyncio.run_coroutine_threadsafe(shut(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)

    def run(self, command: str, *, check: bool = True, stdin: str | None = None) -> str:
        """Run a shell ``command`` on the host and return its stdout.

        Raises:
            SshError: the host is unreachable, or ``check`` and the command failed.
        """

        res = self._call(self._run(command, stdin))
        if check and res.exit_status != 0:
            raise SshError(
                f"on host {self.host.name!r}: `{command}` exited {res.exit_status}: "
                f"{str(res.stderr or '').strip()[-500:]}"
            )
        return str(res.stdout or "")

    def put_file(self, local: Path, remote_rel: str, mode: int = 0o644) -> str:
        """Copy ``local`` to ``<state_dir>/<remote_rel>`` with ``mode``; returns the remote
        path as a shell expression."""
        dest = f"{self._state}/{shlex.quote(remote_rel)}"
        self.run(
            f'umask 077; mkdir -p "$(dirname {dest})" && cat > {dest} && chmod {mode:o} {dest}',
            stdin=local.read_text(),
        )
        return dest

    # -- launcher interface -------------------------------------------------------------

    def version(self) -> str:
        """``mooncake --version`` on the host (e.g. ``mooncake-py 0.1.0``), asked once."""
        if self._version is None:
            cmd = " ".join(shlex.quote(a) for a in self.mooncake) + " --version"
            self._version = self.run(cmd).strip()
        return self._version

    def argv(self, spec: ComponentSpec) -> list[str]:
        """The remote command line, with config and secret replaced by the remote copies."""
        argv = [*self.mooncake, *spec.argv[1:]] if spec.argv[0] == "mooncake" else list(spec.argv)
        out: list[str] = []
        skip = False
        for i, a in enumerate(argv):
            if skip:
                skip = False
                continue
            if a in ("--config", "--secret-file") and i + 1 < len(argv):
                out += [a, "@CONFIG@" if a == "--config" else "@SECRET@"]
                skip = True
            else:
                out.append(a)
        return out

    def start(self, spec: ComponentSpec, log_path: Path) -> Started:
        """Copy config and secret, start ``spec`` with ``setsid nohup``, read back its pid.

        ``log_path`` is ignored: the log is on the remote host (``logs/<name>.log``).

        Raises:
            SshError: the host is unreachable or the start command failed.
        """
        config, secret = self.config_file, self.secret_file
        remote_cfg = self.put_file(config, f"{RUN_DIR}/config.yaml") if config else ""
        remote_secret = self.put_file(secret, f"{RUN_DIR}/secret", 0o600) if secret else ""
        argv = self.argv(spec)
        words = []
        for a in argv:
            if a == "@CONFIG@":
                words.append(remote_cfg)
            elif a == "@SECRET@":
                words.append(remote_secret)
            else:
                words.append(shlex.quote(a))
        log = f"{self._state}/{LOG_DIR}/{shlex.quote(spec.name)}.log"
        pidf = f"{self._state}/{RUN_DIR}/{shlex.quote(spec.name)}.pid"
        cmd = (
            f"umask 077 && mkdir -p {self._state}/{LOG_DIR} {self._state}/{RUN_DIR} && "
            f"(setsid nohup {' '.join(words)} >> {log} 2>&1 < /dev/null & echo $! > {pidf}) && "
            f"cat {pidf}"
        )
        pid = int(self.run(cmd).strip())
        return Started(pid=pid, pgid=pid, argv=tuple(argv), version=self.version())

    def alive(self, rec: ComponentRecord) -> bool:
        """Whether the pid runs on the host (not a zombie)."""
        out = self.run(f"ps -o stat= -p {rec.pid} || true").strip()
        return bool(out) and not out.startswith("Z")

    def group_alive(self, rec: ComponentRecord) -> bool:
        """Whether any live process of the group is left on the host."""
        out = self.run(f"ps -eo pgid=,stat= | awk '$1 == {int(rec.pgid)} {{print $2}}'")
        return any(not s.startswith("Z") for s in out.split())

    def stop(self, rec: ComponentRecord, grace_s: float = 10.0) -> bool:
        """SIGTERM the remote group, SIGKILL after ``grace_s``; remove the pid file."""
        self.run(f"kill -TERM -- -{rec.pgid} 2>/dev/null || true")
        deadline = time.monotonic() + grace_s
        killed = False
        while self.group_alive(rec):
            if time.monotonic() > deadline:
                self.run(f"kill -KILL -- -{rec.pgid} 2>/dev/null || true")
                killed = True
                break
            time.sleep(0.2)
        self.run(f"rm -f {self._state}/{RUN_DIR}/{shlex.quote(rec.name)}.pid")
        return killed

    def tail(self, rec: ComponentRecord, n: int) -> list[str]:
        """The last ``n`` lines of the remote log."""
        log = f"{self._state}/{LOG_DIR}/{shlex.quote(rec.name)}.log"
        return self.run(f"tail -n {int(n)} {log} 2>/dev/null || true").splitlines()

    def follow(self, rec: ComponentRecord, n: int) -> Iterator[str]:
        """Last ``n`` lines, then new ones (polls the remote file every second)."""
        yield from self.tail(rec, n)
        log = f"{self._state}/{LOG_DIR}/{shlex.quote(rec.name)}.log"
        size = int(self.run(f"stat -c %s {log} 2>/dev/null || echo 0").strip() or 0)
        while True:
            time.sleep(1.0)
            chunk = self.run(f"tail -c +{size + 1} {log} 2>/dev/null || true")
            size += len(chunk.encode())
            yield from chunk.splitlines()

    def port_in_use(self, address: str, port: int) -> str | None:
        """A description of the listener on ``port`` on the host, or None if free."""
        out = self.run(f"ss -Htlnp 'sport = :{int(port)}' 2>/dev/null || true").strip()
        return out or None

    def nic(self, name: str) -> tuple[str, int | None] | None:
        """(operstate, mtu) of NIC ``name`` on the host, or None if it does not exist."""
        q = shlex.quote(name)
        out = self.run(
            f"test -d /sys/class/net/{q} && cat /sys/class/net/{q}/operstate /sys/class/net/{q}/mtu || true"
        ).split()
        if len(out) < 2:
            return None
        return out[0].upper(), int(out[1]) if out[1].isdigit() else None


def _shell_path(path: str) -> str:
    # Quote everything except a leading ~, which must expand to the *remote* home.
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)
