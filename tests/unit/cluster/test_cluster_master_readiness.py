"""`cluster status` says what each master is: leader, follower (caught up or not), standalone."""

from __future__ import annotations

import pytest

from mooncake_core.cluster.supervisor import master_readiness


@pytest.mark.parametrize(
    ("readiness", "line"),
    [
        ({"state": "standalone", "durable": False, "journal_seq": None}, "standalone, no journal"),
        (
            {"state": "standalone", "durable": True, "journal_seq": 812},
            "standalone (journal seq 812)",
        ),
        (
            {"state": "leader", "ha": True, "applied_seq": 40, "caught_up": True},
            "leader (ha, seq 40)",
        ),
        (
            {
                "state": "follower",
                "ha": True,
                "applied_seq": 40,
                "caught_up": True,
                "leader_id": "m1",
            },
            "follower, caught up (seq 40; leader m1)",
        ),
        (
            {"state": "follower", "ha": True, "applied_seq": 12, "caught_up": False},
            "follower, catching up (seq 12)",
        ),
        ({"state": "recovering", "ha": True}, "recovering"),
    ],
)
def test_master_readiness_line(readiness: dict[str, object], line: str) -> None:
    assert master_readiness(readiness) == line
