"""A put through a grant (one exchange with the master) against PutStart + PutEnd, A/B.

Usage: ``python bench/store_grants_ab.py [--sizes 4096,65536,1048576] [--seconds 4]
[--transports tcp,shm]``

Starts our master and one store node (``mooncake master``, ``mooncake store node``,
127.0.0.1, a 1 GiB segment) and, in this process, two clients of that master per
transport: ``granted`` (as shipped: the call that ends a put asks for the space of the
next put of that size, which then takes one ``PutCommit``) and ``plain`` (the same
client never asking, so every put is PutStart, transfer, PutEnd). For ``put_from`` of
fresh keys of each size the two take turns every 100 calls for ``--seconds``, so drift
on a noisy machine lands on both; it prints p50 / p90 per client, size and transport as
JSON, with how many master calls each client's puts took (from ``/metrics``). Keys are
removed every 100 puts. A sample of values is read back and checked.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4096,65536,1048576")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--transports", default="tcp,shm")
    args = ap.parse_args()
    with master_and_node(Path(tempfile.mkdtemp(prefix="grants_ab_"))) as master:
        out = [
            _measure(master, t, int(s), args.seconds)
            for t in args.transports.split(",")
            for s in args.sizes.split(",")
        ]
        print(json.dumps(out, indent=1))


def _measure(master: str, transport: str, size: int, seconds: float) -> dict[str, Any]:
    from mooncake_core.store.client import Client
    from mooncake_core.store.client.options import ClientOptions

    clients = {
        name: Client(ClientOptions(master=master, transport=transport)).setup()
        for name in ("granted", "plain")
    }
    # Never asks for a grant: every put is PutStart, transfer, PutEnd.
    clients["plain"]._grants.wants = lambda size, config: False  # type: ignore[method-assign]
    lat: dict[str, dict[str, list[float]]] = {"put_from": {}}
    calls = {name: [0, 0] for name in clients}  # master calls, puts
    try:
        bufs = {name: ctypes.create_string_buffer(size) for name in clients}
        addrs = {name: c.register_buffer(bufs[name]) for name, c in clients.items()}
        n = 0
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            for name, c in clients.items():
                acc = lat["put_from"].setdefault(name, [])
                ctypes.memset(addrs[name], n % 251, size)
                before = c._m.fast_calls
                keys = [f"{transport}/{name}/{size}/{n}/{i}" for i in range(BLOCK)]
                for k in keys:
                    t0 = time.perf_counter()
                    c.put_from(k, addrs[name], size)
                    acc.append(time.perf_counter() - t0)
                calls[name][0] += c._m.fast_calls - before
                calls[name][1] += BLOCK
                if c.get(keys[-1]) != bytes([n % 251]) * size:
                    raise SystemExit(f"{name}: {keys[-1]} read wrong bytes")
                for k in keys:
                    c.remove(k, force=True)
                n += 1
    finally:
        for c in clients.values():
            c.close()
    res: dict[str, Any] = {
        "transport": transport,
        "size": size,
        "fast_calls_per_put": {k: round(v[0] / v[1], 2) for k, v in calls.items()},
    }
    return res | turn_summary(lat)


if __name__ == "__main__":
    main()
