"""The fix search against exhaustive search: for every failing (or marginal) plan of a grid of models x GPUs x
context lengths, the cheapest fix `plan` offers, its margin, and whether an exhaustive search over TP x PP x
FP8 weights x FP8 KV x utilization x max_model_len finds a cheaper one (none may).

"Cheaper" is the fix search's own order: fewer GPUs, then a longer context, then fewer FP8 trade-offs. The
exhaustive search plans every shape up to the found fix's GPU count, each at the largest utilization the free
memory at start covers (more never costs), with the longest max_model_len that fits with margin (rounded as
fixes are); every candidate must fit with margin (verdict `fits`) as the fixes must.

    python bench/fix_search.py
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from oomguard.engines.vllm.engine import PLANNER as VLLM
from oomguard.engines.vllm.fixes import (
    LENGTH_ROUNDING,
    MAX_UTILIZATION,
    TP_CHOICES,
    fp8_weights_supported,
    free_memory_cap,
    longest_max_model_len,
)
from oomguard.engines.vllm.plan import Plan, PlanRequest, kv_reserve_bytes, plan
from oomguard.errors import OomguardError
from oomguard.kinds import Verdict
from oomguard.planning.fix_search import Fix, search_fixes

GiB = 1 << 30
MODELS = (
    "Qwen/Qwen3-8B",
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen3-14B",
    "Qwen/Qwen3-32B",
    "meta-llama/Llama-3.1-70B-Instruct",
)
GPUS = ("T4", "L4", "A10G", "L40S", "A100-80GB", "H100")
LENGTHS = (8192, 32768, 131072)
MAX_SHAPE_GPUS = 16


def _round(length: int, block: int) -> int:
    if length >= 2 * LENGTH_ROUNDING:
        return length // LENGTH_ROUNDING * LENGTH_ROUNDING
    return max(block, length // block * block)


def _cost(gpus: int, length: int, flags: dict[str, object]) -> tuple[int, int, int]:
    risks = sum(1 for name in ("quantization", "kv_cache_dtype") if name in flags)
    return (gpus, -length, risks)


def _fits(request: PlanRequest, flags: dict[str, object]) -> Plan | None:
    try:
        result = plan(request.with_flags(**flags))
    except OomguardError:
        return None
    return result if result.verdict == Verdict.FITS else None


def _best_at(
    request: PlanRequest, flags: dict[str, object], asked: int
) -> tuple[int, dict[str, object]] | None:
    """The longest length (<= asked) this shape holds with margin at the largest utilization it may use."""
    try:
        probe = plan(request.with_flags(**flags, max_model_len=asked))
    except OomguardError:
        return None
    if probe.failure not in (None, "max-model-len", "no-kv-memory", "startup-free-memory"):
        return None
    utilization = min(MAX_UTILIZATION, free_memory_cap(probe))
    try:
        roomy = plan(request.with_flags(**flags, max_model_len=asked, gpu_memory_utilization=utilization))
    except OomguardError:
        return None
    if roomy.failure not in (None, "max-model-len", "no-kv-memory"):
        return None
    length = min(
        asked, _round(longest_max_model_len(roomy, kv_reserve_bytes(roomy)), roomy.engine.block_size)
    )
    for candidate in (length, _round(length - LENGTH_ROUNDING, roomy.engine.block_size)):
        if candidate <= 0:
            continue
        final = {**flags, "max_model_len": candidate, "gpu_memory_utilization": utilization}
        if _fits(request, final) is not None:
            return candidate, final
    return None


def exhaustive_cheaper(request: PlanRequest, base: Plan, fix: Fix[Plan] | None) -> tuple[str, int]:
    """The cheapest configuration exhaustive search finds, if cheaper than `fix`; and how many it planned."""
    asked = base.engine.max_model_len
    limit = fix.result.gpus if fix is not None else MAX_SHAPE_GPUS
    target = (
        _cost(fix.result.gpus, fix.result.max_model_len, dict(fix.result.flags))
        if fix is not None
        else (MAX_SHAPE_GPUS + 1, 0, 0)
    )
    fp8_w = (
        base.model.quantization is None and base.engine.quantization is None and fp8_weights_supported(base)
    )
    shapes = [(tp, pp) for tp in TP_CHOICES for pp in range(1, limit + 1) if tp * pp <= limit]
    tried = 0
    best: tuple[tuple[int, int, int], str] | None = None
    for (tp, pp), kv8, w8 in itertools.product(shapes, (False, True), (False, True) if fp8_w else (False,)):
        flags: dict[str, object] = {"tensor_parallel_size": tp, "pipeline_parallel_size": pp}
        if kv8:
            flags["kv_cache_dtype"] = "fp8"
        if w8:
            flags["quantization"] = "fp8"
        tried += 1
        found = _best_at(request, flags, asked)
        if found is None:
            continue
        length, final = found
        cost = _cost(tp * pp, length, final)
        if cost < target and (best is None or cost < best[0]):
            best = (cost, " ".join(f"{k}={v}" for k, v in final.items()))
    return (best[1] if best else ""), tried


def main() -> int:
    rows = []
    started = time.perf_counter()
    for model, gpu, length in itertools.product(MODELS, GPUS, LENGTHS):
        request = PlanRequest(model=model, gpu=gpu, flags={"max_model_len": length})
        try:
            base = plan(request)
        except OomguardError:
            continue
        if base.verdict == Verdict.FITS:
            continue
        fixes = search_fixes(VLLM, base)
        fix = fixes[0] if fixes else None
        cheaper, tried = exhaustive_cheaper(request, base, fix)
        margin = fix.plan.margin if fix is not None else None
        rows.append((model, gpu, length, str(base.verdict), base.failure or "-", fix, margin, cheaper, tried))
    elapsed = time.perf_counter() - started
    print(
        f"{'model':<34} {'GPU':<10} {'length':>7} {'verdict / failure':<32} {'cheapest fix found':<62} "
        f"{'GPUs':>4} {'len':>7} {'spare GiB':>9}  cheaper by exhaustive search"
    )
    bad = 0
    for model, gpu, length, verdict, failure, fix, margin, cheaper, tried in rows:
        text = ", ".join(f"{k}={v}" for k, v in fix.result.flags.items()) if fix else "(none found)"
        spare = f"{margin.spare_bytes / GiB:9.2f}" if margin is not None else f"{'-':>9}"
        bad += bool(cheaper)
        print(
            f"{model:<34} {gpu:<10} {length:>7} {verdict + ' / ' + failure:<32} {text[:62]:<62} "
            f"{fix.result.gpus if fix else '-':>4} {fix.result.max_model_len if fix else '-':>7} {spare}  "
            f"{cheaper or 'none'} ({tried} shapes)"
        )
    print(
        f"\n{len(rows)} failing or marginal plans; a fix found for {sum(r[5] is not None for r in rows)}; "
        f"exhaustive search found a cheaper one for {bad}; {elapsed:.1f} s"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
