"""Audit throughput: can the writer keep up, and what does it cost the decision loop?

Four measurements; 1-3 use decisions with 4 candidates (3 prefill + 1 decode):

1. ``submit`` cost alone (writer not started): ns per call.
2. Maximum write rate: submit N prebuilt decisions as fast as possible, then wait until
   all are on disk; decisions/s and rows/s. Again with a ``record_outcome`` after every
   decision (what the live front door does when each request ends).
3. Sustained rate: a producer paced at ``--rate`` decisions/s for ``--seconds``; reports
   the achieved rate, drops, peak queue depth and how long the final drain took.
4. Decision-loop slowdown: the real sans-IO ``Conductor.schedule`` (3 prefill + 1 decode
   instances, i.e. 4 candidates per decision, and 16 + 16) alone, with ``to_record()``,
   with ``submit(*to_record())`` to a running writer, and with ``submit_source(decision)``
   (the writer thread builds the records). Loops alternate and the best of ``--repeat``
   runs is kept to reduce noise.

6. (``--audit-cpu``) The audit's CPU in the conductor's process per decision, one writer
   warmed up: the deciding thread's ``submit_source`` calls, and every thread of the
   process until the decisions are committed (the writer process's CPU is its own).

The database is SQLite in a temporary folder (WAL, synchronous=NORMAL), upgraded with the
real migrations. Run: ``python bench/audit_throughput.py [--decisions 200000]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from mooncake_core.conductor.audit import AuditWriter, WriterOptions, sample, upgrade
from mooncake_core.conductor.audit.process_writer import ProcessAuditWriter
from mooncake_core.config import AuditConfig


def fresh_db(folder: Path, name: str) -> str:
    url = f"sqlite:///{folder / name}"
    upgrade(url)
    return url


def options(**kw: object) -> WriterOptions:
    return WriterOptions.from_config(AuditConfig(), **kw)


def bench_submit(folder: Path, n: int) -> float:
    pairs = list(sample.synthetic(n, t0=1.8e9))
    w = AuditWriter.open(fresh_db(folder, "submit.db"), options(queue_max=n + 1))
    t = time.perf_counter()
    for d, c in pairs:
        w.submit(d, c)
    dt = time.perf_counter() - t
    w._q.clear()  # not written: only the call cost is measured here
    w.close()
    return dt / n * 1e9


def bench_max_rate(folder: Path, n: int) -> tuple[float, float, int]:
    pairs = list(sample.synthetic(n, t0=1.8e9))
    rows = n + sum(len(c) for _, c in pairs)
    w = AuditWriter.open(fresh_db(folder, "max.db"), options(queue_max=n + 1))
    w.start()
    t = time.perf_counter()
    for d, c in pairs:
        w.submit(d, c)
    w.close()
    dt = time.perf_counter() - t
    snap = w.snapshot()
    assert snap.written == n, snap
    return n / dt, rows / dt, snap.batches


def bench_max_rate_outcomes(folder: Path, n: int) -> float:
    """Decisions/s when every decision is followed by its outcome update."""
    pairs = list(sample.synthetic(n, t0=1.8e9))
    w = AuditWriter.open(fresh_db(folder, "outcomes.db"), options(queue_max=2 * n + 1))
    w.start()
    t = time.perf_counter()
    for d, c in pairs:
        w.submit(d, c)
        w.record_outcome(d.request_id, "completed")
    w.close()
    dt = time.perf_counter() - t
    snap = w.snapshot()
    assert snap.written == n, snap
    return n / dt


def bench_sustained(folder: Path, rate: float, seconds: float) -> dict[str, float]:
    n = int(rate * seconds)
    pairs = list(sample.synthetic(n, t0=1.8e9))
    w = AuditWriter.open(fresh_db(folder, "sustained.db"), options())
    w.start()
    peak = 0
    tick = 0.01
    per_tick = max(1, int(rate * tick))
    t0 = time.perf_counter()
    i = 0
    while i < n:
        for d, c in pairs[i : i + per_tick]:
            w.submit(d, c)
        i += per_tick
        peak = max(peak, w.snapshot().queue_depth)
        target = t0 + i / rate
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    t_sub = time.perf_counter()
    w.close()
    t_end = time.perf_counter()
    snap = w.snapshot()
    return {
        "achieved": n / (t_sub - t0),
        "written": snap.written,
        "dropped": snap.dropped,
        "peak_queue": peak,
        "drain_s": t_end - t_sub,
    }


def build_conductor(seed: int, n_prefill: int, n_decode: int):  # type: ignore[no-untyped-def]
    from mooncake_core.conductor import BlockStored, Conductor, ConductorOptions, Tier
    from mooncake_core.config.models import ConductorConfig, HashingConfig

    rng = random.Random(seed)
    prefill = [f"prefill-{i}" for i in range(n_prefill)]
    c = Conductor(
        ConductorConfig(  # type: ignore[call-arg]
            policy="kvcache_centric",
            admission="early_reject_predictive",
            ttft_slo_s=86_400,
            tbt_slo_s=86_400,
        ),
        prefill,
        {f"decode-{i}": 64 for i in range(n_decode)},
        hashing=HashingConfig(block_size=512),
        options=ConductorOptions(seed=seed),
    )
    chains = []
    key = 1
    for _ in range(1000):
        chain = list(range(key, key + 25))
        key += 25
        chains.append(chain)
        for inst in rng.sample(prefill, rng.randint(1, min(3, n_prefill))):
            c.apply(BlockStored(inst, Tier.HBM, tuple(chain[: rng.randint(1, 25)])))
    return c, chains


def decision_loop(
    m: int, writer: AuditWriter | None, seed: int, mode: str, shape: tuple[int, int]
) -> tuple[float, float]:
    """Mean seconds per decision of schedule, plus per ``mode``: ``none``, ``records``
    (to_record only), ``submit`` (to_record + submit), ``source`` (submit_source); and
    this process's CPU time (all threads) when the loop started."""
    from collections import deque

    from mooncake_core.conductor import ScheduleRequest

    c, chains = build_conductor(seed, *shape)
    rng = random.Random(seed + 1)
    reqs = []
    fresh = 10**9
    for i in range(m):
        chain = chains[min(int(rng.paretovariate(1.2)) - 1, len(chains) - 1)]
        keys = (*chain[: rng.randint(5, 25)], *range(fresh, fresh + rng.randint(0, 4)))
        fresh += 5
        reqs.append(ScheduleRequest(f"r{seed}-{i}", keys, len(keys) * 512 + 100, 300))
    inflight: deque[str] = deque()
    now = 1.8e9
    total = 0.0
    cpu0 = time.process_time()
    for req in reqs:
        t = time.perf_counter()
        d = c.schedule(req, now)
        if mode == "records":
            d.to_record()
        elif mode == "submit":
            writer.submit(*d.to_record())  # type: ignore[union-attr]
        elif mode in ("source", "process"):
            writer.submit_source(d)  # type: ignore[union-attr]
        total += time.perf_counter() - t
        now += 0.01
        if d.admitted:
            inflight.append(req.request_id)
        while len(inflight) > 64:
            rid = inflight.popleft()
            c.on_prefill_start(rid, now)
            c.on_prefill_done(rid, now)
            c.on_decode_join(rid, now)
            c.on_decode_done(rid, now)
    return total / m, cpu0


