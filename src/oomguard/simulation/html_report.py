"""The `--html` page: the summary and one chart per series, drawn so that the chart cannot mislead.

- Step-drawn: a step's value holds for the step's own duration, then jumps (no line interpolated between
  two steps, so a one-step spike is as wide as that step, not as wide as the gap to the next one).
- No spike lost: the time axis is cut into `BUCKETS` equal slices (two per drawn unit of the plot's width);
  each slice shows the maximum over every step that overlaps it, so a single step's peak is drawn however
  short it is; the stroke does not scale with the page, so it stays visible at any width or zoom. Time with
  no step (an idle engine) is drawn as 0: nothing runs, waits, holds KV blocks or allocates activations.
- One series per chart, each on its own axis with its unit: KV cache used (% of usable blocks), running
  requests, waiting requests, the step's activation peak (GiB) against the headroom.
- Nothing cut: text wraps instead of scrolling sideways (the summary's OOM line is the one that matters).

The page is self-contained (no external script or font); its one script adds a crosshair and a readout.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oomguard.simulation.fix_search import FixSearch
from oomguard.simulation.report import summary_dict, summary_text
from oomguard.simulation.run import SimulationResult, Summary, Timeline
from oomguard.simulation.workload import STEPS
from oomguard.units import GiB, format_gib

CHART_W, CHART_H, CHART_PAD = 900, 160, 56  # SVG user units: plot width/height, the y-axis labels' room
CHART_MARGIN = 10  # room for tick labels at the plot's edges
BUCKETS = 2 * CHART_W  # time slices per chart: two per unit of plot width


@dataclass(frozen=True)
class Slices:
    """The timeline cut into equal time slices; per slice the maximum of each series over its steps."""

    x0: float
    x1: float
    kv_percent: tuple[float, ...]
    running: tuple[int, ...]
    waiting: tuple[int, ...]
    peak_gib: tuple[float, ...]
    peak_step: tuple[int, ...]  # the step holding the slice's activation peak (-1: no step in the slice)

    @property
    def width(self) -> float:
        return (self.x1 - self.x0) / len(self.kv_percent) if self.kv_percent else 1.0

    def start(self, k: int) -> float:
        return self.x0 + k * self.width


def slice_timeline(tl: Timeline, usable_blocks: int, buckets: int = BUCKETS) -> Slices:
    """Maxima per time slice; a step counts in every slice its [time, time + duration) overlaps."""
    n = len(tl)
    if n == 0:
        return Slices(0.0, 1.0, (), (), (), (), ())
    x0 = tl.time[0]
    x1 = tl.time[-1] + tl.duration[-1]
    if x1 <= x0:
        x1 = x0 + 1.0
    count = buckets
    scale = count / (x1 - x0)
    kv = [0] * count
    run = [0] * count
    wait = [0] * count
    peak = [0] * count
    step_of = [-1] * count
    last = count - 1
    times, durations = tl.time, tl.duration
    kv_col, run_col, wait_col, peak_col = tl.kv_blocks_used, tl.running, tl.waiting, tl.peak_bytes
    for i in range(n):
        t = times[i]
        lo = min(last, int((t - x0) * scale))
        # The slice holding the step's last instant (a step ending on a slice boundary stays out of it).
        hi = min(last, max(lo, math.ceil((t + durations[i] - x0) * scale) - 1))
        k_v, r_v, w_v, p_v = kv_col[i], run_col[i], wait_col[i], peak_col[i]
        for k in range(lo, hi + 1):
            kv[k] = max(kv[k], k_v)
            run[k] = max(run[k], r_v)
            wait[k] = max(wait[k], w_v)
            if step_of[k] < 0 or p_v > peak[k]:
                peak[k] = p_v
                step_of[k] = tl.step[i]
    return Slices(
        x0,
        x1,
        tuple(100.0 * b / usable_blocks for b in kv),
        tuple(run),
        tuple(wait),
        tuple(p / GiB for p in peak),
        tuple(step_of),
    )


def slice_max(
    times: Sequence[float],
    durations: Sequence[float],
    values: Sequence[float],
    x0: float,
    x1: float,
    buckets: int = BUCKETS,
) -> list[float]:
    """`values` (each holding over [time, time + duration)) cut into `buckets` equal slices of [x0, x1): per
    slice the maximum over every value that overlaps it, 0 where none does (as `slice_timeline`)."""
    out = [0.0] * buckets
    if x1 <= x0:
        return out
    scale = buckets / (x1 - x0)
    last = buckets - 1
    for t, d, v in zip(times, durations, values):
        lo = min(last, max(0, int((t - x0) * scale)))
        hi = min(last, max(lo, math.ceil((t + d - x0) * scale) - 1))
        for k in range(lo, hi + 1):
            out[k] = max(out[k], v)
    return out


def step_path(values: Sequence[float], x0: float, width: float, span: float, top: float) -> str:
    """An SVG path drawing `values` as steps: each slice a horizontal run, joined by vertical jumps."""
    sx = CHART_W / span if span > 0 else 1.0
    sy = CHART_H / top if top > 0 else 1.0
    parts: list[str] = []
    previous: float | None = None
    for k, v in enumerate(values):
        x = CHART_PAD + k * width * sx
        y = CHART_H - v * sy
        if previous is None:
            parts.append(f"M{x:.2f},{y:.2f}")
        elif v != previous:
            parts.append(f"H{x:.2f}V{y:.2f}")
        previous = v
    if previous is not None:
        parts.append(f"H{CHART_PAD + len(values) * width * sx:.2f}")
    return "".join(parts)


def nice_top(value: float) -> float:
    """The smallest 1, 2 or 5 x 10^k at or above `value` (axis maximum)."""
    if value <= 0:
        return 1.0
    decade = 10.0 ** math.floor(math.log10(value))
    for m in (1.0, 2.0, 5.0):
        if m * decade >= value * (1 - 1e-12):
            return m * decade
    return 10.0 * decade


def _axes(x0: float, x1: float, top: float, x_unit: str, fmt: str, y_unit: str = "") -> str:
    """Frame, y ticks (0, half, top) with the axis unit, x ticks (start, middle, end) with theirs."""
    parts = [f'<rect class="frame" x="{CHART_PAD}" y="0" width="{CHART_W}" height="{CHART_H}"/>']
    for frac in (0.0, 0.5, 1.0):
        y = CHART_H - frac * CHART_H
        parts.append(
            f'<text class="tick" x="{CHART_PAD - 4}" y="{y + 4:.1f}" text-anchor="end">'
            f"{format(frac * top, fmt)}</text>"
        )
        x = CHART_PAD + frac * CHART_W
        anchor = "start" if frac == 0 else ("end" if frac == 1 else "middle")
        parts.append(
            f'<text class="tick" x="{x:.1f}" y="{CHART_H + 16}" text-anchor="{anchor}">'
            f"{x0 + frac * (x1 - x0):,.0f} {x_unit}</text>"
        )
    if y_unit:
        parts.append(
            f'<text class="unit" x="4" y="{CHART_H / 2:.0f}" text-anchor="middle" '
            f'transform="rotate(-90 8 {CHART_H / 2:.0f})">{html.escape(y_unit)}</text>'
        )
    return "".join(parts)


# Equal-count step buckets for the data-parallel JSON series (simulation/dp/report.py).
HTML_POINTS = 2000  # buckets per series; each keeps its bucket's maximum so no spike is lost


def _buckets(n: int, limit: int = HTML_POINTS) -> list[range]:
    size = max(1, -(-n // limit))
    return [range(i, min(n, i + size)) for i in range(0, n, size)]


@dataclass(frozen=True)
class Chart:
    key: str  # element id and CSS class
    title: str
    y_unit: str
    values: tuple[float, ...]
    top: float
    fmt: str
    extra: str = ""  # SVG drawn over the series (the headroom line, OOM markers)


def _chart_svg(chart: Chart, s: Slices, x_unit: str) -> str:
    view = f"0 -{CHART_MARGIN} {CHART_PAD + CHART_W + 3 * CHART_MARGIN} {CHART_H + 2 * CHART_MARGIN + 14}"
    path = step_path(chart.values, s.x0, s.width, s.x1 - s.x0, chart.top)
    return (
        f'<h2>{html.escape(chart.title)}</h2>\n<svg id="{chart.key}-chart" class="chart" viewBox="{view}" '
        f'role="img" aria-label="{html.escape(chart.title)} over {x_unit}">'
        f"{_axes(s.x0, s.x1, chart.top, x_unit, chart.fmt, chart.y_unit)}"
        f'<path class="series {chart.key}" d="{path}"/>{chart.extra}</svg>'
    )


# The page's only script: a crosshair and a readout over every chart, starting at the peak slice, and a
# record of any element wider than its box (the browser test reads it). The charts are plain SVG without it.
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
  function show(i) {
    var px = data.pad + (i + 0.5) / data.kv.length * data.width;
    cross.forEach(function (line) {
      line.setAttribute("x1", px.toFixed(1));
      line.setAttribute("x2", px.toFixed(1));
    });
    var t0 = data.x0 + i * data.slice;
    readout.textContent = (data.step[i] < 0 ? "idle" : "step " + data.step[i]) + " at " + t0.toFixed(2) +
      " " + data.unit + ": KV " + data.kv[i].toFixed(1) + "% used, " + data.running[i] + " running, " +
      data.waiting[i] + " waiting, activation peak " + data.peak[i].toFixed(2) + " GiB" +
      (data.headroom === null ? "" : " of " + data.headroom.toFixed(2) + " GiB") +
      " (maxima over " + data.slice.toFixed(3) + " " + data.unit + ")";
    readout.dataset.index = String(i);
  }
  svgs.forEach(function (svg) {
    svg.addEventListener("mousemove", function (ev) {
      var box = svg.getBoundingClientRect();
      var frac = ((ev.clientX - box.left) / box.width * svg.viewBox.baseVal.width - data.pad) / data.width;
      show(Math.min(data.kv.length - 1, Math.max(0, Math.floor(frac * data.kv.length))));
    });
  });
  if (data.kv.length) { show(data.start); }
  var wide = [];
  Array.prototype.forEach.call(document.querySelectorAll("body *"), function (el) {
    if (el instanceof HTMLElement && el.scrollWidth > el.clientWidth + 1) { wide.push(el.id || el.tagName); }
  });
  if (document.documentElement.scrollWidth > window.innerWidth + 1) { wide.push("page"); }
  document.documentElement.dataset.overflow = wide.join(" ");
  document.documentElement.dataset.chart = "ready";
})();
"""

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1000px;padding:0 1em}
pre{background:#f6f6f6;padding:1em;white-space:pre-wrap;overflow-wrap:anywhere}
svg.chart{width:100%;height:auto;background:#fff;display:block}
.frame{fill:none;stroke:#ccc} .tick{font-size:11px;fill:#555} .unit{font-size:11px;fill:#333}
.series{fill:none;stroke-width:1.5;vector-effect:non-scaling-stroke;shape-rendering:crispEdges}
.kv{stroke:#1f77b4} .running{stroke:#9467bd} .waiting{stroke:#ff7f0e} .peak{stroke:#2ca02c}
.oom{fill:#d62728}
.head{stroke:#d62728;stroke-width:2;stroke-dasharray:6 4;vector-effect:non-scaling-stroke;
shape-rendering:crispEdges}
.cross{stroke:#888;stroke-width:0.6}
h2{font-size:1.05em;margin:1.2em 0 0.3em}
#readout{font-family:ui-monospace,monospace;min-height:1.4em;overflow-wrap:anywhere}
table{border-collapse:collapse;table-layout:fixed;width:100%} td,th{border:1px solid #ccc;padding:2px 6px;
overflow-wrap:anywhere;text-align:left}
"""


def render_html(
    result: SimulationResult, summary: Summary, setup: dict[str, Any], fixes: FixSearch | None = None
) -> str:
    """The self-contained page (see the module docstring)."""
    s = slice_timeline(result.timeline, result.usable_blocks)
    unit = "steps" if summary.clock == STEPS else "s"
    headroom = result.config.headroom_bytes
    head_gib = headroom / GiB if headroom is not None else None
    peak_top = nice_top(max(max(s.peak_gib, default=0.0), head_gib or 0.0) * 1.05)
    span = s.x1 - s.x0
    sx = CHART_W / span if span > 0 else 1.0
    extra = ""
    if head_gib is not None:
        y = CHART_H - head_gib * CHART_H / peak_top
        extra += (
            f'<line class="head" x1="{CHART_PAD}" x2="{CHART_PAD + CHART_W}" y1="{y:.1f}" y2="{y:.1f}">'
            f"<title>headroom {head_gib:.2f} GiB</title></line>"
        )
    extra += "".join(
        f'<circle class="oom" cx="{CHART_PAD + (e.time - s.x0) * sx:.1f}" '
        f'cy="{CHART_H - e.peak_bytes / GiB * CHART_H / peak_top:.1f}" r="3">'
        f"<title>OOM at step {e.step}: {format_gib(e.peak_bytes)}, {html.escape(e.shape.describe())}</title>"
        "</circle>"
        for e in result.oom_events[:200]
    )
    charts = (
        Chart("kv", "KV cache used", "% of blocks", s.kv_percent, 100.0, ".0f"),
        Chart("running", "Running requests", "requests", tuple(map(float, s.running)),
              nice_top(max((2, *s.running))), ",g"),
        Chart("waiting", "Waiting requests", "requests", tuple(map(float, s.waiting)),
              nice_top(max((2, *s.waiting))), ",g"),
        Chart("peak", "Step activation peak against the headroom (dashed red)", "GiB", s.peak_gib, peak_top,
              ".1f", extra),
    )  # fmt: skip
    rows = (
        "".join(
            f"<tr><td>{e.step}</td><td>{e.time:,.2f}</td><td>{format_gib(e.peak_bytes)}</td>"
            f"<td>{html.escape(e.shape.describe())}</td><td>{e.kv_usage:.1%}</td></tr>"
            for e in result.oom_events[:50]
        )
        or '<tr><td colspan="5">none</td></tr>'
    )
    start = max(range(len(s.peak_gib)), key=s.peak_gib.__getitem__) if s.peak_gib else 0
    series = {
        "kv": [round(k, 2) for k in s.kv_percent],
        "running": list(s.running),
        "waiting": list(s.waiting),
        "peak": [round(v, 4) for v in s.peak_gib],
        "step": list(s.peak_step),
        "headroom": round(head_gib, 4) if head_gib is not None else None,
        "x0": s.x0,
        "slice": s.width,
        "unit": unit,
        "start": start,
        "pad": CHART_PAD,
        "width": CHART_W,
        "height": CHART_H,
    }
    # `</` cannot end the script element early: JSON escapes the slash.
    data_json = json.dumps(series, separators=(",", ":")).replace("</", "<\\/")
    text = html.escape(summary_text(result, summary, setup, fixes))
    data = html.escape(json.dumps(summary_dict(result, summary, setup, fixes), indent=1))
    svgs = "\n".join(_chart_svg(c, s, unit) for c in charts)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>oomguard simulate</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{_STYLE}</style></head><body>
<h1>oomguard simulate</h1>
<pre id="summary">{text}</pre>
<p id="readout"></p>
{svgs}
<h2>OOM events ({summary.oom_events:,})</h2>
<table id="oom-events"><colgroup><col style="width:8%"><col style="width:10%"><col style="width:10%"><col>
<col style="width:9%"></colgroup>
<tr><th>step</th><th>time</th><th>peak</th><th>shape</th><th>KV used</th></tr>
{rows}</table>
<details><summary>JSON</summary><pre>{data}</pre></details>
<script type="application/json" id="timeline-data">{data_json}</script>
<script>{_SCRIPT}</script>
</body></html>
"""
