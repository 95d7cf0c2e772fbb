"""The `--html` page: the summary and one chart per series, drawn as `chart` draws (step-drawn over equal
time slices, each the maximum of the steps it overlaps, so no spike is lost).

- One series per chart, each on its own axis with its unit: KV cache used (% of usable blocks), running
  requests, waiting requests, the step's activation peak (GiB) against the headroom.
- Nothing cut: text wraps instead of scrolling sideways (the summary's OOM line is the one that matters).

The page is self-contained (no external script or font); its one script adds a crosshair and a readout.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from typing import Any

from oomguard.simulation.chart import (
    BUCKETS,
    CHART_H,
    CHART_PAD,
    CHART_W,
    OVERFLOW_SCRIPT,
    STYLE,
    chart_svg,
    limit_line,
    nice_top,
    slices_overlapped,
    step_path,
)
from oomguard.simulation.fix_search import FixSearch
from oomguard.simulation.report import summary_dict, summary_text
from oomguard.simulation.run import SimulationResult, Summary, Timeline
from oomguard.simulation.workload import STEPS
from oomguard.units import GiB, format_gib


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
    times, durations = tl.time, tl.duration
    kv_col, run_col, wait_col, peak_col = tl.kv_blocks_used, tl.running, tl.waiting, tl.peak_bytes
    for i in range(n):
        k_v, r_v, w_v, p_v = kv_col[i], run_col[i], wait_col[i], peak_col[i]
        for k in slices_overlapped(times[i], durations[i], x0, scale, count):
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
    path = step_path(chart.values, s.x0, s.width, s.x1 - s.x0, chart.top)
    body = f'<path class="series {chart.key}" d="{path}"/>{chart.extra}'
    return chart_svg(
        f"{chart.key}-chart", chart.title, chart.y_unit, chart.top, chart.fmt, body, s.x0, s.x1, x_unit
    )


# The page's own script: a crosshair and a readout over every chart, starting at the peak slice (then
# `chart.OVERFLOW_SCRIPT`). The charts are plain SVG without it.
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
})();
"""

# The page's own style, after `chart.STYLE`.
_STYLE = """
.series{fill:none;stroke-width:1.5;vector-effect:non-scaling-stroke;shape-rendering:crispEdges}
.kv{stroke:#1f77b4} .running{stroke:#9467bd} .waiting{stroke:#ff7f0e} .peak{stroke:#2ca02c}
.oom{fill:#d62728}
.cross{stroke:#888;stroke-width:0.6}
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
    extra = limit_line(head_gib, peak_top, f"headroom {head_gib:.2f} GiB") if head_gib is not None else ""
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
<style>{STYLE}{_STYLE}</style></head><body>
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
<script>{_SCRIPT}{OVERFLOW_SCRIPT}</script>
</body></html>
"""
