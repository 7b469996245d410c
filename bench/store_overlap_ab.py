"""A tcp get that reads its remembered location while it asks the master, A/B.

Usage: ``python bench/store_overlap_ab.py [--sizes 4096,65536] [--seconds 6]``

Starts our master and one store node (``mooncake master``, ``mooncake store node``,
127.0.0.1, a 1 GiB segment) and, in this process, two clients of that master forced
onto tcp: ``overlap`` (as shipped: a get reads where the key was last read while its
lookup is under way, and keeps the bytes only if the master answers the same version)
and ``plain`` (the same client with nothing remembered, so every get waits for the
lookup, then for the transfer). For ``get_into`` and ``get`` of 300 warm keys of each
size the two take turns every 100 calls for ``--seconds``, so drift on a noisy machine
lands on both; it prints p50 / p90 per client, call and size as JSON, with how many
overlapped reads were used and how many were void. Every value read back is checked.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from store_bench import master_and_node
from store_unix_ab import turn_summary

BLOCK = 100
WARM = 300


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4096,65536")
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    with master_and_node(Path(tempfile.mkdtemp(prefix="overlap_ab_"))) as master:
        out = [_measure(master, int(s), args.seconds) for s in args.sizes.split(",")]
        print(json.dumps(out, indent=1))


def _measure(master: str, size: int, seconds: float) -> dict[str, Any]:
    from mooncake_core.store.client import Client
    from mooncake_core.store.client.options import ClientOptions

    clients = {
        name: Client(ClientOptions(master=master, transport="tcp")).setup()
        for name in ("overlap", "plain")
    }
    # Nothing remembered: every get of this client is lookup, then transfer.
    clients["plain"]._remember = lambda res, replica: None  # type: ignore[method-assign]
    bufs, addrs = {}, {}
    lat: dict[str, dict[str, list[float]]] = {}
    try:
        for name, c in clients.items():
            bufs[name] = ctypes.create_string_buffer(2 * size)
            addrs[name] = c.register_buffer(bufs[name])
        src = clients["overlap"]
        for i in range(WARM):
            ctypes.memset(addrs["overlap"], i % 251, size)
            src.put_from(f"w{size}/{i}", addrs["overlap"], size)
        n = 0
        for op in ("get_into", "get"):
            t_end = time.monotonic() + seconds
            while time.monotonic() < t_end:
                for name, c in clients.items():
                    acc = lat.setdefault(op, {}).setdefault(name, [])
                    a = addrs[name]
                    for _ in range(BLOCK):
                        i = n % WARM
                        t0 = time.perf_counter()
                        if op == "get_into":
                            c.get_into(f"w{size}/{i}", a + size, size)
                        else:
                            v = c.get(f"w{size}/{i}")
                        acc.append(time.perf_counter() - t0)
                        got = bufs[name].raw[size:] if op == "get_into" else v
                        if got != bytes([i % 251]) * size:
                            raise SystemExit(f"{name}: {op} of w{size}/{i} read wrong bytes")
                        n += 1
        used = {name: list(c.overlapped_reads) for name, c in clients.items()}
    finally:
        for c in clients.values():
            c.close()
    res: dict[str, Any] = {"size": size, "overlapped_reads_used_void": used}
    return res | turn_summary(lat)


if __name__ == "__main__":
    main()
