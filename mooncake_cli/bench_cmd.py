"""`mooncake bench`: data-plane benchmarks, shaped like upstream's tools.

``mooncake bench transfer`` mirrors upstream's ``transfer_engine_bench``: a target exposes
a buffer as a segment and waits; an initiator runs ``--threads`` loops that each submit a
batch of ``--batch-size`` requests of ``--block-size`` bytes, wait for all of them, free
the batch and start again, for ``--duration`` seconds. Request ``i`` of thread ``t`` uses
offset ``block * (i * threads + t)`` on both sides, as upstream does, and the result is
``batches * batch_size * block_size / elapsed`` (GB = 1e9 bytes) and requests per second.

Both buffers are filled with a known pattern first (fresh memory would be the kernel's
shared zero page, which reads impossibly fast), and ``--verify`` (on by default) checks one
block end to end after the timed loop.
"""

from __future__ import annotations

import json
import signal
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .common import ConfigOption, JsonOption, err, fail, load, write_stdout

if TYPE_CHECKING:
    from mooncake_core.transfer import Region, RemoteSegment, TransferEngine, TransferSnapshot

app = typer.Typer(help="Benchmark the data plane (transfer engine).", no_args_is_help=True)

PATTERN_PERIOD = 4093
"""Fill pattern period in bytes: a prime, so blocks at different offsets differ."""


class Mode(StrEnum):
    target = "target"
    initiator = "initiator"


class Protocol(StrEnum):
    auto = "auto"
    tcp = "tcp"
    shm = "shm"
    rdma = "rdma"


class Operation(StrEnum):
    read = "read"
    write = "write"


@dataclass(frozen=True, slots=True)
class BenchResult:
    """One initiator run, as printed by ``--json``."""

    protocol: str
    operation: str
    block_size: int
    batch_size: int
    threads: int
    duration_s: float
    batches: int
    bytes: int
    gbps: float
    """Payload GB/s, GB = 1e9 bytes (upstream's default unit)."""
    iops: float
    """Completed requests per second."""
    cpu_s: float
    """CPU seconds this (initiator) process used during the timed loop, all threads."""
    batch_p50_ms: float
    batch_p99_ms: float
    verified: bool | None
    """Whether the post-run end-to-end check passed (None: ``--no-verify``, or no spare
    buffer room beyond block*batch*threads to check with)."""
    segment: str
    nics: dict[str, dict[str, Any]]
    """Per-NIC counters from the engine snapshot after the run."""


def _size(text: str, flag: str) -> int:
    from pydantic import ByteSize, TypeAdapter, ValidationError

    try:
        return int(TypeAdapter(ByteSize).validate_python(text))
    except ValidationError:
        fail(f"{flag} must be a byte size such as 65536, 64KiB or 1MiB, got {text!r}")


