"""Fault harness: the faults real clusters see, as small reusable tools for tests.

Every tool acts on real processes or real kernel objects; nothing is simulated:

- ``paused(pid)`` / ``pause_for(pid, s)``: SIGSTOP then SIGCONT (a long GC, VM steal, a
  CPU stall; the process sees its clocks jump when it resumes).
- ``kill9(proc)``: SIGKILL and reap.
- ``SmallDisk(size)``: a tmpfs of ``size`` bytes (a disk that fills up); ``fill()`` eats
  every free byte, ``free()`` gives it back, ``resize(n)`` grows or shrinks it live.
- ``SlowDisk()``: a directory on a loop-mounted ext4 image; ``throttle(pid, ...)`` caps
  that process's writes to it with a blkio cgroup (a slow disk).
- ``FakeClock()``: libfaketime for a spawned process; ``jump(s)`` moves its wall and
  monotonic clocks at once (a clock step, an NTP jump, a resumed VM).
- ``partition(pair, link)``: cut one veth link of a ``tests.netns_util`` rig, and heal.
- ``CutProxy(port)``: a loopback TCP forwarder to ``port``; ``cut()`` partitions
  whoever dials it from that port (silence, bytes held as by a dead link), ``heal()``
  forwards again; ``cut(replies_only=True)`` holds only what the server sends back
  (requests arrive and take effect, their replies are late: a lost reply). For one
  process's link to one server (a master cut off from etcd while its clients still
  reach it), where a network namespace would move the clients too.

Root-only tools skip the test (``pytest.skip``) with the reason when they cannot work.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

LIBFAKETIME = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
)


def _pid(target: Any) -> int:
    return int(getattr(target, "pid", target))


@contextlib.contextmanager
def paused(target: Any) -> Iterator[None]:
    """SIGSTOP ``target`` (a pid or a Popen) for the body, SIGCONT after, whatever happens."""
    pid = _pid(target)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def pause_for(target: Any, seconds: float) -> None:
    """Stop ``target`` for ``seconds`` of wall time, then let it run again."""
    with paused(target):
        time.sleep(seconds)


def kill9(proc: subprocess.Popen[Any], timeout: float = 10.0) -> int:
    """SIGKILL ``proc`` and reap it; returns its exit status."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGKILL)
    return proc.wait(timeout=timeout)


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"{what} needs root")


def _sh(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=True, capture_output=True, text=True)


