"""`oomguard rules`: Prometheus alerting and recording rules for the watch detectors.

    oomguard rules                                  # print the rules (YAML) to stdout
    oomguard rules -o oomguard-rules.yml --selector 'job="vllm"' --horizon 3h --imbalance 0.2
    oomguard rules --grafana dashboard.json         # also a Grafana dashboard over the recorded series

Load the file through `rule_files:` in prometheus.yml; `promtool check rules FILE` validates it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from oomguard.errors import ConfigError
from oomguard.watch.cli import add_threshold_options, thresholds_from
from oomguard.watch.durations import parse_duration
from oomguard.watch.prom_rules import RuleOptions, rules_yaml


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    for text in (args.selector, args.gpu_selector, args.container_selector):
        if text.count('"') % 2 or "\n" in text:
            raise ConfigError(f'selector {text!r} is not a list of label matchers like job="vllm"')
    options = RuleOptions(
        args.selector, args.gpu_selector, args.container_selector, parse_duration(args.for_), args.group
    )
    text = rules_yaml(thresholds_from(args), options)
    if args.output:
        _write(args.output, text)
    else:
        sys.stdout.write(text)
    if args.grafana:
        from oomguard.watch.grafana import dashboard_json

        _write(args.grafana, dashboard_json(options))
    return 0
