"""Two batch paths of the store client, each A/B in one client, alternating.

Usage: ``python bench/store_batch_ab.py [--transport auto|tcp] [--size 4096]
[--rounds 16] [--block 25]``

Starts our master and one store node (``mooncake master``, ``mooncake store node``,
127.0.0.1, a 1 GiB segment) and, in this process, a client that moves batches of 64
values of ``--size`` bytes. Two comparisons, each taking turns every ``--block``
batches for ``--rounds`` rounds, so drift on a noisy machine lands on both:

- ``put``: ``batch_put_from`` of fresh keys with batch grants (a batch like the last
  one is copied into the grants it got and committed in one ``BatchPutCommit``) and
  without them (``BatchPutStart``, copies, ``BatchPutEnd``; the client asks for none).
  Each batch is removed after it is timed, so the segment never fills.
- ``get``: ``batch_get_into`` of batches written through grants, the replica lists
  answered as one run (fast op 27) and in the plain packed form (op 15, as before).

Prints the median microseconds per batch of each as JSON. Every batch put is checked
to succeed and every read to return the size.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from store_bench import master_and_node

KEYS = 64


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transport", default="auto", choices=["auto", "tcp"])
    ap.add_argument("--size", type=int, default=4096, help="bytes per value")
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--block", type=int, default=25, help="batches per turn")
    args = ap.parse_args()
    with master_and_node(Path(tempfile.mkdtemp(prefix="batch_ab_"))) as master:
        print(json.dumps(_measure(master, args), indent=1))


def _measure(master: str, args: argparse.Namespace) -> dict[str, Any]:
    from mooncake_core.store import master_rpc as rpc
    from mooncake_core.store.client import Client
    from mooncake_core.store.client import batch as batch_mod
    from mooncake_core.store.client.options import ClientOptions
    from mooncake_core.store.fast_packed import unpack_reads

    size = args.size
    c = Client(ClientOptions(master=master, transport=args.transport)).setup()
    buf = ctypes.create_string_buffer(2 * KEYS * size)
    base = c.register_buffer(buf)
    ctypes.memset(base, 7, KEYS * size)
    src = [base + i * size for i in range(KEYS)]
    dst = [base + (KEYS + i) * size for i in range(KEYS)]
    sizes = [size] * KEYS
    out: dict[str, Any] = {"transport": args.transport, "size": size, "keys": KEYS}
    try:
        # Puts: grants asked for (256, the client's limit) or not (0).
        lat: dict[str, list[float]] = {"grants": [], "no_grants": []}
        n = 0
        for _ in range(args.rounds):
            for mode, limit in (("no_grants", 0), ("grants", 256)):
                batch_mod.MAX_BATCH_GRANTS = limit
                for _ in range(args.block):
                    keys = [f"p{n}/{i}" for i in range(KEYS)]
                    t0 = time.perf_counter()
                    res = c.batch_put_from(keys, src, sizes)
                    lat[mode].append(time.perf_counter() - t0)
                    if any(r is not None for r in res):
                        raise SystemExit(f"batch put failed: {res[:2]}")
                    c.remove_by_prefix(f"p{n}/", force=True)
                    n += 1
        batch_mod.MAX_BATCH_GRANTS = 256
        out["batch_put_from_us"] = _medians(lat)
        # Gets: three batches written through grants, read back in turn.
        for b in range(3):
            if any(
                r is not None
                for r in c.batch_put_from([f"g{b}/{i}" for i in range(KEYS)], src, sizes)
            ):
                raise SystemExit("batch put failed")
        call = rpc.BATCH_GET_REPLICA_LIST
        run = call.packed
        plain = rpc.Packed("BatchGetReplicaListPacked", 15, lambda q, b: unpack_reads(q.keys, b))
        lat = {"run": [], "plain": []}
        for r in range(args.rounds):
            for mode, packed in (("plain", plain), ("run", run)):
                object.__setattr__(call, "packed", packed)  # the op the client sends
                for j in range(args.block):
                    keys = [f"g{(r + j) % 3}/{i}" for i in range(KEYS)]
                    t0 = time.perf_counter()
                    got = c.batch_get_into(keys, dst, sizes)
                    lat[mode].append(time.perf_counter() - t0)
                    if got != sizes:
                        raise SystemExit(f"batch get failed: {got[:2]}")
        object.__setattr__(call, "packed", run)
        out["batch_get_into_us"] = _medians(lat)
    finally:
        c.close()
    return out


def _medians(lat: dict[str, list[float]]) -> dict[str, int]:
    return {k: round(statistics.median(v) * 1e6) for k, v in lat.items()}


if __name__ == "__main__":
    main()
