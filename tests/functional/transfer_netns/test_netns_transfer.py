"""Transfer Engine across two namespaces joined by two 1 Gbit/s veth NICs.

Target in namespace A exposes a segment; the initiator in namespace B reads it. Checks the
issue's multi-NIC claims on real kernel networking: striping over both NICs, surviving a
link going down mid-transfer (and using it again once it is back), and failing cleanly
when the target dies.

``MC_NETNS_SIZE_MIB`` (default 256) sets the transfer size; at 1 Gbit/s per link the
whole module takes about 25 s with the default (most of it moving the bytes).
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from transfer_netns_agent import AgentClient

from tests.netns_util import NetnsPair

pytestmark = [pytest.mark.privileged, pytest.mark.slow, pytest.mark.integration]

SIZE = int(os.environ.get("MC_NETNS_SIZE_MIB", "256")) << 20
PORT = 17301
# Short pauses and timeouts so faults resolve within the test's budget.
ENGINE_CONFIG = {
    "protocol": "tcp",
    "connect_timeout_s": 1.0,
    "request_timeout_s": 10.0,  # a stalled connection is given up after 10 / (3 + 1) s
    "nic_pause_s": 0.5,
    "nic_pause_max_s": 1.0,
    "nic_failure_threshold": 1,
}


class Agent(AgentClient):
    """An agent with this module's engine config; a missing answer fails the test."""

    def __init__(self, rig: NetnsPair, side: str, mode: str, nics: tuple[str, ...], **kw: Any):
        super().__init__(rig, side, mode, nics, ENGINE_CONFIG, **kw)  # type: ignore[arg-type]

    def line(self, timeout: float = 60) -> dict[str, Any]:
        try:
            return super().line(timeout)
        except (TimeoutError, RuntimeError) as exc:
            pytest.fail(str(exc))


def _target(rig: NetnsPair, nics: tuple[str, ...]) -> tuple[Agent, str, str]:
    agent = Agent(rig, "a", "target", nics, port=PORT, size=SIZE, seed=7)
    hello = agent.line()
    return agent, hello["segment"], hello["xxh3"]


def _rx(rig: NetnsPair, link: int) -> int:
    return rig.link_stats(link, "b")["rx_bytes"]


def _until_flowing(rig: NetnsPair, link: int, since: int, timeout: float = 10) -> None:
    """Wait until ``link`` has carried SIZE/16 bytes since ``since``: the transfer is
    really under way (whatever SIZE is), so a fault lands mid-transfer."""
    deadline = time.monotonic() + timeout
    while _rx(rig, link) - since < SIZE // 16:
        if time.monotonic() > deadline:
            pytest.fail(f"link {link} carried no data within {timeout} s")
        time.sleep(0.005)


def _read(init: Agent, segment: str, digest: str) -> float:
    run = init.call(cmd="read", segment=segment, length=SIZE)
    assert run["state"] == "COMPLETED" and run["xxh3"] == digest, run
    return float(run["seconds"])


def test_netns_two_nics_stripe_one_transfer(make_rig) -> None:
    rig = make_rig(2, rate="1gbit")
    a_nics, b_nics = rig.nics("a"), rig.nics("b")

    target, segment, digest = _target(rig, a_nics[:1])
    init = Agent(rig, "b", "initiator", b_nics[:1])
    single = min(_read(init, segment, digest) for _ in range(2))
    init.stop()
    target.stop()

    target, segment, digest = _target(rig, a_nics)
    init = Agent(rig, "b", "initiator", b_nics)
    before = [_rx(rig, 0), _rx(rig, 1)]
    # Best of up to 5: the dual-NIC run needs twice the CPU of the single one, and a
    # shared 2-core box under load can starve it; the claim is what striping can reach.
    dual: list[float] = []
    while len(dual) < 5 and (not dual or single / min(dual) < 1.8):
        dual.append(_read(init, segment, digest))
    moved = [_rx(rig, 0) - before[0], _rx(rig, 1) - before[1]]
    init.stop()
    target.stop()
    # Each link carried about half of every read (kernel counters, not ours).
    assert min(moved) > len(dual) * SIZE // 3, moved
    speedup = single / min(dual)
    assert speedup >= 1.8, (
        f"two NICs gave {speedup:.2f}x one NIC ({single:.2f} s vs {min(dual):.2f} s for "
        f"{SIZE >> 20} MiB; dual runs {[round(d, 2) for d in dual]}); per-link bytes {moved}"
    )


def test_netns_link_down_mid_transfer_fails_over_and_recovers(make_rig) -> None:
    rig = make_rig(2, rate="1gbit")
    target, segment, digest = _target(rig, rig.nics("a"))
    init = Agent(rig, "b", "initiator", rig.nics("b"))
    lost_nic = rig.nics("b")[1]

    before = _rx(rig, 1)
    init.send(cmd="read", segment=segment, length=SIZE, timeout=30)
    assert init.line()["event"] == "started"
    _until_flowing(rig, 1, before)
    rig.link_down(1)
    result = init.line(timeout=60)
    assert result["ok"] and result["state"] == "COMPLETED", result
    assert result["xxh3"] == digest, "data read across the failover differs from the target's"
    assert lost_nic in result["paused_seen"], result
    assert result["nics"][lost_nic]["errors"] >= 1, result["nics"]

    rig.link_up(1)
    time.sleep(ENGINE_CONFIG["nic_pause_max_s"] + 0.2)  # the pause ends; the next slice probes
    before = _rx(rig, 1)
    again = init.call(cmd="read", segment=segment, length=SIZE)
    assert again["state"] == "COMPLETED" and again["xxh3"] == digest, again
    assert _rx(rig, 1) - before > SIZE // 4, "the restored link carried no share"
    assert again["nics"][lost_nic]["bytes_received"] > result["nics"][lost_nic]["bytes_received"]
    init.stop()
    target.stop()


def test_netns_killed_target_fails_requests_with_reason(make_rig) -> None:
    rig = make_rig(2, rate="1gbit")
    target, segment, _ = _target(rig, rig.nics("a"))
    init = Agent(rig, "b", "initiator", rig.nics("b"))

    before = _rx(rig, 0)
    init.send(cmd="read", segment=segment, length=SIZE, timeout=30)
    assert init.line()["event"] == "started"
    _until_flowing(rig, 0, before)
    target.proc.kill()
    target.proc.wait(timeout=10)
    t_kill = time.monotonic()
    result = init.line(timeout=60)
    assert result["ok"], result
    assert result["state"] == "FAILED", result
    assert result["reason"], "a FAILED request must say why"
    assert time.monotonic() - t_kill <= ENGINE_CONFIG["request_timeout_s"], result
    init.stop()
