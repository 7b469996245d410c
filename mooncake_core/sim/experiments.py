"""The paper's experiments, each one function that writes a markdown table and PNG plots.

Every experiment replays a trace through :func:`~mooncake_core.sim.engine.simulate` with
the paper's cluster shape and writes into its report folder (``reports/<name>/`` by
default): ``<name>.md`` (the table, with the paper's numbers beside ours where the paper
has them), ``results.json`` (the same rows, for scripts) and the plots.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mooncake_core.sim import plots
from mooncake_core.sim.bound import lower_bound_avg_ttft
from mooncake_core.sim.cache import BlockLRU
from mooncake_core.sim.config import SimConfig, set_field
from mooncake_core.sim.engine import simulate
from mooncake_core.sim.results import SimResult, Summary
from mooncake_core.sim.trace import TraceRequest, load_trace

__all__ = [
    "PAPER",
    "PAPER_TRACE_SHA256",
    "ExperimentOptions",
    "Report",
    "default_trace",
    "is_paper_trace",
    "lower_bound_avg_ttft",
    "run_fig5",
    "run_grid",
    "run_hitrate",
    "run_one",
    "run_pd_ratio",
    "run_rejection",
    "run_sweep",
    "splice_report",
]

PAPER: dict[str, dict[str, float]] = {
    # FAST'25 Fig. 5: average TTFT (s) of the prefill scheduling policies, 16 prefill nodes.
    "fig5_avg_ttft_s": {
        "random": 19.65,
        "load_balance": 5.27,
        "cache_aware": 3.58,
        "kvcache_centric": 3.07,
    },
    # Rejected requests on 8P+8D at 2x replay (paper section 7 / arXiv Fig. 10 text).
    "rejections": {"baseline": 4183, "early_reject": 3771, "early_reject_predictive": 3589},
}
"""Numbers quoted from the paper (DESIGN.md section 2), shown beside ours.

Only beside a replay of the trace the paper used, at the paper's setting
(:func:`is_paper_trace` and each experiment's own check): next to another trace they
would compare different workloads.
"""

PAPER_TRACE_SHA256 = "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df"
"""SHA-256 of the FAST'25 conversation trace (``traces/conversation_trace.jsonl`` of the
public release, 12,031 requests): the trace the paper's Fig. 5 replayed."""

_POLICIES = ("random", "load_balance", "cache_aware", "kvcache_centric", "adaptive")
_ADMISSIONS = ("baseline", "early_reject", "early_reject_predictive")


def is_paper_trace(path: Path) -> bool:
    """Whether ``path`` holds the FAST'25 conversation trace, byte for byte."""
    try:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return False
    return digest == PAPER_TRACE_SHA256


def default_trace() -> Path | None:
    """The trace to use when none is given, or ``None``.

    ``$MOONCAKE_TRACE`` when set (only it: a wrong path is not silently replaced);
    otherwise the shared conversation trace at ``../shared/traces/`` relative to the
    working directory or to the repository, or under ``/work/shared``.
    """
    env = os.environ.get("MOONCAKE_TRACE")
    if env:
        return Path(env) if Path(env).is_file() else None
    here = Path(__file__).resolve().parents[2]
    candidates = [
        Path.cwd().parent / "shared/traces/conversation_trace.jsonl",
        here.parent / "shared/traces/conversation_trace.jsonl",
        Path("/work/shared/traces/conversation_trace.jsonl"),
    ]
    return next((p for p in candidates if p.is_file()), None)


