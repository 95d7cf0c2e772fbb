"""`oomguard watch`: scrape vLLM /metrics (and NVML, host memory), store samples, alert before an OOM.

    oomguard watch http://localhost:8000 http://localhost:8001        # live view, one line per DP engine
    oomguard watch localhost:8000 --json                               # JSON-lines alerts on stdout
    oomguard watch localhost:8000 --once                               # one check; exit 1 when anything fires
    oomguard watch --prometheus http://prom:9090 --selector '{job="vllm"}' --once

Exit codes: 0 nothing found (or stopped), 1 findings with --once, 2 bad input.
SIGTERM and SIGHUP stop it as Ctrl-C does: the tick in progress ends, buffered samples are written (or
saved aside to be read back on the next run).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
import typing
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields, replace

from oomguard.errors import ConfigError
from oomguard.watch.clock import TickClock
from oomguard.watch.detectors import Alert, PendingTrend, Thresholds, evaluate, pending_trends
from oomguard.watch.durations import parse_duration
from oomguard.watch.escape import printable
from oomguard.watch.host import HostProbe, is_loopback_url, url_port
from oomguard.watch.nvml import NvmlProbe
from oomguard.watch.planned import PlanSource
from oomguard.watch.scrape import DEFAULT_TIMEOUT_S, MIN_TIMEOUT_S, Scraper, normalize_url
from oomguard.watch.store import Store
from oomguard.watch.view import CLEAR, alert_json, alert_line, pending_json, pending_line, screen
from oomguard.watch.watcher import Probe, Watcher

DEFAULT_DB = "oomguard-watch.sqlite"
PROMETHEUS_BACKOFF_MAX_S = 300.0
EXIT_FINDINGS = 1
STOP_SIGNALS = ("SIGTERM", "SIGHUP")  # docker stop, kubectl delete, systemd; a closed terminal


class OneLineParser(argparse.ArgumentParser):
    """Bad flags as the one-line error every oomguard command gives, not the whole usage."""

    def error(self, message: str) -> typing.NoReturn:
        raise ConfigError(f"{message} (see oomguard {self.prog.split()[-1]} --help)")


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGTERM/SIGHUP, so the loop ends as after Ctrl-C and the buffer is saved; a second
    signal stops at once (still through `finally`)."""
    stop = threading.Event()

    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for name in STOP_SIGNALS:
            if hasattr(signal, name):
                number = getattr(signal, name)
                previous[number] = signal.signal(number, handler)
    try:
        yield stop
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


# CLI option -> Thresholds field; durations are parsed, the rest are floats.
THRESHOLD_OPTIONS: dict[str, str] = {
    "--leak-window": "leak_window_s",
    "--horizon": "horizon_s",
    "--kv-window": "kv_window_s",
    "--kv-high": "kv_high",
    "--kv-horizon": "kv_horizon_s",
    "--queue-window": "queue_window_s",
    "--queue-min": "queue_min_waiting",
    "--queue-limit": "queue_limit",
    "--preemption-window": "preemption_window_s",
    "--preemptions-per-min": "preemptions_per_min",
    "--imbalance": "imbalance",
    "--imbalance-window": "imbalance_window_s",
    "--host-memory-ratio": "host_memory_ratio",
    "--restart-window": "restart_window_s",
}

# Options that are fractions, with their largest sensible value (an imbalance may exceed 100%).
FRACTION_BOUNDS = {"kv_high": 1.0, "host_memory_ratio": 1.0, "imbalance": 10.0}


def add_threshold_options(parser: argparse.ArgumentParser) -> None:
    defaults = Thresholds()
    group = parser.add_argument_group("thresholds (durations like 90s, 15m, 2h)")
    for option, name in THRESHOLD_OPTIONS.items():
        group.add_argument(
            option,
            dest=name,
            default=None,
            metavar="D" if name.endswith("_s") else "X",
            help=f"default {getattr(defaults, name):g}{' s' if name.endswith('_s') else ''}",
        )


