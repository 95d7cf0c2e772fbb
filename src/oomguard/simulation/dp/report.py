"""Renderers for a data-parallel simulation: text, the `--json` object (`ranks[]`), the HTML page with a line
per rank, the sweep table. They format what `dp.run` computed and `run.summarize` gives per rank."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from oomguard.simulation.chart import (
    BUCKETS,
    OVERFLOW_SCRIPT,
    STYLE,
    chart_svg,
    limit_line,
    nice_top,
    slice_max,
    step_path,
)
from oomguard.simulation.dp.run import DpResult, RankEvent
from oomguard.simulation.report import _num
from oomguard.simulation.report import summary_dict as rank_dict
from oomguard.simulation.run import SimulationResult, Summary, summarize
from oomguard.simulation.workload import STEPS
from oomguard.units import format_gib

SERIES_POINTS = 500  # points per rank series in the JSON (each the maximum of the steps it stands for)
RANK_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _event(event: RankEvent | None) -> dict[str, Any] | None:
    if event is None:
        return None
    return {"rank": event.rank, "time": _num(event.time), "step": event.step}


def _step_buckets(n: int, limit: int) -> list[range]:
    """`n` steps cut into at most `limit` equal-count buckets, in order."""
    size = max(1, -(-n // limit))
    return [range(i, min(n, i + size)) for i in range(0, n, size)]


def _series(result: SimulationResult, points: int) -> dict[str, list[Any]]:
    """Each rank's JSON series: per bucket of steps its first time, its maxima, the preemptions so far."""
    tl = result.timeline
    buckets = _step_buckets(len(tl), points)
    preempted = 0
    cumulative = []
    for b in buckets:
        preempted += sum(tl.preempted[i] for i in b)
        cumulative.append(preempted)
    return {
        "time": [_num(tl.time[b[0]]) for b in buckets],
        "kv_usage": [_num(max(tl.kv_blocks_used[i] for i in b) / result.usable_blocks, 4) for b in buckets],
        "running": [max(tl.running[i] for i in b) for b in buckets],
        "waiting": [max(tl.waiting[i] for i in b) for b in buckets],
        "preemptions": cumulative,
    }


