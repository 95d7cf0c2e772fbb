"""Accuracy: oomguard's scheduler model against vLLM 0.33.0's real scheduler (the oracle), scenario by
scenario.

Builds step-clocked workloads from the shared traces (Azure, Mooncake with prefix ids), runs
`../shared/tools/vllm_oracle/sched_oracle.py` on each (only if ~/vllm-oracle exists and its output is not
cached under bench/.oracle_cache/), runs `oomguard simulate` logic on the same workload and flags, and prints
steps / preemptions / peak KV blocks / max running, plus the first step whose chunk sizes differ.

    python bench/simulate_vs_oracle.py [--only NAME] [--no-oracle]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

SHARED = REPO.parent / "shared"
TRACES = SHARED / "data" / "traces"
ORACLE = SHARED / "tools" / "vllm_oracle"
REFS = SHARED / "data" / "scheduler_reference"
CACHE = REPO / "bench" / ".oracle_cache"
PY = Path.home() / "vllm-oracle" / "bin" / "python"


def azure(name: str, n: int, gap: int, start: int = 0) -> list[dict]:
    rows = (
        (TRACES / "azure_llm_inference_2023" / f"AzureLLMInferenceTrace_{name}.csv")
        .read_text()
        .splitlines()[1:]
    )
    out = []
    for i, line in enumerate(rows[start : start + n]):
        _, p, o = line.split(",")
        out.append(
            {
                "id": f"{name}{i}",
                "prompt_tokens": int(p),
                "output_tokens": max(1, int(o)),
                "arrival_step": i * gap,
            }
        )
    return out


def mooncake(name: str, n: int, ms_per_step: float, cap: int = 30000) -> list[dict]:
    out = []
    for i, line in enumerate(
        (TRACES / "mooncake_fast25" / f"{name}_trace.jsonl").read_text().splitlines()[:n]
    ):
        d = json.loads(line)
        if d["input_length"] >= cap:
            continue
        out.append(
            {
                "id": f"m{i}",
                "prompt_tokens": d["input_length"],
                "output_tokens": d["output_length"],
                "arrival_step": int(d["timestamp"] / ms_per_step),
                "prefix_hash_ids": d["hash_ids"],
            }
        )
    return out


# name -> (workload builder, oracle args)
SCENARIOS = {
    "mooncake_conv_llama_pc": (
        lambda: mooncake("conversation", 300, 40),
        {"model": "Llama-3.1-8B", "blocks": 6000, "mnbt": 4096, "seqs": 64, "L": 32768, "pc": True},
    ),
    "mooncake_conv_llama_pc_tight": (
        lambda: mooncake("conversation", 300, 10),
        {"model": "Llama-3.1-8B", "blocks": 2500, "mnbt": 2048, "seqs": 64, "L": 32768, "pc": True},
    ),
    "mooncake_synth_gptoss_pc": (
        lambda: mooncake("synthetic", 200, 50),
        {"model": "gpt-oss-20b", "blocks": 5000, "mnbt": 4096, "seqs": 64, "L": 32768, "pc": True},
    ),
    "azure_conv_llama_lpt_preempt": (
        lambda: azure("conv", 600, 1),
        {
            "model": "Llama-3.1-8B",
            "blocks": 1200,
            "mnbt": 2048,
            "seqs": 128,
            "L": 16384,
            "pc": False,
            "lpt": 256,
        },
    ),
    "azure_conv_llama_pc_preempt": (
        lambda: azure("conv", 600, 1),
        {"model": "Llama-3.1-8B", "blocks": 1200, "mnbt": 2048, "seqs": 128, "L": 16384, "pc": True},
    ),
    "azure_code_gemma2_sw": (
        lambda: azure("code", 300, 2),
        {"model": "gemma-2-9b", "blocks": 6000, "mnbt": 2048, "seqs": 64, "L": 8192, "pc": False},
    ),
    "azure_code_gemma2_sw_pc": (
        lambda: azure("code", 300, 2),
        {"model": "gemma-2-9b", "blocks": 6000, "mnbt": 2048, "seqs": 64, "L": 8192, "pc": True},
    ),
    "azure_code_qwen3moe_bs32": (
        lambda: azure("code", 400, 0),
        {
            "model": "Qwen3-30B-A3B",
            "blocks": 4000,
            "mnbt": 8192,
            "seqs": 256,
            "L": 16384,
            "pc": False,
            "bs": 32,
        },
    ),
    # Sparse arrivals: long runs of identical decode steps (simulate advances them together), block
    # boundaries and preemptions falling inside those runs.
    "azure_conv_llama_sparse_decode_runs": (
        lambda: azure("conv", 400, 12),
        {"model": "Llama-3.1-8B", "blocks": 1100, "mnbt": 2048, "seqs": 64, "L": 16384, "pc": False},
    ),
    "azure_conv_llama_pc_sparse_decode_runs": (
        lambda: azure("conv", 400, 12),
        {"model": "Llama-3.1-8B", "blocks": 1100, "mnbt": 2048, "seqs": 64, "L": 16384, "pc": True},
    ),
    # Sliding-window + full-attention groups with prefix caching, preempting (own blocks found again).
    "azure_conv_gptoss_pc_preempt": (
        lambda: azure("conv", 500, 2),
        {"model": "gpt-oss-20b", "blocks": 2300, "mnbt": 2048, "seqs": 128, "L": 16384, "pc": True},
    ),
    "mooncake_conv_llama_pc_sparse_decode_runs": (
        lambda: mooncake("conversation", 250, 10),
        {"model": "Llama-3.1-8B", "blocks": 2100, "mnbt": 2048, "seqs": 32, "L": 32768, "pc": True},
    ),
}


def oracle_run(name: str, work: list[dict], a: dict) -> Path | None:
    out = CACHE / name
    if (out / "summary.json").exists():
        return out
    if not PY.exists():
        return None
    out.mkdir(parents=True, exist_ok=True)
    (out / "workload.jsonl").write_text("".join(json.dumps(w) + "\n" for w in work))
    (out / "params.json").write_text(json.dumps(a))
    cmd = [
        str(PY),
        str(ORACLE / "sched_oracle.py"),
        "--model-dir",
        str(ORACLE / "configs" / a["model"]),
        "--workload",
        str(out / "workload.jsonl"),
        "--out-dir",
        str(out),
        "--no-per-request-print",
        "--num-gpu-blocks",
        str(a["blocks"]),
        "--max-num-batched-tokens",
        str(a["mnbt"]),
        "--max-num-seqs",
        str(a["seqs"]),
        "--max-model-len",
        str(a["L"]),
        "--block-size",
        str(a.get("bs", 16)),
        "--long-prefill-token-threshold",
        str(a.get("lpt", 0)),
        "--allow-long-max-model-len",
    ]
    if a.get("pc"):
        cmd.append("--prefix-caching")
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        print(f"{name}: oracle failed: {res.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return out


def simulate_oracle_workload(workload: Path, model_dir: Path, a: dict):  # type: ignore[no-untyped-def]
    """oomguard's scheduler on the oracle's workload; the KV groups from the planner's readers (models/ and
    engines/vllm/kv.py), as `oomguard simulate --num-gpu-blocks-override` gets them."""
    from oomguard.engines.vllm.flags import parse_serve_command
    from oomguard.simulation.model_facts import read_model
    from oomguard.simulation.run import SimulationConfig, simulate
    from oomguard.simulation.scheduler import SchedulerConfig
    from oomguard.simulation.workload import read_workload

    serve = parse_serve_command(
        [
            "vllm",
            "serve",
            str(model_dir),
            "--block-size",
            str(a.get("bs", 16)),
            "--max-model-len",
            str(a["L"]),
        ]
    )
    _, groups = read_model(serve, "H100", None)
    cfg = SchedulerConfig(
        a["mnbt"],
        a["seqs"],
        a["L"],
        a["blocks"],
        groups,
        enable_prefix_caching=bool(a.get("pc")),
        long_prefill_token_threshold=a.get("lpt", 0),
        async_scheduling=False,
    )
    return simulate(read_workload(workload), SimulationConfig(cfg, record_chunks=True))


def oracle_compare_rows(name: str, result, ref: Path, wall: float) -> tuple:  # type: ignore[no-untyped-def]
    oracle = json.loads((ref / "summary.json").read_text())
    tl = result.timeline
    steps = [json.loads(line) for line in (ref / "timeline.jsonl").read_text().splitlines()]
    steps = [o for o in steps if o["executed"]]
    first_diff = "same"
    for i, (chunks, o) in enumerate(zip(tl.chunks, steps)):
        ours = sorted((rid, n) for rid, n, _ in chunks)
        theirs = sorted([(p[0], p[1]) for p in o["prefill"]] + [(d, 1) for d in o["decode"]])
        if ours != theirs or tl.kv_blocks_used[i] != o["kv_blocks_used"]:
            first_diff = f"differ at step {o['step']}"
            break
    return (
        name,
        f"{len(tl)}/{oracle['total_steps']}",
        f"{result.preemptions}/{oracle['total_preemptions']}",
        f"{max(tl.kv_blocks_used)}/{oracle['max_kv_blocks_used']}",
        f"{max(tl.running)}/{oracle['max_running']}",
        first_diff,
        f"{wall:.2f}",
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    ap.add_argument("--no-oracle", action="store_true", help="use cached oracle output only")
    args = ap.parse_args()
    rows = []
    dirs: list[tuple[str, Path, dict]] = []
    for ref in sorted(REFS.iterdir()):
        if ref.is_dir():
            p = json.loads((ref / "params.json").read_text())["oracle_args"]
            dirs.append(
                (
                    ref.name,
                    ref,
                    {
                        "model": Path(p["model_dir"]).name,
                        "blocks": p["num_gpu_blocks"],
                        "mnbt": p["max_num_batched_tokens"],
                        "seqs": p["max_num_seqs"],
                        "L": p["max_model_len"],
                        "pc": p["prefix_caching"],
                        "bs": p["block_size"],
                        "lpt": p["long_prefill_token_threshold"],
                    },
                )
            )
    for name, (build, a) in SCENARIOS.items():
        if args.only and args.only != name:
            continue
        cached = CACHE / name
        out = (
            cached
            if (cached / "summary.json").exists()
            else (None if args.no_oracle else oracle_run(name, build(), a))
        )
        if out is not None:
            dirs.append((name, out, a))
    for name, d, a in dirs:
        if args.only and args.only != name:
            continue
        t0 = time.perf_counter()
        result = simulate_oracle_workload(d / "workload.jsonl", ORACLE / "configs" / a["model"], a)
        wall = time.perf_counter() - t0
        rows.append(oracle_compare_rows(name, result, d, wall))
    header = ("scenario", "steps ours/oracle", "preempt", "peak blocks", "max running", "chunks", "wall s")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
