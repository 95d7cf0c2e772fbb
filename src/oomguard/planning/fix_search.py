"""The one fix-search loop: try each engine's candidate flag changes, re-plan them, keep those that start.

Candidates of one group are alternatives (TP 2, 4, 8 ...): the first that fits ends the group. A candidate
that does not fit alone may be widened by the engine (vLLM: with the longest max_model_len it then allows).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from oomguard.engines.base import EnginePlanner, FixCandidate
from oomguard.errors import OomguardError
from oomguard.result import FixResult

P = TypeVar("P")
# How many verified fixes a plan shows (each costs one or two re-plans).
DEFAULT_FIX_LIMIT = 6


@dataclass(frozen=True)
class Fix(Generic[P]):
    """A verified fix: its neutral description and the engine's plan with it applied."""

    result: FixResult
    plan: P


def _try(engine: EnginePlanner[P], base: P, flags: Mapping[str, Any]) -> P | None:
    try:
        fixed = engine.replan(base, flags)
    except OomguardError:
        return None
    return fixed if engine.fits(fixed) else None


def search_fixes(engine: EnginePlanner[P], base: P, *, limit: int = DEFAULT_FIX_LIMIT) -> list[Fix[P]]:
    """Flag changes that make `base` start (or leave it headroom), each re-planned and verified, cheapest
    first."""
    fixes: list[Fix[P]] = []
    tried: set[str] = set()
    solved: set[str] = set()
    for candidate in engine.candidates(base):
        flags_key = repr(sorted(candidate.flags.items()))
        if flags_key in tried or candidate.key in solved:
            continue
        tried.add(flags_key)
        chosen: FixCandidate = candidate
        fixed = _try(engine, base, candidate.flags)
        if fixed is None:
            wider = engine.widen(base, candidate)
            if wider is not None:
                fixed = _try(engine, base, wider.flags)
                chosen = wider
        if fixed is not None:
            solved.add(candidate.key)
            fixes.append(Fix(engine.fix_result(base, fixed, chosen), fixed))
        if len(fixes) >= limit:
            break
    return sorted(fixes, key=lambda f: engine.fix_order(f.result, f.plan))
