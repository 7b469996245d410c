"""Component logs keep client libraries' per-request INFO lines out (httpx logs each etcd call)."""

from __future__ import annotations

import logging

from mooncake_cli.common import setup_service_logging


def test_service_logging_quiets_http_clients_but_keeps_ours() -> None:
    setup_service_logging()
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
    assert logging.getLogger("httpx").isEnabledFor(logging.WARNING)
    assert logging.getLogger("mooncake_core.store.master_service").isEnabledFor(logging.INFO)
