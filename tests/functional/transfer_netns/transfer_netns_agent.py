"""A Transfer Engine process for the namespace tests, run inside a namespace.

``target``: exposes a ``--size`` byte segment named ``seg`` filled with a seeded random
pattern, prints one JSON line ``{"segment": ..., "xxh3": ...}`` and serves until stdin
closes or it is killed.

``initiator``: a JSON-lines command loop on stdin/stdout (one reply line per command,
``{"ok": false, "error": ...}`` on failure):

* ``{"cmd": "read", "segment": S, "length": N, "timeout": T}``: one READ of N bytes into
  a fresh local region. Prints ``{"event": "started"}`` right after submitting, then the
  result: final state, reason, seconds, xxh3 of the bytes read, which local NICs were
  seen paused while it ran (snapshot polled every 10 ms), and the NIC counters after.
* ``{"cmd": "snapshot"}``: the NIC counters now.

Engine settings come from ``--config`` (JSON of TransferConfig fields).

:class:`AgentClient` starts an agent inside a rig namespace and talks to it; the tests
and ``bench/transfer_bench.py --only netns`` share it.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import xxhash

from mooncake_core.config import TransferConfig
from mooncake_core.transfer import OpCode, TransferEngine, TransferRequest, TransferState

if TYPE_CHECKING:
    from tests.netns_util import NetnsPair


def _engine(args: argparse.Namespace) -> TransferEngine:
    cfg = TransferConfig(**json.loads(args.config))
    engine = TransferEngine(cfg, nics=tuple(args.nics.split(",")), port=args.port)
    engine.start()
    return engine


def _buffer(size: int) -> mmap.mmap:
    return mmap.mmap(-1, size, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)


def _nics(engine: TransferEngine) -> dict[str, dict[str, Any]]:
    return {n.nic: asdict(n) for n in engine.snapshot().nics}


PERIOD = (1 << 20) + 4093
"""Pattern period: not a multiple of any slice size, so a slice landing at the wrong
offset changes the checksum."""


def _fill(view: np.ndarray, seed: int) -> None:
    # Tiling one random period is ~10x faster than drawing 256 MiB of random bytes.
    period = np.random.default_rng(seed).integers(0, 256, PERIOD, dtype=np.uint8)
    reps = -(-len(view) // PERIOD)
    for i in range(reps):
        chunk = view[i * PERIOD : (i + 1) * PERIOD]
        chunk[:] = period[: len(chunk)]


def target(args: argparse.Namespace) -> None:
    engine = _engine(args)
    buf = _buffer(args.size)
    _fill(np.frombuffer(buf, dtype=np.uint8), args.seed)
    engine.register_memory(buf, location="cpu:0", name="seg")
    digest = xxhash.xxh3_64_hexdigest(buf)
    print(json.dumps({"segment": f"{engine.segment_name}/seg", "xxh3": digest}), flush=True)
    sys.stdin.read()  # serve until the test closes stdin (or kills this process)
    engine.close()


def _read(engine: TransferEngine, msg: dict[str, Any]) -> dict[str, Any]:
    length = int(msg["length"])
    buf = _buffer(length)
    region = engine.register_memory(buf, location="cpu:0")
    seg = engine.open_segment(msg["segment"])
    batch = engine.allocate_batch(1)
    t0 = time.perf_counter()
    engine.submit(batch, [TransferRequest(OpCode.READ, region, 0, seg, 0, length)])
    print(json.dumps({"event": "started"}), flush=True)
    paused: set[str] = set()
    deadline = t0 + float(msg.get("timeout", 60))
    while True:
        status = engine.status(batch, 0)
        paused.update(n.nic for n in engine.snapshot().nics if n.paused)
        if status.state is not TransferState.WAITING or time.perf_counter() > deadline:
            break
        time.sleep(0.01)
    seconds = time.perf_counter() - t0
    if status.state is not TransferState.WAITING:
        engine.free_batch(batch)
    return {
        "ok": True,
        "state": status.state.name,
        "reason": status.reason,
        "transferred": status.transferred,
        "seconds": seconds,
        "xxh3": xxhash.xxh3_64_hexdigest(buf) if status.state is TransferState.COMPLETED else None,
        "paused_seen": sorted(paused),
        "nics": _nics(engine),
    }


def initiator(args: argparse.Namespace) -> None:
    engine = _engine(args)
    try:
        for line in sys.stdin:
            msg = json.loads(line)
            try:
                if msg["cmd"] == "read":
                    reply = _read(engine, msg)
                elif msg["cmd"] == "snapshot":
                    reply = {"ok": True, "nics": _nics(engine)}
                else:
                    reply = {"ok": False, "error": f"unknown command {msg['cmd']!r}"}
            except Exception as exc:  # reported to the test, which fails with it
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(reply), flush=True)
    finally:
        engine.close()


class AgentClient:
    """One agent process started in a rig namespace, spoken to in JSON lines.

    Args:
        rig: the namespace rig.
        side: ``"a"`` or ``"b"``.
        mode: ``"target"`` or ``"initiator"``.
        nics: local NIC addresses for its engine.
        config: TransferConfig fields.
        **options: more agent flags (``port``, ``size``, ``seed``).
    """

    def __init__(
        self,
        rig: NetnsPair,
        side: Literal["a", "b"],
        mode: str,
        nics: tuple[str, ...],
        config: dict[str, Any],
        **options: Any,
    ) -> None:
        args = [__file__, mode, "--nics", ",".join(nics), "--config", json.dumps(config)]
        for key, value in options.items():
            args += [f"--{key}", str(value)]
        self.proc = rig.python(
            side,
            *args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        # A reader thread, so waiting for a line can time out instead of hanging the run.
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for text in self.proc.stdout:
            self._lines.put(text)
        self._lines.put("")

    def line(self, timeout: float = 60) -> dict[str, Any]:
        """The next JSON line.

        Raises:
            TimeoutError: none within ``timeout`` seconds.
            RuntimeError: the agent exited.
        """
        try:
            text = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"agent gave no answer within {timeout} s") from None
        if not text:
            raise RuntimeError(f"agent exited ({self.proc.poll()}) before answering")
        return dict(json.loads(text))

    def send(self, **msg: Any) -> None:
        """Send one command without waiting."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def call(self, **msg: Any) -> dict[str, Any]:
        """Send one command and return its final reply (skipping the "started" event).

        Raises:
            RuntimeError: the agent answered ``ok: false``.
        """
        self.send(**msg)
        reply = self.line()
        if reply.get("event") == "started":
            reply = self.line()
        if not reply.get("ok"):
            raise RuntimeError(f"agent command {msg} failed: {reply}")
        return reply

    def stop(self) -> None:
        """Close stdin (the agent exits), killing it if it does not."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("mode", choices=["target", "initiator"])
    ap.add_argument("--nics", required=True, help="comma-separated local NIC addresses")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--size", type=int, default=256 << 20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--config", default="{}", help="TransferConfig fields as JSON")
    args = ap.parse_args()
    (target if args.mode == "target" else initiator)(args)


if __name__ == "__main__":
    main()
