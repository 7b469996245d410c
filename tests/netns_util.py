"""Network namespaces joined by veth "NICs": a multi-host rig on one machine.

Multi-NIC and fault tests need real kernel networking between two "hosts". This module
builds one with iproute2: namespaces A and B, ``n_links`` veth pairs between them, each
pair on its own subnet, optionally shaped with ``tc``::

    ns A (mcns-<pid>-<seq>-a)                      ns B (mcns-<pid>-<seq>-b)
      mcv0a 10.77.1.1/24  <---- veth link 0 ---->  mcv0b 10.77.1.2/24
      mcv1a 10.77.2.1/24  <---- veth link 1 ---->  mcv1b 10.77.2.2/24

:func:`netns_switch` builds ``n`` hosts on one switch instead (a bridge in its own
namespace, one veth per host, host ``i`` at 10.78.<rig>.<i+1>/24), for clusters of more
than two hosts.

Only 10.77.x.0/24 and 10.78.x.0/24 addresses inside the rig's own namespaces are ever
used. Names carry
the creating PID, so concurrent runs never collide and namespaces left behind by a crashed
run (its PID is gone) are removed the next time a rig is built.

Needs root and ``ip`` (iproute2); ``tc`` only when links are shaped. Standard library only,
so bench scripts can use it as well as tests (``from tests.netns_util import netns_pair``).
"""

from __future__ import annotations

import atexit
import ctypes
import itertools
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "DEFAULT_PREFIX",
    "Link",
    "NetnsError",
    "NetnsPair",
    "NetnsSwitch",
    "cleanup_leftovers",
    "netns_pair",
    "netns_switch",
    "netns_unavailable_reason",
]

DEFAULT_PREFIX = "mcns"
"""Every namespace this module creates is named ``<prefix>-<pid>-<seq>-<a|b>``."""

Side = Literal["a", "b"]

_CLONE_NEWNET = 0x40000000
_seq = itertools.count()
_live: weakref.WeakSet[NetnsPair | NetnsSwitch] = weakref.WeakSet()


class NetnsError(RuntimeError):
    """An ``ip``/``tc`` command failed; the message carries the command and its stderr."""


@dataclass(frozen=True)
class Link:
    """One veth pair between the two namespaces: a "NIC" on each host."""

    index: int
    dev_a: str
    dev_b: str
    addr_a: str
    addr_b: str
    prefixlen: int = 24

    def dev(self, side: Side) -> str:
        """Device name of this link inside namespace ``side``."""
        return self.dev_a if side == "a" else self.dev_b

    def addr(self, side: Side) -> str:
        """IPv4 address of this link inside namespace ``side``."""
        return self.addr_a if side == "a" else self.addr_b


