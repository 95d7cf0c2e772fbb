"""Renderers for a simulation: text summary, JSON, timeline CSV/Parquet, PNG plot, self-contained HTML page.

Renderers only format what `run.summarize` and the timeline already hold; they compute nothing new.
"""

from __future__ import annotations

import csv
import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oomguard.simulate.run import SimulationResult, Summary, Timeline
from oomguard.simulate.workload import STEPS
from oomguard.units import format_gib


def _num(x: float | None, digits: int = 3) -> float | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return round(x, digits)


def summary_dict(result: SimulationResult, summary: Summary, setup: dict[str, Any]) -> dict[str, Any]:
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
        "prefix_cache_hit_rate": _num(summary.prefix_hit_rate, 4),
        "requests": summary.requests,
        "finished": summary.finished,
        "rejected_prompt_too_long": summary.rejected,
        "unservable": summary.unservable,
        "setup": setup,
        "notes": list(result.notes),
    }


def summary_text(result: SimulationResult, summary: Summary, setup: dict[str, Any]) -> str:
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
        f"  queue p99      {summary.queue_p99:,.3f} {unit}; TTFT p50 {summary.ttft_p50:,.3f}, p99 {summary.ttft_p99:,.3f} {unit}",
        (
            f"  throughput     {summary.output_tokens_per_s:,.1f} output tokens/{unit} "
            f"({summary.total_tokens_per_s:,.1f} scheduled tokens/{unit} while busy)"
        ),
    ]
    if summary.prefix_hit_rate is not None:
        lines.append(f"  prefix cache   {summary.prefix_hit_rate:.1%} of prompt tokens hit")
    if summary.peak_shape is not None:
        lines.append(
            f"  peak step      {format_gib(summary.peak_bytes)} at step {summary.peak_step}: {summary.peak_shape}"
            f" (layout {result.config.memory.layout}, padding up to {summary.max_padding_ratio:.1f}x)"
        )
    headroom = result.config.headroom_bytes
    if headroom is None:
        lines.append(
            "  OOM events     not judged: no headroom known (give --headroom, or --model/--gpu for the planner)"
        )
    elif summary.oom_events:
        first = result.oom_events[0]
        lines.append(
            f"  OOM events     {summary.oom_events:,} steps pass the {format_gib(headroom)} headroom; first at "
            f"{first.time:,.2f} {unit} (step {first.step}): {format_gib(first.peak_bytes)} for "
            f"{first.shape.describe()}, KV {first.kv_usage:.0%} used"
        )
    else:
        lines.append(f"  OOM events     none: every step stays under the {format_gib(headroom)} headroom")
    lines += [f"  note: {n}" for n in result.notes]
    return "\n".join(lines)


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


HTML_POINTS = 2000  # points per plotted series; each keeps its bucket's maximum so no spike is lost
CHART_W, CHART_H, CHART_PAD = 900, 200, 48  # SVG user units: plot width/height and the y-axis labels' room
CHART_MARGIN = 10  # room for tick labels at the plot's edges


