"""`mooncake sim`: replay traces through the real Conductor in a simulated cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .common import JsonOption, err, fail, out, write_stdout

if TYPE_CHECKING:
    from mooncake_core.sim.config import SimConfig
    from mooncake_core.sim.experiments import ExperimentOptions, Report

app = typer.Typer(
    help="Simulate the cluster on a request trace: policies, admission, cache sizes, P:D splits.",
    no_args_is_help=True,
)

TraceOpt = Annotated[
    Path | None,
    typer.Option(
        "--trace",
        help="JSONL trace in the public Mooncake format (default: the shared conversation "
        "trace, or $MOONCAKE_TRACE).",
        show_default=False,
    ),
]
SpeedOpt = Annotated[
    float | None,
    typer.Option(
        "--speed", help="Replay speed: 2 replays twice as fast (default: the experiment's)."
    ),
]
SampleOpt = Annotated[
    str | None,
    typer.Option("--sample", help="first:N, every:K or fraction:F (default: whole trace)."),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of sampling and the random policy.")]
OutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out", help="Report folder (default: reports/<experiment>).", show_default=False
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="FIELD=VALUE applied to the base config (repeatable), e.g. conductor.policy=random.",
    ),
]
ProfileOpt = Annotated[str, typer.Option("--profile", help="Cost profile name or JSON path.")]


def _options(
    trace: Path | None,
    speed: float | None,
    sample: str | None,
    seed: int,
    out_dir: Path | None,
    profile: str,
) -> ExperimentOptions:
    from mooncake_core.sim.experiments import ExperimentOptions, default_trace
    from mooncake_core.sim.trace import parse_sample

    path = trace or default_trace()
    if path is None:
        fail("no trace found: pass --trace PATH (or set MOONCAKE_TRACE)")
    if not path.is_file():
        fail(f"--trace {path}: no such file")
    if speed is not None and not speed > 0:
        fail(f"--speed must be > 0, got {speed}")
    try:
        parse_sample(sample)
    except ValueError as e:
        fail(f"--sample: {e}")
    return ExperimentOptions(path, speed, sample, seed, out_dir, profile)


def _run(
    fn_name: str, opts: ExperimentOptions, as_json: bool, doc: Path | None = None, **kw: object
) -> None:
    from mooncake_core.sim import TraceError
    from mooncake_core.sim import experiments as ex

    fn = getattr(ex, fn_name)
    if doc is not None and not doc.is_file():
        fail(f"--doc {doc}: no such file")
    try:
        report: Report = fn(opts, **kw)
        if doc is not None:
            ex.splice_report(doc, report)
            err.print(f"wrote the table into {doc}", highlight=False)
    except TraceError as e:
        fail(f"bad trace: {e}")
    except (ValueError, OSError) as e:
        fail(str(e))
    if as_json:
        write_stdout(json.dumps(report.rows, indent=2, default=str))
    else:
        write_stdout(report.markdown)
    err.print(f"wrote {', '.join(str(p) for p in report.files)}", highlight=False)


def _pairs(settings: list[str] | None) -> list[tuple[str, str]]:
    """``--set FIELD=VALUE`` items as pairs (exits on a malformed one)."""
    pairs = []
    for item in settings or []:
        key, sep, value = item.partition("=")
        if not sep:
            fail(f"--set {item!r}: expected FIELD=VALUE")
        pairs.append((key.strip(), value.strip()))
    return pairs


@app.command("fig5")
def fig5(
    trace: TraceOpt = None,
    speed: SpeedOpt = None,
    sample: SampleOpt = None,
    seed: SeedOpt = 0,
    out_dir: OutOpt = None,
    profile: ProfileOpt = "llama3_70b_a800",
    as_json: JsonOption = False,
) -> None:
    """Average and p90 TTFT of random, load_balance, cache_aware, kvcache_centric, adaptive."""
    opts = _options(trace, speed, sample, seed, out_dir, profile)
    _run("run_fig5", opts, as_json)


@app.command("rejection")
def rejection(
    trace: TraceOpt = None,
    speed: SpeedOpt = None,
    sample: SampleOpt = None,
    seed: SeedOpt = 0,
    out_dir: OutOpt = None,
    profile: ProfileOpt = "llama3_70b_a800",
    settings: SetOpt = None,
    as_json: JsonOption = False,
) -> None:
    """Rejections of baseline, early_reject and early_reject_predictive (8P+8D, 2x replay)."""
    opts = _options(trace, speed, sample, seed, out_dir, profile)
    _run("run_rejection", opts, as_json, settings=_pairs(settings))


@app.command("hitrate")
def hitrate(
    trace: TraceOpt = None,
    speed: SpeedOpt = None,
    sample: SampleOpt = None,
    seed: SeedOpt = 0,
    out_dir: OutOpt = None,
    profile: ProfileOpt = "llama3_70b_a800",
    capacities: Annotated[
        str, typer.Option("--capacities", help="Comma-separated total capacities in tokens.")
    ] = "1e4,1e5,1e6,3e6,1e7,3e7,5e7,1e8",
    instances: Annotated[int, typer.Option("--instances", help="Prefill instances.")] = 16,
    as_json: JsonOption = False,
) -> None:
    """Prefix hit rate vs cache capacity: local per-instance vs global pool."""
    try:
        caps = [int(float(c)) for c in capacities.split(",") if c.strip()]
    except ValueError:
        fail(f"--capacities: expected numbers like 1e6,3e6, got {capacities!r}")
    if not caps or min(caps) < 0 or instances < 1:
        fail("--capacities needs non-negative numbers and --instances >= 1")
    opts = _options(trace, speed, sample, seed, out_dir, profile)
    _run(
        "run_hitrate",
        opts,
        as_json,
        capacities=caps,
        instances=instances,
        command=opts.command_line(
            "hitrate", f"--capacities {capacities}", f"--instances {instances}"
        ),
    )


@app.command("pd_ratio")
def pd_ratio(
    trace: TraceOpt = None,
    speed: SpeedOpt = None,
    sample: SampleOpt = None,
    seed: SeedOpt = 0,
    out_dir: OutOpt = None,
    profile: ProfileOpt = "llama3_70b_a800",
    nodes: Annotated[int, typer.Option("--nodes", help="Total nodes split between P and D.")] = 16,
    as_json: JsonOption = False,
) -> None:
    """Goodput as the prefill:decode split varies at a fixed node count."""
    if nodes < 2:
        fail(f"--nodes must be >= 2, got {nodes}")
    opts = _options(trace, speed, sample, seed, out_dir, profile)
    _run(
        "run_pd_ratio",
        opts,
        as_json,
        nodes=nodes,
    )


def _base_config(
    profile: str, seed: int, settings: list[str] | None, prefill: int, decode: int
) -> SimConfig:
    from mooncake_core.sim.config import SimConfig, set_field

    try:
        cfg = SimConfig(
            prefill_instances=prefill, decode_instances=decode, profile=profile, seed=seed
        )
        for item in settings or []:
            key, sep, value = item.partition("=")
            if not sep:
                fail(f"--set {item!r}: expected FIELD=VALUE")
            cfg = set_field(cfg, key.strip(), value.strip())
    except ValueError as e:
        fail(str(e))
    return cfg


PrefillOpt = Annotated[int, typer.Option("--prefill", help="Prefill instances.")]
DecodeOpt = Annotated[int, typer.Option("--decode", help="Decode instances.")]


@app.command("sweep")
def sweep(
    field: Annotated[
        str,
        typer.Option("--field", help="Config field, e.g. conductor.kvcache_balancing_threshold."),
    ],
    values: Annotated[str, typer.Option("--values", help="Comma-separated values.")],
    trace: TraceOpt = None,
    speed: SpeedOpt = None,
    sample: SampleOpt = None,
    seed: SeedOpt = 0,
    out_dir: OutOpt = None,
    profile: ProfileOpt = "llama3_70b_a800",
    settings: SetOpt = None,
    prefill: PrefillOpt = 16,
    decode: DecodeOpt = 16,
    as_json: JsonOption = False,
) -> None:
    """Run one config over a list of values of any field and tabulate the results."""
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not vals:
        fail("--values needs at least one value")
    opts = _options(trace, speed, sample, seed, out_dir, profile)
    base = _base_config(profile, seed, settings, prefill, decode)
    cmd = opts.command_line(
        "sweep",
        f"--field {field}",
        f"--values {values}",
        f"--prefill {prefill}",
        f"--decode {decode}",
        *(f"--set {s}" for s in settings or []),
    )
    _run("run_sweep", opts, as_json, field=field, values=vals, base=base, command=cmd)


@app.command("run")
def run(
    trace: TraceOpt = None,
    speed: SpeedOpt = None,
    sample: SampleOpt = None,
    seed: SeedOpt = 0,
    profile: ProfileOpt = "llama3_70b_a800",
    settings: SetOpt = None,
    prefill: PrefillOpt = 16,
    decode: DecodeOpt = 16,
    policy: Annotated[str | None, typer.Option("--policy", help="Scheduling policy.")] = None,
    admission: Annotated[
        str | None, typer.Option("--admission", help="Admission strategy.")
    ] = None,
    per_request: Annotated[
        Path | None,
        typer.Option("--per-request", help="Also write one CSV row per request to this file."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Simulate one config and print its summary."""
    from mooncake_core.sim import TraceError, lower_bound_avg_ttft
    from mooncake_core.sim.config import set_field
    from mooncake_core.sim.experiments import run_one

    opts = _options(trace, speed, sample, seed, None, profile)
    cfg = _base_config(profile, seed, settings, prefill, decode)
    try:
        if policy is not None:
            cfg = set_field(cfg, "conductor.policy", policy)
        if admission is not None:
            cfg = set_field(cfg, "conductor.admission", admission)
        trace_reqs = opts.load()
        summary, res = run_one(trace_reqs, cfg)
    except TraceError as e:
        fail(f"bad trace: {e}")
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    if per_request is not None:
        try:
            res.write_csv(per_request)
        except OSError as e:
            fail(f"--per-request {per_request}: {e.strerror or e}")
        err.print(f"wrote {per_request}", highlight=False)
    data = summary.as_dict()
    # Beside the policy's average TTFT: what no policy can beat on this trace and profile.
    bound = lower_bound_avg_ttft(trace_reqs, cfg)
    data["lower_bound_avg_ttft_s"] = bound
    data["vs_bound"] = summary.avg_ttft_s / bound if bound > 0 else float("nan")
    data["wall_s"] = round(res.wall_s, 3)
    data["requests_per_s"] = round(len(trace_reqs) / res.wall_s, 1) if res.wall_s > 0 else None
    if as_json:
        write_stdout(json.dumps(data, indent=2, default=str))
        return
    from rich.table import Table

    c = cfg.conductor
    t = Table(
        title=f"{cfg.prefill_instances}P+{cfg.decode_instances}D policy={c.policy} "
        f"admission={c.admission} threshold={c.kvcache_balancing_threshold:g}"
    )
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k, v in data.items():
        t.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
    out.print(t)


