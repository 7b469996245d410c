"""`mooncake loadgen`: replay a trace (scaled to the tiny model) against the front door."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import ConfigOption, JsonOption, err, fail, load, out, write_stdout

HELP = "Replay a trace or a synthetic prefix-heavy workload against the front door."


def loadgen(
    trace: Annotated[
        Path | None,
        typer.Option("--trace", help="JSONL trace (public format); default: synthetic workload."),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option("--url", help="Front door URL (default: the config's conductor)."),
    ] = None,
    config: ConfigOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Requests to send.")] = 100,
    divisor: Annotated[
        int, typer.Option("--divisor", min=1, help="Trace lengths (and 512-token blocks) / this.")
    ] = 32,
    max_output: Annotated[int, typer.Option("--max-output", min=1, help="Output cap.")] = 32,
    speed: Annotated[float, typer.Option("--speed", min=0.001, help="Replay speed.")] = 1.0,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="Most requests open at once.")
    ] = 16,
    rate: Annotated[
        float, typer.Option("--rate", min=0.001, help="Synthetic: requests per second.")
    ] = 10.0,
    prefixes: Annotated[int, typer.Option("--prefixes", min=1, help="Synthetic: prefixes.")] = 4,
    prefix_tokens: Annotated[
        int, typer.Option("--prefix-tokens", min=1, help="Synthetic: shared prefix length.")
    ] = 256,
    suffix_tokens: Annotated[
        int, typer.Option("--suffix-tokens", min=1, help="Synthetic: unique suffix length.")
    ] = 32,
    seed: Annotated[int, typer.Option("--seed", help="Synthetic workload seed.")] = 0,
    as_json: JsonOption = False,
) -> None:
    """Send the workload, then print TTFT/TBT percentiles, hit rate, rejections, goodput."""
    import asyncio
    import json

    from mooncake_core.loadgen import (
        LoadOptions,
        run_load,
        scale_trace,
        synthetic_prefix_workload,
    )

    cfg = load(config)
    if url is None:
        url = f"http://{cfg.host(cfg.conductor.host).address}:{cfg.conductor.http_port}"
    max_input = max(1, cfg.model.max_seq_len - max_output - 1)
    try:
        if trace is not None:
            from mooncake_core.sim.trace import TraceError, load_trace

            try:
                reqs = load_trace(trace, sample=f"first:{limit}")
            except (OSError, TraceError) as exc:
                fail(f"cannot read trace {trace}: {exc}")
            work = scale_trace(reqs, divisor=divisor, max_input=max_input, max_output=max_output)
        else:
            work = synthetic_prefix_workload(
                limit,
                prefixes=prefixes,
                prefix_tokens=min(prefix_tokens, max_input - suffix_tokens),
                suffix_tokens=suffix_tokens,
                max_tokens=max_output,
                rate=rate,
                seed=seed,
            )
    except ValueError as exc:
        fail(str(exc))
    opts = LoadOptions(
        url=url.rstrip("/"),
        concurrency=concurrency,
        speed=speed,
        ttft_slo_s=cfg.conductor.ttft_slo_s,
        tbt_slo_s=cfg.conductor.tbt_slo_s,
    )
    err.print(f"loadgen: {len(work)} requests -> {opts.url}", highlight=False, markup=False)
    report = asyncio.run(run_load(work, opts))
    if as_json:
        write_stdout(json.dumps(report.to_dict()))
        return
    from rich.table import Table

    from mooncake_core.fmt import pct, seconds

    t = Table(title="loadgen")
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("requests / completed", f"{report.requests} / {report.completed}")
    t.add_row("rejected (429) / errors", f"{report.rejected} / {report.errors}")
    t.add_row(
        "TTFT mean / p50 / p90 / p99",
        " / ".join(
            seconds(v)
            for v in (report.ttft_mean_s, report.ttft_p50_s, report.ttft_p90_s, report.ttft_p99_s)
        ),
    )
    t.add_row(
        "TBT mean / p50 / p90 / p99",
        " / ".join(
            seconds(v)
            for v in (report.tbt_mean_s, report.tbt_p50_s, report.tbt_p90_s, report.tbt_p99_s)
        ),
    )
    t.add_row("prefix hit rate", pct(report.hit_rate, 1))
    t.add_row("goodput", f"{report.goodput_rps:.2f} req/s ({report.slo_met} met SLOs)")
    t.add_row("statuses", ", ".join(f"{k} {v}" for k, v in sorted(report.statuses.items())))
    t.add_row("wall time", f"{report.wall_s:.1f} s")
    out.print(t)
