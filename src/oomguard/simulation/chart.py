"""The SVG charts of the `--html` pages (one engine, data parallel), drawn so that a chart cannot mislead.

- Step-drawn: a step's value holds for the step's own duration, then jumps (no line interpolated between
  two steps, so a one-step spike is as wide as that step, not as wide as the gap to the next one).
- No spike lost: the time axis is cut into `BUCKETS` equal slices (two per drawn unit of the plot's width);
  each slice shows the maximum over every step that overlaps it, so a single step's peak is drawn however
  short it is; the stroke does not scale with the page, so it stays visible at any width or zoom. Time with
  no step (an idle engine) is drawn as 0: nothing runs, waits, holds KV blocks or allocates activations.
- One series per axis, with its unit; text wraps instead of scrolling sideways.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

CHART_W, CHART_H, CHART_PAD = 900, 160, 56  # SVG user units: plot width/height, the y-axis labels' room
CHART_MARGIN = 10  # room for tick labels at the plot's edges
BUCKETS = 2 * CHART_W  # time slices per chart: two per unit of plot width

# The style both pages share: the page, the frame and ticks, the dashed red limit line. A step-drawn series
# is `fill:none;stroke-width:1.5;vector-effect:non-scaling-stroke;shape-rendering:crispEdges` on each page.
STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1000px;padding:0 1em}
pre{background:#f6f6f6;padding:1em;white-space:pre-wrap;overflow-wrap:anywhere}
svg.chart{width:100%;height:auto;background:#fff;display:block}
.frame{fill:none;stroke:#ccc} .tick{font-size:11px;fill:#555} .unit{font-size:11px;fill:#333}
.head{stroke:#d62728;stroke-width:2;stroke-dasharray:6 4;vector-effect:non-scaling-stroke;
shape-rendering:crispEdges}
h2{font-size:1.05em;margin:1.2em 0 0.3em}
"""

# Records any element wider than its box, and the page if wider than the window, then marks the charts
# ready: the browser test reads both. It runs last, after any script of the page's own.
OVERFLOW_SCRIPT = """
(function () {
  "use strict";
  var wide = [];
  Array.prototype.forEach.call(document.querySelectorAll("body *"), function (el) {
    if (el instanceof HTMLElement && el.scrollWidth > el.clientWidth + 1) { wide.push(el.id || el.tagName); }
  });
  if (document.documentElement.scrollWidth > window.innerWidth + 1) { wide.push("page"); }
  document.documentElement.dataset.overflow = wide.join(" ");
  document.documentElement.dataset.chart = "ready";
})();
"""


def slice_max(
    times: Sequence[float],
    durations: Sequence[float],
    values: Sequence[float],
    x0: float,
    x1: float,
    buckets: int = BUCKETS,
) -> list[float]:
    """`values` (each holding over [time, time + duration)) cut into `buckets` equal slices of [x0, x1): per
    slice the maximum over every value that overlaps it, 0 where none does."""
    out = [0.0] * buckets
    if x1 <= x0:
        return out
    scale = buckets / (x1 - x0)
    for t, d, v in zip(times, durations, values):
        for k in slices_overlapped(t, d, x0, scale, buckets):
            out[k] = max(out[k], v)
    return out


def slices_overlapped(time: float, duration: float, x0: float, scale: float, buckets: int) -> range:
    """The slices (each 1 / `scale` wide from `x0`, `buckets` of them) that [time, time + duration)
    overlaps: at least the one holding `time`, up to the one holding its last instant (a step ending on a
    slice boundary stays out of the next slice)."""
    last = buckets - 1
    lo = min(last, max(0, int((time - x0) * scale)))
    hi = min(last, max(lo, math.ceil((time + duration - x0) * scale) - 1))
    return range(lo, hi + 1)


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


def limit_line(value: float, top: float, title: str) -> str:
    """The dashed red horizontal line at `value` on an axis from 0 to `top` (a headroom, a threshold)."""
    y = CHART_H - value * CHART_H / top
    return (
        f'<line class="head" x1="{CHART_PAD}" x2="{CHART_PAD + CHART_W}" y1="{y:.1f}" y2="{y:.1f}">'
        f"<title>{title}</title></line>"
    )


def _axes(x0: float, x1: float, top: float, x_unit: str, fmt: str, y_unit: str) -> str:
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


def chart_svg(
    svg_id: str, title: str, y_unit: str, top: float, fmt: str, body: str, x0: float, x1: float, x_unit: str
) -> str:
    """A titled chart: its axes over [x0, x1] x [0, top] (y ticks formatted with `fmt`), `body` drawn in
    the frame (the series' paths, limit lines, markers)."""
    view = f"0 -{CHART_MARGIN} {CHART_PAD + CHART_W + 3 * CHART_MARGIN} {CHART_H + 2 * CHART_MARGIN + 14}"
    axes = _axes(x0, x1, top, x_unit, fmt, y_unit)
    return (
        f'<h2>{html.escape(title)}</h2>\n<svg class="chart" id="{svg_id}" viewBox="{view}" role="img" '
        f'aria-label="{html.escape(title)} over {x_unit}">{axes}{body}</svg>'
    )
