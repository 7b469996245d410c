"""HA as `mooncake cluster up` brings it up: a leader failover loses nothing.

Only `mooncake.yaml` and the CLI are used, as an operator would: `etcd.enabled` with three
masters, `cluster up --detach`, objects written and read with `mooncake store put/get`
and no `--master` (the CLI's default target), the leader found with `cluster status`.
Round 1 SIGKILLs the leader; round 2 SIGSTOPs the new leader past its etcd lease and
resumes it. After each round every acknowledged object reads back byte-exact, also after
the clients' TTL has passed (a new leader must not expire nodes that were merely looking
for it), and the old leader comes back as a follower by itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_support import cli, free_block, has_command, kill_recorded, make_config, write_config

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed"),
    pytest.mark.skipif(not has_command("store", "node"), reason="no `mooncake store node`"),
]

MASTERS = 3
TTL_S = 3.0
LEASE_S = 2
OBJECTS = 5  # each put and get is a CLI process (~1.5 s): 60 of them made this 2 min


@pytest.fixture
def ha_cluster(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    path, cfg = make_config(tmp_path)
    base = free_block(2 * MASTERS)
    cfg["master"].update(
        port=base,
        metrics_port=base + MASTERS,
        client_ttl_s=TTL_S,
        heartbeat_interval_s=0.5,
        unmount_grace_s=0.5,
    )
    cfg["etcd"] = {
        "enabled": True,
        # Never a port make_config gave a component: a port is free only until bound.
        "client_port": free_block(1),
        "peer_port": free_block(1),
        "masters": MASTERS,
        "lease_ttl_s": LEASE_S,
    }
    write_config(path, cfg)
    yield path, cfg
    cli("cluster", "down", "-c", str(path))
    kill_recorded(Path(cfg["state_dir"]))


def _masters(path: Path) -> dict[str, dict[str, Any]]:
    st = cli("cluster", "status", "-c", str(path), "--json", "--only", "master")
    rows = {c["name"]: c for c in json.loads(st.stdout)["components"]}
    return {n: r for n, r in rows.items() if r["role"] == "master"}


def _wait(what: str, cond: Any, timeout: float, path: Path | None = None) -> float:
    """Poll ``cond`` until truthy; on a timeout the message names the last value and,
    given the config ``path``, every master's state and detail."""
    t0 = time.monotonic()
    while True:
        got = cond()
        if got:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            seen = ""
            if path is not None:
                seen = "; " + ", ".join(
                    f"{n}: {r['state']} {r['detail']}" for n, r in _masters(path).items()
                )
            raise AssertionError(f"{what}: not within {timeout} s (last: {got!r}{seen})")
        time.sleep(0.25)


def _leader(path: Path, rows: dict[str, dict[str, Any]] | None = None) -> str | None:
    """The one master whose detail says leader (``rows``: a `_masters` result to reuse)."""
    rows = _masters(path) if rows is None else rows
    leaders = [n for n, r in rows.items() if r["detail"].startswith("leader")]
    return leaders[0] if len(leaders) == 1 else None


def _serving_pid(port: int) -> int:
    """The pid of the process listening on ``port`` (the master itself, not a keeper), or
    -1 while nothing listens there (a respawn in progress)."""
    out = subprocess.run(
        ["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout
    if "pid=" not in out:
        return -1
    return int(out.split("pid=", 1)[1].split(",", 1)[0])


def _read_all(path: Path, tmp: Path, digests: dict[str, str]) -> dict[str, str]:
    """Every key's sha256 as read back through the CLI's default master (or the error)."""
    seen: dict[str, str] = {}
    for key in digests:
        out = tmp / "got.bin"
        res = cli("store", "get", "-c", str(path), key, "-o", str(out), timeout=60)
        if res.returncode != 0:
            seen[key] = "error: " + (res.stderr.strip().splitlines() or ["?"])[-1]
        else:
            seen[key] = hashlib.sha256(out.read_bytes()).hexdigest()
    return seen


def test_leader_kill_and_pause_through_cluster_up_lose_nothing(
    ha_cluster: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, _ = ha_cluster
    only = ["--only", "etcd", "--only", "master", "--only", "store"]
    up = cli("cluster", "up", "-c", str(path), "--detach", *only, timeout=180)
    assert up.returncode == 0, up.stderr
    _wait("one leader", lambda: _leader(path), 30)

    digests: dict[str, str] = {}
    for i in range(OBJECTS):
        data = os.urandom(64 << 10)
        src = tmp_path / f"v{i}.bin"
        src.write_bytes(data)
        key = f"ha/obj-{i}"
        res = cli("store", "put", "-c", str(path), key, str(src))
        assert res.returncode == 0, res.stderr
        digests[key] = hashlib.sha256(data).hexdigest()
    assert _read_all(path, tmp_path, digests) == digests

    ports = {n: int(r["ports"][f"{n}.port"]) for n, r in _masters(path).items()}
    timings: dict[str, float] = {}
    for round_, fault in enumerate(("kill", "pause")):
        old = _leader(path)
        assert old is not None
        pid = _serving_pid(ports[old])
        assert pid > 0, old
        t0 = time.monotonic()
        if fault == "kill":
            os.kill(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(LEASE_S * 3)
            os.kill(pid, signal.SIGCONT)

        def new_leader(pid: int = pid) -> str | None:
            # A leader served by another process than the faulted one. After a kill the
            # keeper respawns that master and it may win the next election itself: the
            # new process is as good a leader as another master.
            lead = _leader(path)
            return lead if lead is not None and _serving_pid(ports[lead]) != pid else None

        _wait(f"round {round_}: a new leader after the {fault}", new_leader, 45, path)
        timings[f"{fault}: new leader"] = time.monotonic() - t0
        # Readable at once through the CLI's default master (no --master anywhere) ...
        assert _read_all(path, tmp_path, digests) == digests, fault
        timings[f"{fault}: all readable"] = time.monotonic() - t0
        # ... and still after the clients' TTL: nothing was expired for looking elsewhere.
        time.sleep(max(0.0, TTL_S * 2 - (time.monotonic() - t0)))
        assert _read_all(path, tmp_path, digests) == digests, fault

        def all_followers_caught_up() -> bool:
            # Every master but the leader (the faulted one among them, unless its
            # respawned process won the election) is a healthy, caught-up follower.
            rows = _masters(path)
            lead = _leader(path, rows)
            return lead is not None and all(
                r["state"] == "healthy" and r["detail"].startswith("follower, caught up")
                for n, r in rows.items()
                if n != lead
            )

        _wait(f"round {round_}: followers caught up", all_followers_caught_up, 60, path)
        # `cluster status` reports the store as the leader sees it, not as the first
        # master (a follower now, or after the pause) does: it once said 0 keys here.
        st = json.loads(cli("cluster", "status", "-c", str(path), "--json").stdout)
        assert st["store"]["key_count"] == OBJECTS, (fault, st["store"]["readiness"])
        assert st["store"]["readiness"]["serving"], fault
        timings[f"{fault}: all followers caught up"] = time.monotonic() - t0
    print("failover timings:", json.dumps({k: round(v, 2) for k, v in timings.items()}))
