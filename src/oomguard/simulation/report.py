"""Renderers for a simulation: text summary, JSON, timeline CSV/Parquet, PNG plot, self-contained HTML page.

Renderers only format what `run.summarize` and the timeline already hold; they compute nothing new.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oomguard.simulation.fix_search import FixSearch
from oomguard.simulation.run import SimulationResult, Summary, Timeline
from oomguard.simulation.workload import STEPS
from oomguard.units import format_gib


def _num(x: float | None, digits: int = 3) -> float | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return round(x, digits)


def summary_dict(
    result: SimulationResult, summary: Summary, setup: dict[str, Any], fixes: FixSearch | None = None
) -> dict[str, Any]:
    """The `--json` object. Keys are stable; `steps`, `preemptions`, `max_kv_blocks_used`, `max_running`
    mean what the scheduler oracle's summary means by them."""
    events = [
        {
            "step": e.step,
            "time": _num(e.time),
            "peak_bytes": e.peak_bytes,
            "headroom_bytes": e.headroom_bytes,
            "shape": e.shape.describe(),
            "kv_usage": _num(e.kv_usage, 4),
            "kv_blocks_used": e.kv_blocks_used,
        }
        for e in result.oom_events[:100]
    ]
    return {
        "steps": summary.steps,
        "preemptions": summary.preemptions,
        "max_kv_blocks_used": summary.max_kv_blocks_used,
        "max_running": summary.max_running,
        "usable_blocks": summary.usable_blocks,
        "kv_usage": {
            "p50": _num(summary.kv_usage_p50, 4),
            "p99": _num(summary.kv_usage_p99, 4),
            "max": _num(summary.kv_usage_max, 4),
        },
        "clock": "steps" if summary.clock == STEPS else "seconds",
        "simulated_time": _num(summary.simulated_time),
        "time_saturated": _num(summary.time_saturated),
        "queue_p99": _num(summary.queue_p99),
        "ttft_p50": _num(summary.ttft_p50),
        "ttft_p99": _num(summary.ttft_p99),
        "output_tokens_per_s": _num(summary.output_tokens_per_s, 1),
        "total_tokens_per_s": _num(summary.total_tokens_per_s, 1),
        "max_padding_ratio": _num(summary.max_padding_ratio),
        "peak_bytes": summary.peak_bytes,
        "peak_step": summary.peak_step,
        "peak_shape": summary.peak_shape,
        "oom_events": summary.oom_events,
        "first_oom_time": _num(summary.first_oom_time),
        "oom_event_list": events,
        "fixes": [f.to_dict() for f in fixes.fixes] if fixes is not None else None,
        "prefix_cache_hit_rate": _num(summary.prefix_hit_rate, 4),
        "requests": summary.requests,
        "finished": summary.finished,
        "rejected_prompt_too_long": summary.rejected,
        "unservable": summary.unservable,
        "setup": setup,
        "notes": list(result.notes),
    }


def summary_text(
    result: SimulationResult, summary: Summary, setup: dict[str, Any], fixes: FixSearch | None = None
) -> str:
    unit = "steps" if summary.clock == STEPS else "s"
    lines = [
        f"oomguard simulate: {result.workload_source}",
        f"  setup          {setup.get('describe', '')}",
        (
            f"  requests       {summary.requests:,} arrived, {summary.finished:,} finished"
            + (f", {summary.rejected} rejected (prompt >= max_model_len)" if summary.rejected else "")
            + (f", {summary.unservable} never fit the pool" if summary.unservable else "")
        ),
        f"  steps          {summary.steps:,} over {summary.simulated_time:,.1f} {unit}",
        (
            f"  KV blocks      peak {summary.max_kv_blocks_used:,} / {summary.usable_blocks:,}; usage p50 "
            f"{summary.kv_usage_p50:.1%}, p99 {summary.kv_usage_p99:.1%}, max {summary.kv_usage_max:.1%}"
        ),
        f"  saturated      {summary.time_saturated:,.1f} {unit} with requests waiting on a >=95% full pool",
        f"  preemptions    {summary.preemptions:,}; max running {summary.max_running:,}",
        f"  queue p99      {summary.queue_p99:,.3f} {unit}; TTFT p50 {summary.ttft_p50:,.3f}, p99 "  # noqa: ISC004
        f"{summary.ttft_p99:,.3f} {unit}",
        (
            f"  throughput     {summary.output_tokens_per_s:,.1f} output tokens/{unit} "
            f"({summary.total_tokens_per_s:,.1f} scheduled tokens/{unit} while busy)"
        ),
    ]
    if summary.prefix_hit_rate is not None:
        lines.append(f"  prefix cache   {summary.prefix_hit_rate:.1%} of prompt tokens hit")
    if summary.peak_shape is not None:
        layout = result.config.memory.layout
        # Packed (varlen) activations have no padding: the ratio only means something for the padded layout.
        padding = f", padding up to {summary.max_padding_ratio:.1f}x" if layout == "padded" else ""
        lines.append(
            f"  peak step      {format_gib(summary.peak_bytes)} at step {summary.peak_step}: "
            f"{summary.peak_shape}"
            f" (layout {layout}{padding})"
        )
    headroom = result.config.headroom_bytes
    if headroom is None:
        lines.append(
            "  OOM events     not judged: no headroom known (give --headroom, or --model/--gpu for the "
            "planner)"
        )
    elif summary.oom_events:
        first = result.oom_events[0]
        passes = "step passes" if summary.oom_events == 1 else "steps pass"
        lines.append(
            f"  OOM events     {summary.oom_events:,} {passes} the {format_gib(headroom)} headroom; first at "
            f"{first.time:,.2f} {unit} (step {first.step}): {format_gib(first.peak_bytes)} for "
            f"{first.shape.describe()}, KV {first.kv_usage:.0%} used"
        )
        lines += _fix_lines(fixes, unit)
    else:
        lines.append(f"  OOM events     none: every step stays under the {format_gib(headroom)} headroom")
    lines += [f"  note: {n}" for n in result.notes]
    return "\n".join(lines)