def paced_latency(
    m: int,
    rate: float,
    writer: AuditWriter | ProcessAuditWriter | None,
    seed: int,
    shape: tuple[int, int],
    mode: str,
) -> list[float]:
    """Per-decision latency (schedule + audit call) with decisions paced at ``rate``/s,
    as in a live conductor that is not saturated: the writer works between decisions."""
    from collections import deque

    from mooncake_core.conductor import ScheduleRequest

    c, chains = build_conductor(seed, *shape)
    rng = random.Random(seed + 1)
    inflight: deque[str] = deque()
    lat: list[float] = []
    now = 1.8e9
    fresh = 10**9
    start = time.perf_counter()
    for i in range(m):
        chain = chains[min(int(rng.paretovariate(1.2)) - 1, len(chains) - 1)]
        keys = (*chain[: rng.randint(5, 25)], *range(fresh, fresh + rng.randint(0, 4)))
        fresh += 5
        req = ScheduleRequest(f"p{seed}-{i}", keys, len(keys) * 512 + 100, 300)
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t = time.perf_counter()
        d = c.schedule(req, now)
        if mode == "submit":
            writer.submit(*d.to_record())  # type: ignore[union-attr]
        elif mode in ("source", "process"):
            writer.submit_source(d)  # type: ignore[union-attr]
        lat.append(time.perf_counter() - t)
        now += 1 / rate
        if d.admitted:
            inflight.append(req.request_id)
        while len(inflight) > 64:
            rid = inflight.popleft()
            c.on_prefill_start(rid, now)
            c.on_prefill_done(rid, now)
            c.on_decode_join(rid, now)
            c.on_decode_done(rid, now)
    return lat


def pct(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(q * len(ys)))]


