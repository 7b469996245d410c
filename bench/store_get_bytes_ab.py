"""A large ``get``'s bytes object: built by ``bytes(view)`` against ``bytes_of``, A/B.

Usage: ``python bench/store_get_bytes_ab.py [--transport auto|tcp] [--mib 64] [--rounds 12]``

Starts our master and one store node (``mooncake master``, ``mooncake store node``,
127.0.0.1, a 1 GiB segment), puts one value of ``--mib`` MiB and reads it back with
``Client.get`` ``--rounds`` times each way, alternating: the staged bytes copied into
the result by ``bytes(memoryview)`` (before) and by ``_native.bytes_of`` (now: the
result's pages advised as huge pages first). Every value read back is checked; prints
the median time and GB/s (1e9 bytes/s) of each way as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from store_bench import master_and_node


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transport", default="auto", choices=["auto", "tcp"])
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=12)
    args = ap.parse_args()

    from mooncake_core.store.client import Client
    from mooncake_core.store.client import client as client_mod
    from mooncake_core.store.client.options import ClientOptions

    size = args.mib << 20
    ways = {
        "bytes_view": lambda st, off, n: bytes(st.view()[off : off + n]),
        "bytes_of": client_mod.bytes_of,
    }
    took: dict[str, list[float]] = {w: [] for w in ways}
    with master_and_node(Path(tempfile.mkdtemp(prefix="get_bytes_"))) as master:
        c = Client(ClientOptions(master=master, transport=args.transport)).setup()
        value = os.urandom(size)
        c.put("big", value)
        try:
            for r in range(args.rounds):
                for way in list(ways) if r % 2 else list(ways)[::-1]:
                    client_mod.bytes_of = ways[way]  # type: ignore[assignment]
                    t0 = time.perf_counter()
                    got = c.get("big")
                    took[way].append(time.perf_counter() - t0)
                    assert got == value, "read back other bytes"
                    del got
        finally:
            client_mod.bytes_of = ways["bytes_of"]  # type: ignore[assignment]
            c.close()
    print(
        json.dumps(
            {
                w: {
                    "median_ms": round(statistics.median(t) * 1e3, 1),
                    "gbps": round(size / statistics.median(t) / 1e9, 2),
                }
                for w, t in took.items()
            }
            | {"transport": args.transport, "mib": args.mib}
        )
    )


if __name__ == "__main__":
    main()
