"""The step that failed, from a scheduler dump, and its activation arithmetic
(`oomguard.simulation.step_memory`).

A scheduler dump (`num_scheduled_tokens={req: n, ...}`) gives the step's rows. A layer that packs prefills
densely allocates rows x longest chunk x width (the padded mixed-length prefill OOM: 8 x 31,344 x 10,240 x 2 B
= 4.78 GiB), a
varlen layer tokens x width. Which of the two the failed allocation was is read from its size: the
request divided by rows x longest chunk x dtype bytes is a whole layer width (a multiple of the model's
hidden size when the planner knows the model, else of 128) only when the step was padded. The width found
that way sizes the step even for a model nobody can look up.

Fixes are the same step re-scheduled under a smaller token budget and per-request chunk cap, as vLLM's V1
scheduler does: each row's chunk is at most `long_prefill_token_threshold`, and rows take tokens from the
step's budget in turn. The short rows are taken first (running requests are scheduled before a new long
prompt), which is also the worst case for padding, so the new peak is an upper bound. Pure arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from oomguard.diagnosis.evidence import OomMessage, ScheduledStep
from oomguard.engines.vllm.accounting import FORWARD_HIDDEN_STREAMS
from oomguard.simulation.step_memory import (
    ActivationModel,
    Row,
    StepMemory,
    StepMemoryOptions,
    StepShape,
    step_memory,
)
from oomguard.units import GiB as _GIB

# Activations are bf16/fp16 unless the planner says otherwise.
DEFAULT_ACTIVATION_BYTES = 2
# Layer widths are multiples of this (every hidden / intermediate size of the catalog's models is).
WIDTH_QUANTUM = 128
# A width read from a request printed with 2 decimals (e.g. "4.78 GiB") is within this of the truth.
WIDTH_TOLERANCE = 0.005
# Plausible layer widths (bytes per token per row / dtype bytes).
MIN_WIDTH, MAX_WIDTH = 512, 262_144
# A step is worth analysing as padded when its rows x longest chunk exceed its real prefill tokens this much.
PADDING_WORTH_NAMING = 1.5
# Token budgets offered as fixes, largest first (powers of two as people set them).
CAPS = (16384, 8192, 4096, 2048, 1024)
# A single-token row is a decode (V1 schedules 1 token per running decode without speculation).
DECODE_TOKENS = 1


@dataclass(frozen=True)
class CappedStep:
    """The failing step under a smaller budget: the flags, the new shape and its peaks."""

    flags: dict[str, str]
    shape: StepShape
    padded: StepMemory
    packed: StepMemory
    fits: bool | None  # within the memory the failing step had (None: not known)


@dataclass(frozen=True)
class StepAnalysis:
    step: ScheduledStep
    shape: StepShape
    widths: ActivationModel
    width_source: str
    layout: str  # which layout's tensor is the failed allocation: 'padded' | 'packed' | '' (not known)
    padded: StepMemory
    packed: StepMemory
    oom: OomMessage | None
    available: int | None  # memory the step had at least: what was free at the OOM plus its hidden streams
    caps: tuple[CappedStep, ...]

    @property
    def explains_oom(self) -> bool:
        return self.layout == "padded" and self.oom is not None


def shape_of(step: ScheduledStep) -> StepShape:
    return StepShape(tuple(Row(tokens=n, decode=n <= DECODE_TOKENS) for n in step.tokens_per_request))


def reschedule(shape: StepShape, budget: int, chunk_cap: int) -> StepShape:
    """The same requests under `budget` tokens per step and `chunk_cap` tokens per request; short rows
    first (see the module docstring), rows left without tokens are not scheduled."""
    rows: list[Row] = []
    left = budget
    for row in sorted(shape.rows, key=lambda r: r.tokens):
        take = min(row.tokens, chunk_cap, left)
        if take <= 0:
            break
        rows.append(Row(tokens=take, decode=row.decode, samples=row.samples and take == row.tokens))
        left -= take
    return StepShape(tuple(rows))


def _near_multiple(value: float, quantum: float) -> int | None:
    """`value` as a whole multiple of `quantum` when it is within WIDTH_TOLERANCE of one."""
    k = round(value / quantum)
    if k >= 1 and abs(value - k * quantum) <= WIDTH_TOLERANCE * value:
        return int(k * quantum)
    return None


def layer_width(
    requested: int, elements_per_width: int, dtype_bytes: float, hidden: int | None
) -> int | None:
    """The layer width `requested` bytes imply for a tensor of `elements_per_width` x width elements."""
    if elements_per_width <= 0:
        return None
    width = requested / (elements_per_width * dtype_bytes)
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        return None
    if hidden:
        whole = _near_multiple(width, hidden)
        if whole is not None:
            return whole
    return _near_multiple(width, WIDTH_QUANTUM)


def _oom_for(step: ScheduledStep, ooms: list[OomMessage]) -> OomMessage | None:
    """The allocator error that followed this step in the same document."""
    after = [
        o
        for o in ooms
        if o.requested and o.where.source == step.where.source and o.where.line >= step.where.line
    ]
    if after:
        return min(after, key=lambda o: o.where.line)
    sized = [o for o in ooms if o.requested]
    return sized[0] if sized else None


def _widths(
    shape: StepShape, oom: OomMessage | None, planned: ActivationModel | None
) -> tuple[ActivationModel, str, str] | None:
    dtype = planned.dtype_bytes if planned else DEFAULT_ACTIVATION_BYTES
    hidden = planned.hidden_size if planned else None
    if oom is not None and oom.requested:
        prefills = shape.prefills
        rows, longest = len(prefills), shape.max_prefill
        if rows >= 2 and rows * longest > PADDING_WORTH_NAMING * sum(r.tokens for r in prefills):
            width = layer_width(oom.requested, rows * longest, dtype, hidden)
            if width is not None:
                return (
                    _with_width(planned, width, dtype),
                    (
                        f"{width:,} x {dtype:g} B per token per row, read from "
                        f"the failed {oom.requested / _GIB:.2f} GiB allocation ({oom.where})"
                    ),
                    "padded",
                )
        width = layer_width(oom.requested, shape.num_tokens, dtype, hidden)
        if width is not None:
            return (
                _with_width(planned, width, dtype),
                (
                    f"{width:,} x {dtype:g} B per token, read from the failed "
                    f"{oom.requested / _GIB:.2f} GiB allocation ({oom.where})"
                ),
                "packed",
            )
    if planned is not None:
        return planned, planned.source, ""
    return None


def _with_width(planned: ActivationModel | None, width: int, dtype: float) -> ActivationModel:
    """The planner's activation costs with the layer width the allocation showed; without a model, a model
    of that width whose forward pass is its hidden streams only (the rest of its layers is unknown)."""
    if planned is not None:
        return replace(planned, hidden_size=width)
    return ActivationModel(
        hidden_size=width,
        dtype_bytes=dtype,
        forward_bytes_per_token=FORWARD_HIDDEN_STREAMS * width * dtype,
        sampler_bytes_per_row=0.0,
        source="the failed allocation",
    )


def _worst(steps: list[ScheduledStep]) -> ScheduledStep:
    """The step with the most padded elements (rows x longest chunk), the last one on ties."""

    def padded(s: ScheduledStep) -> int:
        prefills = [n for n in s.tokens_per_request if n > DECODE_TOKENS] or list(s.tokens_per_request)
        return len(prefills) * max(prefills)

    best = max(padded(s) for s in steps)
    return [s for s in steps if padded(s) == best][-1]


def analyse(
    steps: list[ScheduledStep],
    ooms: list[OomMessage],
    planned: ActivationModel | None,
    budget_now: int | None,
) -> StepAnalysis | None:
    """The failing step's padded and packed peaks and the peaks under smaller budgets; None when the step's
    width is unknown (no sized OOM that fits a layer width, and no model for the planner)."""
    if not steps:
        return None
    sized = [o for o in ooms if o.requested]
    before = [
        s
        for s in steps
        if any(o.where.source == s.where.source and o.where.line >= s.where.line for o in sized)
    ]
    step = _worst(before or steps)
    shape = shape_of(step)
    if not shape.rows:
        return None
    oom = _oom_for(step, ooms)
    found = _widths(shape, oom, planned)
    if found is None:
        return None
    widths, source, layout = found
    padded = step_memory(shape, widths, StepMemoryOptions(layout="padded"))
    packed = step_memory(shape, widths, StepMemoryOptions(layout="packed"))
    available = None
    if oom is not None and oom.requested and oom.free is not None and layout:
        # At least what was free plus the step's hidden streams, allocated before any layer ran. (If the
        # failed tensor was not the layer's first, the step had more: this errs towards the smaller budget.)
        available = hidden_streams(shape, widths) + oom.free
    analysis = StepAnalysis(step, shape, widths, source, layout, padded, packed, oom, available, ())
    caps = tuple(
        reschedule_peaks(analysis, cap, cap)
        for cap in CAPS
        if cap < shape.num_tokens and (budget_now is None or cap < budget_now)
    )
    return replace(analysis, caps=caps)


def hidden_streams(shape: StepShape, widths: ActivationModel) -> int:
    """The hidden states a step carries through every layer (input, residual, output): 3 x tokens x width."""
    return int(FORWARD_HIDDEN_STREAMS * shape.num_tokens * widths.hidden_size * widths.dtype_bytes)


def reschedule_peaks(analysis: StepAnalysis, budget: int, chunk_cap: int) -> CappedStep:
    """The failing step under `budget` tokens per step and `chunk_cap` per request, with its peaks."""
    new = reschedule(analysis.shape, budget, chunk_cap)
    padded = step_memory(new, analysis.widths, StepMemoryOptions(layout="padded"))
    packed = step_memory(new, analysis.widths, StepMemoryOptions(layout="packed"))
    fits = None if analysis.available is None else padded.peak_bytes <= analysis.available
    flags = {"long_prefill_token_threshold": str(chunk_cap)}
    if budget < analysis.shape.num_tokens:
        flags = {"max_num_batched_tokens": str(budget), **flags}
    return CappedStep(flags, new, padded, packed, fits)


def recommended(analysis: StepAnalysis) -> CappedStep | None:
    """The largest budget whose padded peak fits the memory the step had (the smallest cut in throughput);
    without that figure, 8192 or the largest offered."""
    fitting = [c for c in analysis.caps if c.fits]
    if fitting:
        return fitting[0]
    if any(c.fits is False for c in analysis.caps):
        return analysis.caps[-1] if analysis.caps else None
    preferred = [c for c in analysis.caps if c.flags["max_num_batched_tokens"] == "8192"]
    return preferred[0] if preferred else (analysis.caps[0] if analysis.caps else None)
