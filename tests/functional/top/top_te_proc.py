"""A Transfer Engine process that serves its snapshot on /telemetry (for the top tests).

    python top_te_proc.py --name te-a                      # target: hosts a segment
    python top_te_proc.py --name te-b --read SEGMENT        # initiator: reads it in a loop

Prints one JSON line ``{"segment_name", "telemetry_url"}`` on stdout when ready, then
runs until stdin closes. The initiator reads 1 MiB then sleeps 20 ms, forever: a steady
~tens of MB/s over tcp on loopback that does not hog a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from mooncake_core import __version__
from mooncake_core.config.models import TransferConfig
from mooncake_core.telemetry import ComponentInfo, TelemetryRegistry, serve_telemetry
from mooncake_core.transfer import TransferEngine

MiB = 1 << 20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--read", default=None, help="segment to read in a loop")
    args = ap.parse_args()
    eng = TransferEngine(TransferConfig(protocol="tcp"), nics=["127.0.0.1"]).start()
    reg = TelemetryRegistry(ComponentInfo(args.name, "transfer", version=__version__))
    reg.register("transfer", eng.snapshot)
    srv = serve_telemetry(reg, "127.0.0.1", 0)
    region = eng.register_memory(bytearray(8 * MiB), name="seg")
    stop = threading.Event()
    if args.read:
        seg = eng.open_segment(args.read)

        def loop() -> None:
            while not stop.is_set():
                eng.read(region, 0, seg, 0, MiB)
                time.sleep(0.02)

        threading.Thread(target=loop, daemon=True).start()
    print(json.dumps({"segment_name": eng.segment_name, "telemetry_url": srv.url}), flush=True)
    sys.stdin.read()
    stop.set()
    srv.close()
    eng.close()


if __name__ == "__main__":
    main()
