"""`mooncake audit`: why did the scheduler do that? List, show, explain, stats, export."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.markup import escape
from rich.table import Table

from .common import ConfigOption, JsonOption, err, fail, load, out, write_stdout
from .db_cmd import UrlOption, audit_url
from .tables import print_table

if TYPE_CHECKING:
    from mooncake_core.conductor.audit import AuditReader, DecisionFilter

app = typer.Typer(
    help="Scheduling audit: list, show, explain and aggregate conductor decisions.",
    no_args_is_help=True,
)

SinceOption = Annotated[
    str | None,
    typer.Option("--since", help="From this time: ISO 8601 (UTC) or relative like 10m, 2h, 1d."),
]
UntilOption = Annotated[
    str | None, typer.Option("--until", help="Up to this time (same syntax as --since).")
]
RequestOption = Annotated[str | None, typer.Option("--request", help="Only this request id.")]
InstanceOption = Annotated[
    str | None,
    typer.Option("--instance", help="Only decisions that chose this prefill or decode instance."),
]
PolicyOption = Annotated[str | None, typer.Option("--policy", help="Only this scheduling policy.")]
RejectedOption = Annotated[bool, typer.Option("--rejected", help="Only rejected requests.")]
OutcomeOption = Annotated[
    str | None,
    typer.Option(
        "--outcome",
        help="Only requests that ended this way: completed, rejected, failed, cancelled, "
        "or unknown (no outcome recorded: still running, or an older row).",
    ),
]


def _open(url: str | None, config: Path | None) -> AuditReader:
    from mooncake_core.conductor.audit import AuditReader, SchemaError

    target = audit_url(url, config)
    # Say which database this is: with the conductor on another host, a sqlite file
    # here is not the one it writes.
    err.print(f"audit database: {_shown(target)}", markup=False, highlight=False)
    if url is None and target.startswith("sqlite"):
        cfg = load(config)
        try:
            remote = cfg.host(cfg.conductor.host).ssh_user is not None
        except KeyError:
            remote = False
        if remote:
            err.print(
                f"note: the conductor runs on host {cfg.conductor.host!r}; this sqlite file "
                "is the one on this host (name a shared database in audit.url)",
                markup=False,
                highlight=False,
            )
    try:
        return AuditReader.open(target)
    except SchemaError as exc:
        fail(str(exc))
    except Exception as exc:  # bad URL, driver missing, unreachable server
        fail(f"cannot open audit database {target}: {exc}")


def _shown(url: str) -> str:
    """``url`` with any password hidden."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def _filter(
    since: str | None,
    until: str | None,
    request: str | None = None,
    instance: str | None = None,
    policy: str | None = None,
    rejected: bool = False,
    limit: int | None = None,
    offset: int = 0,
    outcome: str | None = None,
) -> DecisionFilter:
    from mooncake_core.conductor.audit import DecisionFilter, parse_when

    now = time.time()
    try:
        return DecisionFilter(
            since=None if since is None else parse_when(since, now),
            until=None if until is None else parse_when(until, now),
            request_id=request,
            instance=instance,
            policy=policy,
            rejected_only=rejected,
            limit=limit,
            offset=offset,
            outcome=outcome,
        )
    except ValueError as exc:
        fail(str(exc), code=2)


_BIAS_CAPTION = (
    "TTFT error = actual - predicted; bias = its mean (+: took longer than predicted); "
    "rel err = |actual - predicted| / actual"
)


def _rate(x: float | None) -> str:
    from mooncake_core.fmt import pct

    return pct(x, 1)


def _s(x: float | None) -> str:
    from mooncake_core.fmt import seconds

    return seconds(x)


