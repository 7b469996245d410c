"""The master keeper's restart policy and how it names an exit (sans-IO)."""

from __future__ import annotations

import signal

from mooncake_core.cluster.keeper import RestartBackoff, describe_exit


def test_backoff_doubles_while_children_die_young_and_resets_after_a_stable_run() -> None:
    b = RestartBackoff(first_s=0.5, max_s=4.0, stable_s=30.0)
    assert [b.next_delay(1.0) for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert b.next_delay(30.0) == 0.5
    assert b.next_delay(0.1) == 1.0


def test_exit_descriptions() -> None:
    assert describe_exit(3) == "exit status 3"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(-200) == "killed by signal 200"
