"""MountSegment refuses transport addresses the Transfer Engine could never resolve."""

from __future__ import annotations

import pytest

from mooncake_core.config.models import MasterConfig
from mooncake_core.store.errors import InvalidArgumentError
from mooncake_core.store.master import MasterState


@pytest.mark.parametrize("addr", ["", "127.0.0.1:17001", "node-3.rack:1", "[::1]:65535"])
def test_good_addresses_mount(addr: str) -> None:
    m = MasterState(MasterConfig())
    assert m.mount_segment("s", "c", 4096, 0.0, transport_address=addr).name == "s"


@pytest.mark.parametrize(
    "addr",
    [
        "127.0.0.1",
        ":80",
        "h:0",
        "h:65536",
        "h:8o",
        "h :80",
        "h/x:80",
        "\t\x08:80",
        "é:80",
        "h:" + "9" * 300,
    ],
)
def test_bad_addresses_are_refused_and_nothing_is_mounted(addr: str) -> None:
    m = MasterState(MasterConfig())
    with pytest.raises(InvalidArgumentError, match="transport_address must be host:port"):
        m.mount_segment("s", "c", 4096, 0.0, transport_address=addr)
    assert not m.snapshot().segments
