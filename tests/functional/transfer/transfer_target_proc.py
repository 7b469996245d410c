"""A target process for the Transfer Engine functional tests.

Starts an engine, exposes one segment filled with a known pattern, prints one JSON line
(its segment name), then answers commands on stdin, one per line:

    sha256 OFFSET LENGTH   -> hex digest of that range of the segment
    snapshot               -> JSON of the engine's snapshot (NIC counters)
    quit                   -> close and exit (EOF does the same)
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys

from mooncake_core.config.models import TransferConfig
from mooncake_core.transfer import TransferEngine


def pattern(length: int, seed: int = 0) -> bytes:
    """Deterministic pseudo-random test bytes (a short period would hide misplaced slices)."""
    import numpy as np

    return np.random.default_rng(seed).bytes(length)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nics", default="127.0.0.1")
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--name", default="store-0")
    ap.add_argument("--shm", action="store_true")
    ap.add_argument("--secret", default=None, help="hex")
    ap.add_argument("--host-id", default=None)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--config", default="{}", help="TransferConfig fields as JSON")
    args = ap.parse_args()
    cfg = TransferConfig(**json.loads(args.config))
    secret = bytes.fromhex(args.secret) if args.secret else None
    eng = TransferEngine(
        cfg, nics=args.nics.split(","), port=args.port, secret=secret, host_id=args.host_id
    )
    eng.start()
    if args.shm:
        region = eng.allocate_memory(args.size, name=args.name)
    else:
        region = eng.register_memory(bytearray(args.size), name=args.name)
    view = region.view()
    view[:] = pattern(args.size)
    print(json.dumps({"segment_name": eng.segment_name}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "sha256":
            off, n = int(cmd[1]), int(cmd[2])
            print(hashlib.sha256(view[off : off + n]).hexdigest(), flush=True)
        elif cmd[0] == "snapshot":
            print(json.dumps(dataclasses.asdict(eng.snapshot())), flush=True)
    del view
    eng.close()


if __name__ == "__main__":
    main()
