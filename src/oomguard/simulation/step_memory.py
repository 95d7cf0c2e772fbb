"""Memory of one engine step's batch shape: the planner's activation mechanism, packed or padded.

The planner sizes the profile run's activation as `max(forward peak, sampler warm-up) + fixed`
(`oomguard.engines.vllm.accounting.activation_estimate`). A served step is the same mechanism at its own
shape: the forward peak of T scheduled tokens (`forward_peak_bytes` is linear in the tokens: three hidden
streams plus the widest layer's transient, fused-MoE caches and the DP ranks' gathered tokens included), the
sampler over the rows that sample this step, and the same fixed part (MLA workspace, encoder cache, allocator
residual). So for the profile shape itself, simulate and plan give the same number; a packed step of at most
`max_num_batched_tokens` tokens never passes it. `ActivationModel` holds those per-token and per-row costs.

What the planner's mechanism does not have is a layer that pads: one that packs prefills densely allocates
`num_prefills x longest_chunk x width`, so one long chunk pads every short one to its length (the padded
mixed-length prefill OOM: the
PLE short-conv path of a hybrid model, 8 x 31,344 x 10,240 x 2 B = 4.78 GiB per intermediate, "two or three
alive"). The padded layout (an option: the model's layers must pad for it to apply) adds that phase:
hidden streams + `tensors_alive` x the padded tensor (decode rows ride along packed).

Also reported: the packed and padded tensor sizes, the padding ratio, the largest tensor against 2**31
elements (PyTorch's int32 indexing limit, `canUse32BitIndexMath`), the EP all-gather/reduce-scatter bytes of
the step (AG/RS, vLLM's default all2all backend: every DP rank's tokens, x hidden x dtype, each way).

Pure arithmetic; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from oomguard.engines.vllm.accounting import FORWARD_HIDDEN_STREAMS, FP32_BYTES, PROFILE_RESIDUAL_BYTES

INT32_INDEX_LIMIT = 2**31  # PyTorch canUse32BitIndexMath: numel must stay below 2^31
# The padded mixed-length prefill OOM: packed_tokens -> transpose().contiguous() -> conv/silu, "2-3 alive".
DEFAULT_TENSORS_ALIVE = 3
# fp32 logits copies alive in the sampler when no engine version says otherwise (the planner's
# `Behaviour.sampler_logit_copies` of current vLLM: the logits and one probabilities/sorted copy).
DEFAULT_SAMPLER_COPIES = 2.0


@dataclass(frozen=True)
class Row:
    """One request in a step: `tokens` scheduled now, `context` tokens already computed before them."""

    tokens: int
    context: int = 0
    decode: bool = False
    samples: bool = True  # False for a non-final prefill chunk (no token sampled)


@dataclass(frozen=True)
class StepShape:
    rows: tuple[Row, ...]

    @property
    def num_tokens(self) -> int:
        return sum(r.tokens for r in self.rows)

    @property
    def prefills(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if not r.decode)

    @property
    def num_decodes(self) -> int:
        return sum(1 for r in self.rows if r.decode)

    @property
    def max_prefill(self) -> int:
        return max((r.tokens for r in self.rows if not r.decode), default=0)

    def describe(self) -> str:
        """'8 prefills (max 31,344) + 2 decodes = 32,767 tokens'."""
        p = self.prefills
        return (
            f"{len(p)} prefills (max {self.max_prefill:,}) + {self.num_decodes} decodes = "
            f"{self.num_tokens:,} tokens"
        )


@dataclass(frozen=True)
class ModelWidths:
    """A model given by its widths alone (every layer alike), for `oomguard step --hidden-size ...`."""

    hidden_size: int
    dtype_bytes: float
    intermediate_size: int = 0  # dense MLP; for MoE the expert's (moe_intermediate_size)
    vocab_size: int = 0
    tensor_parallel_size: int = 1
    num_experts: int = 0
    experts_per_token: int = 0
    expert_parallel: bool = False
    data_parallel_size: int = 1

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and self.experts_per_token > 0


@dataclass(frozen=True)
class ActivationModel:
    """What a step's activations cost on one rank: the planner's mechanism, per token and per sampled row."""

    hidden_size: int
    dtype_bytes: float
    forward_bytes_per_token: (
        float  # hidden streams + the widest layer's transient (accounting.forward_peak_bytes)
    )
    sampler_bytes_per_row: float  # fp32 logits x vocab x copies (accounting.sampler_warmup_bytes per row)
    fixed_bytes: int = (
        0  # MLA workspace + encoder cache + allocator residual (accounting.activation_estimate)
    )
    ep_gathered_ranks: int = 0  # expert parallel: the DP ranks whose tokens each rank gathers (0: no EP)
    source: str = "flags"

    @classmethod
    def from_widths(
        cls, widths: ModelWidths, sampler_copies: float = DEFAULT_SAMPLER_COPIES
    ) -> ActivationModel:
        """`accounting.forward_peak_bytes` for a model whose layers all have these widths (per token):
        3 hidden streams + the MLP's gate_up and activation (3 I / TP), or fused MoE's caches per routed copy
        (k x (3 I + H), I TP-sharded without EP; with EP the DP ranks' tokens gathered first)."""
        h, s = widths.hidden_size, widths.dtype_bytes
        tp = max(1, widths.tensor_parallel_size)
        gathered = max(1, widths.data_parallel_size) if widths.expert_parallel else 1
        if widths.is_moe:
            inter = widths.intermediate_size // (1 if widths.expert_parallel else tp)
            widest = gathered * widths.experts_per_token * (3 * inter + h) * s
        else:
            widest = 3 * (widths.intermediate_size // tp) * s
        return cls(
            hidden_size=h,
            dtype_bytes=s,
            forward_bytes_per_token=FORWARD_HIDDEN_STREAMS * h * s + widest,
            sampler_bytes_per_row=widths.vocab_size * FP32_BYTES * sampler_copies,
            fixed_bytes=PROFILE_RESIDUAL_BYTES,
            ep_gathered_ranks=gathered if widths.is_moe and widths.expert_parallel else 0,
            source="widths given as flags",
        )


@dataclass(frozen=True)
class StepMemoryOptions:
    layout: str = "packed"  # "packed" | "padded"
    tensors_alive: int = DEFAULT_TENSORS_ALIVE

    def __post_init__(self) -> None:
        if self.layout not in ("packed", "padded"):
            raise ValueError(f"layout must be packed or padded, not {self.layout!r}")
        if self.tensors_alive < 1:
            raise ValueError("tensors_alive must be >= 1")


@dataclass(frozen=True)
class StepMemory:
    num_tokens: int
    num_prefills: int
    num_decodes: int
    max_prefill_len: int
    packed_tensor_bytes: int
    padded_tensor_bytes: int
    padding_ratio: float  # padded prefill elements / real prefill elements (1.0 = no waste)
    row_padding: tuple[float, ...]  # per prefill row: batch max / its length
    max_tensor_elements: int
    exceeds_int32_index: bool
    tensors_alive: int
    forward_bytes: int  # the planner's forward peak at this step's tokens
    padded_layer_bytes: int  # hidden streams + tensors_alive x the padded tensor (0 when packed)
    ep_dispatch_bytes: int
    ep_combine_bytes: int
    sampler_rows: int
    sampler_bytes: int
    fixed_bytes: int
    peak_bytes: int
    peak_part: str  # which phase made the peak: "forward", "padded layer" or "sampler"
    layout: str


def step_memory(
    shape: StepShape, model: ActivationModel, options: StepMemoryOptions = StepMemoryOptions()
) -> StepMemory:
    """The activation peak of one step (see the module docstring for each term)."""
    s = model.dtype_bytes
    h = model.hidden_size
    t = shape.num_tokens
    prefill_lens = [r.tokens for r in shape.rows if not r.decode]
    p = len(prefill_lens)
    lmax = max(prefill_lens, default=0)
    real = sum(prefill_lens)
    packed_elems = t * h
    padded_elems = p * lmax * h
    padding_ratio = (p * lmax / real) if real else 1.0
    forward = int(t * model.forward_bytes_per_token)
    sampler_rows = sum(1 for r in shape.rows if r.samples)
    sampler = int(sampler_rows * model.sampler_bytes_per_row)
    ep = int(t * model.ep_gathered_ranks * h * s)
    padded_layer = 0
    max_elems = packed_elems
    if options.layout == "padded":
        # The padded layer's prefill tensor, plus the decode rows it handles packed, over the hidden streams.
        padded_layer = int(
            (FORWARD_HIDDEN_STREAMS * t + options.tensors_alive * (p * lmax + shape.num_decodes)) * h * s
        )
        max_elems = max(padded_elems, packed_elems)
    phases = {"forward": forward, "padded layer": padded_layer, "sampler": sampler}
    part = max(phases, key=lambda k: phases[k])
    return StepMemory(
        num_tokens=t,
        num_prefills=p,
        num_decodes=shape.num_decodes,
        max_prefill_len=lmax,
        packed_tensor_bytes=int(packed_elems * s),
        padded_tensor_bytes=int(padded_elems * s),
        padding_ratio=padding_ratio,
        row_padding=tuple(lmax / n for n in prefill_lens),
        max_tensor_elements=max_elems,
        exceeds_int32_index=max_elems >= INT32_INDEX_LIMIT,
        tensors_alive=options.tensors_alive,
        forward_bytes=forward,
        padded_layer_bytes=padded_layer,
        ep_dispatch_bytes=ep,
        ep_combine_bytes=ep,
        sampler_rows=sampler_rows,
        sampler_bytes=sampler,
        fixed_bytes=model.fixed_bytes,
        peak_bytes=phases[part] + model.fixed_bytes,
        peak_part=part,
        layout=options.layout,
    )


def step_peak_bytes(
    num_tokens: int,
    num_prefills: int,
    max_prefill: int,
    num_decodes: int,
    num_sampling: int,
    model: ActivationModel,
    options: StepMemoryOptions,
) -> int:
    """`step_memory(...).peak_bytes` from the shape's summary numbers, for the simulator's inner loop."""
    peak = int(num_tokens * model.forward_bytes_per_token)
    sampler = int(num_sampling * model.sampler_bytes_per_row)
    peak = max(peak, sampler)
    if options.layout == "padded":
        padded = int(
            (
                FORWARD_HIDDEN_STREAMS * num_tokens
                + options.tensors_alive * (num_prefills * max_prefill + num_decodes)
            )
            * model.hidden_size
            * model.dtype_bytes
        )
        peak = max(peak, padded)
    return peak + model.fixed_bytes
