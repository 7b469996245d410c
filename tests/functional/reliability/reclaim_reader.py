"""A reader process for test_rel_reclaimed_reads: gets live ``obj-*`` keys until stdin
closes and prints one line per read (``exact``, ``WRONG <key> <names>``, or the error
code). The test SIGSTOPs it at random moments, so some transfers end long after their
lease, as in a process that stalls (GC, VM steal, swap) mid-read.

MODE ``get``: ``get`` over tcp; ``batch``: ``batch_get_into`` of two keys over shm
(the batch read's plain path: one copy each, made in this process).

Usage: python reclaim_reader.py MASTER_ADDRESS LEASE_S SIZE ROW MODE
"""

from __future__ import annotations

import random
import sys
import threading

from mooncake_core.config.models import MasterConfig
from mooncake_core.store import Client, ClientOptions
from mooncake_core.store.errors import StoreError


def main() -> None:
    address, lease_s, size, row, mode = (
        sys.argv[1],
        float(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
        sys.argv[5],
    )
    done = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        done.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    cfg = MasterConfig(lease_ttl_s=lease_s, heartbeat_interval_s=0.5, client_ttl_s=2.0)
    rng = random.Random(7)
    transport = "tcp" if mode == "get" else "auto"
    opts = ClientOptions(master=address, master_config=cfg, transport=transport)
    buf = bytearray(2 * size)
    with Client(opts).setup() as c:
        base = c.register_buffer(buf)
        print("ready", flush=True)
        while not done.is_set():
            keys = [e.key for e in c.list_keys(prefix="obj-").entries]
            if not keys:
                continue
            pair = [rng.choice(keys), rng.choice(keys)]
            if mode == "get":
                try:
                    got = [c.get(pair[0])]
                except StoreError as e:
                    print(e.code.name, flush=True)
                    continue
            else:
                res = c.batch_get_into(pair, [base, base + size], [size, size])
                got = []
                for n, r in enumerate(res):
                    if isinstance(r, StoreError):
                        print(r.code.name, flush=True)
                    else:
                        got.append(bytes(buf[n * size : n * size + r]))
                pair = [k for k, r in zip(pair, res, strict=True) if not isinstance(r, StoreError)]
            for key, value in zip(pair, got, strict=False):
                report(key, value, size, row)


def report(key: str, got: bytes, size: int, row: int) -> None:
    if got == key.encode().ljust(row, b".") * (size // row):
        print("exact", flush=True)
    else:
        names = sorted({got[i : i + row].rstrip(b".") for i in range(0, len(got), row)})
        print("WRONG", key, b",".join(names[:4]).decode(errors="replace"), flush=True)


if __name__ == "__main__":
    main()
