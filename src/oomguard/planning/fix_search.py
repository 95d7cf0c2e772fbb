"""The one fix-search loop: try each engine's candidate flag changes, re-plan them, settle each with the
follow-up settings the engine says it still needs, keep those that count as fixes, cheapest first.

Candidates of one group are alternatives (TP 2, 4, 8 ...): the first that fits ends the group. Candidates that
add GPUs stop once two GPU counts of the same variant fit: more GPUs would only cost more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from oomguard.engines.base import EnginePlanner, FixCandidate
from oomguard.errors import OomguardError
from oomguard.result import FixResult

P = TypeVar("P")
# How many verified fixes a plan shows (each costs a few re-plans).
DEFAULT_FIX_LIMIT = 6
# Follow-up settings a candidate may add (a length, a utilization) before it is given up.
SETTLE_STEPS = 5
# GPU counts of one variant that fit are alternatives enough; a larger count is not tried after this many.
ENOUGH_GPU_COUNTS = 2


@dataclass(frozen=True)
class Fix(Generic[P]):
    """A verified fix: its neutral description and the engine's plan with it applied."""

    result: FixResult
    plan: P


def settle(
    engine: EnginePlanner[P], base: P, flags: Mapping[str, Any], pinned: frozenset[str] = frozenset()
) -> tuple[P, dict[str, Any]] | None:
    """Re-plan `base` with `flags`; while it does not fit, add the follow-up the engine names and re-plan.
    The fitting plan and the flags it took, or None. `flags` and `pinned` are never changed by a follow-up."""
    current = dict(flags)
    keep = pinned | frozenset(flags)
    for _ in range(SETTLE_STEPS):
        try:
            trial = engine.replan(base, current)
        except OomguardError:
            return None
        if engine.fits(trial):
            return trial, current
        more = engine.follow_up(base, trial, current, keep)
        if not more:
            return None
        current.update(more)
    return None


def search_fixes(engine: EnginePlanner[P], base: P, *, limit: int = DEFAULT_FIX_LIMIT) -> list[Fix[P]]:
    """Flag changes that make `base` start (or leave it margin), each settled and verified, cheapest first."""
    fixes: list[Fix[P]] = []
    tried: set[str] = set()
    solved: set[str] = set()
    gpu_counts: dict[str, set[int]] = {}  # GPU counts that fit, by variant
    for candidate in engine.candidates(base):
        flags_key = repr(sorted(candidate.flags.items()))
        if flags_key in tried or candidate.key in solved or _enough_shapes(candidate, gpu_counts):
            continue
        tried.add(flags_key)
        settled = settle(engine, base, candidate.flags)
        if settled is None:
            continue
        fixed, flags = settled
        solved.add(candidate.key)
        if candidate.gpus:
            gpu_counts.setdefault(candidate.variant, set()).add(candidate.gpus)
        fixes.append(Fix(engine.fix_result(base, fixed, candidate, flags), fixed))
    return sorted(fixes, key=lambda f: engine.fix_order(f.result, f.plan))[:limit]


def _enough_shapes(candidate: FixCandidate, gpu_counts: Mapping[str, set[int]]) -> bool:
    counts = gpu_counts.get(candidate.variant, set())
    return bool(candidate.gpus) and len(counts) >= ENOUGH_GPU_COUNTS and candidate.gpus > max(counts)
