"""With a cluster secret: the master, the nodes' data servers and the CLI all require it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_client_procs import Cluster, make_client, start_cluster

from mooncake_core.store.errors import AuthError
from mooncake_core.transfer import TransferEngine, TransferError

pytestmark = pytest.mark.integration
SECRET = b"store-client-test-secret"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(tmp_path_factory.mktemp("store_auth"), secret=SECRET)
    yield c
    c.close()


def test_secret_holders_round_trip_others_are_refused(secure: Cluster, tmp_path: Path) -> None:
    with make_client(secure, secret=SECRET) as c:
        c.put("auth/k", b"secret bytes")
        assert c.get("auth/k") == b"secret bytes"
        seg = c.stat("auth/k").replicas[0][0].segment
    address = secure.nodes[seg].match[2]  # the node's data server, from its ready line
    with make_client(secure) as anon, pytest.raises(AuthError):
        anon.is_exist("auth/k")
    with make_client(secure, secret=b"wrong") as wrong, pytest.raises(AuthError):
        wrong.get("auth/k")
    # The node's data server refuses a Transfer Engine without the secret.
    from mooncake_core.config.models import TransferConfig

    with TransferEngine(TransferConfig()) as eng, pytest.raises(TransferError):
        region = eng.register_memory(bytearray(16))
        seg_handle = eng.open_segment(f"{address}/{seg}")
        eng.read(region, 0, seg_handle, 0, 12)
    # The CLI reads the secret file named in the config.
    cmd = [sys.executable, "-m", "mooncake_cli", "store", "get", "auth/k"]
    cmd += ["--master", secure.address, "--config", str(secure.config)]
    r = subprocess.run(cmd, capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout == b"secret bytes", r.stderr.decode()
