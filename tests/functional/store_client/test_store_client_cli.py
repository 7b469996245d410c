"""`mooncake store ...` as real subprocesses against a real master and two nodes."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from store_client_procs import NODE_READY, Cluster, free_port, spawn, stop
from typer.testing import CliRunner

from mooncake_cli.main import app
from mooncake_core.store.client import Client

pytestmark = pytest.mark.integration


@dataclass
class Ran:
    returncode: int
    stdout: bytes
    stderr: bytes


def run(c: Cluster, *args: str, stdin: bytes | None = None, proc: bool = False) -> Ran:
    """``mooncake store ARGS`` against ``c``: a real subprocess with ``proc``, else the
    same typer app in this process (each CLI process costs seconds on the loaded CI box).
    """
    tail = ["--master", c.address, "--config", str(c.config)]
    if proc:
        cmd = [sys.executable, "-m", "mooncake_cli", "store", *args, *tail]
        r = subprocess.run(cmd, input=stdin, capture_output=True, timeout=60)
        return Ran(r.returncode, r.stdout, r.stderr)
    res = CliRunner().invoke(app, ["store", *args, *tail], input=stdin)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return Ran(res.exit_code, res.stdout_bytes, res.stderr_bytes)


def ok(c: Cluster, *args: str, stdin: bytes | None = None, proc: bool = False) -> bytes:
    r = run(c, *args, stdin=stdin, proc=proc)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


def test_node_health_endpoint(cluster: Cluster) -> None:
    health = cluster.nodes["n0"].match[3]
    with urllib.request.urlopen(f"http://{health}/health", timeout=5) as r:
        doc = json.load(r)
    assert doc["status"] == "ok" and doc["segment"] == "n0" and doc["size"] == 64 << 20


def test_put_get_stat_from_file_and_stdin(cluster: Cluster, client: Client, tmp_path: Path) -> None:
    src = tmp_path / "in.bin"
    src.write_bytes(bytes(range(256)) * 1000)
    doc = json.loads(
        ok(cluster, "put", "cli/file", str(src), "--replicas", "2", "--json", proc=True)
    )
    assert doc == {"key": "cli/file", "size": 256_000, "replicas": 2}
    ok(cluster, "put", "cli/stdin", "-", "--soft-pin", stdin=b"from stdin")
    dst = tmp_path / "out.bin"
    ok(cluster, "get", "cli/file", "-o", str(dst))
    assert dst.read_bytes() == src.read_bytes()
    assert ok(cluster, "get", "cli/stdin", proc=True) == b"from stdin"
    st = json.loads(ok(cluster, "stat", "cli/file", "--json"))
    assert st["size"] == 256_000 and st["segments"] == ["n0", "n1"] and len(st["replicas"]) == 2
    assert st["lease_remaining_s"] > 0  # the get above leased it
    assert client.stat("cli/stdin").pin.name == "SOFT"


def test_ls_paginates_and_exists(cluster: Cluster, client: Client) -> None:
    assert client.put_batch([f"page/{i}" for i in range(5)], [b"v"] * 5) == [None] * 5
    first = json.loads(ok(cluster, "ls", "page/", "--limit", "2", "--json"))
    assert [e["key"] for e in first["entries"]] == ["page/0", "page/1"]
    seen = [e["key"] for e in first["entries"]]
    after = first["next_start_after"]
    while after is not None:
        page = json.loads(ok(cluster, "ls", "page/", "-n", "2", "--start-after", after, "--json"))
        seen += [e["key"] for e in page["entries"]]
        after = page["next_start_after"]
    assert seen == [f"page/{i}" for i in range(5)]
    r = run(cluster, "exists", "page/0", "page/x", "--json", proc=True)
    assert r.returncode == 1 and json.loads(r.stdout) == {"page/0": True, "page/x": False}
    assert json.loads(ok(cluster, "rm", "--regex", "^page/[0-3]$", "--json"))["removed"] == 4
    assert json.loads(ok(cluster, "rm", "page/4", "--json"))["removed"] == 1


def test_pins_show_up_and_clear(cluster: Cluster, client: Client) -> None:
    ok(cluster, "pin", "sys/prompt/", "--ttl", "30m")
    ok(cluster, "pin", "hot/", "--hard")
    pins = {p["target"]: p for p in json.loads(ok(cluster, "pins", "--json"))}
    assert (
        pins["sys/prompt/"]["hard"] is False and 1700 < pins["sys/prompt/"]["remaining_s"] <= 1800
    )
    assert pins["hot/"]["hard"] is True and pins["hot/"]["remaining_s"] is None
    client.put("hot/k", b"v")  # a prefix pin covers keys written later
    assert client.stat("hot/k").pin.name == "HARD"
    ok(cluster, "unpin", "hot/")
    ok(cluster, "unpin", "sys/prompt/")
    left = {p["target"] for p in json.loads(ok(cluster, "pins", "--json"))}
    assert not left & {"hot/", "sys/prompt/"}
    client.remove("hot/k")


def test_bad_input_is_a_clear_error(cluster: Cluster) -> None:
    r = run(cluster, "put", "", "-", stdin=b"x", proc=True)
    assert r.returncode == 1 and b"INVALID_KEY" in r.stderr
    r = run(cluster, "get", "no/such/key")
    assert r.returncode == 1 and b"OBJECT_NOT_FOUND" in r.stderr and r.stdout == b""
    r = run(cluster, "pin", "x/", "--hard", "--ttl", "5m")
    assert r.returncode == 1 and b"hard pin has no TTL" in r.stderr
    r = run(cluster, "rm")
    assert r.returncode == 1 and b"exactly one of" in r.stderr


def test_node_takes_size_and_ports_from_its_config_entry(cluster: Cluster, tmp_path: Path) -> None:
    data_port, metrics_port = free_port(), free_port()
    cfg = tmp_path / "node.yaml"
    entry = {
        "name": "cfgnode",
        "segment_size": 8 << 20,
        "data_port": data_port,
        "metrics_port": metrics_port,
    }
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path), "store_nodes": [entry]}))
    p = spawn(
        ["store", "node", "--name", "cfgnode", "--master", cluster.address, "--config", str(cfg)],
        NODE_READY,
    )
    try:
        assert p.match[2] == f"127.0.0.1:{data_port}"
        assert p.match[3] == f"127.0.0.1:{metrics_port}"
        with urllib.request.urlopen(f"http://{p.match[3]}/health", timeout=5) as r:
            assert json.load(r)["size"] == 8 << 20
    finally:
        assert stop(p) == 0
