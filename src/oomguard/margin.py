"""How far a plan that fits is from not fitting, against the stated uncertainty of its own numbers.

Every estimated ledger line has a band (+- bytes). A start depends on three constraints, per rank:

- KV sizing: the pool (budget minus the estimated lines) must hold one max_model_len request. Its slack is
  available KV - what one request needs; an error in any in-budget estimate (and in the device total, scaled
  by the utilization) moves it byte for byte.
- the device at peak: total - everything on the GPU. With a utilization budget only the lines outside it
  (CUDA context, graphs before v0.21) and the device total can move it: an in-budget error shrinks KV instead.
  With --kv-cache-memory-bytes every line can.
- the free-memory check at start: total - context - other processes - budget.

The margin is the smallest slack minus what it must keep: the summed bands (the edge of the stated
uncertainty), or --safety when given. A plan that fits at the estimate but not at that edge is MARGINAL.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from oomguard.kinds import Verdict


@dataclass(frozen=True)
class Margin:
    """The tightest constraint of a plan: its slack at the estimate and what it must keep."""

    constraint: str  # "KV sizing", "device at peak", "free memory at start"
    rank: str  # the rank's label
    slack_bytes: int  # to spare at the point estimate
    band_bytes: int  # the summed bands of the estimates it depends on
    required_bytes: int  # band_bytes, or --safety when given

    @property
    def spare_bytes(self) -> int:
        """Slack beyond what the constraint must keep (negative: marginal)."""
        return self.slack_bytes - self.required_bytes


def verdict_of(fits: bool, margin: Margin | None) -> Verdict:
    if not fits:
        return Verdict.WILL_NOT_START
    if margin is not None and margin.spare_bytes < 0:
        return Verdict.MARGINAL
    return Verdict.FITS


def tightest(margins: Iterable[Margin]) -> Margin | None:
    return min(margins, key=lambda m: m.spare_bytes, default=None)
