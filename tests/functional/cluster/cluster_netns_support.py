"""Multi-host rigs for the cluster tests: network namespaces, each running its own sshd.

Keys (host key, user key) are generated into the test's temp directory; sshd listens only
on the namespace's own 10.77.x / 10.78.x address, so nothing outside the rig is ever
reachable. :func:`ssh_switch`: ``n`` hosts on one switch; :func:`netns_pair`: two hosts
on veth links (no sshd).
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from tests.netns_util import (  # noqa: E402
    NetnsSwitch,
    netns_pair,
    netns_switch,
    netns_unavailable_reason,
)

SSHD = Path("/usr/sbin/sshd")

__all__ = [
    "NetnsSwitch",
    "netns_pair",
    "netns_unavailable_reason",
    "ssh_switch",
    "sshd_unavailable_reason",
]


def sshd_unavailable_reason() -> str | None:
    """Why the SSH rig cannot run here, or None."""
    reason = netns_unavailable_reason()
    if reason:
        return reason
    if not SSHD.exists():
        return "openssh-server (/usr/sbin/sshd) is not installed"
    if subprocess.run(["which", "ssh-keygen"], capture_output=True).returncode != 0:
        return "ssh-keygen is not installed"
    return None


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def _keys(tmp_path: Path) -> Path:
    keys = tmp_path / "ssh"
    keys.mkdir()
    _keygen(keys / "host_key")
    _keygen(keys / "user_key")
    (keys / "authorized_keys").write_text((keys / "user_key.pub").read_text())
    # sshd refuses to start without its privilege-separation directory.
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    return keys


def _sshd(keys: Path, label: str, address: str, popen: Callable[..., object]) -> None:
    conf = keys / f"sshd_{label}.conf"
    conf.write_text(
        "\n".join(
            [
                f"ListenAddress {address}",
                "Port 22",
                f"HostKey {keys / 'host_key'}",
                f"PidFile {keys / f'sshd_{label}.pid'}",
                f"AuthorizedKeysFile {keys / 'authorized_keys'}",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "StrictModes no",
                "UsePAM no",
                "",
            ]
        )
    )
    popen(
        [str(SSHD), "-D", "-e", "-f", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=open(keys / f"sshd_{label}.log", "wb"),  # noqa: SIM115 (closed with the rig)
    )


@contextmanager
def ssh_switch(tmp_path: Path, n: int = 3) -> Iterator[tuple[NetnsSwitch, Path]]:
    """``n`` namespaces on one switch, sshd on port 22 in each.

    Yields:
        The rig and the user's private key (authorized for root on every host).
    """
    keys = _keys(tmp_path)
    with netns_switch(n) as rig:
        for i, addr in enumerate(rig.addrs):
            _sshd(keys, f"h{i}", addr, functools.partial(rig.popen, i))
        for addr in rig.addrs:
            _wait_port(rig.run, 0, addr, 22)
        yield rig, keys / "user_key"


def _wait_port(
    run: Callable[..., subprocess.CompletedProcess[object]],
    where: object,
    address: str,
    port: int,
    timeout: float = 10.0,
) -> None:
    deadline = time.monotonic() + timeout
    code = (
        "import socket,sys\n"
        f"s=socket.socket(); s.settimeout(0.5)\n"
        f"sys.exit(s.connect_ex(({address!r},{port})))\n"
    )
    while time.monotonic() < deadline:
        if run(where, [sys.executable, "-c", code]).returncode == 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"sshd on {address}:{port} did not come up")