def dp_dict(result: DpResult, summaries: Sequence[Summary], setup: dict[str, Any]) -> dict[str, Any]:
    """The `--json` object of a DP run. `ranks[k]` has the single-engine keys for rank k plus `rank`,
    `routed` and `series` (time, kv_usage, running, waiting, cumulative preemptions)."""
    imb = result.imbalance
    span = len(imb.values) * imb.sample_s
    ranks = []
    for k, (rank, summary) in enumerate(zip(result.ranks, summaries)):
        entry = rank_dict(rank, summary, {})
        entry.pop("setup", None)
        ranks.append({"rank": k, "routed": result.routed[k], **entry, "series": _series(rank, SERIES_POINTS)})
    step = max(1, len(imb.values) // SERIES_POINTS)
    cfg = result.config
    return {
        "data_parallel_size": cfg.data_parallel_size,
        "balancer": cfg.balancer.value,
        "balancer_rule": result.rule,
        "api_servers": cfg.api_servers,
        "lockstep": cfg.lockstep,
        "clock": "steps" if result.clock == STEPS else "seconds",
        "requests": sum(s.requests for s in summaries) + result.rejected,
        "finished": sum(s.finished for s in summaries),
        "rejected_prompt_too_long": result.rejected,
        "preemptions": sum(s.preemptions for s in summaries),
        "imbalance": {
            "definition": "(max - min) / mean of the ranks' KV usage averaged over the trailing window, "
            "0 while the mean is under min_mean",
            "window": imb.window,
            "min_mean": imb.min_mean,
            "threshold": imb.threshold,
            "time_above": _num(imb.time_above),
            "fraction_above": _num(imb.time_above / span, 4) if span else None,
            "max": _num(imb.max, 4),
            "series": {
                "time": [_num(t) for t in imb.times[::step]],
                "value": [_num(max(imb.values[i : i + step]), 4) for i in range(0, len(imb.values), step)],
            },
        },
        "first_saturated": _event(result.first_saturated),
        "first_preemption": _event(result.first_preemption),
        "first_oom": _event(result.first_oom),
        "ep_max_dispatch_bytes": result.max_dispatch_bytes if cfg.lockstep else None,
        "ep_max_dispatch_step": result.max_dispatch_step,
        "ranks": ranks,
        "setup": setup,
        "notes": list(result.notes),
    }


def _when(event: RankEvent | None, unit: str, what: str) -> str:
    if event is None:
        return f"no rank {what}"
    return f"rank {event.rank} {what} first, at {event.time:,.2f} {unit} (step {event.step:,})"


def dp_text(result: DpResult, summaries: Sequence[Summary], setup: dict[str, Any]) -> str:
    unit = "steps" if result.clock == STEPS else "s"
    cfg = result.config
    imb = result.imbalance
    span = len(imb.values) * imb.sample_s
    mode = (
        "MoE ranks in lockstep (idle ranks run dummy batches)"
        + (
            ", experts parallel across the ranks"
            if cfg.lockstep_memory and cfg.lockstep_memory.gathers_all_ranks
            else ""
        )
        if cfg.lockstep
        else "independent engines"
    )
    pool = result.ranks[0].usable_blocks if result.ranks else 0
    lines = [
        f"oomguard simulate, data parallel: {result.workload_source}",
        f"  setup          {setup.get('describe', '')}",
        f"  deployment     DP {cfg.data_parallel_size}: {mode}; one KV pool of {pool:,} blocks per rank",
        f"  balancer       {result.rule}",
        (
            f"  requests       {sum(s.requests for s in summaries) + result.rejected:,} arrived, "
            f"{sum(s.finished for s in summaries):,} finished; routed per rank "
            + " / ".join(f"{r:,}" for r in result.routed)
        ),
        (
            f"  imbalance      KV usage (max-min)/mean above {imb.threshold:.0%} for {imb.time_above:,.1f} "
            "of "
            f"{span:,.1f} {unit}"
            + (f" ({imb.time_above / span:.1%})" if span else "")
            + f"; max {imb.max:.0%}"
        ),
        "  saturation     "  # noqa: ISC004
        f"{_when(result.first_saturated, unit, 'saturates (requests wait on a >=95% full pool)')}",
        f"  preemption     {_when(result.first_preemption, unit, 'preempts')}",
    ]
    headroom = cfg.engine.headroom_bytes
    if headroom is None:
        lines.append("  OOM            not judged: no headroom known (give --headroom, or --model/--gpu)")
    else:
        lines.append(
            f"  OOM            {_when(result.first_oom, unit, f'passes the {format_gib(headroom)} headroom')}"
        )
    if cfg.lockstep and cfg.lockstep_memory and cfg.lockstep_memory.gathers_all_ranks:
        lines.append(
            f"  EP dispatch    largest {format_gib(result.max_dispatch_bytes)} per rank each way"
            + (f" at step {result.max_dispatch_step:,}" if result.max_dispatch_step is not None else "")
            + " (every rank's tokens of that step, gathered)"
        )
    header = (
        "rank",
        "routed",
        "KV peak",
        "KV p99",
        "preempt",
        "max run",
        "max wait",
        "saturated",
        "OOM",
        "peak GiB",
    )
    rows = [
        (
            str(k),
            f"{result.routed[k]:,}",
            f"{s.kv_usage_max:.1%}",
            f"{s.kv_usage_p99:.1%}",
            f"{s.preemptions:,}",
            f"{s.max_running:,}",
            f"{max(r.timeline.waiting, default=0):,}",
            f"{s.time_saturated:,.1f} {unit}",
            f"{s.oom_events:,}",
            f"{s.peak_bytes / 2**30:.2f}",
        )
        for k, (r, s) in enumerate(zip(result.ranks, summaries))
    ]
    lines.append("")
    lines.extend("  " + line for line in _table(header, rows))
    lines += [f"  note: {n}" for n in result.notes]
    return "\n".join(lines)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in [header, *rows]
    ]


def summaries_of(result: DpResult) -> list[Summary]:
    return [summarize(r) for r in result.ranks]


def _rank_paths(
    result: DpResult, column: str, percent: bool, x0: float, x1: float, top: float
) -> tuple[str, float]:
    """Each rank's series drawn as steps over the same time slices (`chart.slice_max`), and the highest
    value drawn."""
    parts = []
    highest = 0.0
    width = (x1 - x0) / BUCKETS
    for k, rank in enumerate(result.ranks):
        tl = rank.timeline
        scale = 100.0 / rank.usable_blocks if percent else 1.0
        values = [v * scale for v in getattr(tl, column)]
        sliced = slice_max(tl.time, tl.duration, values, x0, x1)
        highest = max(highest, max(sliced, default=0.0))
        colour = RANK_COLOURS[k % len(RANK_COLOURS)]
        parts.append(
            f'<path class="rank" data-rank="{k}" stroke="{colour}" '
            f'd="{step_path(sliced, x0, width, x1 - x0, top) if top else ""}">'
            f"<title>rank {k}</title></path>"
        )
    return "".join(parts), highest


