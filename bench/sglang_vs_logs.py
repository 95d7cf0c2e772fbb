"""SGLang planner vs real SGLang startup logs: max_total_num_tokens and the K/V sizes it logged.

Each case is a public log (URL in `source`) with the command that produced it; numbers are copied from the
log.
Prints predicted next to logged, case by case. Run: python bench/sglang_vs_logs.py
"""

from __future__ import annotations

from dataclasses import dataclass

from oomguard.engines.sglang.plan import SglangRequest, plan_sglang

GiB = 1 << 30


@dataclass(frozen=True)
class Case:
    source: str
    command: str
    gpu: str
    logged_tokens: int
    logged_k_gib: float
    caveat: str


CASES = (
    Case(
        "https://github.com/vllm-project/vllm/issues/21348",
        "python3 -m sglang.launch_server --model Qwen/Qwen3-235B-A22B --quantization fp8 --tp 4 "
        "--mem-fraction-static 0.93",
        "H100",
        367404,
        8.23,
        "checkpoint is Qwen3-235B-A22B-FP8 (block-quantized); planned as the bf16 config quantized to fp8 at "
        "load",
    ),
)


def main() -> None:
    print(
        f"{'case':<52} {'tokens (log)':>13} {'tokens (plan)':>14} {'error':>7} {'K GiB log/plan':>16} "
        f"{'K GiB at logged tokens':>23}"
    )
    for case in CASES:
        result = plan_sglang(SglangRequest.from_argv(case.command, gpu=case.gpu))
        tokens = result.kv.kv_cache_tokens
        k_gib = result.rank0.kv_cache_bytes / 2 / GiB
        error = (tokens - case.logged_tokens) / case.logged_tokens
        # The cell is exact: the logged token count times oomguard's cell gives the logged K size.
        pool = result.rank0.layout
        k_at_logged = (case.logged_tokens + pool.page_size) * pool.cell_bytes / 2 / GiB
        print(
            f"{case.source[-40:]:<52} {case.logged_tokens:>13,} {tokens:>14,} {error:>+7.1%} "
            f"{case.logged_k_gib:>7.2f}/{k_gib:<7.2f} {k_at_logged:>23.2f}"
        )
        print(f"  note: {case.caveat}")


if __name__ == "__main__":
    main()
