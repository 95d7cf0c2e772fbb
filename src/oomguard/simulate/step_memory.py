"""Memory of one engine step's batch shape: packed (varlen) versus padded-to-longest activations.

A step schedules some prefill chunks and some decodes. Most layers work on the packed token list
(`num_tokens x width`); a layer that packs prefills densely instead allocates `num_prefills x
batch_max_prefill_len x width`, so one long chunk pads every short one to its length (seed 002: the PLE
short-conv path of a hybrid model, 8 x 31,344 x 10,240 x 2 B = 4.78 GiB per intermediate, two or three alive).

What is counted, per step (bytes; s = activation dtype bytes, H = the layer width, T = scheduled tokens):
- `packed_tensor_bytes` = T x H x s; `padded_tensor_bytes` = P x Lmax x H x s (P prefill rows, Lmax the
  longest prefill chunk; decode rows take the packed decode path).
- `tensors_alive` intermediates of the chosen layout at once (default 3: packed input, its transposed copy,
  the convolved/activated output; the seed reports "two or three").
- the MLP intermediates (gate_up 2I/tp plus the activated I/tp per token) and, for MoE with expert parallel,
  the dispatch/combine buffers: every token goes to `experts_per_token` experts, so T x k x H x s each way
  (with DP, the gathered tokens of all DP ranks: x DP).
- the residual stream (hidden + residual, 2 x T x H x s) under all of it.
- the sampler: fp32 logits of one row per scheduled request x vocab x 4 B, `sampler_copies` alive (logits
  plus the probabilities/sorted copy of the top-k/top-p path).
- `max_tensor_elements` against 2**31, PyTorch's int32 indexing limit (`canUse32BitIndexMath`).

Pure arithmetic; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

INT32_INDEX_LIMIT = 2**31  # PyTorch canUse32BitIndexMath: numel must stay below 2^31
FP32_BYTES = 4  # the sampler works on fp32 logits (vLLM upcasts logits before sampling)
DEFAULT_TENSORS_ALIVE = 3  # seed 002: packed_tokens -> transpose().contiguous() -> conv/silu, "2-3 alive"
DEFAULT_SAMPLER_COPIES = 2  # logits + one same-sized fp32 copy (softmax / sort in top-k/top-p)


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
        return f"{len(p)} prefills (max {self.max_prefill:,}) + {self.num_decodes} decodes = {self.num_tokens:,} tokens"


@dataclass(frozen=True)
class ModelWidths:
    """The widths that size a step's activations (per rank)."""

    hidden_size: int
    dtype_bytes: float
    intermediate_size: int = 0
    vocab_size: int = 0
    tensor_parallel_size: int = 1
    num_experts: int = 0
    experts_per_token: int = 0
    expert_parallel_size: int = 1
    data_parallel_size: int = 1
    source: str = "flags"

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and self.experts_per_token > 0


@dataclass(frozen=True)
class StepMemoryOptions:
    layout: str = "packed"  # "packed" | "padded"
    tensors_alive: int = DEFAULT_TENSORS_ALIVE
    sampler_copies: int = DEFAULT_SAMPLER_COPIES

    def __post_init__(self) -> None:
        if self.layout not in ("packed", "padded"):
            raise ValueError(f"layout must be packed or padded, not {self.layout!r}")
        if self.tensors_alive < 1 or self.sampler_copies < 0:
            raise ValueError("tensors_alive must be >= 1 and sampler_copies >= 0")


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
    layer_bytes: int  # the chosen layout's intermediates alive at once
    mlp_bytes: int
    ep_dispatch_bytes: int
    ep_combine_bytes: int
    residual_bytes: int
    sampler_rows: int
    sampler_logits_bytes: int
    peak_bytes: int
    peak_part: str  # which phase made the peak: "layer", "mlp" or "sampler"
    layout: str