def thresholds_from(args: argparse.Namespace) -> Thresholds:
    changes: dict[str, float] = {}
    for option, name in THRESHOLD_OPTIONS.items():
        raw = getattr(args, name)
        if raw is None:
            continue
        if name.endswith("_s"):
            changes[name] = parse_duration(raw)
        else:
            try:
                changes[name] = float(raw)
            except ValueError:
                raise ConfigError(f"{option} wants a number, got {raw!r}") from None
        if changes[name] < 0:
            raise ConfigError(f"{option} must not be negative")
    for name, upper in FRACTION_BOUNDS.items():
        if name in changes and not 0 < changes[name] <= upper:
            raise ConfigError(
                f"--{name.replace('_', '-')} is a fraction in (0, {upper:g}], got {changes[name]:g}"
            )
    known = {f.name for f in fields(Thresholds)}
    return replace(Thresholds(), **{k: v for k, v in changes.items() if k in known})


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="oomguard watch", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "urls", nargs="*", metavar="URL", help="vLLM /metrics endpoints (one per DP rank or replica)"
    )
    parser.add_argument(
        "--prometheus", metavar="URL", help="run the detectors on range queries against Prometheus"
    )
    parser.add_argument(
        "--selector", default="", help="PromQL label matchers for --prometheus, e.g. '{job=\"vllm\"}'"
    )
    parser.add_argument("--gpu-selector", default="", help="PromQL label matchers for dcgm-exporter series")
    parser.add_argument("--db", default=DEFAULT_DB, help=f"SQLite file for samples (default ./{DEFAULT_DB})")
    parser.add_argument("--interval", default="5s", help="time between scrapes (default 5s)")
    parser.add_argument(
        "--timeout",
        default=f"{DEFAULT_TIMEOUT_S:g}s",
        help="deadline of each scrape, NVML read or Prometheus query as a whole (default 5s)",
    )
    parser.add_argument(
        "--once", action="store_true", help="one scrape and one check; exit 1 when anything fires"
    )
    parser.add_argument(
        "--json", action="store_true", help="JSON-lines alerts on stdout instead of the live view"
    )
    parser.add_argument("--count", type=int, default=None, help="stop after this many scrapes")
    parser.add_argument("--duration", default=None, help="stop after this long (e.g. 8h)")
    parser.add_argument(
        "--pid",
        type=int,
        action="append",
        default=[],
        help="also watch host memory of this local process (found by port for local URLs)",
    )
    parser.add_argument("--no-host", action="store_true", help="do not read /proc and cgroups for local URLs")
    parser.add_argument("--no-nvml", action="store_true", help="do not read GPU memory through NVML")
    parser.add_argument(
        "--plan",
        metavar="COMMAND",
        help="the server's `vllm serve ...` command (quoted): alert when "
        "it got clearly fewer KV blocks than `oomguard plan` says it should",
    )
    parser.add_argument("--gpu", help="GPU for --plan (e.g. H100); default: the planner's")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every failed scrape and retry")
    add_threshold_options(parser)
    return parser


def _probes(args: argparse.Namespace, urls: list[str]) -> tuple[list[Probe], list[str]]:
    probes: list[Probe] = []
    notes: list[str] = []
    if not args.no_nvml:
        nvml = NvmlProbe()
        if nvml.available:
            probes.append(nvml)
        else:
            notes.append(nvml.reason)
    if not args.no_host:
        probes += [HostProbe(pid=pid) for pid in args.pid]
        if not args.pid:
            probes += [HostProbe(port=url_port(u), target=u) for u in urls if is_loopback_url(u)]
    return probes, notes


def _timeout(args: argparse.Namespace) -> float:
    timeout = parse_duration(args.timeout)
    if timeout < MIN_TIMEOUT_S:
        raise ConfigError(f"--timeout must be at least {MIN_TIMEOUT_S * 1000:g}ms, got {args.timeout!r}")
    return timeout


def _emit_pending(trends: Sequence[PendingTrend], as_json: bool) -> None:
    """What a one-shot check could not judge yet, so silence is not read as "all clear"."""
    for trend in trends:
        print(pending_json(trend) if as_json else pending_line(trend), flush=True)


def _emit(alerts: Sequence[Alert], cleared: Sequence[Alert], as_json: bool) -> None:
    for alert in alerts:
        print(alert_json(alert) if as_json else alert_line(alert), flush=True)
    for alert in cleared:
        print(
            alert_json(alert, state="resolved")
            if as_json
            else f"RESOLVED {alert.detector} {printable(alert.subject)}",
            flush=True,
        )


