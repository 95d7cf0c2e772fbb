"""`oomguard rules`: Prometheus alerting and recording rules for the watch detectors.

    oomguard rules                                  # print the rules (YAML) to stdout
    oomguard rules -o oomguard-rules.yml --selector 'job="vllm"' --horizon 3h --imbalance 0.2
    oomguard rules --grafana dashboard.json         # also a Grafana dashboard over the recorded series

Load the file through `rule_files:` in prometheus.yml; `promtool check rules FILE` validates it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from oomguard.errors import ConfigError
from oomguard.watch.cli import OneLineParser, add_threshold_options, thresholds_from
from oomguard.watch.detectors import Thresholds
from oomguard.watch.durations import parse_duration
from oomguard.watch.label_matchers import canonical
from oomguard.watch.prom_rules import RuleOptions, rules_yaml


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="oomguard rules", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write the rules here instead of stdout")
    parser.add_argument(
        "--selector", default="", help="label matchers for the vLLM targets, e.g. 'job=\"vllm\"'"
    )
    parser.add_argument("--gpu-selector", default="", help="label matchers for dcgm-exporter series")
    parser.add_argument(
        "--container-selector",
        default=RuleOptions.container_selector,
        help="label matchers for cAdvisor container series",
    )
    parser.add_argument(
        "--for", dest="for_", default="5m", help="how long a condition holds before firing (5m)"
    )
    parser.add_argument("--group", default="oomguard", help="rule group name prefix")
    parser.add_argument("--grafana", metavar="FILE", help="also write a Grafana dashboard JSON here")
    add_threshold_options(parser)
    return parser


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as err:
        raise ConfigError(f"cannot write {path}: {err.strerror or err}") from None


# Windows that become PromQL ranges: promtool refuses a range that rounds to 0 (ranges are in milliseconds,
# and the leak window's older half is one too). A rule over less than a second judges nothing anyway.
MIN_RANGE_S = 1.0
RANGE_OPTIONS = {
    "--leak-window": ("leak_window_s", 2 * MIN_RANGE_S),
    "--kv-window": ("kv_window_s", MIN_RANGE_S),
    "--queue-window": ("queue_window_s", MIN_RANGE_S),
    "--preemption-window": ("preemption_window_s", MIN_RANGE_S),
    "--imbalance-window": ("imbalance_window_s", MIN_RANGE_S),
    "--restart-window": ("restart_window_s", MIN_RANGE_S),
}
_GROUP_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


def _check_ranges(thresholds: Thresholds) -> None:
    for option, (name, least) in RANGE_OPTIONS.items():
        value = getattr(thresholds, name)
        if value < least:
            raise ConfigError(f"{option} must be at least {least:g}s for a PromQL range, got {value:g}s")


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    selector, gpu_selector, container_selector = (
        canonical(text) for text in (args.selector, args.gpu_selector, args.container_selector)
    )
    if not _GROUP_NAME.fullmatch(args.group):
        raise ConfigError(f"--group {args.group!r}: use letters, digits, '_', '.', ':' or '-'")
    thresholds = thresholds_from(args)
    _check_ranges(thresholds)
    options = RuleOptions(selector, gpu_selector, container_selector, parse_duration(args.for_), args.group)
    text = rules_yaml(thresholds, options)
    if args.output:
        _write(args.output, text)
    else:
        sys.stdout.write(text)
    if args.grafana:
        from oomguard.watch.grafana import dashboard_json

        _write(args.grafana, dashboard_json(options))
    return 0