def step_memory(shape: StepShape, widths: ModelWidths, options: StepMemoryOptions = StepMemoryOptions()) -> StepMemory:
    """The activation peak of one step (see the module docstring for each term)."""
    s = widths.dtype_bytes
    h = widths.hidden_size
    t = shape.num_tokens
    prefill_lens = [r.tokens for r in shape.rows if not r.decode]
    p = len(prefill_lens)
    lmax = max(prefill_lens, default=0)
    real = sum(prefill_lens)
    packed_elems = t * h
    padded_elems = p * lmax * h
    packed_bytes = int(packed_elems * s)
    padded_bytes = int(padded_elems * s)
    padding_ratio = (p * lmax / real) if real else 1.0
    row_padding = tuple(lmax / n for n in prefill_lens)

    tp = max(1, widths.tensor_parallel_size)
    inter = widths.intermediate_size // tp
    mlp_bytes = int(t * 3 * inter * s)  # gate_up (2I) + activated (I)
    ep_dispatch = ep_combine = 0
    if widths.is_moe and widths.expert_parallel_size > 1:
        ep_dispatch = int(t * widths.data_parallel_size * widths.experts_per_token * h * s)
        ep_combine = ep_dispatch
    residual = int(2 * t * h * s)

    if options.layout == "padded":
        # The padded layer's prefill tensor plus the decode rows it handles packed.
        layer_one = padded_bytes + int(shape.num_decodes * h * s)
        max_elems = max(padded_elems, packed_elems)
    else:
        layer_one = packed_bytes
        max_elems = packed_elems
    layer_bytes = options.tensors_alive * layer_one
    sampler_rows = sum(1 for r in shape.rows if r.samples)
    sampler_bytes = sampler_rows * widths.vocab_size * FP32_BYTES * options.sampler_copies
    mlp_phase = mlp_bytes + ep_dispatch + ep_combine
    phases = {
        "layer": residual + layer_bytes,
        "mlp": residual + mlp_phase,
        "sampler": int(t * h * s) + sampler_bytes,
    }
    part = max(phases, key=lambda k: phases[k])
    return StepMemory(
        num_tokens=t,
        num_prefills=p,
        num_decodes=shape.num_decodes,
        max_prefill_len=lmax,
        packed_tensor_bytes=packed_bytes,
        padded_tensor_bytes=padded_bytes,
        padding_ratio=padding_ratio,
        row_padding=row_padding,
        max_tensor_elements=max_elems,
        exceeds_int32_index=max_elems >= INT32_INDEX_LIMIT,
        tensors_alive=options.tensors_alive,
        layer_bytes=layer_bytes,
        mlp_bytes=mlp_bytes,
        ep_dispatch_bytes=ep_dispatch,
        ep_combine_bytes=ep_combine,
        residual_bytes=residual,
        sampler_rows=sampler_rows,
        sampler_logits_bytes=sampler_bytes,
        peak_bytes=phases[part],
        peak_part=part,
        layout=options.layout,
    )


def step_peak_bytes(
    num_tokens: int, num_prefills: int, max_prefill: int, num_decodes: int, num_sampling: int,
    widths: ModelWidths, options: StepMemoryOptions,
) -> int:
    """`step_memory(...).peak_bytes` from the shape's summary numbers, for the simulator's inner loop."""
    s = widths.dtype_bytes
    h = widths.hidden_size
    residual = 2 * num_tokens * h * s
    if options.layout == "padded":
        layer_one = num_prefills * max_prefill * h * s + num_decodes * h * s
    else:
        layer_one = num_tokens * h * s
    inter = widths.intermediate_size // max(1, widths.tensor_parallel_size)
    mlp = num_tokens * 3 * inter * s
    if widths.is_moe and widths.expert_parallel_size > 1:
        mlp += 2 * num_tokens * widths.data_parallel_size * widths.experts_per_token * h * s
    sampler = num_sampling * widths.vocab_size * FP32_BYTES * options.sampler_copies
    return int(max(residual + options.tensors_alive * layer_one, residual + mlp, num_tokens * h * s + sampler))
