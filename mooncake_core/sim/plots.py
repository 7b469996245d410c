"""PNG plots of the experiments (matplotlib with the Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mooncake_core.sim.results import LoadSample

__all__ = ["bar_chart", "line_chart", "load_chart", "ttft_cdf"]


def _plt() -> Any:
    # Imported here: matplotlib is slow to import and only the experiments need it.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bar_chart(
    path: Path,
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    title: str,
    ylabel: str,
    log: bool = False,
) -> Path:
    """Grouped bars: one group per label, one bar per series."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    x = np.arange(len(labels))
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        bars = ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=name)
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.set_xticks(x, labels)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log:
        ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def line_chart(
    path: Path,
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    vlines: dict[str, float] | None = None,
) -> Path:
    """One line per series over a shared x axis."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, ys in series.items():
        ax.plot(x, ys, marker="o", label=name)
    for name, xv in (vlines or {}).items():
        ax.axvline(xv, linestyle="--", color="grey")
        ax.annotate(name, (xv, ax.get_ylim()[1]), fontsize=8, ha="left", va="top")
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def ttft_cdf(path: Path, ttfts: Mapping[str, Sequence[float]], title: str) -> Path:
    """Empirical CDF of TTFT per policy (log x)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, values in ttfts.items():
        v = np.sort(np.asarray([t for t in values if t == t], dtype=float))
        if v.size:
            ax.plot(v, np.arange(1, v.size + 1) / v.size, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def load_chart(path: Path, runs: Mapping[str, Sequence[LoadSample]], title: str) -> Path:
    """Prefill and decode load over time, one panel per run (the oscillation plot)."""
    plt = _plt()
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.6 * len(runs)), sharex=True, squeeze=False)
    for ax, (name, samples) in zip(axes[:, 0], runs.items(), strict=True):
        t = [s.time_s for s in samples]
        ax.plot(
            t,
            [s.prefill_busy for s in samples],
            label="prefill busy (fraction of instance-time in the window)",
        )
        ax.plot(t, [s.decode_kv for s in samples], label="decode KV used (fraction of capacity)")
        ax.plot(t, [s.decode_load for s in samples], label="decode slots used (fraction)")
        ax.set_ylabel(name)
        ax.set_ylim(0, 1.05)
        ax.grid(True, alpha=0.3)
    axes[0, 0].legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("time (s)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