@dataclass(frozen=True)
class ExperimentOptions:
    """Inputs shared by every experiment.

    Attributes:
        trace: JSONL trace file.
        speed: replay speed (``None``: the experiment's paper setting).
        sample: ``first:N``, ``every:K``, ``fraction:F`` or ``None`` (all).
        seed: seed of sampling and of the random policy.
        out: report folder (``None``: ``reports/<experiment>``).
        profile: cost profile name or path.
    """

    trace: Path
    speed: float | None = None
    sample: str | None = None
    seed: int = 0
    out: Path | None = None
    profile: str = "llama3_70b_a800"

    def load(self, default_speed: float = 1.0) -> list[TraceRequest]:
        """Load the trace at the given (or default) speed."""
        speed = self.speed if self.speed is not None else default_speed
        return load_trace(self.trace, speed=speed, sample=self.sample, seed=self.seed)

    def folder(self, name: str) -> Path:
        """Create and return the report folder."""
        p = self.out if self.out is not None else Path("reports") / name
        p.mkdir(parents=True, exist_ok=True)
        return p

    def base(self, **kw: Any) -> SimConfig:
        """A :class:`SimConfig` with this profile and seed, plus ``kw``."""
        return SimConfig(profile=self.profile, seed=self.seed, **kw)

    def command_line(self, name: str, *flags: str) -> str:
        """The complete ``mooncake sim`` command line that reruns ``name`` with these options.

        Args:
            name: the experiment (subcommand).
            flags: the experiment's own flags, already formatted (``"--set a=1"``).
        """
        parts = [f"mooncake sim {name}", f"--trace {self.trace}", f"--seed {self.seed}"]
        parts.append(f"--profile {self.profile}")
        if self.speed is not None:
            parts.append(f"--speed {self.speed:g}")
        if self.sample is not None:
            parts.append(f"--sample {self.sample}")
        parts.extend(flags)
        if self.out is not None:
            parts.append(f"--out {self.out}")
        return " ".join(parts)

    def paper_setting(self, default_speed: float) -> bool:
        """Whether this replays the paper's trace, whole, at ``default_speed``."""
        speed = self.speed if self.speed is not None else default_speed
        return self.sample is None and speed == default_speed and is_paper_trace(self.trace)


@dataclass(frozen=True)
class Report:
    """What an experiment wrote.

    Attributes:
        name: experiment name.
        folder: report folder.
        markdown: the table text (also in ``<folder>/<name>.md``).
        files: every file written.
        rows: the table rows as dicts (also in ``results.json``).
    """

    name: str
    folder: Path
    markdown: str
    files: tuple[Path, ...]
    rows: list[dict[str, Any]]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    return head + "".join(
        "| " + " | ".join(_fmt(r.get(c, "")) for c in columns) + " |\n" for r in rows
    )


def _finish(
    name: str,
    folder: Path,
    title: str,
    intro: str,
    rows: list[dict[str, Any]],
    columns: Sequence[str],
    plot_files: Sequence[Path],
    command: str,
) -> Report:
    md = f"# {title}\n\n{intro}\n\nCommand: `{command}`\n\n" + _table(rows, columns)
    md += "".join(f"\n![{p.stem}]({p.name})\n" for p in plot_files)
    md_path = folder / f"{name}.md"
    md_path.write_text(md, encoding="utf-8")
    js = folder / "results.json"
    js.write_text(json.dumps(rows, indent=2, default=str) + "\n", encoding="utf-8")
    return Report(name, folder, md, (md_path, js, *plot_files), rows)


def splice_report(doc: Path, report: Report) -> None:
    """Write ``report``'s command and table into ``doc`` between its markers.

    The markers are the lines ``<!-- report:NAME begin -->`` and
    ``<!-- report:NAME end -->`` (``NAME`` the experiment); what lies between them is
    replaced by the report without its title, so a page quotes the table the command
    produced, not a copy typed by hand.

    Raises:
        ValueError: ``doc`` lacks the markers.
        OSError: ``doc`` cannot be read or written.
    """
    begin = f"<!-- report:{report.name} begin -->"
    end = f"<!-- report:{report.name} end -->"
    text = doc.read_text(encoding="utf-8")
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"{doc}: no '{begin}' ... '{end}' lines to write the table between")
    body = (
        report.markdown.split("\n", 2)[2] if report.markdown.startswith("# ") else report.markdown
    )
    doc.write_text(text[: i + len(begin)] + "\n" + body.strip() + "\n" + text[j:], encoding="utf-8")


def _row(label: str, s: Summary, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"run": label}
    row.update(s.as_dict())
    row.update(extra)
    return row