@app.command("grid")
def grid(
    trace: TraceOpt = None,
    sample: SampleOpt = None,
    seed: SeedOpt = 0,
    out_dir: OutOpt = None,
    profile: ProfileOpt = "llama3_70b_a800",
    speeds: Annotated[str, typer.Option("--speeds", help="Comma-separated replay speeds.")] = (
        "1,2,3,4"
    ),
    gbps: Annotated[
        str, typer.Option("--gbps", help="Comma-separated node link speeds in Gbit/s.")
    ] = "10,25,100",
    policies: Annotated[
        str,
        typer.Option("--policies", help="Comma-separated policies; the first is the reference."),
    ] = "kvcache_centric,adaptive",
    decode: Annotated[
        str, typer.Option("--decode", help="Comma-separated decode simulation: off, on or both.")
    ] = "off,on",
    settings: SetOpt = None,
    doc: Annotated[
        Path | None,
        typer.Option(
            "--doc",
            help="Also write the table into this markdown file, between its "
            "'<!-- report:grid begin -->' and '<!-- report:grid end -->' lines.",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Policies over speed x node bandwidth x decode on/off, with the no-queue lower bound."""
    try:
        sp = [float(v) for v in speeds.split(",") if v.strip()]
        gb = [float(v) for v in gbps.split(",") if v.strip()]
    except ValueError:
        fail(f"--speeds/--gbps: expected comma-separated numbers, got {speeds!r}, {gbps!r}")
    if not sp or not gb or any(not v > 0 for v in sp + gb):
        fail("--speeds and --gbps need positive numbers")
    pols = [p.strip() for p in policies.split(",") if p.strip()]
    modes = [v.strip() for v in decode.split(",") if v.strip()]
    if not modes or any(m not in ("on", "off") for m in modes):
        fail(f"--decode: expected a comma-separated list of on/off, got {decode!r}")
    opts = _options(trace, None, sample, seed, out_dir, profile)
    _run(
        "run_grid",
        opts,
        as_json,
        speeds=sp,
        gbps=gb,
        decode=[m == "on" for m in modes],
        policies=pols,
        settings=_pairs(settings),
        doc=doc,
    )
