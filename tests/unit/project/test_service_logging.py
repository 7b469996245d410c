"""Component logs keep client libraries' per-request INFO lines out (httpx logs each etcd call)."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import logging
from mooncake_cli.common import setup_service_logging
setup_service_logging()
logging.getLogger("httpx").info("HTTP Request: POST /v3/kv/range")
logging.getLogger("httpx").warning("etcd unreachable")
logging.getLogger("mooncake_core.store.master_service").info("elected leader m1")
"""


def test_service_logging_quiets_http_clients_but_keeps_ours() -> None:
    err = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, check=True
    ).stderr
    assert "HTTP Request" not in err
    assert "WARNING httpx: etcd unreachable" in err
    assert "INFO mooncake_core.store.master_service: elected leader m1" in err