def run_one(trace: Sequence[TraceRequest], config: SimConfig) -> tuple[Summary, SimResult]:
    """Simulate one config and summarise it against its own SLOs."""
    res = simulate(trace, config)
    c = config.conductor
    return res.summary(c.ttft_slo_s, c.tbt_slo_s), res


def _with(config: SimConfig, **fields: Any) -> SimConfig:
    for k, v in fields.items():
        config = set_field(config, k.replace("__", "."), v)
    return config


def run_fig5(opts: ExperimentOptions, command: str | None = None) -> Report:
    """Fig. 5: average and p90 TTFT of each prefill policy, 16 prefill instances.

    TTFT only (decode is not simulated; admission is ``none``, as the paper measures
    the scheduling policies without rejection). Each policy's row carries the no-queue
    lower bound and its ratio to it; the paper's numbers only when the trace is the
    paper's, whole, at 1x.
    """
    trace = opts.load()
    folder = opts.folder("fig5")
    base = opts.base(prefill_instances=16, decode_instances=16, simulate_decode=False)
    bound = lower_bound_avg_ttft(trace, base)
    paper = opts.paper_setting(1.0)
    rows = []
    ttfts: dict[str, list[float]] = {}
    for policy in _POLICIES:
        cfg = _with(base, conductor__policy=policy, conductor__admission="none")
        s, res = run_one(trace, cfg)
        ttfts[policy] = [r.ttft_s for r in res.requests if not r.rejected]
        extra: dict[str, Any] = {"migrations": res.counters["migrations"]}
        extra.update(_vs_bound(s.avg_ttft_s, bound))
        if paper:
            extra["paper_avg_ttft_s"] = PAPER["fig5_avg_ttft_s"].get(policy, math.nan)
        rows.append(_row(policy, s, **extra))
    labels = [r["run"] for r in rows]
    files = [
        plots.bar_chart(
            folder / "fig5_ttft.png",
            labels,
            {
                "avg TTFT": [r["avg_ttft_s"] for r in rows],
                "p90 TTFT": [r["p90_ttft_s"] for r in rows],
            },
            "TTFT by prefill scheduling policy (16 prefill instances)",
            "seconds",
        ),
        plots.ttft_cdf(folder / "fig5_ttft_cdf.png", ttfts, "TTFT distribution by policy"),
    ]
    return _finish(
        "fig5",
        folder,
        "Fig. 5: prefill scheduling policies",
        f"{len(trace)} requests, 16 prefill instances, 3M-token local cache each, admission none. "
        f"No-queue lower bound of the average TTFT {bound:.3f} s."
        + ("" if paper else " (The paper's numbers are shown only for its conversation trace.)"),
        rows,
        [
            "run",
            "avg_ttft_s",
            "lower_bound_s",
            "vs_bound",
            "p90_ttft_s",
            "p99_ttft_s",
            "hit_rate",
            "local_hit_rate",
            "migrations",
            *(["paper_avg_ttft_s"] if paper else []),
        ],
        files,
        command or opts.command_line("fig5"),
    )


def _vs_bound(avg_ttft_s: float, bound: float) -> dict[str, float]:
    """The lower bound and a run's ratio to it, as row fields."""
    ratio = avg_ttft_s / bound if bound > 0 else math.nan
    return {"lower_bound_s": bound, "vs_bound": ratio}


