"""A link slowed with ``tc`` (netem delay+rate, or tbf rate where netem is missing): the measured Transfer Engine bandwidth moves the
conductor's transfer predictor, which then prefers the replica behind the fast link.

The live conductor does not feed NIC measurements into its NetworkModel yet (only the
simulator calls ``set_bandwidth``), so this drives the sans-IO model with the numbers a
real TE transfer measured over the slowed link.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from transfer_netns_agent import AgentClient

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from mooncake_core.conductor.network import NetworkModel  # noqa: E402
from tests.netns_util import NetnsError, NetnsPair, netns_pair, netns_unavailable_reason  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.privileged, pytest.mark.slow]

SIZE = 8 << 20
PORTS = (17321, 17322)
CONFIG: dict[str, Any] = {"protocol": "tcp", "connect_timeout_s": 2.0, "request_timeout_s": 30.0}


@pytest.fixture
def rig() -> Iterator[NetnsPair]:
    reason = netns_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with netns_pair(2, rate="1gbit") as pair:
        yield pair


def _measure(rig: NetnsPair, link: int) -> float:
    """Bytes/s of one real TE READ of SIZE over ``link`` (best of two)."""
    a, b = rig.nics("a")[link], rig.nics("b")[link]
    target = AgentClient(rig, "a", "target", (a,), CONFIG, port=PORTS[link], size=SIZE, seed=link)
    try:
        hello = target.line(30)
        init = AgentClient(rig, "b", "initiator", (b,), CONFIG)
        try:
            runs = []
            for _ in range(2):
                run = init.call(cmd="read", segment=hello["segment"], length=SIZE)
                assert run["state"] == "COMPLETED" and run["xxh3"] == hello["xxh3"], run
                runs.append(float(run["seconds"]))
        finally:
            init.stop()
    finally:
        target.stop()
    return SIZE / min(runs)


def _choose(net: NetworkModel, now: float) -> tuple[str, dict[str, float]]:
    times = {s: net.transfer_time(s, "prefill-0", SIZE, now) for s in ("store-0", "store-1")}
    return min(times, key=lambda s: times[s]), times


def test_rel_netem_slowed_link_moves_prediction_and_choice(rig: NetnsPair) -> None:
    net = NetworkModel(default_bandwidth_bps=1e9)
    net.set_bandwidth("prefill-0", "nic0", 1e10)  # the fetching side is never the bound
    before = [_measure(rig, 0), _measure(rig, 1)]
    for i, bw in enumerate(before):
        net.set_bandwidth(f"store-{i}", "nic0", bw)
    _, times_before = _choose(net, 0.0)

    # store-1's link degrades. netem when the kernel has sch_netem, else a tbf rate cap
    # (the same bandwidth drop; only the added delay is missing).
    try:
        rig.shape(1, rate="40mbit", netem="delay 20ms")
    except NetnsError as e:
        if "unknown" not in str(e):
            raise
        rig.shape(1, rate="40mbit")
    slow = _measure(rig, 1)
    assert slow < before[1] / 4, f"netem did not slow the link: {before[1]:.3g} -> {slow:.3g} B/s"
    net.set_bandwidth("store-1", "nic0", slow)
    choice, times_after = _choose(net, 1.0)

    assert choice == "store-0", times_after
    # The prediction moved by the measured factor (the model is linear in bandwidth).
    ratio = times_after["store-1"] / times_before["store-1"]
    assert ratio == pytest.approx(before[1] / slow, rel=0.01), (times_before, times_after)
    assert ratio > 4
