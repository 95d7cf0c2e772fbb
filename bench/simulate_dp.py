"""Data parallel: the Azure conversation trace through DP 4 behind each balancer, and the simulator's speed.

Plans Qwen3-32B on H100s (vLLM serve defaults, max_model_len 16384, one rank per GPU), replays the whole
Azure LLM inference conversation trace (19,366 requests, one hour) at 0.5x, 1x and 2x its arrival rate through
four
ranks, each the V1 scheduler with its own KV pool, behind vLLM 0.33's internal balancer (with its default of
one API server per rank), the rule before vLLM PR #49204, round robin, and the llm-d KV-aware router. Per
balancer: each rank's peak KV usage and preemptions, the time the ranks' KV usage is more than 15% apart
((max - min) / mean, counted while the mean is at least 5%), the first rank to saturate.

Speed: the DP run (vLLM's balancer) against four single-engine runs over the same requests split round robin,
in CPU seconds of this process (the machine is shared; wall time would measure the neighbours).

    python bench/simulate_dp.py
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from oomguard.simulation.cli import build_setup, split_argv
from oomguard.simulation.dp.balancer import BalancerKind
from oomguard.simulation.dp.run import DpConfig, DpResult, simulate_dp
from oomguard.simulation.run import simulate, summarize
from oomguard.simulation.workload import Workload, read_workload, scale_rate

TRACE = REPO.parent / "shared/data/traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"
MODEL = "Qwen/Qwen3-32B"
DP = 4
RATES = (0.5, 1.0, 2.0)


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in [header, *rows])


def _row(rate: float, result: DpResult, cpu: float) -> tuple[str, ...]:
    summaries = [summarize(r) for r in result.ranks]
    imb = result.imbalance
    span = len(imb.values) * imb.sample_s
    sat = result.first_saturated
    return (
        f"{rate:g}x",
        result.config.balancer.value,
        " ".join(f"{s.kv_usage_max:.0%}" for s in summaries),
        " ".join(f"{s.preemptions:,}" for s in summaries),
        f"{imb.time_above:,.0f} s ({imb.time_above / span:.0%})" if span else "-",
        f"rank {sat.rank} at {sat.time:,.0f} s" if sat is not None else "none",
        " ".join(f"{r:,}" for r in result.routed),
        f"{cpu:.1f}",
    )


def main() -> None:
    args, rest = split_argv(["--model", MODEL, "--gpu", "H100", "--max-model-len=16384", "-dp", str(DP)])
    setup = build_setup(args, rest)
    base = read_workload(TRACE)
    print(f"{MODEL} on H100, DP {DP}: {setup.describe}")
    rows = []
    speed = []
    for rate in RATES:
        workload = scale_rate(base, rate) if rate != 1.0 else base
        for kind in BalancerKind:
            api_servers = DP if kind in (BalancerKind.VLLM, BalancerKind.VLLM_LEGACY) else 1
            config = DpConfig(setup.config, DP, kind, api_servers=api_servers)
            t0 = time.process_time()
            result = simulate_dp(workload, config)
            cpu = time.process_time() - t0
            rows.append(_row(rate, result, cpu))
            if kind is BalancerKind.VLLM:
                dp_cpu = cpu
        # Four single engines over the requests split round robin: the work DP 4 does, without a balancer.
        t0 = time.process_time()
        for k in range(DP):
            part = Workload(workload.requests[k::DP], workload.clock, workload.source)
            simulate(part, replace(setup.config))
        singles = time.process_time() - t0
        speed.append((f"{rate:g}x", f"{dp_cpu:.1f}", f"{singles:.1f}", f"{dp_cpu / singles:.2f}"))
    print(
        _table(
            (
                "rate",
                "balancer",
                "KV peak per rank",
                "preemptions per rank",
                "imbalance > 15%",
                "first saturated",
                "routed per rank",
                "CPU s",
            ),
            rows,
        )
    )
    print()
    print(_table(("rate", "DP 4 CPU s", "4 single engines CPU s", "ratio"), speed))


if __name__ == "__main__":
    main()
