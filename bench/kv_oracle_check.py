"""Cross-check oomguard's KV arithmetic against vLLM 0.33.0's own functions (../shared/tools/vllm_oracle).

With vLLM installed in ~/vllm-oracle (see the oracle's README), runs kv_oracle.py over a grid of models and
flags, records vLLM's answers in bench/data/kv_oracle_results.jsonl (which a CI test replays without vLLM),
and prints predicted vs vLLM: num_blocks, "GPU KV cache size" tokens, max concurrency, the fit verdict.

    python bench/kv_oracle_check.py            # replay the recorded answers
    python bench/kv_oracle_check.py --record   # ask vLLM again (about 8 s a case)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from oomguard.engines.vllm.kv_check import KvCase, predict

ORACLE_DIR = REPO.parent / "shared" / "tools" / "vllm_oracle"
ORACLE_PYTHON = Path.home() / "vllm-oracle" / "bin" / "python"
RESULTS = REPO / "bench" / "data" / "kv_oracle_results.jsonl"
GiB = 1 << 30

GRID = [
    KvCase("Llama-3.1-8B", 58.11 * GiB, 8192),
    KvCase("Llama-3.1-8B", 20.0 * GiB, 131072),
    KvCase("Llama-3.1-8B", 5.0 * GiB, 131072),
    KvCase("Llama-3.1-8B", 30.0 * GiB, 32768, tp=2),
    KvCase("Llama-3.1-8B", 30.0 * GiB, 32768, tp=16),
    KvCase("Llama-3.1-8B", 30.0 * GiB, 32768, kv_cache_dtype="fp8"),
    KvCase("Llama-3.1-8B", 30.0 * GiB, 32768, block_size=32),
    KvCase("Qwen3-8B", 45.0 * GiB, 40960),
    KvCase("Qwen3-8B", 45.0 * GiB, 40960, pp=2),
    KvCase("Qwen3-30B-A3B", 20.0 * GiB, 32768, tp=4),
    KvCase("gpt-oss-20b", 58.47 * GiB, 8192),
    KvCase("gpt-oss-20b", 59.32 * GiB, 8192, tp=2),
    KvCase("gpt-oss-20b", 30.0 * GiB, 131072, async_scheduling=True),
    KvCase("gpt-oss-20b", 30.0 * GiB, 131072, async_scheduling=False),
    KvCase("gpt-oss-20b", 30.0 * GiB, 131072, disable_hybrid=True),
    KvCase("gemma-2-9b", 54.12 * GiB, 8192),
    KvCase("gemma-3-27b", 19.53 * GiB, 8192),
    KvCase("gemma-3-27b", 19.53 * GiB, 32768, async_scheduling=True),
    KvCase("gemma-3-27b", 10.0 * GiB, 131072, max_num_batched_tokens=2048, max_num_seqs=256),
    KvCase("DeepSeek-V2-Lite", 43.61 * GiB, 8192),
    KvCase("DeepSeek-V2-Lite", 43.61 * GiB, 8192, tp=4),
    KvCase("DeepSeek-V3", 12.0 * GiB, 163840, tp=8),
    KvCase("DeepSeek-V3", 2.0 * GiB, 163840, tp=8),
]


def ask_vllm(case: KvCase) -> dict:
    argv = [
        str(ORACLE_PYTHON),
        str(ORACLE_DIR / "kv_oracle.py"),
        str(ORACLE_DIR / "configs" / case.model),
        "--available-bytes",
        str(int(case.available_bytes)),
        "--max-model-len",
        str(case.max_model_len),
        "--tp",
        str(case.tp),
        "--pp",
        str(case.pp),
        "--block-size",
        str(case.block_size),
        "--kv-cache-dtype",
        case.kv_cache_dtype,
        "--max-num-batched-tokens",
        str(case.max_num_batched_tokens),
        "--max-num-seqs",
        str(case.max_num_seqs),
        "--async-scheduling",
        "on" if case.async_scheduling else "off",
        "--quiet",
    ]
    if case.disable_hybrid:
        argv.append("--disable-hybrid-kv-cache-manager")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    out = json.loads(done.stdout)
    return {
        key: out.get(key)
        for key in (
            "num_blocks",
            "gpu_kv_cache_size_tokens",
            "max_concurrency",
            "bytes_per_block_pool",
            "error",
            "fit_error",
        )
    } | {
        "groups": [
            [g["type"], g["num_layers"], g["blocks_per_request"]] for g in out.get("kv_cache_groups", [])
        ]
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--record", action="store_true", help="run vLLM's code again and rewrite the recording"
    )
    args = parser.parse_args()
    if args.record:
        if not ORACLE_PYTHON.exists():
            print(f"vLLM oracle not installed at {ORACLE_PYTHON}", file=sys.stderr)
            return 2
        with RESULTS.open("w") as out:
            for case in GRID:
                answer = ask_vllm(case)
                out.write(json.dumps({"case": case.to_dict(), "vllm": answer}) + "\n")
                print("recorded", case.label(), file=sys.stderr)
    rows = [json.loads(line) for line in RESULTS.read_text().splitlines() if line.strip()]
    print(f"{'case':<58} {'blocks ours/vLLM':>20} {'tokens ours/vLLM':>24} {'concurrency ours/vLLM':>24}")
    exact = 0
    for row in rows:
        case, truth = KvCase.from_dict(row["case"]), row["vllm"]
        ours = predict(case, ORACLE_DIR / "configs")
        if truth.get("error"):
            same = ours.fit_error == truth["error"]
            exact += same
            print(f"{case.label():<58} {'fit error, word for word' if same else 'fit error differs'}")
            continue
        same = (
            ours.num_blocks == truth.get("num_blocks")
            and ours.kv_tokens == truth.get("gpu_kv_cache_size_tokens")
            and abs(ours.max_concurrency - (truth.get("max_concurrency") or 0)) < 1e-9
        )
        exact += same
        print(
            f"{case.label():<58} {ours.num_blocks:>9,}/{truth.get('num_blocks') or 0:>9,} "
            f"{ours.kv_tokens:>11,}/{truth.get('gpu_kv_cache_size_tokens') or 0:>11,} "
            f"{ours.max_concurrency:>11.4f}/{truth.get('max_concurrency') or 0:>11.4f}"
            + ("" if same else "  <- differs")
        )
    print(f"\n{exact}/{len(rows)} cases identical to vLLM 0.33.0's own KV functions")
    return 0 if exact == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
