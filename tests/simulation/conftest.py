"""What several simulate tests run: seed 002's traffic on Llama-3.1-8B (vLLM's own config), and its flags."""

from __future__ import annotations

import json
from pathlib import Path

LLAMA = "tools/vllm_oracle/configs/Llama-3.1-8B"


def seed002_trace(directory: Path) -> Path:
    """Seed 002's traffic: a 153,853-token prompt arriving among short multi-turn requests."""
    rows = [{"arrival_s": 0.05 * i, "prompt_tokens": 600 + 37 * i, "output_tokens": 200} for i in range(30)]
    rows.append({"arrival_s": 0.5, "prompt_tokens": 153_853, "output_tokens": 50})
    rows.sort(key=lambda r: r["arrival_s"])
    path = directory / "agentic.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def seed002_args(shared_data: Path, trace: Path, layout: str) -> list[str]:
    """`oomguard simulate` arguments for that trace: seed 002's engine, the step `layout`, its headroom."""
    return [
        str(trace),
        "--model",
        str(shared_data.parent / LLAMA),
        "--num-gpu-blocks-override",
        "30000",
        "--max-num-batched-tokens",
        "32768",
        "--max-num-seqs",
        "64",
        "--max-model-len",
        "163840",
        "--hidden-size",
        "10240",
        "--layout",
        layout,
        "--headroom",
        "11.8GiB",
        "--step-time",
        "20,0.05,0.01",
    ]