class SmallDisk:
    """A tmpfs of ``size`` bytes mounted on a fresh directory: a disk that can fill up.

    Use as a context manager (unmounts on exit) or call ``close()``. ``fill()`` writes a
    filler file until ENOSPC (leaving ``leave`` bytes), ``free()`` deletes it, and
    ``resize(n)`` remounts with a new size without touching the files on it.
    """

    def __init__(self, size: int, *, prefix: str = "mc-smalldisk-") -> None:
        _need_root("SmallDisk (mounting a tmpfs)")
        self.path = Path(tempfile.mkdtemp(prefix=prefix))
        self.size = size
        try:
            _sh("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(self.path))
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            self.path.rmdir()
            pytest.skip(f"cannot mount a tmpfs: {e}")
        self._filler = self.path / ".filler"
        self._mounted = True

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int = 0) -> int:
        """Write a filler until the disk is full (``leave`` bytes spare); bytes written."""
        written = 0
        chunk = b"\0" * (1 << 16)
        with open(self._filler, "ab") as f:
            while True:
                room = self.free_bytes() - leave
                if room <= 0:
                    break
                try:
                    f.write(chunk[: min(len(chunk), room)])
                    f.flush()
                except OSError:
                    break
                written += min(len(chunk), room)
        return written

    def free(self) -> None:
        """Delete the filler: the disk has room again."""
        with contextlib.suppress(FileNotFoundError):
            self._filler.unlink()

    def resize(self, size: int) -> None:
        """Grow or shrink the tmpfs in place (files stay)."""
        _sh("mount", "-o", f"remount,size={size}", str(self.path))
        self.size = size

    def close(self) -> None:
        if self._mounted:
            with contextlib.suppress(subprocess.CalledProcessError):
                _sh("umount", "-l", str(self.path))
            self._mounted = False
            shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> SmallDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FakeClock:
    """libfaketime for spawned processes: their wall and monotonic clocks jump on demand.

    Pass ``env()`` to the process you start; ``jump(s)`` moves every clock of that process
    forward (or back, negative) by ``s`` seconds relative to where it is now, at once.
    The offset is read from a file on every clock call (``FAKETIME_NO_CACHE``).
    """

    def __init__(self) -> None:
        lib = next((p for p in LIBFAKETIME if os.path.exists(p)), None)
        if lib is None:
            pytest.skip("libfaketime is not installed (Debian: apt-get install faketime)")
        self.lib = lib
        fd, name = tempfile.mkstemp(prefix="mc-faketime-")
        os.close(fd)
        self.file = Path(name)
        self.offset = 0.0
        self._write()

    def _write(self) -> None:
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(f"{self.offset:+.3f}\n")
        os.replace(tmp, self.file)

    def env(self) -> dict[str, str]:
        """Environment additions for a process that should run on this clock."""
        return {
            "LD_PRELOAD": self.lib,
            "FAKETIME_TIMESTAMP_FILE": str(self.file),
            "FAKETIME_NO_CACHE": "1",
        }

    def jump(self, seconds: float) -> None:
        """Step every clock of the processes on this clock by ``seconds``."""
        self.offset += seconds
        self._write()

    def close(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.file.unlink()

    def __enter__(self) -> FakeClock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def partition(pair: Any, link: int = 0) -> Iterator[None]:
    """Cut veth ``link`` of a ``tests.netns_util.NetnsPair`` for the body, then heal it."""
    pair.link_down(link)
    try:
        yield
    finally:
        pair.link_up(link)


class CutProxy:
    """Forward loopback TCP from ``self.port`` to ``target_port``; cut and heal the link.

    While cut, the proxy reads and accepts nothing: what either side sends stays in the
    kernel's socket buffers and nobody answers, as over a link that drops every packet
    (a connection attempt completes in the kernel's backlog, then hears nothing). Once
    healed, held bytes flow again, as TCP's retransmissions would deliver them.
    """

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ)
        self._peer: dict[socket.socket, socket.socket] = {}
        self._upstream: set[socket.socket] = set()  # sockets to the target (replies)
        self._replies_only = False
        self._cut = threading.Event()
        self._parked = threading.Event()  # the loop saw the cut: nothing moves now
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"cut-proxy-{self.port}")
        self._thread.daemon = True
        self._thread.start()

    @property
    def is_cut(self) -> bool:
        return self._cut.is_set()

    def cut(self, *, replies_only: bool = False) -> None:
        """Cut the link; once this returns, not one more byte is forwarded.

        ``replies_only``: cut only the target-to-client direction; requests still
        arrive (a reply lost after the server acted on the request).
        """
        self._parked.clear()
        self._replies_only = replies_only
        self._cut.set()
        if not self._parked.wait(5):
            raise AssertionError("the proxy did not stop forwarding within 5 s")

    def heal(self) -> None:
        self._cut.clear()

    def _close(self, s: socket.socket) -> None:
        for one in (s, self._peer.pop(s, None)):
            if one is None:
                continue
            self._peer.pop(one, None)
            self._upstream.discard(one)
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(one)
            one.close()

    def _accept(self) -> None:
        c, _ = self._listener.accept()
        try:
            u = socket.create_connection(self.target, timeout=2)
        except OSError:
            c.close()
            return
        self._upstream.add(u)
        for one, other in ((c, u), (u, c)):
            one.settimeout(5)  # a send to a peer that stopped reading gives up
            self._peer[one] = other
            self._sel.register(one, selectors.EVENT_READ)

    def _run(self) -> None:
        while not self._stop.is_set():
            one_way = self._replies_only
            if self._cut.is_set() and not one_way:
                self._parked.set()
                time.sleep(0.02)
                continue
            held = 0
            for key, _ in self._sel.select(0.05):
                if self._cut.is_set() and not one_way:
                    break  # the rest waits in the kernel until heal()
                s = key.fileobj
                assert isinstance(s, socket.socket)
                if self._cut.is_set() and s in self._upstream:
                    held += 1  # a reply: it waits in the kernel until heal()
                    continue
                if s is self._listener:
                    self._accept()
                    continue
                if s not in self._peer:
                    continue  # closed earlier in this round
                try:
                    data = s.recv(1 << 16)
                    if data:
                        self._peer[s].sendall(data)
                except OSError:
                    data = b""
                if not data:
                    self._close(s)
            if self._cut.is_set() and one_way:
                self._parked.set()
                if held:
                    time.sleep(0.005)  # held replies stay readable: do not spin

    def close(self) -> None:
        self._stop.set()
        self._cut.clear()
        self._thread.join(5)
        for s in list(self._peer):
            self._close(s)
        self._sel.close()
        self._listener.close()

    def __enter__(self) -> CutProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SlowDisk:
    """A directory whose writes go to a throttled block device: a slow disk.

    An ext4 image on a loop device is mounted on ``path``; ``throttle(pid, wbps, wiops)``
    moves ``pid`` into a fresh blkio cgroup whose writes to that device are capped (cgroup
    v1 ``blkio.throttle.*``, else v2 ``io.max``). Writes that reach the device from that
    process (``fsync``, ``O_DIRECT``) wait. Needs root and loop devices; otherwise the
    test is skipped with the reason.
    """

    def __init__(self, size: int = 64 << 20) -> None:
        _need_root("SlowDisk")
        self._work = Path(tempfile.mkdtemp(prefix="mc-slowdisk-"))
        self.path = self._work / "mnt"
        self.path.mkdir()
        image = self._work / "disk.img"
        self._cgroup: Path | None = None
        self.device = ""
        try:
            with open(image, "wb") as f:
                f.truncate(size)
            _sh("mkfs.ext4", "-q", "-F", str(image))
            self.device = _sh("losetup", "--find", "--show", str(image)).stdout.strip()
            _sh("mount", self.device, str(self.path))
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            self.close()
            pytest.skip(f"cannot build a loop-mounted disk: {e}")
        os.chmod(self.path, 0o700)

    def throttle(self, pid: int, *, wbps: int = 1 << 20, wiops: int = 50) -> None:
        """Cap writes of ``pid`` to this disk at ``wbps`` bytes/s and ``wiops`` writes/s."""
        rdev = os.stat(self.device).st_rdev
        dev = f"{os.major(rdev)}:{os.minor(rdev)}"
        v1 = Path("/sys/fs/cgroup/blkio")
        if (v1 / "blkio.throttle.write_bps_device").exists():
            cg = v1 / f"mc-slowdisk-{os.getpid()}-{pid}"
            cg.mkdir(exist_ok=True)
            (cg / "blkio.throttle.write_bps_device").write_text(f"{dev} {wbps}")
            (cg / "blkio.throttle.write_iops_device").write_text(f"{dev} {wiops}")
        else:
            v2 = Path("/sys/fs/cgroup")
            ctl = v2 / "cgroup.controllers"
            if not ctl.exists() or "io" not in ctl.read_text().split():
                pytest.skip("no blkio (v1) or io (v2) cgroup controller")
            cg = v2 / f"mc-slowdisk-{os.getpid()}-{pid}"
            cg.mkdir(exist_ok=True)
            (cg / "io.max").write_text(f"{dev} wbps={wbps} wiops={wiops}")
        (cg / "cgroup.procs").write_text(str(pid))
        self._cgroup = cg

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError, FileNotFoundError):
            _sh("umount", "-l", str(self.path))
        if self.device:
            with contextlib.suppress(subprocess.CalledProcessError, FileNotFoundError):
                _sh("losetup", "-d", self.device)
        if self._cgroup is not None:
            # A cgroup can only go once its processes are gone (the test killed them).
            with contextlib.suppress(OSError):
                self._cgroup.rmdir()
        shutil.rmtree(self._work, ignore_errors=True)

    def __enter__(self) -> SlowDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
