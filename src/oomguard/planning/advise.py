"""vLLM-side questions built on the fix search: the verified fixes of a vLLM plan (diagnose and check ask for
them), the fewest GPUs for a model at a length, and what-if ledgers given as numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from oomguard.engines.vllm.engine import PLANNER as VLLM
from oomguard.engines.vllm.engine import with_flags
from oomguard.engines.vllm.fixes import PP_CHOICES, TP_CHOICES
from oomguard.engines.vllm.plan import Plan, PlanRequest, plan
from oomguard.errors import OomguardError
from oomguard.ledger import KV_CACHE, GpuLedger, largest_line_that_fits
from oomguard.planning.fix_search import DEFAULT_FIX_LIMIT, Fix, search_fixes
from oomguard.units import GiB


def suggest_fixes(result: Plan, *, limit: int = DEFAULT_FIX_LIMIT) -> list[Fix[Plan]]:
    """Flag changes that make a vLLM plan fit (or leave more headroom), each re-planned and verified."""
    return search_fixes(VLLM, result, limit=limit)


def fewest_gpus(request: PlanRequest, *, max_gpus: int = 64) -> Plan | None:
    """The smallest TP x PP that fits the model at the requested length (TP first: it also shards KV)."""
    shapes = sorted(
        ((tp, pp) for tp in TP_CHOICES for pp in PP_CHOICES if tp * pp <= max_gpus),
        key=lambda s: (s[0] * s[1], s[1]),
    )
    for tp, pp in shapes:
        try:
            candidate = plan(with_flags(request, {"tensor_parallel_size": tp, "pipeline_parallel_size": pp}))
        except OomguardError:
            continue
        if candidate.fits:
            return candidate
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
                f"cap the KV cache at {kv_room / GiB:.2f} GiB per replica (was {ledger.bytes_of(KV_CACHE) / GiB:.2f}): "
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
