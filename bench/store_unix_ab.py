"""The fast control channel over its abstract Unix socket against its TCP port, A/B.

Usage: ``python bench/store_unix_ab.py [--transport auto|tcp] [--size 4096] [--seconds 6]``

Starts our master and one store node (``mooncake master``, ``mooncake store node``,
127.0.0.1, a 1 GiB segment) and, in this process, two clients of that master: one
reaching the fast channel through the Unix socket the master advertises
(``ClientOptions(fast_unix=True)``, the default), one through its TCP port
(``fast_unix=False``). For each call (``put_from`` of fresh keys, ``get_into`` of 300
warm keys, ``is_exist``) the two take turns every 100 calls for ``--seconds``, so drift
on a noisy machine lands on both; it prints p50 / p90 per client and call as JSON.
Every value read back is checked.
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

BLOCK = 100


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transport", default="auto", choices=["auto", "tcp"])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    with master_and_node(Path(tempfile.mkdtemp(prefix="unix_ab_"))) as master:
        print(json.dumps(_measure(master, args), indent=1))


def _measure(master: str, args: argparse.Namespace) -> dict[str, Any]:
    from mooncake_core.store.client import Client
    from mooncake_core.store.client.options import ClientOptions

    size = args.size
    clients = {
        name: Client(ClientOptions(master=master, transport=args.transport, fast_unix=unix))
        for name, unix in (("unix", True), ("tcp", False))
    }
    bufs, addrs = {}, {}
    try:
        for name, c in clients.items():
            c.setup()
            bufs[name] = ctypes.create_string_buffer(2 * size)
            addrs[name] = c.register_buffer(bufs[name])
            ctypes.memset(addrs[name], ord("v"), size)
        warm = clients["unix"]
        for i in range(300):
            warm.put_from(f"w{i}", addrs["unix"], size)
        lat: dict[str, dict[str, list[float]]] = {}
        n = 0
        for op in ("put_from", "get_into", "is_exist"):
            t_end = time.monotonic() + args.seconds
            while time.monotonic() < t_end:
                for name, c in clients.items():
                    acc = lat.setdefault(op, {}).setdefault(name, [])
                    a = addrs[name]
                    for _ in range(BLOCK):
                        t0 = time.perf_counter()
                        if op == "put_from":
                            c.put_from(f"k{n}", a, size)
                        elif op == "get_into":
                            c.get_into(f"w{n % 300}", a + size, size)
                        else:
                            c.is_exist(f"w{n % 300}")
                        acc.append(time.perf_counter() - t0)
                        n += 1
                    if op == "get_into" and bufs[name].raw[size:] != b"v" * size:
                        raise SystemExit(f"{name}: get_into read wrong bytes")
        paths = {name: c._m._fast_address(master) for name, c in clients.items()}
    finally:
        for c in clients.values():
            c.close()
    res: dict[str, Any] = {"transport": args.transport, "size": size, "fast_paths": paths}
    return res | turn_summary(lat)


def turn_summary(lat: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """``{"op.client": {calls, p50_us, p90_us}}`` from seconds per call, by op and client
    (sorts the lists)."""
    res = {}
    for op, by in lat.items():
        for name, v in by.items():
            v.sort()
            res[f"{op}.{name}"] = {
                "calls": len(v),
                "p50_us": round(v[len(v) // 2] * 1e6, 1),
                "p90_us": round(v[len(v) * 9 // 10] * 1e6, 1),
            }
    return res


if __name__ == "__main__":
    main()