def _buckets(n: int, limit: int = HTML_POINTS) -> list[range]:
    size = max(1, -(-n // limit))
    return [range(i, min(n, i + size)) for i in range(0, n, size)]


def _points(xs: Sequence[float], ys: Sequence[float], x0: float, x1: float, top: float) -> str:
    sx = CHART_W / (x1 - x0) if x1 > x0 else 1.0
    sy = CHART_H / top if top > 0 else 1.0
    return " ".join(f"{CHART_PAD + (x - x0) * sx:.1f},{CHART_H - y * sy:.1f}" for x, y in zip(xs, ys))


def _axes(x0: float, x1: float, top: float, unit: str, fmt: str) -> str:
    """Frame, three y ticks (0, half, top) and three x ticks (start, middle, end)."""
    parts = [f'<rect class="frame" x="{CHART_PAD}" y="0" width="{CHART_W}" height="{CHART_H}"/>']
    for frac in (0.0, 0.5, 1.0):
        y = CHART_H - frac * CHART_H
        parts.append(
            f'<text class="tick" x="{CHART_PAD - 4}" y="{y + 4:.1f}" text-anchor="end">'
            f"{format(frac * top, fmt)}</text>"
        )
        x = CHART_PAD + frac * CHART_W
        parts.append(
            f'<text class="tick" x="{x:.1f}" y="{CHART_H + 16}" text-anchor="middle">'
            f"{x0 + frac * (x1 - x0):,.0f} {unit}</text>"
        )
    return "".join(parts)


# The page's only script: a crosshair and a readout over both charts, starting at the peak step. The charts
# themselves are plain SVG, drawn without it.
_SCRIPT = """
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("timeline-data").textContent);
  var readout = document.getElementById("readout");
  var svgs = Array.prototype.slice.call(document.querySelectorAll("svg.chart"));
  var ns = "http://www.w3.org/2000/svg";
  var cross = svgs.map(function (svg) {
    var line = document.createElementNS(ns, "line");
    line.setAttribute("class", "cross");
    line.setAttribute("y1", "0");
    line.setAttribute("y2", String(data.height));
    svg.appendChild(line);
    return line;
  });
  function nearest(x) {
    var lo = 0, hi = data.x.length - 1;
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (data.x[mid] < x) { lo = mid + 1; } else { hi = mid; }
    }
    return lo;
  }
  function show(i) {
    var px = data.pad + (data.x1 > data.x0 ? (data.x[i] - data.x0) / (data.x1 - data.x0) : 0) * data.width;
    cross.forEach(function (line) {
      line.setAttribute("x1", px.toFixed(1));
      line.setAttribute("x2", px.toFixed(1));
    });
    readout.textContent = "step " + data.step[i] + " at " + data.x[i].toFixed(2) + " " + data.unit +
      ": KV " + data.kv[i].toFixed(1) + "% used, " + data.waiting[i] + " waiting, activation peak " +
      data.peak[i].toFixed(2) + " GiB" + (data.headroom === null ? "" : " of " + data.headroom.toFixed(2) + " GiB");
    readout.dataset.index = String(i);
  }
  svgs.forEach(function (svg) {
    svg.addEventListener("mousemove", function (ev) {
      var box = svg.getBoundingClientRect();
      var frac = ((ev.clientX - box.left) / box.width * svg.viewBox.baseVal.width - data.pad) / data.width;
      show(nearest(data.x0 + Math.min(1, Math.max(0, frac)) * (data.x1 - data.x0)));
    });
  });
  if (data.x.length) { show(data.start); }
  document.documentElement.dataset.chart = "ready";
})();
"""


def render_html(result: SimulationResult, summary: Summary, setup: dict[str, Any]) -> str:
    """A self-contained page: the summary, SVG charts of KV usage and the step's activation peak against the
    headroom (each point the maximum of the steps it stands for), OOM events marked and listed."""
    tl = result.timeline
    buckets = _buckets(len(tl))
    xs = [tl.time[b[0]] for b in buckets]
    kv = [max(tl.kv_blocks_used[i] for i in b) / result.usable_blocks * 100 for b in buckets]
    peak = [max(tl.peak_bytes[i] for i in b) / 2**30 for b in buckets]
    waiting = [max(tl.waiting[i] for i in b) for b in buckets]
    steps = [tl.step[max(b, key=lambda i: tl.peak_bytes[i])] for b in buckets]
    x0 = xs[0] if xs else 0.0
    x1 = (tl.time[-1] + tl.duration[-1]) if len(tl) else 1.0
    headroom = result.config.headroom_bytes
    head_gib = headroom / 2**30 if headroom is not None else None
    top = max(max(peak, default=0.0), head_gib or 0.0, 1e-9) * 1.1
    unit = "steps" if summary.clock == STEPS else "s"
    head_line = ""
    if head_gib is not None:
        y = CHART_H - head_gib * CHART_H / top
        head_line = (
            f'<line class="head" x1="{CHART_PAD}" x2="{CHART_PAD + CHART_W}" y1="{y:.1f}" y2="{y:.1f}">'
            f"<title>headroom {head_gib:.2f} GiB</title></line>"
        )
    sx = CHART_W / (x1 - x0) if x1 > x0 else 1.0
    markers = "".join(
        f'<circle class="oom" cx="{CHART_PAD + (e.time - x0) * sx:.1f}" '
        f'cy="{CHART_H - e.peak_bytes / 2**30 * CHART_H / top:.1f}" r="3">'
        f"<title>OOM at step {e.step}: {format_gib(e.peak_bytes)}, {html.escape(e.shape.describe())}</title></circle>"
        for e in result.oom_events[:200]
    )
    rows = (
        "".join(
            f"<tr><td>{e.step}</td><td>{e.time:,.2f}</td><td>{format_gib(e.peak_bytes)}</td>"
            f"<td>{html.escape(e.shape.describe())}</td><td>{e.kv_usage:.1%}</td></tr>"
            for e in result.oom_events[:50]
        )
        or '<tr><td colspan="5">none</td></tr>'
    )
    start = max(range(len(peak)), key=peak.__getitem__) if peak else 0
    series = {
        "x": [round(x, 4) for x in xs],
        "kv": [round(k, 2) for k in kv],
        "peak": [round(v, 4) for v in peak],
        "waiting": waiting,
        "step": steps,
        "headroom": round(head_gib, 4) if head_gib is not None else None,
        "x0": x0,
        "x1": x1,
        "unit": unit,
        "start": start,
        "pad": CHART_PAD,
        "width": CHART_W,
        "height": CHART_H,
    }
    # `</` cannot end the script element early: JSON escapes the slash.
    data_json = json.dumps(series, separators=(",", ":")).replace("</", "<\\/")
    text = html.escape(summary_text(result, summary, setup))
    data = html.escape(json.dumps(summary_dict(result, summary, setup), indent=1))
    view = f"0 -{CHART_MARGIN} {CHART_PAD + CHART_W + 3 * CHART_MARGIN} {CHART_H + 2 * CHART_MARGIN + 14}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>oomguard simulate</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2em;max-width:1000px}} pre{{background:#f6f6f6;padding:1em;overflow:auto}}
svg.chart{{width:100%;height:auto;background:#fff}} .frame{{fill:none;stroke:#ccc}} .tick{{font-size:11px;fill:#555}}
.kv{{fill:none;stroke:#1f77b4;stroke-width:1.2}} .pk{{fill:none;stroke:#2ca02c;stroke-width:1.2}}
.wait{{fill:none;stroke:#ff7f0e;stroke-width:0.8;opacity:0.7}} .oom{{fill:#d62728}}
.head{{stroke:#d62728;stroke-dasharray:6 4}} .cross{{stroke:#888;stroke-width:0.6}}
#readout{{font-family:ui-monospace,monospace;min-height:1.4em}}
table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:2px 6px}}
</style></head><body>
<h1>oomguard simulate</h1>
<pre id="summary">{text}</pre>
<h2>KV cache used (%, blue) and waiting requests (orange, scaled to their maximum {max(waiting, default=0):,})</h2>
<svg id="kv-chart" class="chart" viewBox="{view}" role="img" aria-label="KV cache usage over {unit}">
{_axes(x0, x1, 100.0, unit, ".0f")}
<polyline class="kv" points="{_points(xs, kv, x0, x1, 105.0)}"/>
<polyline class="wait" points="{_points(xs, waiting, x0, x1, max(waiting, default=0) * 1.05 or 1.0)}"/></svg>
<h2>Step activation peak (GiB, green) against the headroom (red)</h2>
<svg id="peak-chart" class="chart" viewBox="{view}" role="img" aria-label="step activation peak over {unit}">
{_axes(x0, x1, top, unit, ".1f")}
{head_line}<polyline class="pk" points="{_points(xs, peak, x0, x1, top)}"/>{markers}</svg>
<p id="readout"></p>
<h2>OOM events ({summary.oom_events})</h2>
<table id="oom-events"><tr><th>step</th><th>time</th><th>peak</th><th>shape</th><th>KV used</th></tr>{rows}</table>
<details><summary>JSON</summary><pre>{data}</pre></details>
<script type="application/json" id="timeline-data">{data_json}</script>
<script>{_SCRIPT}</script>
</body></html>
"""


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
