"""Score the host-memory ledger against real host-OOM reports.

Cases: bench/data/host_oom_cases.jsonl, one per vLLM host-memory report of the development sets
(../shared/data/validation/oom_reports_dev.jsonl and bench/data/oom_corpus/tune.jsonl; never the frozen
split),
with the setup transcribed from the report as a `vllm serve` command, the GPUs of one node, the limit where
the
report states it, the step it died at, and the node figure where the report gives one. For each case: the
predicted verdict and step, the node peak (+- band) and the reported figure; then how many stated-limit cases
the plan calls at the same step. Cases the ledger cannot plan say why.

    python bench/host_vs_reports.py [--verbose]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from oomguard.engines.vllm.host import host_ledger, plan_host_inputs
from oomguard.engines.vllm.plan import PlanRequest, plan
from oomguard.errors import OomguardError
from oomguard.host.ledger import HostLedger, HostLimits
from oomguard.host.limits import given_limits
from oomguard.units import GiB

CASES = REPO / "bench" / "data" / "host_oom_cases.jsonl"
CORPORA = {
    "dev": REPO.parent / "shared" / "data" / "validation" / "oom_reports_dev.jsonl",
    "tune": REPO / "bench" / "data" / "oom_corpus" / "tune.jsonl",
}


def load_cases() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]


def corpus_ids() -> dict[str, set[str]]:
    """The report ids of each development set (the frozen split is never opened)."""
    found: dict[str, set[str]] = {}
    for name, path in CORPORA.items():
        if path.is_file():
            found[name] = {json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()}
    return found


def ledger_for(case: dict[str, Any]) -> HostLedger:
    """Plan the transcribed command on the reported GPU (its tier sets max_num_seqs) and build the node
    ledger."""
    result = plan(
        PlanRequest.from_argv(case["command"], gpu=case["gpu"] or "H100", vllm_version=case["vllm_version"])
    )
    stages: dict[int, int] = {}
    used: dict[int, int] = {}
    for rank in result.ranks:
        stage = rank.placement.pp_rank
        stages[stage] = max(stages.get(stage, 0), rank.weights.bytes)
        used[stage] = max(used.get(stage, 0), rank.gpu.used_bytes)
    limits = given_limits(case["limit"]) if case["limit"] else HostLimits()
    inputs = plan_host_inputs(
        result.engine,
        result.model,
        limits,
        stage_weights=[stages[k] for k in sorted(stages)],
        stage_gpu_used=[used[k] for k in sorted(used)],
        unified_memory=result.gpu.unified_memory,
        local_gpus=case["local_gpus"],
    )
    return host_ledger(result.engine, inputs)


def predicted_step(ledger: HostLedger) -> str:
    return ledger.dies_at.value if ledger.dies_at else f"fits ({ledger.verdict.value})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="print every ledger line of each case")
    options = parser.parse_args()
    ids = corpus_ids()
    header = f"{'report':<46} {'case':<30} {'limit':>7} {'reported':>16} {'predicted':>16} {'node peak':>18} figure"  # noqa: E501
    print(header)
    print("-" * len(header))
    stated = same_step = 0
    for case in load_cases():
        where = case["corpus"]
        if where in ids and case["id"] not in ids[where]:
            raise SystemExit(f"{case['id']}: not in the {where} corpus")
        reported = f"{case['reported_outcome'][:3]} @ {case['reported_step']}"
        limit = case["limit"] or "-"
        if not case["modelled"] or not case["command"]:
            print(
                f"{case['id'][:46]:<46} {case['case'][:30]:<30} {limit:>7} {reported:>16} {'-':>16} "
                f"{'-':>18} "
                f"not planned: {case['why_not']}"
            )
            continue
        try:
            ledger = ledger_for(case)
        except OomguardError as err:
            print(f"{case['id'][:46]:<46} {case['case'][:30]:<30} cannot plan: {err}")
            continue
        step = predicted_step(ledger)
        peak = f"{ledger.peak_bytes / GiB:.0f}+-{ledger.peak_band / GiB:.0f} GiB @{ledger.peak_step.value}"
        figure = case["reported_figure"]
        if case["reported_node_gib"] is not None:
            figure = f"{case['reported_node_gib']:.1f} GiB: {figure}"
        print(
            f"{case['id'][:46]:<46} {case['case'][:30]:<30} {limit:>7} {reported:>16} {step:>16} {peak:>18} "
            f"{figure}"
        )
        if options.verbose:
            for line in ledger.lines:
                print(
                    f"    {line.label:<40} {line.count:>3} x {line.bytes_each / GiB:8.2f} GiB  "
                    f"{line.step.value}"
                )
        if case["limit"] and case["reported_outcome"] == "oom-killed":
            stated += 1
            same_step += ledger.dies_at is not None and ledger.dies_at.value == case["reported_step"]
    print()
    print(f"stated-limit OOM reports planned: {stated}; called OOM-killed at the reported step: {same_step}")
    print()
    print("Process baselines vs the resident sizes reports measured:")
    for case in load_cases():
        if not case.get("compare_line"):
            continue
        ledger = ledger_for(case)
        line = next(item for item in ledger.lines if item.key == case["compare_line"])
        low, high = case["reported_range_gib"]
        print(
            f"  {case['id']}: {line.label} {line.bytes_each / GiB:.1f} +-{line.band_each / GiB:.1f} GiB "
            f"predicted; {low}-{high} GiB measured ({case['reported_figure']})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
