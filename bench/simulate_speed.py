"""Speed: `oomguard simulate` end to end on the Azure conversation trace (19,366 requests, one hour).

Reads the trace, plans Llama-3.1-8B-Instruct on one H100 (vLLM serve defaults, max_model_len 16384), replays
every request through the scheduler model with the roofline step time, and summarizes; then the same at 10x
the arrival rate. Prints steps per second and simulated seconds per wall second.

    python bench/simulate_speed.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from oomguard.simulate.cli import build_setup, split_argv
from oomguard.simulate.run import simulate, summarize
from oomguard.simulate.workload import read_workload, scale_rate

TRACE = REPO.parent / "shared/data/traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"


def main() -> None:
    rows = []
    for rate in (1.0, 10.0):
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
        rows.append(
            (
                f"{rate:g}x",
                f"{len(workload.requests):,}",
                f"{summary.steps:,}",
                f"{t2 - t0:.2f}",
                f"{t1 - t0:.2f}",
                f"{summary.steps / (t2 - t1):,.0f}",
                f"{summary.simulated_time / (t2 - t0):,.0f}",
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
        "sim s",
        "preemptions",
        "KV max",
    )
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
