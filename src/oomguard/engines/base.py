"""What an engine gives the planning package: one planner object per `engines/<name>/plan.py`.

`planning.dispatch` picks the engine, `planning.fix_search` runs the one fix-search loop over its candidates,
and the engine turns its own plan into the neutral `PlanResult`. P is the engine's rich plan type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from oomguard.request import Request
from oomguard.result import FixResult, PlanResult

P = TypeVar("P")


@dataclass(frozen=True)
class FixCandidate:
    """A flag change to try. Candidates of one `group` are alternatives: the first that fits ends the
    group."""

    flags: Mapping[str, Any]
    summary: str
    group: str = ""
    # A candidate that changes the deployment's shape: the GPUs it takes (0: unchanged), and the trade-offs
    # that come with it (e.g. " with FP8 KV"); the loop stops adding GPUs to a variant that fits two ways.
    gpus: int = 0
    variant: str = ""

    @property
    def key(self) -> str:
        return self.group or self.summary


class EnginePlanner(Protocol[P]):
    name: str  # the folder under engines/
    display_name: str

    def is_command(self, argv: Sequence[str]) -> bool:
        """Whether a launch command is this engine's."""
        ...

    def knows_setting(self, name: str) -> bool:
        """Whether `name` is one of the engine's own settings (its field name, e.g. max_model_len)."""
        ...

    def setting_names(self) -> tuple[str, ...]:
        """The settings the engine models, by field name (for "did you mean" hints)."""
        ...

    def plan(self, request: Request) -> P:
        """Plan one deployment; OomguardError subclasses for bad input."""
        ...

    def replan(self, plan: P, flags: Mapping[str, Any]) -> P:
        """`plan`'s request with `flags` changed, planned again."""
        ...

    def fits(self, plan: P) -> bool:
        """Whether a re-planned candidate counts as a fix."""
        ...

    def candidates(self, plan: P) -> list[FixCandidate]:
        """Flag changes worth trying for this plan, most wanted first."""
        ...

    def follow_up(
        self, base: P, trial: P, flags: Mapping[str, Any], pinned: frozenset[str]
    ) -> Mapping[str, Any] | None:
        """A candidate re-planned as `trial` did not fit: the setting to add that cures what is left (vLLM:
        the longest length the new setting holds), never one of `pinned`; None to give the candidate up."""
        ...

    def fix_result(self, base: P, fixed: P, candidate: FixCandidate, flags: Mapping[str, Any]) -> FixResult:
        """The neutral fix: `flags` (the candidate's and its follow-ups), summary, cost against `base`, the
        full command."""
        ...

    def fix_order(self, fix: FixResult, fixed: P) -> tuple[float, ...]:
        """Cheapest first."""
        ...

    def to_result(self, plan: P, fixes: tuple[FixResult, ...], at_lengths: tuple[int, ...]) -> PlanResult:
        """The neutral result of a plan, with the fixes found for it."""
        ...
