"""Where a 64-key batch of 4 KiB puts and gets spends its time, part by part.

Usage: ``python bench/store_batch_parts.py [--transport auto|tcp] [--batches 100]
[--size 4096]``

Starts our master and one store node (``mooncake master``, ``mooncake store node``,
127.0.0.1, a 1 GiB segment) and, in this process, a client that puts 64 keys of 4 KiB
(``--size``) with ``batch_put_from`` and reads them back with ``batch_get_into``,
``--batches`` times each after a warm-up. It prints the time per batch of each whole
call and of its parts: the master calls (``BatchPutStart``, ``BatchPutEnd``,
``BatchGetReplicaList``: round trip and the master's work) and the data path (``start``: the copies submitted, over
shm the copies themselves; ``finish``: waiting for them), summed over puts and gets.
Every value read back is checked. ``--profile DIR`` also writes cProfile files of the
client and the master there.

``--compare-parts N``: instead, N rounds of one batch put and get each way, alternating
in the same client: the batch cut into pipelined parts as over tcp, and in one part as
a same-host client moves it (``DataPath.copies_all_here``); prints the medians.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from store_bench import master_and_node

KEYS = 64
Batch = tuple[list[int], list[int], list[int]]
"""The values' addresses, the read-back addresses and the sizes of one batch."""


def _timed(obj: Any, name: str, acc: dict[str, float]) -> None:
    f: Callable[..., Any] = getattr(obj, name)

    def timed(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            acc[name] += time.perf_counter() - t0

    setattr(obj, name, timed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transport", default="auto", choices=["auto", "tcp"])
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--size", type=int, default=4096, help="bytes per value")
    ap.add_argument("--profile", type=Path, default=None)
    ap.add_argument("--compare-parts", type=int, default=0, metavar="ROUNDS")
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="batch_parts_"))
    prof: tuple[str, ...] = ()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        prof = ("-m", "cProfile", "-o", str(args.profile / "master.prof"))
    if args.compare_parts:
        # Every round's keys stay (a removed object's range waits for its readers'
        # leases): the segment holds them all.
        need = 2 * args.compare_parts * 2 * KEYS * args.size + (256 << 20)
        with master_and_node(out, node_bytes=max(1 << 30, need)) as master:
            print(json.dumps(_compare_parts(master, args), indent=1))
        return
    with master_and_node(out, master_prefix=prof) as master:
        print(json.dumps(_measure(master, args), indent=1))


def _client_and_buffer(master: str, args: argparse.Namespace) -> tuple[Any, Any, Batch]:
    """A client of ``master`` and one registered buffer: ``KEYS`` values of ``--size``
    bytes (value i filled with i + 1), then as much room to read them back into."""
    from mooncake_core.store.client import Client
    from mooncake_core.store.client.options import ClientOptions

    c = Client(ClientOptions(master=master, transport=args.transport)).setup()
    size = args.size
    buf = ctypes.create_string_buffer(2 * KEYS * size)
    base = ctypes.addressof(buf)
    for i in range(KEYS):
        ctypes.memset(base + i * size, i + 1, size)
    c.register_buffer(base, 2 * KEYS * size)
    src = [base + i * size for i in range(KEYS)]
    dst = [base + (KEYS + i) * size for i in range(KEYS)]
    return c, buf, (src, dst, [size] * KEYS)


def _compare_parts(master: str, args: argparse.Namespace) -> dict[str, Any]:
    import statistics

    from mooncake_core.store.client.data import DataPath

    c, buf, (src, dst, sizes) = _client_and_buffer(master, args)
    size = args.size
    base = ctypes.addressof(buf)
    one_part = DataPath.copies_all_here
    times: dict[str, tuple[list[float], list[float]]] = {"parts": ([], []), "one": ([], [])}
    try:
        for r in range(args.compare_parts):
            for way in ("parts", "one") if r % 2 else ("one", "parts"):
                DataPath.copies_all_here = one_part if way == "one" else lambda self: False  # type: ignore[method-assign]
                keys = [f"{way}-{r}-{i}" for i in range(KEYS)]
                t0 = time.perf_counter()
                assert all(x is None for x in c.batch_put_from(keys, src, sizes))
                t1 = time.perf_counter()
                assert all(x == size for x in c.batch_get_into(keys, dst, sizes))
                t2 = time.perf_counter()
                assert buf.raw[KEYS * size :] == buf.raw[: KEYS * size], "read back other bytes"
                ctypes.memset(base + KEYS * size, 0, KEYS * size)
                times[way][0].append(t1 - t0)
                times[way][1].append(t2 - t1)
    finally:
        DataPath.copies_all_here = one_part  # type: ignore[method-assign]
        c.close()
    total = KEYS * size
    return {
        way: {
            "put_ms": round(statistics.median(p) * 1e3, 2),
            "get_ms": round(statistics.median(g) * 1e3, 2),
            "put_gbps": round(total / statistics.median(p) / 1e9, 2),
            "get_gbps": round(total / statistics.median(g) / 1e9, 2),
        }
        for way, (p, g) in times.items()
    }


def _measure(master: str, args: argparse.Namespace) -> dict[str, Any]:
    c, buf, (src, dst, sizes) = _client_and_buffer(master, args)
    size = args.size
    acc: dict[str, float] = collections.defaultdict(float)
    for name in ("batch_put_start", "batch_put_end", "batch_get_replica_list"):
        _timed(c._m, name, acc)
    for name in ("start", "start_flat", "finish"):
        _timed(c._dp, name, acc)

    def run(tag: str, n: int) -> dict[str, float]:
        t0 = time.perf_counter()
        for r in range(n):
            res = c.batch_put_from([f"{tag}-{r}-{i}" for i in range(KEYS)], src, sizes)
            assert all(x is None for x in res), res[:2]
        put = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        for r in range(n):
            got = c.batch_get_into([f"{tag}-{r}-{i}" for i in range(KEYS)], dst, sizes)
            assert all(x == size for x in got), got[:2]
        get = (time.perf_counter() - t0) / n
        assert buf.raw[KEYS * size :] == buf.raw[: KEYS * size], "read back other bytes"
        return {"batch_put_from_us": put * 1e6, "batch_get_into_us": get * 1e6}

    run("warm", max(args.batches // 5, 1))
    acc.clear()
    if args.profile:
        import cProfile

        pr = cProfile.Profile()
        pr.enable()
    whole = run("timed", args.batches)
    if args.profile:
        pr.disable()
        pr.dump_stats(str(args.profile / "client.prof"))
    c.close()
    parts = {k: round(v / args.batches * 1e6) for k, v in sorted(acc.items())}
    return {
        "transport": args.transport,
        "keys_per_batch": KEYS,
        "value_bytes": size,
        "per_batch_us": {k: round(v) for k, v in whole.items()},
        "parts_per_batch_us": parts,
        "note": "start, start_flat and finish are summed over the put and the get batch",
    }


if __name__ == "__main__":
    main()
