"""A reader process for test_rel_reclaimed_reads: gets live ``obj-*`` keys until stdin
closes and prints one line per read (``exact``, ``WRONG <key> <names>``, or the error
code). The test SIGSTOPs it at random moments, so some transfers end long after their
lease, as in a process that stalls (GC, VM steal, swap) mid-read.

Usage: python reclaim_reader.py MASTER_ADDRESS LEASE_S SIZE ROW
"""

from __future__ import annotations

import random
import sys
import threading

from mooncake_core.config.models import MasterConfig
from mooncake_core.store import Client, ClientOptions
from mooncake_core.store.errors import StoreError


def main() -> None:
    address, lease_s, size, row = (
        sys.argv[1],
        float(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
    )
    done = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        done.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    cfg = MasterConfig(lease_ttl_s=lease_s, heartbeat_interval_s=0.5, client_ttl_s=2.0)
    rng = random.Random(7)
    with Client(ClientOptions(master=address, master_config=cfg, transport="tcp")).setup() as c:
        print("ready", flush=True)
        while not done.is_set():
            keys = [e.key for e in c.list_keys(prefix="obj-").entries]
            if not keys:
                continue
            key = rng.choice(keys)
            want = key.encode().ljust(row, b".") * (size // row)
            try:
                got = c.get(key)
            except StoreError as e:
                print(e.code.name, flush=True)
                continue
            if got == want:
                print("exact", flush=True)
            else:
                names = sorted({got[i : i + row].rstrip(b".") for i in range(0, len(got), row)})
                print("WRONG", key, b",".join(names[:4]).decode(errors="replace"), flush=True)


if __name__ == "__main__":
    main()