def _run_prometheus(args: argparse.Namespace, thresholds: Thresholds, stop: threading.Event) -> int:
    from oomguard.watch.prometheus_query import PrometheusError, PrometheusSource

    source = PrometheusSource(
        args.prometheus, selector=args.selector, gpu_selector=args.gpu_selector, timeout=_timeout(args)
    )
    planned = PlanSource(args.plan, args.gpu) if args.plan else None
    lookback = max(
        thresholds.leak_window_s,
        thresholds.kv_window_s,
        thresholds.restart_window_s,
        thresholds.imbalance_window_s,
        thresholds.preemption_window_s,
        thresholds.queue_window_s,
    )
    interval = parse_duration(args.interval)
    clock = TickClock()
    deadline = _deadline(args, clock)
    rounds = 0
    active: dict[tuple[str, str], Alert] = {}
    found = False
    failures = 0
    while not stop.is_set():
        started = clock.monotonic()
        now = clock.now()
        try:
            history, models = source.history(now - lookback, now)
        except PrometheusError as err:
            if args.once:
                raise
            failures += 1
            delay = min(interval * 2 ** (failures - 1), PROMETHEUS_BACKOFF_MAX_S)
            logging.getLogger(__name__).warning("%s; retrying in %.0f s", printable(str(err)), delay)
            if clock.monotonic() + delay > deadline or (args.count is not None and failures >= args.count):
                return 0
            stop.wait(delay)
            continue
        failures = 0
        alerts = evaluate(history, now, thresholds, models, planned)
        found = found or bool(alerts)
        current = {a.key: a for a in alerts}
        if args.once:
            _emit(alerts, (), args.json)
            _emit_pending(pending_trends(history, now, thresholds), args.json)
        else:
            _emit(
                [a for k, a in current.items() if k not in active or active[k].severity != a.severity],
                [a for k, a in active.items() if k not in current],
                args.json,
            )
        active = current
        rounds += 1
        if (
            args.once
            or (args.count is not None and rounds >= args.count)
            or clock.monotonic() + interval > deadline
        ):
            break
        stop.wait(max(0.0, interval - (clock.monotonic() - started)))
    return EXIT_FINDINGS if args.once and found else 0


def _deadline(args: argparse.Namespace, clock: TickClock) -> float:
    """When --duration ends, on the monotonic clock."""
    return clock.monotonic() + parse_duration(args.duration) if args.duration else float("inf")


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="oomguard watch: %(message)s",
    )
    thresholds = thresholds_from(args)
    if args.count is not None and args.count < 1:
        raise ConfigError(f"--count must be at least 1, got {args.count}")
    if args.prometheus:
        if args.urls:
            raise ConfigError("give either /metrics URLs or --prometheus, not both")
        with stop_on_signals() as stop:
            return _run_prometheus(args, thresholds, stop)
    if not args.urls:
        raise ConfigError(
            "no /metrics URL given (e.g. oomguard watch http://localhost:8000) and no --prometheus"
        )
    urls = [normalize_url(u) for u in args.urls]
    interval = parse_duration(args.interval)
    if interval <= 0:
        raise ConfigError("--interval must be positive")
    timeout = _timeout(args)
    store = Store(args.db)
    with stop_on_signals() as stop:
        try:
            return _loop(args, store, urls, thresholds, interval, timeout, stop)
        finally:
            closing = store.close(time.time())
            if closing.pending:
                print(
                    f"oomguard watch: {closing.pending} records could not be written to {args.db}: "
                    f"{closing.error}",
                    file=sys.stderr,
                )


def _loop(
    args: argparse.Namespace,
    store: Store,
    urls: list[str],
    thresholds: Thresholds,
    interval: float,
    timeout: float,
    stop: threading.Event,
) -> int:
    probes, notes = _probes(args, urls)
    for note in notes:
        logging.getLogger(__name__).info(note)
    planned = PlanSource(args.plan, args.gpu) if args.plan else None
    watcher = Watcher(
        store, Scraper(urls, timeout=timeout), probes, thresholds, planned, probe_deadline_s=timeout
    )
    live = not args.json and not args.once and sys.stdout.isatty()
    clock = TickClock()
    deadline = _deadline(args, clock)
    ticks = 0
    found = False
    while not stop.is_set():
        started = clock.monotonic()
        result = watcher.tick(clock.now())
        ticks += 1
        found = found or bool(result.alerts)
        if live:
            print(CLEAR + screen(result, db=args.db), flush=True)
        elif args.once:
            _emit(result.alerts, (), args.json)
            _emit_pending(result.trends_pending, args.json)
        else:
            _emit(result.new, result.cleared, args.json)
        if (
            args.once
            or (args.count is not None and ticks >= args.count)
            or clock.monotonic() + interval > deadline
        ):
            break
        stop.wait(max(0.0, interval - (clock.monotonic() - started)))
    return EXIT_FINDINGS if args.once and found else 0