def bench_paced(
    folder: Path, m: int, rate: float, shape: tuple[int, int]
) -> dict[str, tuple[float, float]]:
    res: dict[str, tuple[float, float]] = {}
    for mode in ("none", "submit", "source", "process"):
        w = open_writer(folder, f"paced{shape}{mode}.db", mode)
        lat = paced_latency(m, rate, w, 7, shape, mode)
        if w is not None:
            w.close()
        warm = lat[len(lat) // 10 :]
        res[mode] = (pct(warm, 0.5) * 1e6, pct(warm, 0.99) * 1e6)
    return res


def open_writer(folder: Path, name: str, mode: str) -> AuditWriter | ProcessAuditWriter | None:
    """The writer a mode uses, started: none, a thread in this process, or a process."""
    if mode in ("none", "records"):
        return None
    url = fresh_db(folder, name)
    w = (
        ProcessAuditWriter(url, options())
        if mode == "process"
        else AuditWriter.open(url, options())
    )
    w.start()
    return w


MODES = ("none", "records", "submit", "source", "process")
LOOP_LABELS = (
    ("none", "schedule only"),
    ("records", "+ to_record()"),
    ("submit", "+ submit(*to_record()), writer on"),
    ("source", "+ submit_source(decision), writer on"),
    ("process", "+ submit_source, writer process"),
)


def bench_slowdown(
    folder: Path, m: int, repeat: int, shape: tuple[int, int], modes: tuple[str, ...] = MODES
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Microseconds per decision of each mode, one value per repeat (modes interleaved):
    wall time in the loop, and this process's CPU time (every thread) from the loop's
    start until the writer is closed (its last records committed, or with the writer
    process, acknowledged)."""
    runs: dict[str, list[float]] = {mode: [] for mode in modes}
    cpu: dict[str, list[float]] = {mode: [] for mode in modes}
    for r in range(repeat):
        # Interleaved: this machine is shared, so noise hits every mode alike.
        for mode in modes:
            w = open_writer(folder, f"loop{shape}{r}{mode}.db", mode)
            t, cpu0 = decision_loop(m, w, r, mode, shape)  # type: ignore[arg-type]
            if w is not None:
                w.close()
                assert w.snapshot().written == m, w.snapshot()
            cpu[mode].append((time.process_time() - cpu0) / m * 1e6)
            runs[mode].append(t * 1e6)
    return runs, cpu


def prebuilt_decisions(m: int, shape: tuple[int, int], seed: int = 7) -> list[Any]:
    """``m`` real decisions of a conductor of ``shape`` (made before anything is timed)."""
    from mooncake_core.conductor import ScheduleRequest

    c, chains = build_conductor(seed, *shape)
    rng = random.Random(seed + 1)
    out = []
    now = 1.8e9
    for i in range(m):
        chain = chains[min(int(rng.paretovariate(1.2)) - 1, len(chains) - 1)]
        keys = (*chain[: rng.randint(5, 25)], *range(10**9 + 5 * i, 10**9 + 5 * i + 3))
        out.append(c.schedule(ScheduleRequest(f"c{seed}-{i}", keys, len(keys) * 512, 300), now))
        now += 0.01
    return out


def bench_audit_cpu(
    folder: Path, m: int, repeat: int, shape: tuple[int, int], mode: str
) -> tuple[list[float], list[float]]:
    """Measurement 6: the audit's CPU in the conductor's process, per decision, with one
    writer warmed up (as a conductor runs it): the ``submit_source`` calls (the deciding
    thread's CPU) and every thread of this process from the first call until ``flush``
    returns (the writer process's own CPU is not this process's)."""
    ds = prebuilt_decisions(m, shape)
    w = open_writer(folder, f"cpu-{mode}-{shape[0]}x{shape[1]}.db", mode)
    assert w is not None
    path, proc = [], []
    for rep in range(repeat + 2):  # two rounds warm the writer up
        c0, t0 = time.process_time(), time.thread_time()
        for d in ds:
            w.submit_source(d)
        t1 = time.thread_time()
        committed = threading.Event()
        w.when_written(lambda ok, e=committed: e.set())
        assert committed.wait(120)
        c1 = time.process_time()
        if rep >= 2:
            path.append((t1 - t0) / m * 1e6)
            proc.append((c1 - c0) / m * 1e6)
    w.close()
    return path, proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decisions", type=int, default=200_000, help="for the max-rate run")
    ap.add_argument("--rate", type=float, default=20_000.0, help="paced producer, decisions/s")
    ap.add_argument("--seconds", type=float, default=10.0, help="paced run length")
    ap.add_argument("--loop", type=int, default=3000, help="decisions per conductor loop")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--paced-rate", type=float, default=2000.0, help="decisions/s, paced loop")
    ap.add_argument("--paced-decisions", type=int, default=6000)
    ap.add_argument(
        "--loops-only", action="store_true", help="only the conductor-loop measurements (4, 5)"
    )
    ap.add_argument(
        "--audit-cpu",
        action="store_true",
        help="only measurement 6: the audit's CPU per decision in the conductor's process",
    )
    ap.add_argument(
        "--shapes", nargs="+", default=["3x1", "16x16"], help="PREFILLxDECODE instance counts"
    )
    ap.add_argument(
        "--modes",
        nargs="+",
        default=list(MODES),
        choices=MODES,
        help="conductor-loop modes to run (none is always run: the baseline)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.audit_cpu:
            audit_cpu(folder, args)
            return
        if not args.loops_only:
            write_rates(folder, args)
        loops(folder, args)


def write_rates(folder: Path, args: argparse.Namespace) -> None:
    """Measurements 1-3: the writer's own costs and rates."""
    ns = bench_submit(folder, 100_000)
    print(f"submit() alone                      {ns:10.0f} ns/call")
    dps, rps, batches = bench_max_rate(folder, args.decisions)
    print(
        f"max write rate ({args.decisions} decisions)   {dps:10.0f} decisions/s "
        f"({rps:.0f} rows/s, {batches} transactions)"
    )
    ops = bench_max_rate_outcomes(folder, args.decisions)
    print(f"max write rate, + record_outcome each   {ops:10.0f} decisions/s")
    s = bench_sustained(folder, args.rate, args.seconds)
    print(
        f"paced {args.rate:.0f}/s for {args.seconds:.0f}s          achieved {s['achieved']:.0f}/s, "
        f"written {s['written']:.0f}, dropped {s['dropped']:.0f}, peak queue "
        f"{s['peak_queue']:.0f}, final drain {s['drain_s'] * 1000:.0f} ms"
    )


def audit_cpu(folder: Path, args: argparse.Namespace) -> None:
    """Measurement 6, for each shape and each writer mode in ``--modes``."""
    for shape in args.shapes:
        p, d = (int(x) for x in shape.split("x"))
        print(
            f"audit CPU in the conductor's process ({p}P+{d}D: {p + d} candidates), "
            f"{args.repeat} x {args.loop} decisions, one writer, min / median us per decision:"
        )
        for mode in (m for m in args.modes if m in ("source", "process")):
            path, proc = bench_audit_cpu(folder, args.loop, args.repeat, (p, d), mode)
            print(
                f"  {mode:<8} deciding thread {min(path):6.2f} / {statistics.median(path):6.2f}"
                f"   every thread {min(proc):6.2f} / {statistics.median(proc):6.2f}"
            )


def loops(folder: Path, args: argparse.Namespace) -> None:
    """Measurements 4-5: what the audit costs the conductor's decision loop."""
    for shape in args.shapes:
        p, d = (int(x) for x in shape.split("x"))
        modes = ("none", *(m for m in args.modes if m != "none"))
        sl, cpu = bench_slowdown(folder, args.loop, args.repeat, (p, d), modes)
        print(
            f"conductor loop ({p} prefill + {d} decode: {p + d} candidates/decision, "
            f"kvcache_centric), best of {args.repeat} x {args.loop} decisions:"
        )
        best = {k: min(v) for k, v in sl.items()}
        med = {k: statistics.median(v) for k, v in sl.items()}
        cmed = {k: statistics.median(v) for k, v in cpu.items()}
        print(f"  {'':<38} {'best':>8}            {'median':>8}")
        for mode, label in LOOP_LABELS:
            if mode not in sl:
                continue
            print(
                f"  {label:<38} {best[mode]:8.1f} us {(best[mode] / best['none'] - 1) * 100:+6.1f} %"
                f"  {med[mode]:8.1f} us {(med[mode] / med['none'] - 1) * 100:+6.1f} %"
            )
        for mode in ("source", "process"):
            if mode not in sl:
                continue
            ratios = [x / n - 1 for x, n in zip(sl[mode], sl["none"], strict=True)]
            print(
                f"  {mode}, per repeat: "
                + ", ".join(f"{r * 100:+.1f}%" for r in ratios)
                + f"; median {statistics.median(ratios) * 100:+.1f}%"
            )
        print("  this process's CPU per decision (every thread, until the writer closed), median:")
        for mode in sl:
            print(
                f"    {mode:<8} {cmed[mode]:8.1f} us "
                f"{(cmed[mode] / cmed['none'] - 1) * 100:+6.1f} %"
            )

    if args.paced_decisions <= 0:
        return
    for shape in args.shapes:
        p, d = (int(x) for x in shape.split("x"))
        pr = bench_paced(folder, args.paced_decisions, args.paced_rate, (p, d))
        print(
            f"paced conductor ({p}P+{d}D, {args.paced_rate:.0f} decisions/s, "
            f"{args.paced_decisions} decisions): latency of schedule + audit call"
        )
        for mode, label in (
            ("none", "no audit"),
            ("submit", "submit(*to_record()), writer on"),
            ("source", "submit_source(decision), writer on"),
            ("process", "submit_source, writer process"),
        ):
            p50, p99 = pr[mode]
            print(f"  {label:<38} p50 {p50:8.1f} us   p99 {p99:8.1f} us")


if __name__ == "__main__":
    main()
