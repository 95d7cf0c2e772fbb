"""Speed: `oomguard simulate` end to end on the Azure conversation trace (19,366 requests, one hour).

Reads the trace, plans Llama-3.1-8B-Instruct on one H100 (vLLM serve defaults, max_model_len 16384), replays
every request through the scheduler model with the roofline step time, and summarizes; then the same at 10x
the arrival rate. Prints steps per second and simulated seconds per wall second (and per CPU second: the
machine is shared, CPU time is the steadier figure), each against its target. Then, when vLLM's oracle venv
exists (~/vllm-oracle, see ../shared/tools/vllm_oracle), vLLM 0.33's own scheduler loop (faked model) and
oomguard's on the same step-clocked 2,000-request workload, side by side.

    python bench/simulate_speed.py [--no-vllm]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import argparse
import json

from oomguard.simulation.cli import build_setup, split_argv
from oomguard.simulation.run import simulate, summarize
from oomguard.simulation.workload import read_workload, scale_rate

TRACE = REPO.parent / "shared/data/traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"
TARGET_SIM_S_PER_S = 1000  # at 1x: simulated seconds per second
TARGET_STEPS_PER_S = 3000  # at 10x (saturated, preempting): steps per second
VLLM_FACTOR = 20  # oomguard's scheduler loop against vLLM's own on the same workload


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-vllm", action="store_true", help="skip the side-by-side run of vLLM's scheduler")
    opts = ap.parse_args()
    trace_speed()
    if not opts.no_vllm:
        vllm_side_by_side()


def trace_speed() -> None:
    # The planner's modules load on first use: loaded before the clock starts, so that both rows time the
    # same work (read, plan, replay, summary) and not the first one's imports (compiled afresh where bytecode
    # is not cached).
    import oomguard.planning  # noqa: F401

    rows = []
    for rate in (1.0, 10.0):
        c0 = time.process_time()
        t0 = time.perf_counter()
        workload = read_workload(TRACE)
        if rate != 1.0:
            workload = scale_rate(workload, rate)
        args, rest = split_argv(
            ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--max-model-len=16384"]
        )
        setup = build_setup(args, rest)
        t1 = time.perf_counter()
        result = simulate(workload, setup.config)
        summary = summarize(result)
        t2 = time.perf_counter()
        cpu = time.process_time() - c0
        rows.append(
            (
                f"{rate:g}x",
                f"{len(workload.requests):,}",
                f"{summary.steps:,}",
                f"{t2 - t0:.2f}",
                f"{t1 - t0:.2f}",
                f"{summary.steps / (t2 - t1):,.0f}",
                f"{summary.simulated_time / (t2 - t0):,.0f}",
                f"{summary.simulated_time / cpu:,.0f}",
                f"{summary.steps / cpu:,.0f}",
                f"{summary.simulated_time:,.0f}",
                f"{summary.preemptions:,}",
                f"{summary.kv_usage_max:.1%}",
            )
        )
    header = (
        "rate",
        "requests",
        "steps",
        "wall s",
        "of which setup",
        "steps/s",
        "sim s per wall s",
        "sim s per CPU s",
        "steps per CPU s",
        "sim s",
        "preemptions",
        "KV max",
    )
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    one, ten = rows
    # Judged in CPU time, end to end (read, plan, replay, summary): on a shared machine wall time measures
    # the neighbours.
    sim_per_s = float(one[7].replace(",", ""))
    steps_per_s = float(ten[8].replace(",", ""))
    print(
        f"1x: {sim_per_s:,.0f} simulated s per CPU s = {sim_per_s / TARGET_SIM_S_PER_S:.2f}x the target "
        f"{TARGET_SIM_S_PER_S:,}; 10x: {steps_per_s:,.0f} steps per CPU s = "
        f"{steps_per_s / TARGET_STEPS_PER_S:.2f}x the target {TARGET_STEPS_PER_S:,}"
    )


def vllm_side_by_side() -> None:
    """vLLM's real scheduler (the oracle, faked model) and oomguard's on the same 2,000 requests."""
    sys.path.insert(0, str(REPO / "bench"))
    import simulate_vs_oracle as vo

    name = "speed_azure_conv_2000"
    work = vo.azure("conv", 2000, 1)
    params = {"model": "Llama-3.1-8B", "blocks": 6000, "mnbt": 8192, "seqs": 256, "L": 16384, "pc": True}
    if vo.PY.exists():  # run vLLM now, under the same load as oomguard, not from an earlier cache
        import shutil

        shutil.rmtree(vo.CACHE / name, ignore_errors=True)
    ref = vo.oracle_run(name, work, params)
    if ref is None:
        print("vLLM side by side: skipped (no oracle venv at ~/vllm-oracle and no cached run)")
        return
    oracle = json.loads((ref / "summary.json").read_text())
    vllm_steps_per_s = float(oracle["runtime_s"]["steps_per_s"])
    t0 = time.perf_counter()
    result = vo.simulate_oracle_workload(
        ref / "workload.jsonl", vo.ORACLE / "configs" / params["model"], params
    )
    wall = time.perf_counter() - t0
    ours = oracle["schedule_calls"] / wall  # the oracle's rate counts schedule() calls; so does this one
    same = len(result.timeline) == oracle["total_steps"] and result.preemptions == oracle["total_preemptions"]
    print(
        f"same 2,000-request workload, {oracle['total_steps']:,} steps "
        f"({'identical' if same else 'DIFFERENT'}): "
        f"vLLM 0.33 scheduler {vllm_steps_per_s:,.0f} steps/s, oomguard {ours:,.0f} steps/s = "
        f"{ours / vllm_steps_per_s:.1f}x (target {VLLM_FACTOR}x)"
    )


if __name__ == "__main__":
    main()
