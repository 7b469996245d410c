"""/proc/net/dev parsing from fixture text."""

from __future__ import annotations

import pytest

from mooncake_core.telemetry import parse_proc_net_dev, read_proc_net_dev

FIXTURE = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1234567    890    0    0    0     0          0         0  1234567    890    0    0    0     0       0          0
  eth0: 98765432 54321    3    7    0     0          0        12 12345678  4321    1    2    0     0       0          0
veryverylongname0:5 1 0 0 0 0 0 0 6 2 0 0 0 0 0 0
"""


def test_parse_fixture():
    rows = parse_proc_net_dev(FIXTURE)
    assert [r.iface for r in rows] == ["lo", "eth0", "veryverylongname0"]
    eth = rows[1]
    assert (eth.rx_bytes, eth.rx_packets, eth.rx_errors, eth.rx_dropped) == (98765432, 54321, 3, 7)
    assert (eth.tx_bytes, eth.tx_packets, eth.tx_errors, eth.tx_dropped) == (12345678, 4321, 1, 2)
    glued = rows[2]
    assert (glued.rx_bytes, glued.tx_bytes, glued.tx_packets) == (5, 6, 2)


def test_short_line_is_an_error_naming_it():
    with pytest.raises(ValueError, match="eth9"):
        parse_proc_net_dev("eth9: 1 2 3\n")


def test_non_integer_is_an_error():
    with pytest.raises(ValueError, match="non-integer"):
        parse_proc_net_dev("lo: " + " ".join(["x"] * 16) + "\n")


def test_missing_file_reads_empty(tmp_path):
    assert read_proc_net_dev(tmp_path / "nope") == ()


def test_read_fixture_file(tmp_path):
    p = tmp_path / "dev"
    p.write_text(FIXTURE)
    assert len(read_proc_net_dev(p)) == 3
