"""A two-host rig for the cluster tests: network namespaces, each running its own sshd.

Keys (host key, user key) are generated into the test's temp directory; sshd listens only
on the namespace's own 10.77.x address, so nothing outside the rig is ever reachable.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from tests.netns_util import NetnsPair, netns_pair, netns_unavailable_reason  # noqa: E402

SSHD = Path("/usr/sbin/sshd")

__all__ = [
    "NetnsPair",
    "netns_pair",
    "netns_unavailable_reason",
    "ssh_rig",
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


@contextmanager
def ssh_rig(tmp_path: Path) -> Iterator[tuple[NetnsPair, Path]]:
    """Two namespaces joined by one veth link, sshd on port 22 in each.

    Yields:
        The rig and the user's private key (authorized for root on both sides).
    """
    keys = tmp_path / "ssh"
    keys.mkdir()
    _keygen(keys / "host_key")
    _keygen(keys / "user_key")
    (keys / "authorized_keys").write_text((keys / "user_key.pub").read_text())
    # sshd refuses to start without its privilege-separation directory.
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    with netns_pair(1) as rig:
        for side in ("a", "b"):
            conf = keys / f"sshd_{side}.conf"
            conf.write_text(
                "\n".join(
                    [
                        f"ListenAddress {rig.links[0].addr(side)}",
                        "Port 22",
                        f"HostKey {keys / 'host_key'}",
                        f"PidFile {keys / f'sshd_{side}.pid'}",
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
            rig.popen(
                side,
                [str(SSHD), "-D", "-e", "-f", str(conf)],
                stdout=subprocess.DEVNULL,
                stderr=open(keys / f"sshd_{side}.log", "wb"),  # noqa: SIM115 (closed with the rig)
            )
        for side in ("a", "b"):
            _wait_port(rig, "a", rig.links[0].addr(side), 22)
        yield rig, keys / "user_key"


def _wait_port(rig: NetnsPair, side: str, address: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    code = (
        "import socket,sys\n"
        f"s=socket.socket(); s.settimeout(0.5)\n"
        f"sys.exit(s.connect_ex(({address!r},{port})))\n"
    )
    while time.monotonic() < deadline:
        if rig.run(side, [sys.executable, "-c", code]).returncode == 0:  # type: ignore[arg-type]
            return
        time.sleep(0.1)
    raise RuntimeError(f"sshd on {address}:{port} did not come up")
