"""How a master client follows the HA leader: one policy for the sync and async clients.

Sans-IO: the clients (``SyncMaster`` in ``client/sync_master.py``, ``MasterClient`` in
``client/async_master.py``) make the calls, sleep and look the leader up; this module decides
what a failed call leads to and reads the two places the leader's address comes from
(a follower's refusal, the leader key in etcd).

After an ``UNAVAILABLE`` answer (master down, or a follower's ``NOT_LEADER`` refusal) a
call is sent again, to the address the refusal names, else to the one etcd names, after
a back-off of 50 ms doubling to 500 ms, until ``timeout_s`` after the first failure. A
client without etcd follows refusals only: with neither a hint nor a resolver the call
fails at once. Any other error fails at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["LEADER_METADATA", "Failover", "leader_address", "leader_hint"]

LEADER_METADATA = "mooncake-leader"
"""Trailing-metadata key of a follower's ``NOT_LEADER`` refusal: the leader's address."""

FIRST_DELAY_S = 0.05
MAX_DELAY_S = 0.5


def leader_hint(trailing: Iterable[Any] | None) -> str | None:
    """The leader's address a refusal's trailing metadata (``(key, value)`` pairs)
    names, if any."""
    for key, value in trailing or ():
        if key == LEADER_METADATA and value:
            return value if isinstance(value, str) else bytes(value).decode()
    return None


def leader_address(record: bytes | str) -> str:
    """The gRPC ``host:port`` in the leader key's value (the leader's JSON record).

    Raises:
        ValueError: not a leader record.
    """
    try:
        address = json.loads(record)["address"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"not a leader record: {record!r:.80}") from exc
    if not isinstance(address, str) or not address:
        raise ValueError(f"leader record without an address: {record!r:.80}")
    return address


class Failover:
    """The retry schedule of one call.

    Args:
        timeout_s: how long after the first failure the call keeps following the leader.
        can_resolve: the client can ask etcd for the leader.
    """

    __slots__ = ("_can_resolve", "_deadline", "_delay", "_timeout")

    def __init__(self, timeout_s: float, *, can_resolve: bool) -> None:
        self._timeout = timeout_s
        self._can_resolve = can_resolve
        self._deadline: float | None = None
        self._delay = FIRST_DELAY_S

    def after_unavailable(self, hint: str | None, now: float) -> float | None:
        """An ``UNAVAILABLE`` answer at ``now``: seconds to wait before sending the call
        again (to ``hint``, else to the leader etcd names), or ``None``: give up."""
        if hint is None and not self._can_resolve:
            return None
        if self._deadline is None:
            self._deadline = now + self._timeout
        if now >= self._deadline:
            return None
        delay = self._delay
        self._delay = min(delay * 2, MAX_DELAY_S)
        return delay
