"""Renderers for watch: the live terminal screen and JSON-lines alerts. Formatting only, no arithmetic.

Text that came from a scraped endpoint (labels, reasons) is escaped before it reaches the terminal, and the
JSON is strict (RFC 8259): a number that is not finite is written as null, never as NaN or Infinity.
"""

from __future__ import annotations

import json
import math
import time

from oomguard.units import GiB
from oomguard.watch.detectors import Alert, PendingTrend
from oomguard.watch.durations import format_duration, prom_duration
from oomguard.watch.escape import printable
from oomguard.watch.watcher import TickResult

CLEAR = "\x1b[H\x1b[2J"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def alert_line(alert: Alert) -> str:
    eta = f" [in {format_duration(alert.eta_seconds)}]" if alert.eta_seconds else ""
    return printable(f"{alert.severity.upper():8} {alert.detector:13} {alert.subject}: {alert.summary}{eta}")


def pending_line(trend: PendingTrend) -> str:
    return printable(
        f"{'PENDING':8} {trend.detector:13} {trend.subject}: trend needs {trend.need} samples, has "
        f"{trend.have}"
    )


def pending_json(trend: PendingTrend) -> str:
    return strict_json({"state": "pending", **trend.as_dict()})


def strict(value: object) -> object:
    """`value` with every non-finite float replaced by None, so it serializes as strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return value


def strict_json(value: object) -> str:
    return json.dumps(strict(value), allow_nan=False)


def alert_json(alert: Alert, *, state: str = "firing") -> str:
    return strict_json({"state": state, **alert.as_dict()})


def screen(result: TickResult, *, db: str) -> str:
    """The whole live view for one tick."""
    lines = [
        f"oomguard watch  {_clock(result.at)}  db {db}"
        + (
            f"  ({result.pending} records not yet on disk: {result.flush.error})"
            if result.flush.error
            else ""
        )
    ]
    lines.append("")
    preempt = f"pre/{prom_duration(result.preemption_window_s)}"  # an increase over the window, not a total
    header = f"{'engine':<48} {'model':<24} {'KV':>5} {'run':>5} {'wait':>5} {preempt:>8} {'blocks':>8}"
    lines += [header, "-" * len(header)]
    for row in result.ranks:
        lines.append(
            f"{str(row.rank)[:48]:<48} {row.model[:24]:<24} {_pct(row.kv_usage):>5} {_num(row.running):>5} "
            f"{_num(row.waiting):>5} {_num(row.preemptions_window):>8} {_num(row.num_gpu_blocks):>8}"
        )
    if not result.ranks:
        lines.append("(no vLLM samples yet)")
    for mem in result.memory:
        cap = f" of {mem.capacity / GiB:.2f} GiB" if mem.capacity else ""
        lines.append(f"memory  {mem.subject}: {mem.used / GiB:.2f} GiB{cap}")
    lines.append("")
    for target in result.targets:
        state = "waiting" if target.up is None else ("up" if target.up else f"DOWN ({target.last_error})")
        gaps = f", {len(target.gaps)} gap(s) recorded" if target.gaps else ""
        lines.append(f"target  {target.target}: {state}{gaps}")
    lines.append("")
    if result.alerts:
        lines += [alert_line(a) for a in result.alerts]
        for alert in result.alerts[:1]:
            lines += [f"    evidence: {e}" for e in alert.evidence]
            lines += [f"    fix: {f}" for f in alert.fix]
    else:
        lines.append("no alerts")
    lines += [pending_line(t) for t in result.trends_pending[:5]]
    return "\n".join(printable(line) for line in lines)
