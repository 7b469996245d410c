"""KV transfers over node NICs with a simple fair-share contention model.

Every node (a prefill or decode instance, or the store pool) has one aggregate NIC
bandwidth per direction (its NICs together, as the Transfer Engine spreads slices over
all of them). A flow from ``s`` to ``d`` runs at::

    rate = min(bw_s / flows_out(s), bw_d / flows_in(d))

recomputed whenever a flow starts or ends. This is not max-min fair (a flow limited
elsewhere does not hand its unused share back), which makes it slightly pessimistic
under mixed contention, but it is simple, deterministic and O(active flows) per change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Flow", "Links"]


@dataclass(slots=True)
class Flow:
    """One transfer in progress."""

    fid: int
    src: str
    dst: str
    remaining: float
    rate: float = 0.0
    nbytes: float = 0.0
    started: float = 0.0


class Links:
    """Active flows and their rates; the engine asks for the next completion.

    Args:
        bandwidth_bps: bytes/s per node and direction.
        default_bps: bandwidth of nodes missing from ``bandwidth_bps``.

    Raises:
        ValueError: a non-positive bandwidth.
    """

    def __init__(self, bandwidth_bps: Mapping[str, float], default_bps: float) -> None:
        for node, bw in bandwidth_bps.items():
            if not bw > 0:
                raise ValueError(f"bandwidth of {node!r} must be > 0 bytes/s, got {bw!r}")
        if not default_bps > 0:
            raise ValueError(f"default bandwidth must be > 0 bytes/s, got {default_bps!r}")
        self._bw = dict(bandwidth_bps)
        self._default = float(default_bps)
        self._flows: dict[int, Flow] = {}
        self._out: dict[str, int] = {}
        self._in: dict[str, int] = {}
        self._at = 0.0
        self._next_id = 0
        self.bytes_moved = 0.0

    def __len__(self) -> int:
        return len(self._flows)

    def bandwidth(self, node: str) -> float:
        """Bytes/s of ``node`` per direction."""
        return self._bw.get(node, self._default)

    def in_flight(self, node: str) -> float:
        """Bytes still to move on flows touching ``node``."""
        return sum(f.remaining for f in self._flows.values() if node in (f.src, f.dst))

    def _advance(self, now: float) -> None:
        dt = now - self._at
        if dt > 0:
            for f in self._flows.values():
                f.remaining -= f.rate * dt
        self._at = now

    def _rerate(self) -> None:
        bw = self._bw
        d = self._default
        out, inn = self._out, self._in
        for f in self._flows.values():
            a = bw.get(f.src, d) / out[f.src]
            b = bw.get(f.dst, d) / inn[f.dst]
            f.rate = a if a < b else b

    def start(self, src: str, dst: str, nbytes: float, now: float) -> int:
        """Start a flow of ``nbytes`` from ``src`` to ``dst`` at ``now``; returns its id.

        Raises:
            ValueError: a negative size or ``src == dst``.
        """
        if nbytes < 0:
            raise ValueError(f"transfer size must be >= 0 bytes, got {nbytes}")
        if src == dst:
            raise ValueError(f"a flow needs two different nodes, got {src!r} twice")
        self._advance(now)
        fid = self._next_id
        self._next_id += 1
        self._flows[fid] = Flow(fid, src, dst, float(nbytes), 0.0, float(nbytes), now)
        self._out[src] = self._out.get(src, 0) + 1
        self._in[dst] = self._in.get(dst, 0) + 1
        self._rerate()
        return fid

    def next_completion(self) -> tuple[float, int] | None:
        """``(time, flow id)`` of the flow that ends first at current rates, or ``None``."""
        best: tuple[float, int] | None = None
        for f in self._flows.values():
            t = self._at + (f.remaining / f.rate if f.remaining > 0 else 0.0)
            if best is None or t < best[0] or (t == best[0] and f.fid < best[1]):
                best = (t, f.fid)
        return best

    def finish(self, fid: int, now: float) -> Flow:
        """Remove a completed flow at ``now`` and re-share the bandwidth.

        Raises:
            KeyError: no such flow.
        """
        self._advance(now)
        f = self._flows.pop(fid)
        self._out[f.src] -= 1
        self._in[f.dst] -= 1
        self.bytes_moved += f.nbytes
        self._rerate()
        return f