def run_rejection(
    opts: ExperimentOptions,
    settings: Sequence[tuple[str, str]] = (),
    command: str | None = None,
) -> Report:
    """Rejections of the three admission variants on 8P+8D at 2x replay (paper setting).

    Args:
        opts: trace and output options.
        settings: ``(field, value)`` pairs applied to the base config first (what-ifs,
            e.g. ``("decode_max_batch", "4")``).
        command: the command line shown in the report (default: built from ``opts``
            and ``settings``).

    The paper's rejection counts are shown only for the paper's trace, whole, at 2x,
    without what-if settings.

    Raises:
        ValueError: a bad setting.
    """
    base = opts.base(prefill_instances=8, decode_instances=8, load_sample_interval_s=5.0)
    for field, value in settings:
        base = set_field(base, field, value)
    trace = opts.load(default_speed=2.0)
    folder = opts.folder("rejection")
    paper = not settings and opts.paper_setting(2.0)
    rows = []
    loads = {}
    for adm in _ADMISSIONS:
        cfg = _with(base, conductor__admission=adm)
        s, res = run_one(trace, cfg)
        loads[adm] = res.load
        extra: dict[str, Any] = {"paper_rejected": PAPER["rejections"][adm]} if paper else {}
        rows.append(
            _row(
                adm,
                s,
                load_correlation=_load_correlation(res, trace),
                **_overload_stats(res, trace),
                reasons=", ".join(f"{k}={v}" for k, v in s.rejected_by_reason.items()) or "-",
                **extra,
            )
        )
    speed = opts.speed if opts.speed is not None else 2.0
    files = [
        plots.bar_chart(
            folder / "rejection_counts.png",
            [r["run"] for r in rows],
            {
                "rejected": [float(r["rejected"]) for r in rows],
                "wasted prefills": [float(r["wasted_prefills"]) for r in rows],
            },
            f"Rejected requests, 8P+8D, {speed:g}x replay",
            "requests",
        ),
        plots.load_chart(
            folder / "rejection_load.png",
            loads,
            f"Prefill vs decode load over time ({speed:g}x replay)",
        ),
    ]
    return _finish(
        "rejection",
        folder,
        "Overload: early rejection and its prediction-based variant",
        f"{len(trace)} requests at {speed:g}x replay, {base.prefill_instances} prefill + "
        f"{base.decode_instances} decode instances, policy {base.conductor.policy}"
        + (f", what-if settings {dict(settings)}." if settings else "."),
        rows,
        [
            "run",
            "rejected",
            "reasons",
            "wasted_prefills",
            "served",
            "avg_ttft_s",
            "p90_ttft_s",
            "avg_tbt_s",
            "goodput_rps",
            "load_correlation",
            "decode_load_mean",
            "decode_load_std",
            "prefill_busy_std",
            "served_prompt_mean",
            "rejected_prompt_mean",
            *(["paper_rejected"] if paper else []),
        ],
        files,
        command or opts.command_line("rejection", *(f"--set {k}={v}" for k, v in settings)),
    )


def _load_correlation(res: SimResult, trace: Sequence[TraceRequest]) -> float:
    """Pearson correlation of prefill busy and decode load while requests arrive.

    Decode load is ``max(slots used, KV used)``, the quantity admission judges. Anti-phase
    oscillation (the paper's early-rejection pathology) shows as a negative value; loads
    that rise and fall together give a positive one.
    """
    end = trace[-1].arrival_s if trace else 0.0
    pts = [(s.prefill_busy, max(s.decode_load, s.decode_kv)) for s in res.load if s.time_s <= end]
    if len(pts) < 3:
        return math.nan
    a = np.array(pts)
    if a[:, 0].std() == 0 or a[:, 1].std() == 0:
        return math.nan
    return float(np.corrcoef(a[:, 0], a[:, 1])[0, 1])


def _overload_stats(res: SimResult, trace: Sequence[TraceRequest]) -> dict[str, float]:
    """Load level and swing while requests arrive, and the prompt sizes served vs refused.

    With KV memory the binding decode limit, *which* prompts are refused decides how
    many requests fit, so the rejection experiment reports the mean prompt of each side.
    """
    end = trace[-1].arrival_s if trace else 0.0
    samples = [s for s in res.load if s.time_s <= end]
    dec = np.array([max(s.decode_load, s.decode_kv) for s in samples]) if samples else None
    busy = np.array([s.prefill_busy for s in samples]) if samples else None
    served = [r.input_length for r in res.requests if not r.rejected]
    refused = [r.input_length for r in res.requests if r.rejected]
    return {
        "decode_load_mean": float(dec.mean()) if dec is not None else math.nan,
        "decode_load_std": float(dec.std()) if dec is not None else math.nan,
        "prefill_busy_std": float(busy.std()) if busy is not None else math.nan,
        "served_prompt_mean": float(np.mean(served)) if served else math.nan,
        "rejected_prompt_mean": float(np.mean(refused)) if refused else math.nan,
    }


