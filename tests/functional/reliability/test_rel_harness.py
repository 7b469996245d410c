"""The fault harness does what it says, on real processes and real kernel objects."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from faults import CutProxy, FakeClock, SlowDisk, SmallDisk, kill9, paused

TICKER = "import time,sys\nwhile True:\n print(time.monotonic(), time.time(), flush=True)\n time.sleep(0.05)\n"


def _ticker(env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", TICKER],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _drain(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


def test_paused_process_makes_no_progress_and_resumes() -> None:
    proc = _ticker()
    try:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        time.sleep(0.3)
        assert _drain(fd), "the ticker never printed"
        with paused(proc):
            time.sleep(0.3)  # anything already in flight lands in the pipe
            _drain(fd)
            time.sleep(0.6)
            assert not _drain(fd), "a stopped process printed"
        time.sleep(0.5)
        assert _drain(fd), "the process did not resume"
    finally:
        assert kill9(proc) == -9


def test_small_disk_fills_frees_and_grows() -> None:
    with SmallDisk(4 << 20) as disk:
        disk.fill()
        with pytest.raises(OSError) as e, open(disk.path / "x", "wb") as f:
            f.write(b"y" * (1 << 20))
            f.flush()
        assert e.value.errno == errno.ENOSPC
        disk.free()
        assert disk.free_bytes() >= 3 << 20
        disk.resize(8 << 20)
        assert disk.free_bytes() >= 7 << 20
        assert oct(os.stat(disk.path).st_mode & 0o777) == "0o700"


def test_fake_clock_jumps_wall_and_monotonic_of_a_child() -> None:
    with FakeClock() as clock:
        proc = _ticker(clock.env())
        try:
            assert proc.stdout is not None
            mono0, wall0 = (float(x) for x in proc.stdout.readline().split())
            clock.jump(120)
            for _ in range(40):
                mono, wall = (float(x) for x in proc.stdout.readline().split())
                if mono - mono0 > 100:
                    break
            assert 100 < mono - mono0 < 140
            assert 100 < wall - wall0 < 140
        finally:
            kill9(proc)


def test_slow_disk_throttles_fsync_of_one_process() -> None:
    with SlowDisk() as disk:
        code = (
            "import os,sys,time\n"
            "sys.stdin.readline()\n"
            f"fd=os.open({str(disk.path / 'f')!r}, os.O_WRONLY|os.O_CREAT, 0o600)\n"
            "t=time.monotonic(); os.write(fd, b'x'*(2<<20)); os.fsync(fd)\n"
            "print(time.monotonic()-t, flush=True)\n"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert proc.stdin is not None and proc.stdout is not None
        disk.throttle(proc.pid, wbps=1 << 20)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        took = float(proc.stdout.readline())
        proc.wait(timeout=30)
        assert took > 1.0, f"2 MiB + fsync at 1 MiB/s took {took:.2f} s"


def _echo_server() -> socket.socket:
    srv = socket.create_server(("127.0.0.1", 0))

    def echo(c: socket.socket) -> None:
        with c:
            while data := c.recv(4096):
                c.sendall(data)

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(c,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv


def test_cut_proxy_holds_bytes_while_cut_and_delivers_them_once_healed() -> None:
    srv = _echo_server()
    with srv, CutProxy(srv.getsockname()[1]) as proxy:
        c = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
        with c:
            c.sendall(b"one")
            assert c.recv(16) == b"one"
            proxy.cut()
            c.sendall(b"two")
            c.settimeout(0.5)
            with pytest.raises(TimeoutError):
                c.recv(16)  # silence, as over a dead link: no reset, no answer
            # A new connection is not refused either: it hears nothing.
            late = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
            late.settimeout(0.5)
            late.sendall(b"three")
            with pytest.raises(TimeoutError):
                late.recv(16)
            proxy.heal()
            c.settimeout(2)
            late.settimeout(2)
            assert c.recv(16) == b"two"  # held, then delivered
            assert late.recv(16) == b"three"
            late.close()