# The page's own style, after `chart.STYLE`: a step-drawn line per rank and the imbalance series.
_STYLE = """
.rank,.imb{fill:none;stroke-width:1.5;vector-effect:non-scaling-stroke;shape-rendering:crispEdges}
.imb{stroke:#444}
"""


def dp_html(result: DpResult, summaries: Sequence[Summary], setup: dict[str, Any]) -> str:
    """A self-contained page: the summary, then per-rank KV usage, running and waiting requests, and the
    imbalance series against the 15% line. Drawn as `chart` draws: every series step-drawn over equal time
    slices, each slice the maximum of the steps it overlaps, so a one-step spike stays visible at any width;
    each chart on its own axis with its unit; text wraps."""
    unit = "steps" if result.clock == STEPS else "s"
    starts = [r.timeline.time[0] for r in result.ranks if len(r.timeline)]
    ends = [r.timeline.time[-1] + r.timeline.duration[-1] for r in result.ranks if len(r.timeline)]
    x0, x1 = (min(starts), max(ends)) if starts else (0.0, 1.0)
    if x1 <= x0:
        x1 = x0 + 1.0
    charts = []
    for key, title, y_unit, column, percent in (
        ("chart-kv_blocks_used", "KV cache used, a line per rank", "% of blocks", "kv_blocks_used", True),
        ("chart-running", "Running requests, a line per rank", "requests", "running", False),
        ("chart-waiting", "Waiting requests, a line per rank", "requests", "waiting", False),
    ):
        if percent:
            top = 100.0
        else:
            highest = max((max(getattr(r.timeline, column), default=0) for r in result.ranks), default=0)
            top = nice_top(max(2, highest))
        paths, _ = _rank_paths(result, column, percent, x0, x1, top)
        charts.append(chart_svg(key, title, y_unit, top, ".0f" if percent else ",g", paths, x0, x1, unit))
    imb = result.imbalance
    values = [v * 100 for v in imb.values]
    sliced = slice_max(imb.times, [imb.sample_s] * len(values), values, x0, x1)
    top = nice_top(max(max(sliced, default=0.0), imb.threshold * 100) * 1.05)
    body = (
        limit_line(imb.threshold * 100, top, f"{imb.threshold:.0%}")
        + f'<path class="imb" d="{step_path(sliced, x0, (x1 - x0) / BUCKETS, x1 - x0, top)}"/>'
    )
    title = f"KV imbalance across ranks, (max - min) / mean, against {imb.threshold:.0%} (dashed red)"
    charts.append(chart_svg("chart-imbalance", title, "%", top, ".0f", body, x0, x1, unit))
    legend = " ".join(
        f'<span style="color:{RANK_COLOURS[k % len(RANK_COLOURS)]}">&#9632; rank {k}</span>'
        for k in range(len(result.ranks))
    )
    text = html.escape(dp_text(result, summaries, setup))
    data = html.escape(json.dumps(dp_dict(result, summaries, setup), indent=1))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>oomguard simulate: data parallel</title>
<style>{STYLE}{_STYLE}</style></head><body>
<h1>oomguard simulate: data parallel</h1>
<pre id="summary">{text}</pre>
<p id="legend">{legend}</p>
{chr(10).join(charts)}
<details><summary>JSON</summary><pre>{data}</pre></details>
<script>{OVERFLOW_SCRIPT}</script>
</body></html>
"""


def dp_sweep_table(name: str, rows: Sequence[tuple[str, DpResult, Sequence[Summary]]]) -> str:
    """One row per swept value: per-rank peak KV, preemptions per rank, time above the imbalance threshold."""
    header = (
        name,
        "DP",
        "KV peak per rank",
        "preemptions per rank",
        "imbalance >15%",
        "first OOM",
    )
    body = []
    for value, result, summaries in rows:
        imb = result.imbalance
        span = len(imb.values) * imb.sample_s
        first = result.first_oom
        body.append(
            (
                value,
                str(result.config.data_parallel_size),
                " ".join(f"{s.kv_usage_max:.0%}" for s in summaries),
                " ".join(f"{s.preemptions}" for s in summaries),
                f"{imb.time_above:,.1f}" + (f" ({imb.time_above / span:.0%})" if span else ""),
                f"rank {first.rank} at {first.time:,.1f}" if first is not None else "none",
            )
        )
    return "\n".join(_table(header, body))