def _global_lru_hit_rate(trace: Sequence[TraceRequest], capacity_tokens: int) -> float:
    cache = BlockLRU(capacity_tokens // 512)
    hits = total = 0
    for r in trace:
        keys = r.hash_ids[: r.input_length // 512]
        n = cache.prefix_len(keys)
        hits += n
        total += len(keys)
        cache.touch(keys[:n])
        cache.insert(keys)
    return hits / total if total else 0.0


def run_hitrate(
    opts: ExperimentOptions,
    capacities: Sequence[int] = (
        10_000,
        100_000,
        1_000_000,
        3_000_000,
        10_000_000,
        30_000_000,
        50_000_000,
        100_000_000,
    ),
    instances: int = 16,
    command: str | None = None,
) -> Report:
    """Hit rate vs total cache capacity: one global LRU pool vs the same DRAM split per instance.

    * ``global pool (ideal)``: one LRU of the capacity over the trace in arrival order
      (the theoretical curve of Fig. 9);
    * ``local, cache_aware``: ``instances`` prefill instances with ``capacity/instances``
      each, requests placed by the local cache-aware policy, no transfers;
    * ``global, kvcache_centric``: same split, but instances fetch from each other.
    """
    trace = opts.load()
    folder = opts.folder("hitrate")
    base = opts.base(prefill_instances=instances, decode_instances=instances, simulate_decode=False)
    unlimited = _global_lru_hit_rate(trace, 10**15)
    rows = []
    for cap in capacities:
        per = max(cap // instances, 0)
        local, _ = run_one(
            trace, _with(base, conductor__policy="cache_aware", local_cache_tokens=per)
        )
        glob, _ = run_one(
            trace, _with(base, conductor__policy="kvcache_centric", local_cache_tokens=per)
        )
        rows.append(
            {
                "capacity_tokens": cap,
                "per_instance_tokens": per,
                "global_pool_ideal": _global_lru_hit_rate(trace, cap),
                "local_cache_aware": local.hit_rate,
                "global_kvcache_centric": glob.hit_rate,
                "kvcache_centric_avg_ttft_s": glob.avg_ttft_s,
                "cache_aware_avg_ttft_s": local.avg_ttft_s,
                "unlimited": unlimited,
            }
        )
    files = [
        plots.line_chart(
            folder / "hitrate.png",
            [float(r["capacity_tokens"]) for r in rows],
            {
                "global pool (one LRU, ideal)": [r["global_pool_ideal"] for r in rows],
                f"{instances} instances, kvcache_centric (fetch)": [
                    r["global_kvcache_centric"] for r in rows
                ],
                f"{instances} instances, local cache_aware": [r["local_cache_aware"] for r in rows],
                "unlimited cache": [unlimited] * len(rows),
            },
            "Prefix hit rate vs total cache capacity",
            "cache capacity (tokens, total)",
            "hit rate (fraction of complete blocks)",
            logx=True,
            vlines={"3M (one node's DRAM)": 3e6, "50M": 5e7},
        )
    ]
    return _finish(
        "hitrate",
        folder,
        "Fig. 9/10: prefix hit rate vs cache capacity",
        f"{len(trace)} requests; unlimited-cache hit rate {unlimited:.3f}.",
        rows,
        [
            "capacity_tokens",
            "per_instance_tokens",
            "global_pool_ideal",
            "global_kvcache_centric",
            "local_cache_aware",
            "unlimited",
        ],
        files,
        command
        or opts.command_line(
            "hitrate",
            f"--capacities {','.join(str(c) for c in capacities)}",
            f"--instances {instances}",
        ),
    )


def run_pd_ratio(
    opts: ExperimentOptions,
    nodes: int = 16,
    prefill_counts: Sequence[int] | None = None,
    command: str | None = None,
) -> Report:
    """Goodput, TTFT and TBT as the prefill:decode split varies at a fixed node count.

    Replays at 2x by default (the paper's overload setting); admission is
    ``early_reject_predictive``, so the SLO misses show as rejections or slow requests.
    """
    trace = opts.load(default_speed=2.0)
    folder = opts.folder("pd_ratio")
    counts = prefill_counts or [p for p in range(2, nodes - 1, 2)]
    rows = []
    for p in counts:
        cfg = opts.base(prefill_instances=p, decode_instances=nodes - p)
        cfg = _with(cfg, conductor__admission="early_reject_predictive")
        s, _ = run_one(trace, cfg)
        rows.append(_row(f"{p}P:{nodes - p}D", s, prefill=p, decode=nodes - p))
    speed = opts.speed if opts.speed is not None else 2.0
    x = [float(r["prefill"]) for r in rows]
    files = [
        plots.line_chart(
            folder / "pd_goodput.png",
            x,
            {"goodput (req/s meeting both SLOs)": [r["goodput_rps"] for r in rows]},
            f"Goodput vs P:D split ({nodes} nodes, {speed:g}x replay)",
            "prefill instances",
            "req/s",
        ),
        plots.line_chart(
            folder / "pd_latency.png",
            x,
            {
                "avg TTFT (s)": [r["avg_ttft_s"] for r in rows],
                "avg TBT x10 (s)": [10 * r["avg_tbt_s"] for r in rows],
            },
            "TTFT and TBT vs P:D split",
            "prefill instances",
            "seconds",
        ),
    ]
    return _finish(
        "pd_ratio",
        folder,
        "Fig. 15: P:D ratio at a fixed node count",
        f"{len(trace)} requests at {speed:g}x replay, {nodes} nodes, kvcache_centric, early_reject_predictive.",
        rows,
        [
            "run",
            "goodput_rps",
            "slo_attainment",
            "rejected",
            "avg_ttft_s",
            "p90_ttft_s",
            "avg_tbt_s",
            "p90_tbt_s",
        ],
        files,
        command or opts.command_line("pd_ratio", f"--nodes {nodes}"),
    )


def run_sweep(
    opts: ExperimentOptions,
    field: str,
    values: Sequence[str],
    base: SimConfig | None = None,
    command: str | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> Report:
    """Any config field over a list of values (see :func:`~mooncake_core.sim.config.set_field`).

    Raises:
        ValueError: unknown field or a value it does not accept (before anything runs).
    """
    cfg0 = base or opts.base()
    configs = [set_field(cfg0, field, v) for v in values]  # validate all first
    trace = opts.load()
    name = "sweep"
    folder = opts.folder(name)
    rows = []
    for v, cfg in zip(values, configs, strict=True):
        s, res = run_one(trace, cfg)
        row = _row(
            f"{field}={v}",
            s,
            value=v,
            migrations=res.counters["migrations"],
            **_vs_bound(s.avg_ttft_s, lower_bound_avg_ttft(trace, cfg)),
        )
        rows.append(row)
        if on_row is not None:
            on_row(row)
    numeric = all(_is_number(v) for v in values)
    x = [float(v) for v in values] if numeric else list(range(len(values)))
    files = [
        plots.line_chart(
            folder / "sweep_ttft.png",
            x,
            {
                "avg TTFT": [r["avg_ttft_s"] for r in rows],
                "p90 TTFT": [r["p90_ttft_s"] for r in rows],
            },
            f"TTFT vs {field}",
            field,
            "seconds",
        )
    ]
    shape = dataclasses.asdict(cfg0)
    shape.pop("conductor")
    return _finish(
        name,
        folder,
        f"Sweep of {field}",
        f"{len(trace)} requests; base config {shape}, conductor {cfg0.conductor.model_dump()}.",
        rows,
        [
            "run",
            "avg_ttft_s",
            "lower_bound_s",
            "vs_bound",
            "p90_ttft_s",
            "hit_rate",
            "migrations",
            "rejected",
            "goodput_rps",
            "avg_tbt_s",
        ],
        files,
        command or opts.command_line("sweep", f"--field {field}", f"--values {','.join(values)}"),
    )


def _is_number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


GRID_SPEEDS = (1.0, 2.0, 3.0, 4.0)
GRID_GBPS = (10.0, 25.0, 100.0)
GRID_POLICIES = ("kvcache_centric", "adaptive")


def run_grid(
    opts: ExperimentOptions,
    speeds: Sequence[float] = GRID_SPEEDS,
    gbps: Sequence[float] = GRID_GBPS,
    decode: Sequence[bool] = (False, True),
    policies: Sequence[str] = GRID_POLICIES,
    command: str | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    settings: Sequence[tuple[str, str]] = (),
) -> Report:
    """Each policy over replay speed x node bandwidth x decode simulated on/off.

    16 prefill + 16 decode instances, admission ``none``; one link of ``gbps`` Gbit/s
    per node. Each row is one cell: every policy's average TTFT, its ratio to the
    no-queue lower bound (:func:`lower_bound_avg_ttft`), and the relative difference of
    each policy to the first one (``kvcache_centric`` by default). ``settings`` are
    ``(field, value)`` pairs applied to every cell's config first (what-ifs).

    Raises:
        ValueError: no policy or a bad setting (before anything runs).
    """
    if not policies:
        raise ValueError("grid needs at least one policy")
    shape = opts.base(prefill_instances=16, decode_instances=16)
    for field, value in settings:
        shape = set_field(shape, field, value)
    folder = opts.folder("grid")
    trace0 = opts.load(default_speed=1.0 if opts.speed is None else opts.speed)
    bound = lower_bound_avg_ttft(trace0, shape)
    ref = policies[0]
    rows: list[dict[str, Any]] = []
    for speed in speeds:
        trace = load_trace(opts.trace, speed=speed, sample=opts.sample, seed=opts.seed)
        for g in gbps:
            for dec in decode:
                base = dataclasses.replace(
                    shape, simulate_decode=dec, node_bandwidth_bps=g * 1e9 / 8
                )
                row: dict[str, Any] = {
                    "speed": speed,
                    "gbps": g,
                    "decode": "on" if dec else "off",
                    "lower_bound_s": bound,
                }
                for policy in policies:
                    cfg = _with(base, conductor__policy=policy, conductor__admission="none")
                    s, res = run_one(trace, cfg)
                    row[f"{policy}_avg_ttft_s"] = s.avg_ttft_s
                    row[f"{policy}_slo"] = s.slo_attainment
                    row[f"{policy}_migrations"] = res.counters["migrations"]
                    row[f"{policy}_vs_bound"] = s.avg_ttft_s / bound if bound > 0 else math.nan
                for policy in policies[1:]:
                    a, b = row[f"{policy}_avg_ttft_s"], row[f"{ref}_avg_ttft_s"]
                    row[f"{policy}_vs_{ref}_pct"] = 100.0 * (a / b - 1.0) if b > 0 else math.nan
                rows.append(row)
                if on_row is not None:
                    on_row(row)
    columns = ["speed", "gbps", "decode", "lower_bound_s"]
    for policy in policies:
        columns += [f"{policy}_avg_ttft_s", f"{policy}_vs_bound"]
    columns += [f"{p}_vs_{ref}_pct" for p in policies[1:]]
    columns += [f"{p}_migrations" for p in policies]
    worst = {p: max((r[f"{p}_vs_{ref}_pct"] for r in rows), default=math.nan) for p in policies[1:]}
    intro = (
        f"{len(trace0)} requests, 16 prefill + 16 decode instances, admission none, one "
        f"link per node. No-queue lower bound of the average TTFT {bound:.3f} s. "
        + "".join(f"Worst cell of {p} vs {ref}: {w:+.2f}%. " for p, w in worst.items())
    )
    if command is None:
        command = opts.command_line(
            "grid",
            f"--speeds {','.join(f'{v:g}' for v in speeds)}",
            f"--gbps {','.join(f'{v:g}' for v in gbps)}",
            f"--decode {','.join('on' if d else 'off' for d in decode)}",
            f"--policies {','.join(policies)}",
            *(f"--set {k}={v}" for k, v in settings),
        )
    return _finish("grid", folder, "Policy grid", intro.strip(), rows, columns, [], command)
