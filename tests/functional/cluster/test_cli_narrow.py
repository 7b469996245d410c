"""Operator tables at 80 columns and piped: names and ids always appear whole.

A real cluster (master + two store nodes, started by `cluster up`), a real audit
database (`mooncake db upgrade` + the audit writer), real keys; then `cluster status`,
`node ls`, `store ls`, `audit ls`, `audit stats`, `audit show` and `top --once` with
COLUMNS=80 and stdout a pipe.
Every component, node, segment, client, key and request id must appear as a whole word
(not cut with an ellipsis, not wrapped mid-word), and no line may pass 80 columns.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_support import cli, has_command, kill_recorded, make_config

pytestmark = pytest.mark.integration

WIDTH = 80
# Request ids as the conductor makes them (cmpl-<boot>-<n>): a shared prefix, so a cut
# id makes every row look alike.
REQUEST_IDS = [f"cmpl-1a23375f9c0e-{n}" for n in range(1, 5)]
KEYS = ["model-llama3-70b/layer-00/block-0000017", "model-llama3-70b/layer-31/block-0000255"]


def narrow(*args: str) -> subprocess.CompletedProcess[str]:
    """``mooncake ARGS`` with stdout a pipe and COLUMNS=80."""
    env = {**os.environ, "COLUMNS": str(WIDTH), "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mooncake_cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def problems(text: str, names: set[str], what: str) -> list[str]:
    """What is wrong with ``text`` (empty when every name is whole and it fits)."""
    found = [
        f"{what}: line over {WIDTH} columns: {line!r}"
        for line in text.splitlines()
        if len(line.rstrip()) > WIDTH
    ]
    if "…" in text:
        found.append(f"{what}: something is cut with an ellipsis")
    for name in sorted(names):
        pattern = rf"(?<![\w\-/.]){re.escape(name)}(?![\w\-/.])"
        if not re.search(pattern, text):
            found.append(f"{what}: {name!r} does not appear whole")
    return found


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Path, dict]]:
    path, cfg = make_config(tmp_path)
    yield path, cfg
    cli("cluster", "down", "-c", str(path))
    kill_recorded(Path(cfg["state_dir"]))


@pytest.mark.skipif(not has_command("store", "node"), reason="`mooncake store node` missing")
def test_tables_keep_every_name_whole_at_80_columns_piped(
    cluster: tuple[Path, dict], tmp_path: Path
) -> None:
    from mooncake_core.conductor.audit import AuditWriter, WriterOptions, sample

    path, cfg = cluster
    c = str(path)
    up = cli("cluster", "up", "-c", c, "--detach", "--only", "master", "--only", "store")
    assert up.returncode == 0, up.stderr

    # Audit rows: the documented scenario, with conductor-style request ids.
    db = cli("db", "upgrade", "-c", c)
    assert db.returncode == 0, db.stderr
    url = f"sqlite:///{Path(cfg['state_dir']) / 'audit.db'}"
    w = AuditWriter.open(url, WriterOptions(batch_size=2))
    w.start()
    for rid, (d, cands) in zip(REQUEST_IDS, sample.scenario(1_800_000_000.0), strict=True):
        w.submit(dataclasses.replace(d, request_id=rid), cands)
    w.update_actual(REQUEST_IDS[0], 1.50, 0.050)
    w.close()

    blob = tmp_path / "blob"
    blob.write_bytes(os.urandom(300_000))
    for key in KEYS:
        put = cli("store", "put", key, str(blob), "-c", c)
        assert put.returncode == 0, put.stderr

    components = {
        r["name"]
        for r in json.loads(cli("cluster", "status", "-c", c, "--json").stdout)["components"]
    }
    assert {"master", "store-0", "store-1", "conductor"} <= components
    segs = json.loads(cli("node", "ls", "-c", c, "--json").stdout)
    nodes = {str(s[k]) for s in segs for k in ("segment", "node", "client")}
    assert {"store-0", "store-1"} <= nodes

    bad: list[str] = []
    shown: list[str] = []
    status = narrow("cluster", "status", "-c", c)
    assert status.returncode == 1, status.stderr  # conductor and the rest are stopped
    bad += problems(status.stdout, components, "cluster status")
    shown.append(status.stdout)

    ls = narrow("node", "ls", "-c", c)
    assert ls.returncode == 0, ls.stderr
    bad += problems(ls.stdout, nodes, "node ls")
    shown.append(ls.stdout)

    keys = narrow("store", "ls", "-c", c)
    assert keys.returncode == 0, keys.stderr
    bad += problems(keys.stdout, set(KEYS), "store ls")
    shown.append(keys.stdout)

    audit = narrow("audit", "ls", "-c", c)
    assert audit.returncode == 0, audit.stderr
    bad += problems(audit.stdout, {*REQUEST_IDS, "prefill-2", "decode-0"}, "audit ls")
    shown.append(audit.stdout)

    # stats and show printed at their natural width whatever COLUMNS said (190 and
    # 120 columns): every column and the median / p90 caption must fit now.
    stats = narrow("audit", "stats", "-c", c, "--bucket", "1h")
    assert stats.returncode == 0, stats.stderr
    bad += problems(stats.stdout, {"total", "decisions", "measured"}, "audit stats")
    shown.append(stats.stdout)
    show = narrow("audit", "show", "-c", c, REQUEST_IDS[0])
    assert show.returncode == 0, show.stderr
    bad += problems(show.stdout, {REQUEST_IDS[0], "prefill-2", "decode-0"}, "audit show")
    shown.append(show.stdout)

    top = narrow("top", "--once", "-c", c, "--interval", "0.5")
    assert top.returncode == 0, top.stderr
    bad += problems(top.stdout, {"master", *nodes, *REQUEST_IDS}, "top --once")
    shown.append(top.stdout)
    assert not bad, "\n".join(bad) + "\n\n" + "\n".join(shown)
    print("\n".join(shown))  # what an operator sees (pytest -s)