@app.command("ls")
def ls(
    url: UrlOption = None,
    config: ConfigOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    request: RequestOption = None,
    instance: InstanceOption = None,
    policy: PolicyOption = None,
    rejected: RejectedOption = False,
    outcome: OutcomeOption = None,
    limit: Annotated[int, typer.Option("--limit", min=0, help="At most this many rows.")] = 50,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Skip this many rows.")] = 0,
    as_json: JsonOption = False,
) -> None:
    """List decisions, newest first."""
    from mooncake_core.conductor.audit import format_time

    flt = _filter(since, until, request, instance, policy, rejected, limit, offset, outcome)
    with _open(url, config) as reader:
        rows = reader.find(flt)
        # Counting scans the whole selection; skip it when this page is the last one.
        full_page = limit and len(rows) == limit
        total = reader.count(flt) if full_page else offset + len(rows)
    if as_json:
        write_stdout(
            json.dumps(
                [
                    {
                        "id": r.id,
                        **asdict(r.decision),
                        "matched_prefix_blocks": r.matched_prefix_blocks,
                    }
                    for r in rows
                ]
            )
        )
        return
    table = Table(title=f"audit decisions ({len(rows)} of {total})", title_justify="left")
    for name, justify in (
        ("time (UTC)", "left"),
        ("request", "left"),
        ("policy", "left"),
        ("prefill", "left"),
        ("decode", "left"),
        ("hit", "right"),
        ("TTFT pred", "right"),
        ("TTFT actual", "right"),
        ("TBT pred", "right"),
        ("outcome", "left"),
        ("result", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        d = r.decision
        hit = (
            "-"
            if r.matched_prefix_blocks is None
            else f"{r.matched_prefix_blocks}/{d.prompt_blocks}"
        )
        if not d.admitted:
            result = f"[red]rejected[/]: {escape(d.reject_reason or '')}"
        elif d.outcome not in (None, "completed") and d.outcome_detail:
            # Admitted, then it went wrong: say why here, where "ok" would mislead.
            result = f"admitted; {escape(d.outcome_detail)}"
        else:
            result = "[green]ok[/]"
        if d.migration_source:
            result += f" (+{d.migration_blocks} blocks from {escape(d.migration_source)})"
        table.add_row(
            format_time(d.time),
            escape(d.request_id),
            escape(d.policy),
            escape(d.chosen_prefill or "-"),
            escape(d.chosen_decode or "-"),
            hit,
            _s(d.predicted_ttft_s),
            _s(d.actual_ttft_s),
            _s(d.predicted_tbt_s),
            _outcome_cell(d.outcome),
            result,
        )
    print_table(out, table, ("request", "prefill", "decode"))


_OUTCOME_STYLE = {"completed": "green", "rejected": "yellow", "failed": "red", "cancelled": "dim"}


def _outcome_cell(outcome: str | None) -> str:
    """The outcome code, coloured; ``-`` when none was recorded."""
    if outcome is None:
        return "-"
    style = _OUTCOME_STYLE.get(outcome)
    return f"[{style}]{escape(outcome)}[/]" if style else escape(outcome)


def _outcome_text(outcome: str | None, detail: str | None) -> str:
    """``failed: <detail>``, ``completed``, or ``unknown (...)`` for ``show``."""
    if outcome is None:
        return "unknown (still running, or recorded before outcomes were kept)"
    return f"{outcome}: {detail}" if detail else outcome


@app.command("show")
def show(
    request: Annotated[str, typer.Argument(help="Request id.", show_default=False)],
    url: UrlOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a request's latest decision and every candidate it considered."""
    from mooncake_core.conductor.audit import format_time

    with _open(url, config) as reader:
        entry = reader.get(request)
    if entry is None:
        fail(f"no decision recorded for request {request!r}")
    d = entry.decision
    if as_json:
        write_stdout(
            json.dumps(
                {"id": entry.id, **asdict(d), "candidates": [asdict(c) for c in entry.candidates]}
            )
        )
        return
    head = Table(title=f"decision #{entry.id} for {escape(d.request_id)}", show_header=False)
    head.add_column("field", style="bold")
    head.add_column("value")
    fields: list[tuple[str, str]] = [
        ("time", format_time(d.time)),
        ("policy", d.policy),
        ("prompt", f"{d.prompt_tokens} tokens, {d.prompt_blocks} blocks"),
        ("first block key", f"{d.first_block_key or '-'} ({d.block_key_count} keys)"),
        ("prefill", d.chosen_prefill or "-"),
        ("decode", d.chosen_decode or "-"),
        ("TTFT", f"predicted {_s(d.predicted_ttft_s)}, actual {_s(d.actual_ttft_s)}"),
        ("TBT", f"predicted {_s(d.predicted_tbt_s)}, actual {_s(d.actual_tbt_s)}"),
        ("admitted", "yes" if d.admitted else f"no: {d.reject_reason or '-'}"),
        ("outcome", _outcome_text(d.outcome, d.outcome_detail)),
    ]
    if not d.admitted and d.retry_after_s is not None:
        fields.append(("retry after", _s(d.retry_after_s)))
    if d.migration_source:
        fields.append(("migration", f"{d.migration_blocks} blocks from {d.migration_source}"))
    for k, v in fields:
        head.add_row(k, escape(v))
    print_table(out, head, ("field",))

    cands = Table(title="candidates", title_justify="left")
    for name in (
        "",
        "instance",
        "role",
        "prefix hit",
        "fetch",
        "queue",
        "prefill",
        "TTFT",
        "TBT",
        "why not",
    ):
        cands.add_column(
            name, justify="left" if name in ("instance", "role", "why not") else "right"
        )
    for c in entry.candidates:
        cands.add_row(
            "[green]*[/]" if c.chosen else "",
            escape(c.instance),
            c.role,
            f"{c.matched_prefix_blocks}/{d.prompt_blocks}" if c.role == "prefill" else "-",
            f"{c.transfer_blocks} ({_s(c.transfer_time_s)})" if c.transfer_blocks else "-",
            _s(c.queue_time_s) if c.role == "prefill" else "-",
            _s(c.prefill_time_s) if c.role == "prefill" else "-",
            _s(c.predicted_ttft_s),
            _s(c.predicted_tbt_s),
            escape(c.why_not or ""),
        )
    print_table(out, cands, ("instance",))


@app.command("explain")
def explain(
    request: Annotated[str, typer.Argument(help="Request id.", show_default=False)],
    url: UrlOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Say in one paragraph why the request went where it did, with the numbers."""
    with _open(url, config) as reader:
        text = reader.explain(request)
    if text is None:
        fail(f"no decision recorded for request {request!r}")
    if as_json:
        write_stdout(json.dumps({"request_id": request, "explanation": text}))
    else:
        write_stdout(text)


@app.command("stats")
def stats(
    url: UrlOption = None,
    config: ConfigOption = None,
    bucket: Annotated[str, typer.Option("--bucket", help="Bucket width: 30s, 1m, 1h...")] = "1m",
    since: SinceOption = None,
    until: UntilOption = None,
    instance: InstanceOption = None,
    policy: PolicyOption = None,
    outcome: OutcomeOption = None,
    as_json: JsonOption = False,
) -> None:
    """Prediction error, prefix hit rate, rejection rate and outcomes over time."""
    from mooncake_core.conductor.audit import format_time, parse_duration
    from mooncake_core.fmt import signed_seconds

    try:
        bucket_s = parse_duration(bucket)
    except ValueError as exc:
        fail(str(exc), code=2)
    flt = _filter(since, until, instance=instance, policy=policy, outcome=outcome)
    with _open(url, config) as reader:
        st = reader.stats(bucket_s, flt)
    if as_json:
        write_stdout(json.dumps(asdict(st)))
        return
    caption = _BIAS_CAPTION
    if st.ttft_rel_p50 is not None:
        caption += (
            f"\nTTFT rel err over {st.total.measured} measured: median {_rate(st.ttft_rel_p50)},"
            f" p90 {_rate(st.ttft_rel_p90)}"
        )
        if st.model_ttft_rel_p50 is not None:
            caption += (
                f"; uncalibrated models over {st.model_measured}: median "
                f"{_rate(st.model_ttft_rel_p50)}, p90 {_rate(st.model_ttft_rel_p90)}"
            )
    table = Table(
        title=f"audit stats per {bucket}",
        title_justify="left",
        caption=caption,
        caption_justify="left",
    )
    for name in (
        "bucket (UTC)",
        "decisions",
        "rejected",
        "reject rate",
        "completed",
        "rejected later",
        "failed",
        "cancelled",
        "unknown",
        "prefix hit rate",
        "measured",
        "TTFT MAE",
        "TTFT rel err",
        "TTFT bias",
    ):
        table.add_column(
            name, justify="left" if name.startswith("bucket") else "right", no_wrap=True
        )

    def row(label: str, b: Any) -> None:
        table.add_row(
            label,
            str(b.decisions),
            str(b.rejected),
            _rate(b.rejection_rate if b.decisions else None),
            str(b.outcome_completed),
            str(b.outcome_rejected_late),
            str(b.outcome_failed),
            str(b.outcome_cancelled),
            str(b.outcome_unknown),
            _rate(b.hit_rate)
            + (f" ({b.matched_blocks}/{b.prompt_blocks})" if b.prompt_blocks else ""),
            str(b.measured),
            _s(b.ttft_mae_s),
            _rate(b.ttft_mre),
            signed_seconds(b.ttft_bias_s),
        )

    for b in st.buckets:
        row(format_time(b.start), b)
    table.add_section()
    row("total", st.total)
    print_table(out, table, ("bucket (UTC)",))


@app.command("export")
def export(
    fmt: Annotated[
        str, typer.Option("--format", help="csv (decisions) or jsonl (with candidates).")
    ] = "jsonl",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
    url: UrlOption = None,
    config: ConfigOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    request: RequestOption = None,
    instance: InstanceOption = None,
    policy: PolicyOption = None,
    rejected: RejectedOption = False,
    outcome: OutcomeOption = None,
) -> None:
    """Stream decisions, oldest first, as CSV or JSON lines."""
    if fmt not in ("csv", "jsonl"):
        fail(f"--format must be csv or jsonl, got {fmt!r}", code=2)
    fmt_lit: Literal["csv", "jsonl"] = "csv" if fmt == "csv" else "jsonl"
    flt = _filter(since, until, request, instance, policy, rejected, outcome=outcome)
    with _open(url, config) as reader:
        if output is None:
            n = reader.export(sys.stdout, fmt_lit, flt)
            sys.stdout.flush()
        else:
            with output.open("w", newline="", encoding="utf-8") as fh:
                n = reader.export(fh, fmt_lit, flt)
    if output is None:
        return
    err.print(f"wrote {n} decisions to {output}", highlight=False)