def _fill(buf: memoryview, seed: int) -> None:
    """Fill ``buf`` with the periodic pattern of ``seed`` (see :func:`_expected`)."""
    import numpy as np

    period = np.random.default_rng(seed).integers(0, 256, PATTERN_PERIOD, dtype=np.uint8)
    arr = np.frombuffer(buf, dtype=np.uint8)
    chunk = 1 << 24
    tiled = np.tile(period, -(-chunk // PATTERN_PERIOD) + 1)
    for start in range(0, len(arr), chunk):
        # chunk is not a multiple of the period: shift the tile to keep the phase.
        phase = start % PATTERN_PERIOD
        n = min(chunk, len(arr) - start)
        arr[start : start + n] = tiled[phase : phase + n]


def _expected(seed: int, offset: int, length: int) -> bytes:
    import numpy as np

    period = np.random.default_rng(seed).integers(0, 256, PATTERN_PERIOD, dtype=np.uint8)
    tiled = np.tile(period, -(-length // PATTERN_PERIOD) + 2)
    phase = offset % PATTERN_PERIOD
    return tiled[phase : phase + length].tobytes()


TARGET_SEED = 0x7A12
INITIATOR_SEED = 0x1417


def _engine(
    config: Path | None, protocol: Protocol, nics: str, port: int, secret_file: Path | None
) -> TransferEngine:
    from mooncake_core.transfer import TransferEngine

    cfg = load(config).transfer.model_copy(update={"protocol": protocol.value})
    secret = secret_file.read_bytes().strip() if secret_file is not None else None
    nic_list = tuple(n.strip() for n in nics.split(",") if n.strip())
    if not nic_list:
        fail(f"--nics must name at least one address, got {nics!r}")
    engine = TransferEngine(cfg, nics=nic_list, port=port, secret=secret)
    engine.start()
    return engine


def _alloc(size: int) -> memoryview:
    import mmap

    # Anonymous shared mapping: page-aligned, and shareable should a transport map it.
    return memoryview(mmap.mmap(-1, size, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS))


def _run_target(engine: TransferEngine, buffer_size: int, name: str, json_out: bool) -> None:
    # Engine-allocated (shared-memory backed) so same-host initiators can use shm;
    # tcp initiators read and write it in place like any other registered memory.
    region = engine.allocate_memory(buffer_size, location="cpu:0", name=name)
    _fill(region.view(), TARGET_SEED)
    segment = f"{engine.segment_name}/{name}"
    if json_out:
        write_stdout(json.dumps({"segment": segment, "buffer_size": buffer_size}))
    else:
        write_stdout(f"segment: {segment}")
    err.print(f"target ready: {buffer_size} bytes as {segment}; Ctrl-C or SIGTERM to stop")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass


def _run_initiator(
    engine: TransferEngine,
    *,
    segment: str,
    operation: Operation,
    block_size: int,
    batch_size: int,
    threads: int,
    duration: float,
    buffer_size: int,
    verify: bool,
    timeout: float,
) -> BenchResult:
    from mooncake_core.transfer import OpCode, TransferRequest, TransferState

    span = block_size * batch_size * threads
    if span > buffer_size:
        fail(
            f"--buffer-size {buffer_size} is smaller than block*batch*threads = {span}; "
            "raise --buffer-size (the target needs at least as much)"
        )
    buf = _alloc(buffer_size)
    _fill(buf, INITIATOR_SEED)
    region = engine.register_memory(buf, location="cpu:0")
    seg = engine.open_segment(segment)
    op = OpCode.READ if operation is Operation.read else OpCode.WRITE
    plans = [
        [
            TransferRequest(
                op,
                local=region,
                local_offset=block_size * (i * threads + t),
                segment=seg,
                target_offset=block_size * (i * threads + t),
                length=block_size,
            )
            for i in range(batch_size)
        ]
        for t in range(threads)
    ]
    running = threading.Event()
    running.set()
    failed = threading.Event()
    counts = [0] * threads
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[str] = []
    start_barrier = threading.Barrier(threads + 1)

    def worker(t: int) -> None:
        start_barrier.wait()
        try:
            while running.is_set():
                t0 = time.perf_counter()
                batch = engine.allocate_batch(batch_size)
                engine.submit(batch, plans[t])
                # One wait for the whole batch: polling each request (upstream's loop)
                # would measure our status() call rather than the transfers.
                for i, status in enumerate(engine.wait(batch, timeout)):
                    if status.state is not TransferState.COMPLETED:
                        raise RuntimeError(
                            f"request {i} ended {status.state.name}: {status.reason}"
                        )
                engine.free_batch(batch)
                latencies[t].append(time.perf_counter() - t0)
                counts[t] += 1
        except Exception as exc:  # reported by the main thread, which exits non-zero
            errors.append(f"thread {t}: {exc}")
            failed.set()

    workers = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
    for w in workers:
        w.start()
    start_barrier.wait()
    t_start, cpu_start = time.perf_counter(), time.process_time()
    failed.wait(duration)
    running.clear()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t_start
    cpu = time.process_time() - cpu_start
    if errors:
        fail("; ".join(errors))

    verified: bool | None = None
    if verify:
        verified = _verify(engine, region, seg, buf, operation, block_size, span)
    batches = sum(counts)
    moved = batches * batch_size * block_size
    lat = sorted(x for per in latencies for x in per) or [0.0]
    snap = engine.snapshot()
    return BenchResult(
        protocol=seg.transport,
        operation=operation.value,
        block_size=block_size,
        batch_size=batch_size,
        threads=threads,
        duration_s=round(elapsed, 4),
        batches=batches,
        bytes=moved,
        gbps=moved / elapsed / 1e9,
        iops=batches * batch_size / elapsed,
        cpu_s=round(cpu, 4),
        batch_p50_ms=statistics.median(lat) * 1e3,
        batch_p99_ms=lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3,
        verified=verified,
        segment=segment,
        nics=_nic_counters(snap),
    )


def _verify(
    engine: TransferEngine,
    region: Region,
    seg: RemoteSegment,
    buf: memoryview,
    operation: Operation,
    block_size: int,
    span: int,
) -> bool | None:
    """Check data end to end after the timed loop.

    WRITE: block 0 read back must equal what local block 0 sent. READ: the target's last
    bytes, which no initiator of this shape writes, must still hold the target's fill
    pattern (block 0 may carry an earlier write run's data).

    Returns:
        The verdict, or None when the buffers leave no untouched room to check with.
    """
    n = min(block_size, 1 << 20)
    scratch = len(buf) - n
    remote = seg.size - n
    if scratch < span or (operation is Operation.read and remote < span):
        return None
    if operation is Operation.write:
        engine.read(region, scratch, seg, 0, n)
        return bytes(buf[scratch : scratch + n]) == bytes(buf[0:n])
    engine.read(region, scratch, seg, remote, n)
    return bytes(buf[scratch : scratch + n]) == _expected(TARGET_SEED, remote, n)


def _nic_counters(snap: TransferSnapshot) -> dict[str, dict[str, Any]]:
    return {n.nic: asdict(n) for n in snap.nics}


def _print(result: BenchResult, json_out: bool) -> None:
    if json_out:
        write_stdout(json.dumps(asdict(result)))
        return
    from rich.table import Table

    from .common import out

    table = Table(title=f"mooncake bench transfer -> {result.segment}")
    for col in ("op", "block", "batch", "threads", "GB/s", "IOPS", "batch p50 ms", "verified"):
        table.add_column(col, justify="right")
    table.add_row(
        result.operation,
        str(result.block_size),
        str(result.batch_size),
        str(result.threads),
        f"{result.gbps:.3f}",
        f"{result.iops:,.0f}",
        f"{result.batch_p50_ms:.2f}",
        {None: "-", True: "yes", False: "NO"}[result.verified],
    )
    out.print(table)


@app.command("transfer")
def transfer(
    mode: Annotated[
        Mode, typer.Option("--mode", help="target exposes a segment; initiator drives it.")
    ] = Mode.initiator,
    protocol: Annotated[
        Protocol, typer.Option("--protocol", help="Transport to use.")
    ] = Protocol.tcp,
    segment: Annotated[
        str | None,
        typer.Option("--segment", help="Initiator: the target's segment, host:port/name."),
    ] = None,
    operation: Annotated[
        Operation,
        typer.Option("--operation", help="read: target -> initiator; write: the reverse."),
    ] = Operation.read,
    block_size: Annotated[
        str, typer.Option("--block-size", help="Bytes per request (65536, 64KiB, 1MiB).")
    ] = "64KiB",
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, max=65536, help="Requests per batch.")
    ] = 128,
    threads: Annotated[
        int, typer.Option("--threads", min=1, max=256, help="Submitting threads.")
    ] = 1,
    duration: Annotated[float, typer.Option("--duration", min=0.1, help="Seconds to run.")] = 3.0,
    buffer_size: Annotated[
        str,
        typer.Option(
            "--buffer-size", help="Registered buffer per side (needs >= block*batch*threads)."
        ),
    ] = "1GiB",
    nics: Annotated[
        str, typer.Option("--nics", help="Comma-separated NIC addresses to listen on / send from.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Target data port (0: any free port).")
    ] = 0,
    name: Annotated[str, typer.Option("--name", help="Target: segment name.")] = "bench",
    verify: Annotated[
        bool, typer.Option("--verify/--no-verify", help="Check one block end to end after the run.")
    ] = True,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout", min=0.1, help="Seconds one batch may take before it counts as failed."
        ),
    ] = 30.0,
    secret_file: Annotated[
        Path | None,
        typer.Option("--secret-file", help="Cluster secret file for authenticated connections."),
    ] = None,
    config: ConfigOption = None,
    json_out: JsonOption = False,
) -> None:
    """Run a target, or an initiator against one, and print GB/s and IOPS."""
    block = _size(block_size, "--block-size")
    buffer = _size(buffer_size, "--buffer-size")
    if block < 1:
        fail(f"--block-size must be at least 1 byte, got {block_size!r}")
    if mode is Mode.initiator and not segment:
        fail("--segment host:port/name is required in initiator mode (the target prints it)")
    from mooncake_core.transfer import TransferError

    try:
        engine = _engine(config, protocol, nics, port if mode is Mode.target else 0, secret_file)
    except TransferError as exc:
        fail(str(exc))
    try:
        if mode is Mode.target:
            _run_target(engine, buffer, name, json_out)
            return
        result = _run_initiator(
            engine,
            segment=segment or "",
            operation=operation,
            block_size=block,
            batch_size=batch_size,
            threads=threads,
            duration=duration,
            buffer_size=buffer,
            verify=verify,
            timeout=timeout,
        )
    except TransferError as exc:
        fail(str(exc))
    finally:
        engine.close()
    _print(result, json_out)
    if result.verified is False:
        fail("end-to-end check failed: the block read back differs from what was sent")
