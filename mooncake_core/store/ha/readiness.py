"""A master's readiness as clients see it (``GetReadiness``, ``/health``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Readiness:
    """Role and catch-up state of one master (see docs/durability.md, "Readiness")."""

    state: str
    """standalone | recovering | follower | leader | deposed."""
    serving: bool
    durable: bool
    """A journal (local or etcd) records committed changes."""
    journal_seq: int
    """Last record this master wrote (0: none)."""
    ha: bool = False
    member_id: str = ""
    applied_seq: int = 0
    """HA: last replicated record folded into this master's image."""
    caught_up: bool = False
    leader_id: str = ""
    leader_address: str = ""
    fast_port: int = 0
    """Port of this master's fast control channel for the hot calls (0: none)."""
    fast_unix: str = ""
    """The same channel's abstract Unix socket, ``@name`` (empty: none)."""
    put_timeout_s: float = 0.0
    """The master's ``put_timeout_s``: clients start no write transfer past it after
    their PutStart (0: not said; a client then goes by its own configuration)."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Readiness:
        """From the ``readiness`` object of ``/health`` (or the service's dict)."""
        return cls(
            state=str(d.get("state", "")),
            serving=bool(d.get("serving", False)),
            durable=bool(d.get("durable", False)),
            journal_seq=int(d.get("journal_seq") or 0),
            ha=bool(d.get("ha", False)),
            member_id=str(d.get("member_id") or ""),
            applied_seq=int(d.get("applied_seq") or 0),
            caught_up=bool(d.get("caught_up", False)),
            leader_id=str(d.get("leader_id") or ""),
            leader_address=str(d.get("leader_address") or ""),
            fast_port=int(d.get("fast_port") or 0),
            fast_unix=str(d.get("fast_unix") or ""),
            put_timeout_s=float(d.get("put_timeout_s") or 0.0),
        )