def _sh(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(argv)!r} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def _list_netns() -> list[str]:
    proc = _sh(["ip", "-j", "netns", "list"], check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return []
    return [entry["name"] for entry in json.loads(proc.stdout)]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_leftovers(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Delete namespaces named ``<prefix>-<pid>-...`` whose creating process is gone.

    Args:
        prefix: the name prefix to look for (the default is this module's).

    Returns:
        The names of the namespaces deleted.
    """
    removed = []
    for name in _list_netns():
        parts = name.split("-")
        if len(parts) < 3 or parts[0] != prefix or not parts[1].isdigit():
            continue
        if int(parts[1]) != os.getpid() and _pid_alive(int(parts[1])):
            continue
        if int(parts[1]) == os.getpid() and any(name in p.names() for p in _live):
            continue
        _kill_pids_in(name)
        if _sh(["ip", "netns", "del", name], check=False).returncode == 0:
            removed.append(name)
    return removed


def _kill_pids_in(ns: str) -> None:
    proc = _sh(["ip", "netns", "pids", ns], check=False)
    for token in proc.stdout.split():
        if token.isdigit():
            with suppress(ProcessLookupError):
                os.kill(int(token), 9)


def netns_unavailable_reason() -> str | None:
    """Why namespaces cannot be used here, or None when they can.

    Tries to create and delete a throwaway namespace, so it answers for this exact host
    (containers without CAP_SYS_ADMIN fail at ``ip netns add`` even as uid 0).
    """
    if os.geteuid() != 0:
        return "network namespace tests need root (run as uid 0)"
    if shutil.which("ip") is None:
        return "network namespace tests need iproute2's `ip` command"
    probe = f"{DEFAULT_PREFIX}-{os.getpid()}-probe"
    proc = _sh(["ip", "netns", "add", probe], check=False)
    if proc.returncode != 0:
        return f"`ip netns add` failed: {proc.stderr.strip() or proc.returncode}"
    _sh(["ip", "netns", "del", probe], check=False)
    return None


def _teardown(procs: Sequence[subprocess.Popen[Any]], namespaces: Sequence[str]) -> None:
    # Kill what the rig started, then whatever else runs inside, then delete the
    # namespaces (which destroys their veth ends, and with them the peers).
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
    for ns in namespaces:
        _kill_pids_in(ns)
        _sh(["ip", "netns", "del", ns], check=False)


def _setns_and_call(path: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    # Runs in a freshly forked child (single-threaded), so switching this one thread's
    # network namespace switches the whole process.
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}) failed: {os.strerror(err)}")
    finally:
        os.close(fd)
    fn(*args)


class NetnsPair:
    """A live rig: two namespaces, their veth links, and the processes run inside them.

    Build it with :func:`netns_pair`; every method takes ``side`` ``"a"`` or ``"b"``.
    """

    def __init__(self, ns_a: str, ns_b: str, links: tuple[Link, ...]) -> None:
        self.ns_a = ns_a
        self.ns_b = ns_b
        self.links = links
        self._procs: list[subprocess.Popen[Any]] = []
        self._children: list[multiprocessing.process.BaseProcess] = []
        self._closed = False

    def names(self) -> tuple[str, ...]:
        """Every namespace of the rig."""
        return (self.ns_a, self.ns_b)

    def ns(self, side: Side) -> str:
        """The namespace name of ``side``."""
        if side not in ("a", "b"):
            raise ValueError(f"side must be 'a' or 'b', got {side!r}")
        return self.ns_a if side == "a" else self.ns_b

    def nics(self, side: Side) -> tuple[str, ...]:
        """The IPv4 addresses of ``side``'s NICs, in link order."""
        return tuple(link.addr(side) for link in self.links)

    def _link(self, index: int) -> Link:
        if not 0 <= index < len(self.links):
            raise IndexError(f"link {index} does not exist (this rig has {len(self.links)})")
        return self.links[index]

    def ip(self, side: Side, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``ip -n <ns> ARGS`` and raise NetnsError if it fails."""
        return _sh(["ip", "-n", self.ns(side), *args])

    def link_down(self, index: int, side: Side = "a") -> None:
        """Take link ``index`` down on ``side`` (the peer then loses carrier too)."""
        self.ip(side, "link", "set", "dev", self._link(index).dev(side), "down")

    def link_up(self, index: int, side: Side = "a", *, timeout: float = 5.0) -> None:
        """Bring link ``index`` back up on ``side`` and wait until both ends have carrier.

        Raises:
            NetnsError: the link is not operationally up within ``timeout`` seconds.
        """
        self.ip(side, "link", "set", "dev", self._link(index).dev(side), "up")
        self.wait_carrier(index, timeout=timeout)

    def operstate(self, index: int, side: Side) -> str:
        """The kernel's operational state of link ``index`` on ``side`` (``UP``, ``DOWN``...)."""
        out = self.ip(side, "-j", "link", "show", "dev", self._link(index).dev(side))
        return str(json.loads(out.stdout)[0].get("operstate", "UNKNOWN"))

    def wait_carrier(self, index: int, *, timeout: float = 5.0) -> None:
        """Wait until link ``index`` is operationally UP on both ends (carrier is async).

        Raises:
            NetnsError: it is not within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            states = {side: self.operstate(index, side) for side in ("a", "b")}
            if all(state == "UP" for state in states.values()):
                return
            if time.monotonic() > deadline:
                raise NetnsError(f"link {index} not up after {timeout} s: {states}")
            time.sleep(0.02)

    def shape(self, index: int, *, rate: str | None = None, netem: str | None = None) -> None:
        """Replace the egress qdisc of link ``index`` on both ends.

        Args:
            index: link number.
            rate: a tc rate such as ``"1gbit"`` (token bucket filter), or None.
            netem: netem parameters such as ``"delay 1ms loss 0.1%"``, or None. With both,
                netem does the shaping (``netem ... rate R``).
        """
        link = self._link(index)
        for side in ("a", "b"):
            ns, dev = self.ns(side), link.dev(side)
            _sh(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], check=False)
            if netem is not None:
                extra = ["rate", rate] if rate else []
                _sh(
                    [
                        "tc",
                        "-n",
                        ns,
                        "qdisc",
                        "add",
                        "dev",
                        dev,
                        "root",
                        "netem",
                        *netem.split(),
                        *extra,
                    ]
                )
            elif rate is not None:
                # burst must cover one timer tick at this rate or tbf undershoots it.
                _sh(
                    [
                        "tc",
                        "-n",
                        ns,
                        "qdisc",
                        "add",
                        "dev",
                        dev,
                        "root",
                        "tbf",
                        "rate",
                        rate,
                        "burst",
                        "1mb",
                        "latency",
                        "100ms",
                    ]
                )

    def link_stats(self, index: int, side: Side) -> dict[str, int]:
        """Kernel counters of link ``index`` on ``side``: tx/rx bytes and packets."""
        out = self.ip(side, "-s", "-j", "link", "show", "dev", self._link(index).dev(side))
        stats = json.loads(out.stdout)[0]["stats64"]
        return {
            "tx_bytes": int(stats["tx"]["bytes"]),
            "rx_bytes": int(stats["rx"]["bytes"]),
            "tx_packets": int(stats["tx"]["packets"]),
            "rx_packets": int(stats["rx"]["packets"]),
        }

    def popen(self, side: Side, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside namespace ``side``; it is killed when the rig closes.

        ``ip netns exec`` execs the command in place, so the returned PID is the command's
        own (signals reach it directly).
        """
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(side), *argv], **kwargs)
        self._procs.append(proc)
        return proc

    def run(
        self, side: Side, argv: Sequence[str], **kwargs: Any
    ) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` inside namespace ``side`` to completion (``subprocess.run`` kwargs)."""
        return subprocess.run(["ip", "netns", "exec", self.ns(side), *argv], **kwargs)

    def python(self, side: Side, *args: str, **kwargs: Any) -> subprocess.Popen[Any]:
        """Start this interpreter (``sys.executable ARGS``) inside namespace ``side``."""
        return self.popen(side, [sys.executable, *args], **kwargs)

    def spawn(
        self, side: Side, fn: Callable[..., Any], *args: Any
    ) -> multiprocessing.process.BaseProcess:
        """Run ``fn(*args)`` in a forked child that has entered namespace ``side``.

        Fork (not spawn) so ``fn`` need not be importable; keep it to simple callables,
        since the child inherits only the forking thread.
        """
        ctx = multiprocessing.get_context("fork")
        child = ctx.Process(
            target=_setns_and_call, args=(f"/var/run/netns/{self.ns(side)}", fn, args), daemon=True
        )
        child.start()
        self._children.append(child)
        return child

    def close(self) -> None:
        """Kill every process started in the rig, then delete both namespaces (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for child in self._children:
            if child.is_alive():
                child.kill()
            child.join(timeout=10)
        _teardown(self._procs, self.names())


class NetnsSwitch:
    """``n`` host namespaces on one switch: a bridge in a namespace of its own, one veth
    from each host to it (``mcs0`` inside every host). Build it with :func:`netns_switch`;
    hosts are numbered ``0..n-1``."""

    def __init__(self, base: str, n: int, subnet: int) -> None:
        self.hosts = tuple(f"{base}-h{i}" for i in range(n))
        self.switch = f"{base}-sw"
        self.addrs = tuple(f"10.78.{subnet}.{i + 1}" for i in range(n))
        self._procs: list[subprocess.Popen[Any]] = []
        self._closed = False

    def names(self) -> tuple[str, ...]:
        """Every namespace of the rig."""
        return (*self.hosts, self.switch)

    def popen(self, host: int, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside host ``host``; it is killed when the rig closes."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.hosts[host], *argv], **kwargs)
        self._procs.append(proc)
        return proc

    def run(
        self, host: int, argv: Sequence[str], **kwargs: Any
    ) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` inside host ``host`` to completion (``subprocess.run`` kwargs)."""
        return subprocess.run(["ip", "netns", "exec", self.hosts[host], *argv], **kwargs)

    def close(self) -> None:
        """Kill every process started in the rig, then delete its namespaces (idempotent)."""
        if self._closed:
            return
        self._closed = True
        _teardown(self._procs, self.names())


@contextmanager
def netns_switch(n: int = 3, *, prefix: str = DEFAULT_PREFIX) -> Iterator[NetnsSwitch]:
    """Build ``n`` hosts on one switch, yield the rig, and always tear it down.

    Raises:
        NetnsError: an ``ip`` command failed (not root, no iproute2, no netns).
    """
    if not 2 <= n <= 200:
        raise ValueError(f"n must be 2..200, got {n}")
    cleanup_leftovers(prefix)
    seq = next(_seq)
    rig = NetnsSwitch(f"{prefix}-{os.getpid()}-{seq}", n, seq % 250)
    _live.add(rig)
    try:
        for ns in rig.names():
            _sh(["ip", "netns", "add", ns])
            _sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        sw = rig.switch
        _sh(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
        _sh(["ip", "-n", sw, "link", "set", "br0", "up"])
        for i, (ns, addr) in enumerate(zip(rig.hosts, rig.addrs, strict=True)):
            port = f"mcs{i}"
            _sh(
                [
                    "ip",
                    "-n",
                    sw,
                    "link",
                    "add",
                    port,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "mcs0",
                    "netns",
                    ns,
                ]
            )
            _sh(["ip", "-n", sw, "link", "set", port, "master", "br0", "up"])
            _sh(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "mcs0"])
            _sh(["ip", "-n", ns, "link", "set", "mcs0", "up"])
        yield rig
    finally:
        rig.close()


def _build(n_links: int, prefix: str) -> NetnsPair:
    if not 1 <= n_links <= 200:
        raise ValueError(f"n_links must be 1..200, got {n_links}")
    base = f"{prefix}-{os.getpid()}-{next(_seq)}"
    links = tuple(
        Link(i, f"mcv{i}a", f"mcv{i}b", f"10.77.{i + 1}.1", f"10.77.{i + 1}.2")
        for i in range(n_links)
    )
    pair = NetnsPair(f"{base}-a", f"{base}-b", links)
    _live.add(pair)
    try:
        for ns in (pair.ns_a, pair.ns_b):
            _sh(["ip", "netns", "add", ns])
            _sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        for link in links:
            # Created directly inside the namespaces: device names never meet in the root
            # namespace, so concurrent rigs can reuse them.
            _sh(
                [
                    "ip",
                    "-n",
                    pair.ns_a,
                    "link",
                    "add",
                    link.dev_a,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    link.dev_b,
                    "netns",
                    pair.ns_b,
                ]
            )
            for side in ("a", "b"):
                ns, dev = pair.ns(side), link.dev(side)
                _sh(
                    [
                        "ip",
                        "-n",
                        ns,
                        "addr",
                        "add",
                        f"{link.addr(side)}/{link.prefixlen}",
                        "dev",
                        dev,
                    ]
                )
                _sh(["ip", "-n", ns, "link", "set", "dev", dev, "up"])
        for link in links:
            pair.wait_carrier(link.index)
    except BaseException:
        pair.close()
        raise
    return pair


@contextmanager
def netns_pair(
    n_links: int = 2,
    *,
    rate: str | None = None,
    netem: str | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> Iterator[NetnsPair]:
    """Build a two-namespace rig, yield it, and always tear it down.

    Args:
        n_links: number of veth pairs (NICs per host); link i uses 10.77.(i+1).0/24.
        rate: shape every link to this tc rate (e.g. ``"1gbit"``), or None for unshaped.
        netem: netem parameters applied to every link (see :meth:`NetnsPair.shape`).
        prefix: namespace name prefix (also the prefix cleaned up on entry).

    Yields:
        The live :class:`NetnsPair`.

    Raises:
        NetnsError: an ``ip``/``tc`` command failed (not root, no iproute2, no netns).
    """
    cleanup_leftovers(prefix)
    pair = _build(n_links, prefix)
    try:
        if rate is not None or netem is not None:
            for link in pair.links:
                pair.shape(link.index, rate=rate, netem=netem)
        yield pair
    finally:
        pair.close()


@atexit.register
def _close_all_live() -> None:
    # A test that forgot its context manager, or an interpreter exiting on an exception,
    # still leaves no namespace behind.
    for rig in list(_live):
        rig.close()
