"""The inverse questions across deployments, on the one fix-search loop's `settle`: the fewest GPUs that serve
a model at a length; and what-if ledgers (a GPU's lines given as numbers, e.g. another planner's): the ways to
make one fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oomguard.engines.vllm.engine import PLANNER as VLLM
from oomguard.engines.vllm.fixes import fp8_weights_supported, shapes
from oomguard.engines.vllm.plan import Plan, PlanRequest, plan
from oomguard.ledger import KV_CACHE, GpuLedger, largest_line_that_fits
from oomguard.planning.fix_search import settle
from oomguard.units import GiB

# The most GPUs the fewest-GPUs search goes up to (eight 8-GPU nodes).
MAX_SEARCH_GPUS = 64


@dataclass(frozen=True)
class FewestGpus:
    """The smallest deployment that serves the model at the asked length with margin."""

    plan: Plan
    flags: dict[str, Any]

    @property
    def gpus(self) -> int:
        return self.plan.engine.total_gpus

    def command(self) -> str:
        args = self.plan.engine.args
        return " ".join(args.to_argv()) if args else ""


def fewest_gpus_search(request: PlanRequest, *, max_gpus: int = MAX_SEARCH_GPUS) -> FewestGpus | None:
    """Every TP x PP up to `max_gpus`, each also with FP8 weights where the GPU runs them: the fewest GPUs
    that fit with margin; at equal count, BF16 weights before FP8, then TP before PP."""
    base = plan(request)
    fp8 = base.engine.quantization is None and base.model.quantization is None and fp8_weights_supported(base)
    for tp, pp in shapes(1, max_gpus):
        variants: list[dict[str, Any]] = [{"tensor_parallel_size": tp, "pipeline_parallel_size": pp}]
        if fp8:
            variants.append({**variants[0], "quantization": "fp8"})
        for flags in variants:
            settled = settle(VLLM, base, flags, pinned=frozenset({"max_model_len"}))
            if settled is not None:
                return FewestGpus(*settled)
    return None


# ---------------------------------------------------------------------------------------------------------
# What-if ledgers (a GPU's lines given as numbers, e.g. another planner's)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerFix:
    summary: str
    ledger: GpuLedger


# What a fix leaves free on the GPU, so that it does not trade an OOM for a zero-headroom deployment.
LEDGER_FIX_HEADROOM = 0.02


def fix_ledger(ledger: GpuLedger, headroom: float = LEDGER_FIX_HEADROOM) -> list[LedgerFix]:
    """Ways to make a given GPU ledger fit with `headroom` (a fraction of the device) left: shrink each
    replica's KV cache, or run fewer replicas."""
    if ledger.fits:
        return []
    fixes: list[LedgerFix] = []
    reserve = int(ledger.total_bytes * headroom)
    target = GpuLedger(
        ledger.total_bytes - reserve, ledger.lines, ledger.replicas, ledger.label, ledger.notes
    )
    kv_room = largest_line_that_fits(target, KV_CACHE)
    if kv_room > 0 and ledger.line(KV_CACHE) is not None:
        fixed = ledger.with_line(KV_CACHE, kv_room)
        fixes.append(
            LedgerFix(
                f"cap the KV cache at {kv_room / GiB:.2f} GiB per replica (was "
                f"{ledger.bytes_of(KV_CACHE) / GiB:.2f}): "
                f"e.g. --kv-cache-memory-bytes {kv_room}",
                fixed,
            )
        )
    for replicas in range(ledger.replicas - 1, 0, -1):
        fewer = ledger.with_replicas(replicas)
        if fewer.used_bytes <= ledger.total_bytes - reserve:
            fixes.append(LedgerFix(f"run {replicas} replica(s) per GPU instead of {ledger.replicas}", fewer))
            break
    return fixes
