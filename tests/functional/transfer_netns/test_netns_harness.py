"""The two-namespace rig itself: links connect, stay private, go down and up, are shaped,
and nothing is left behind."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from tests.netns_util import NetnsPair, cleanup_leftovers, netns_pair

pytestmark = [pytest.mark.privileged, pytest.mark.integration]

# Accepts connections on every address of its namespace and sinks what it receives,
# answering each connection with the byte count; prints "ready" once listening.
_SINK = r"""
import socket, sys, threading
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", int(sys.argv[1]))); srv.listen(16)
print("ready", flush=True)
def serve(conn):
    buf = bytearray(1 << 20); total = 0
    while True:
        n = conn.recv_into(buf)
        if n == 0:
            break
        total += n
    conn.sendall(str(total).encode()); conn.close()
while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

# Sends argv[3] bytes to each address in argv[2] (comma separated) in parallel, prints
# JSON {addr: bytes acknowledged or the error} and the wall time; exits 1 on any error.
_SOURCE = r"""
import json, socket, sys, threading, time
port, addrs, nbytes = int(sys.argv[1]), sys.argv[2].split(","), int(sys.argv[3])
connect_timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
chunk = memoryview(bytearray(b"\x5a" * (1 << 20)))
res = {}
def send(addr):
    try:
        s = socket.create_connection((addr, port), timeout=connect_timeout)
    except OSError as exc:
        res[addr] = repr(exc)
        return
    left = nbytes
    while left > 0:
        left -= s.send(chunk[: min(left, len(chunk))])
    s.shutdown(socket.SHUT_WR)
    res[addr] = int(s.recv(64))
t0 = time.perf_counter()
ths = [threading.Thread(target=send, args=(a,)) for a in addrs]
[t.start() for t in ths]; [t.join() for t in ths]
print(json.dumps({"acked": res, "seconds": time.perf_counter() - t0}))
sys.exit(0 if all(isinstance(v, int) for v in res.values()) else 1)
"""

PORT = 17999


def _start_sink(rig: NetnsPair) -> subprocess.Popen[str]:
    sink = rig.python("a", "-c", _SINK, str(PORT), stdout=subprocess.PIPE, text=True)
    assert sink.stdout is not None
    assert sink.stdout.readline().strip() == "ready"
    return sink


def _send(rig: NetnsPair, addrs: list[str], nbytes: int, timeout: float = 30) -> dict:
    proc = rig.run(
        "b",
        [sys.executable, "-c", _SOURCE, str(PORT), ",".join(addrs), str(nbytes)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_netns_links_connect_and_are_private(make_rig) -> None:
    rig = make_rig(2)
    assert rig.nics("a") == ("10.77.1.1", "10.77.2.1")
    assert rig.nics("b") == ("10.77.1.2", "10.77.2.2")
    _start_sink(rig)
    got = _send(rig, list(rig.nics("a")), 3 << 20)
    assert got["acked"] == {"10.77.1.1": 3 << 20, "10.77.2.1": 3 << 20}
    # Each link's traffic went over its own veth pair.
    assert rig.link_stats(0, "a")["rx_bytes"] >= 3 << 20
    assert rig.link_stats(1, "a")["rx_bytes"] >= 3 << 20
    root_addrs = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True).stdout
    assert "10.77." not in root_addrs


def test_netns_link_down_blocks_and_up_restores(make_rig) -> None:
    rig = make_rig(2)
    _start_sink(rig)
    rig.link_down(1)
    assert rig.operstate(1, "a") == "DOWN"
    proc = rig.run(
        "b",
        [sys.executable, "-c", _SOURCE, str(PORT), "10.77.2.1", "1024", "0.5"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1  # no carrier: no route to host, or connect times out
    assert _send(rig, ["10.77.1.1"], 1024)["acked"] == {"10.77.1.1": 1024}
    rig.link_up(1)
    assert _send(rig, ["10.77.2.1"], 1024)["acked"] == {"10.77.2.1": 1024}


def _listen_once(port: int) -> None:
    # Runs in a forked child inside namespace A (NetnsPair.spawn).
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("10.77.1.1", port))
    srv.listen(1)
    conn, _ = srv.accept()
    conn.sendall(b"hello from A")
    conn.close()


def test_netns_spawn_runs_callable_inside_namespace(make_rig) -> None:
    rig = make_rig(1)
    child = rig.spawn("a", _listen_once, PORT)
    client = (
        "import socket, time\n"
        "for _ in range(100):\n"
        "    try:\n"
        f"        s = socket.create_connection(('10.77.1.1', {PORT}), timeout=5); break\n"
        "    except OSError:\n"
        "        time.sleep(0.05)\n"
        "print(s.recv(64).decode())\n"
    )
    proc = rig.run("b", [sys.executable, "-c", client], capture_output=True, text=True, timeout=30)
    assert proc.stdout.strip() == "hello from A", proc.stderr
    child.join(timeout=10)
    assert child.exitcode == 0


@pytest.mark.slow
def test_netns_shaped_links_add_up(make_rig) -> None:
    """Two 1 Gbit/s links carry about twice one link: the rig can show striping."""
    rig = make_rig(2, rate="1gbit")
    _start_sink(rig)
    size = 24 << 20
    one = _send(rig, ["10.77.1.1"], size)["seconds"]
    two = _send(rig, list(rig.nics("a")), size)["seconds"]
    single_rate, dual_rate = size / one, 2 * size / two
    assert single_rate < 1.3e9 / 8, f"link not shaped: {single_rate / 1e6:.0f} MB/s"
    assert dual_rate >= 1.8 * single_rate, (single_rate, dual_rate)


def test_netns_teardown_and_leftover_cleanup() -> None:
    from tests.netns_util import netns_unavailable_reason

    reason = netns_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with netns_pair(1) as rig:
        names = (rig.ns_a, rig.ns_b)
        sleeper = rig.popen("a", ["sleep", "60"])
    assert sleeper.poll() is not None  # processes in the rig were killed
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(name in listed for name in names)

    # A namespace left by a crashed run: its creator's PID no longer exists.
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"mcns-{dead.pid}-0-a"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        assert stale in cleanup_leftovers()
    finally:
        subprocess.run(["ip", "netns", "del", stale], capture_output=True)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert stale not in listed
