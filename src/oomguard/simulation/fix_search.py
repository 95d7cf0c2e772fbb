"""When a step passes the headroom: which setting of the flags that shape a step avoids it, at what cost.

A step's activation peak grows with its tokens (`max_num_batched_tokens`), with its longest prefill chunk
(`long_prefill_token_threshold`, which caps one request's chunk when others wait) and, padded, with the rows
it pads (`max_num_seqs` bounds them). For each of the three flags the search walks a bounded ladder of
smaller values (halving from the value in force, `LADDER_STEPS` at most, never under the flag's floor) and
finds the largest one whose whole replay is clean, by bisection: smaller values never make a step bigger.
Each trial is a full simulation of the same workload with the deployment re-planned for the new value
(the pool and the headroom change with `max_num_batched_tokens`); a trial that fails stops at its first
OOM step. The flags are searched in parallel processes.

The cost of a fix is what it does to throughput: output tokens per busy second and TTFT p99 against the
replay as given. The cheapest clean fix comes first.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from oomguard.errors import OomguardError
from oomguard.simulation.parallel import parallel_map
from oomguard.simulation.run import SimulationConfig, Summary, simulate, summarize
from oomguard.simulation.workload import Workload

LADDER_STEPS = 6  # at most this many halvings per flag: a bisection needs 3 trials
MIN_BATCHED_TOKENS = 256  # below this a step is mostly fixed cost; vLLM's own CPU default is 2048
MIN_PREFILL_THRESHOLD = 256
MIN_NUM_SEQS = 8


class StepFlag(enum.Enum):
    """The vLLM flags that set a step's shape (vLLM field names)."""

    MAX_NUM_BATCHED_TOKENS = "max_num_batched_tokens"
    LONG_PREFILL_TOKEN_THRESHOLD = "long_prefill_token_threshold"
    MAX_NUM_SEQS = "max_num_seqs"

    @property
    def option(self) -> str:
        return "--" + self.value.replace("_", "-")


@dataclass(frozen=True)
class StepFix:
    flag: StepFlag
    value: int
    output_tokens_per_s: float
    baseline_tokens_per_s: float
    ttft_p99: float
    baseline_ttft_p99: float
    preemptions: int

    @property
    def throughput_change(self) -> float:
        """Relative change of output tokens per busy second (negative: slower)."""
        if self.baseline_tokens_per_s <= 0:
            return 0.0
        return self.output_tokens_per_s / self.baseline_tokens_per_s - 1.0

    @property
    def flag_text(self) -> str:
        return f"{self.flag.option} {self.value}"

    def describe(self, unit: str) -> str:
        return (
            f"{self.flag_text} (clean replay; throughput {self.throughput_change:+.1%}, "
            f"TTFT p99 {self.baseline_ttft_p99:,.2f} -> {self.ttft_p99:,.2f} {unit})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "flag": self.flag.value,
            "option": self.flag.option,
            "value": self.value,
            "output_tokens_per_s": round(self.output_tokens_per_s, 1),
            "throughput_change": round(self.throughput_change, 4),
            "ttft_p99": round(self.ttft_p99, 3),
            "preemptions": self.preemptions,
        }


@dataclass(frozen=True)
class FixSearch:
    fixes: tuple[StepFix, ...]  # cheapest first; empty when no value on any ladder is clean
    trials: int
    searched: tuple[tuple[StepFlag, tuple[int, ...]], ...]  # each flag's ladder

    @property
    def best(self) -> StepFix | None:
        return self.fixes[0] if self.fixes else None


def ladder(flag: StepFlag, current: int, max_model_len: int) -> tuple[int, ...]:
    """Smaller values to try for `flag`, largest first: halvings of the value in force, powers of two."""
    floor = {
        StepFlag.MAX_NUM_BATCHED_TOKENS: MIN_BATCHED_TOKENS,
        StepFlag.LONG_PREFILL_TOKEN_THRESHOLD: MIN_PREFILL_THRESHOLD,
        StepFlag.MAX_NUM_SEQS: MIN_NUM_SEQS,
    }[flag]
    start = min(current, max_model_len)
    value = 1 << max(0, (start - 1).bit_length() - 1)  # the largest power of two below `start`
    out: list[int] = []
    while value >= floor and len(out) < LADDER_STEPS:
        out.append(value)
        value //= 2
    return tuple(out)


Trial = tuple[bool, Summary | None]  # (clean, summary of the full replay when clean)
MakeConfig = Callable[[dict[str, Any]], SimulationConfig]


def _trial(workload: Workload, make_config: MakeConfig, flag: StepFlag, value: int, unservable: int) -> Trial:
    """Clean: no step passes the headroom, and no more requests are left unservable than as given."""
    try:
        config = make_config({flag.value: value})
    except OomguardError:
        return False, None  # vLLM would refuse this combination (or the planner says it does not start)
    quick = simulate(workload, _stopping(config))
    if quick.oom_events:
        return False, None
    summary = summarize(quick)
    return summary.unservable <= unservable, summary


def _stopping(config: SimulationConfig) -> SimulationConfig:
    return replace(config, stop_at_first_oom=True)


def _bisect(
    workload: Workload, make_config: MakeConfig, flag: StepFlag, values: tuple[int, ...], unservable: int
) -> tuple[int | None, Summary | None, int]:
    """The largest clean value of a descending ladder (clean is monotone along it): (value, summary,
    trials)."""
    lo, hi = 0, len(values) - 1
    found: tuple[int | None, Summary | None] = (None, None)
    trials = 0
    while lo <= hi:
        mid = (lo + hi) // 2
        clean, summary = _trial(workload, make_config, flag, values[mid], unservable)
        trials += 1
        if clean:
            found = (values[mid], summary)
            hi = mid - 1  # a larger value may be clean too
        else:
            lo = mid + 1
    return found[0], found[1], trials


def search_step_fixes(
    workload: Workload,
    make_config: MakeConfig,
    baseline: Summary,
    current: dict[StepFlag, int],
    max_model_len: int,
) -> FixSearch:
    """The largest clean value of each step flag (see the module docstring), cheapest fix first."""
    ladders = tuple(
        (flag, ladder(flag, current[flag], max_model_len)) for flag in StepFlag if flag in current
    )

    def one(item: tuple[StepFlag, tuple[int, ...]]) -> tuple[int | None, Summary | None, int]:
        flag, values = item
        return (
            _bisect(workload, make_config, flag, values, baseline.unservable) if values else (None, None, 0)
        )

    found = parallel_map(one, ladders)
    fixes = [
        StepFix(
            flag=flag,
            value=value,
            output_tokens_per_s=summary.output_tokens_per_s,
            baseline_tokens_per_s=baseline.output_tokens_per_s,
            ttft_p99=summary.ttft_p99,
            baseline_ttft_p99=baseline.ttft_p99,
            preemptions=summary.preemptions,
        )
        for (flag, _), (value, summary, _) in zip(ladders, found)
        if value is not None and summary is not None
    ]
    fixes.sort(key=lambda f: (-f.throughput_change, f.flag.value))
    return FixSearch(tuple(fixes), sum(t for _, _, t in found), ladders)
