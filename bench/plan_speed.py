"""Speed of the planner: `oomguard plan` end to end (a fresh process, bundled catalog) and plans per second
through the Python API for sweeps. Targets (issue 2): < 0.5 s end to end, >= 5,000 plans/s.

    python bench/plan_speed.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from oomguard.planning import PlanRequest, plan


def end_to_end(args: list[str], runs: int = 7) -> float:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO / "src"))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "oomguard", *args], capture_output=True, env=env, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def sweep(model: str, gpu: str, count: int) -> float:
    lengths = [4096 * (1 + i % 32) for i in range(count)]
    utils = [0.80 + 0.005 * (i % 30) for i in range(count)]
    plan(PlanRequest(model=model, gpu=gpu))  # warm the model cache
    start = time.perf_counter()
    for length, util in zip(lengths, utils):
        plan(
            PlanRequest(model=model, gpu=gpu, flags={"max_model_len": length, "gpu_memory_utilization": util})
        )
    return count / (time.perf_counter() - start)


def main() -> int:
    rows = [
        (
            "oomguard plan Llama-3.1-8B --gpu H100 (process, median of 7)",
            f"{end_to_end(['plan', 'meta-llama/Llama-3.1-8B-Instruct', '--gpu', 'H100']):.3f} s",
        ),
        (
            "oomguard plan DeepSeek-V3 -tp 8 --json (process)",
            f"{end_to_end(['plan', 'deepseek-ai/DeepSeek-V3', '--gpu', 'H200', '-tp', '8', '--json']):.3f} s",
        ),
        (
            "oomguard plan Llama-3.1-70B on 1 GPU, with fixes (process)",
            f"{end_to_end(['plan', 'meta-llama/Llama-3.1-70B-Instruct', '--gpu', 'H100']):.3f} s",
        ),
        (
            "API sweep, Llama-3.1-8B (plans/s)",
            f"{sweep('meta-llama/Llama-3.1-8B-Instruct', 'H100', 5000):,.0f}",
        ),
        ("API sweep, gemma-3-27b hybrid (plans/s)", f"{sweep('google/gemma-3-27b-it', 'H100', 3000):,.0f}"),
        ("API sweep, DeepSeek-V3 TP8 (plans/s)", f"{sweep('deepseek-ai/DeepSeek-V3', 'H200', 1000):,.0f}"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value:>10}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