def _fix_lines(fixes: FixSearch | None, unit: str) -> list[str]:
    """The OOM line's fix: the cheapest clean setting of the step flags, then the other clean ones."""
    if fixes is None:
        return []
    if fixes.best is None:
        searched = ", ".join(
            f"{flag.option} down to {values[-1]}" for flag, values in fixes.searched if values
        )
        return [
            f"                 fix: none found ({searched or 'nothing to search'}; {fixes.trials} replays)"
        ]
    lines = [f"                 fix: {fixes.best.describe(unit)}"]
    lines += [f"                 or:  {f.describe(unit)}" for f in fixes.fixes[1:]]
    return lines


def write_timeline(timeline: Timeline, path: Path, usable_blocks: int) -> str:
    """CSV, or Parquet when the name ends in .parquet and pyarrow is importable. Returns what was written."""
    columns = list(Timeline.COLUMNS) + ["kv_usage"]
    data: dict[str, Sequence[Any]] = {c: getattr(timeline, c) for c in Timeline.COLUMNS}
    data["kv_usage"] = [round(b / usable_blocks, 6) for b in timeline.kv_blocks_used]
    if path.suffix == ".parquet":
        try:
            import pyarrow as pa  # type: ignore[import-not-found]
            import pyarrow.parquet as pq  # type: ignore[import-not-found]
        except ImportError:
            path = path.with_suffix(".csv")
        else:
            pq.write_table(pa.table({c: list(data[c]) for c in columns}), path)
            return f"timeline: {path} (Parquet, {len(timeline):,} steps)"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        rows = zip(*(data[c] for c in columns))
        for row in rows:
            writer.writerow([f"{v:.6f}" if isinstance(v, float) else v for v in row])
    return f"timeline: {path} (CSV, {len(timeline):,} steps)"


def write_png(result: SimulationResult, path: Path) -> str:
    """Memory and KV usage over time (matplotlib, the `plot` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot: skipped, matplotlib is not installed (pip install 'oomguard[plot]')"
    tl = result.timeline
    x = tl.time
    unit = "step" if result.clock == STEPS else "time (s)"
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    ax1.plot(x, [b / result.usable_blocks * 100 for b in tl.kv_blocks_used], lw=0.8, color="tab:blue")
    ax1.set_ylabel("KV cache used (%)")
    ax1.set_ylim(0, 105)
    ax1b = ax1.twinx()
    ax1b.plot(x, tl.waiting, lw=0.6, color="tab:orange")
    ax1b.set_ylabel("waiting requests", color="tab:orange")
    ax2.plot(x, [p / 2**30 for p in tl.peak_bytes], lw=0.8, color="tab:green", label="step activation peak")
    if result.config.headroom_bytes is not None:
        ax2.axhline(result.config.headroom_bytes / 2**30, color="tab:red", ls="--", label="headroom")
    for e in result.oom_events[:200]:
        ax2.axvline(e.time, color="tab:red", alpha=0.2, lw=0.5)
    ax2.set_ylabel("GiB")
    ax2.set_xlabel(unit)
    ax2.legend(loc="upper right")
    fig.suptitle(f"oomguard simulate: {Path(result.workload_source).name}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"plot: {path}"


def sweep_table(flag: str, rows: list[tuple[str, Summary, bool]], safest: str | None) -> str:
    header = (flag, "OOM events", "peak GiB", "preemptions", "KV p99", "queue p99", "out tok/s", "safe")
    body = [
        (
            value,
            f"{s.oom_events:,}",
            f"{s.peak_bytes / 2**30:.2f}",
            f"{s.preemptions:,}",
            f"{s.kv_usage_p99:.1%}",
            f"{s.queue_p99:.3f}",
            f"{s.output_tokens_per_s:,.1f}",
            "yes" if safe else "no",
        )
        for value, s, safe in rows
    ]
    widths = [max(len(str(r[i])) for r in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(wd) for c, wd in zip(r, widths)) for r in [header, *body]]
    lines.append(f"largest safe {flag}: {safest}" if safest is not None else f"no value of {flag} is safe")
    return "\n".join(lines)
