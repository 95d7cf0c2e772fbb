"""Weight bytes: the whole checkpoint per component, and what one GPU rank holds under TP / EP / PP.

vLLM's placement rules (vllm/model_executor/layers/linear.py, vocab_parallel_embedding.py, fused_moe/layer.py,
vllm/distributed/utils.py get_pp_indices):
  - column-parallel (q/k/v/gate/up) and row-parallel (o/down) weights are divided by TP;
  - k/v projections hold max(1, kv_heads / TP) heads: replicated when TP > kv heads;
  - Mamba2 in_proj / conv1d hold their B/C part as ceil(n_groups / TP) whole groups (mamba_mixer2 pads
  groups);
  - embedding and lm_head rows are padded to a multiple of 64, then divided by TP;
  - norms, routers, row-parallel biases and ReplicatedLinear layers sit whole on every rank;
  - routed experts without expert parallelism: every rank holds every expert, its intermediate dim divided by
    the MoE TP size (TP x DP); with EP: whole experts, floor(E/EP) per rank plus one on the first E mod EP
    ranks, where E counts EPLB's redundant experts;
  - pipeline stages hold their decoder layers; the first holds the embedding, the last the final norm and
    lm_head (and the embedding again when tied, since lm_head reuses it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from oomguard.models.quantization import is_skipped, quantized_matrix_bytes
from oomguard.models.spec import DTYPE_BYTES, ModelSpec, Role, Split, TensorSpec

VOCAB_PADDING = 64  # vLLM vocab_parallel_embedding.DEFAULT_VOCAB_PADDING_SIZE
PLAIN_FLOAT_DTYPES = ("float32", "float16", "bfloat16")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def pad_vocab(rows: int, multiple: int = VOCAB_PADDING) -> int:
    return _ceil_div(rows, multiple) * multiple


def pp_layer_range(num_layers: int, pp_size: int, pp_rank: int) -> range:
    """vLLM get_pp_indices: equal shares; the remainder goes one each to the stages before the last, starting
    with the second-to-last (the last stage also runs the norm, lm_head and sampler)."""
    share = num_layers // pp_size
    partitions = [share] * pp_size
    for i in range(2, num_layers % pp_size + 2):
        partitions[-i] += 1
    start = sum(partitions[:pp_rank])
    return range(start, start + partitions[pp_rank])


@dataclass(frozen=True)
class RankPlacement:
    """Which part of the model one GPU holds."""

    tp_size: int = 1
    ep_size: int = 1  # > 1: whole experts per rank (vLLM EP = TP x DP); 1: experts TP-sharded
    ep_rank: int = 0
    moe_tp_size: int | None = None  # TP inside routed experts without EP (vLLM: TP x DP); None: tp_size
    layers: range | None = None  # decoder layers of this PP stage; None: all
    has_embedding: bool = True
    has_lm_head: bool = True  # the last stage: final norm and lm_head
    redundant_experts: int = 0  # EPLB physical experts beyond the logical ones
    load_mtp: bool = False  # MTP / next-token-prediction weights are loaded only for speculative decoding
    load_vision: bool = True  # vision towers load unless the engine runs text-only

    @classmethod
    def for_stage(
        cls, spec: ModelSpec, *, pp_size: int = 1, pp_rank: int = 0, tp_size: int = 1, **kwargs: Any
    ) -> RankPlacement:
        first, last = pp_rank == 0, pp_rank == pp_size - 1
        return cls(
            tp_size=tp_size,
            layers=pp_layer_range(spec.num_hidden_layers, pp_size, pp_rank),
            has_embedding=first or (spec.tie_word_embeddings and last),
            has_lm_head=last,
            **kwargs,
        )


@dataclass(frozen=True)
class WeightBytes:
    """Bytes per role, in a fixed order, so a ledger can itemize them."""

    by_role: tuple[tuple[Role, int], ...]

    @property
    def total(self) -> int:
        return sum(b for _, b in self.by_role)

    def of(self, role: Role) -> int:
        return sum(b for r, b in self.by_role if r == role)

    @staticmethod
    def collect(pairs: Iterable[tuple[Role, int]]) -> WeightBytes:
        sums: dict[Role, int] = {}
        for role, num in pairs:
            sums[role] = sums.get(role, 0) + num
        return WeightBytes(tuple((role, sums[role]) for role in Role if role in sums))


def _quantized(tensor: TensorSpec, spec: ModelSpec) -> bool:
    quant = spec.quantization
    return (
        quant is not None
        and tensor.quantizable
        and len(tensor.shape) == 2
        and not is_skipped(tensor.name, quant)
    )


def _computed_bytes(tensor: TensorSpec, spec: ModelSpec, shape: tuple[int, ...], experts: int) -> int:
    """Bytes of `experts` copies of a [shape] tensor as vLLM holds it: quantized layout or model dtype."""
    count = max(1, experts)
    if _quantized(tensor, spec):
        assert spec.quantization is not None
        return count * quantized_matrix_bytes(shape[0], shape[1], spec.quantization, spec.dtype_bytes)
    numel = 1
    for d in shape:
        numel *= d
    return int(count * numel * spec.dtype_bytes)


# vLLM Mxfp4MoEMethod.create_weights on Hopper (Marlin / triton kernels): the per-rank intermediate size is
# rounded up to a multiple of 128 and the hidden size to 256 for swizzling; the padding is allocated.
MXFP4_INTERMEDIATE_ALIGN = 128
MXFP4_HIDDEN_ALIGN = 256


def _round_up(n: int, multiple: int) -> int:
    return _ceil_div(n, multiple) * multiple


def _mxfp4_padded(tensor: TensorSpec, spec: ModelSpec, shape: tuple[int, ...]) -> tuple[int, ...]:
    """NOTE: gpt-oss experts are allocated padded (2880 -> 3072 hidden, 2880 -> 2944 intermediate at TP 1)."""
    if spec.quantization is None or spec.quantization.method != "mxfp4" or tensor.split != Split.EXPERT:
        return shape
    fused = "gate_up" in tensor.name
    padded = []
    for dim, size in enumerate(shape):
        if size == spec.hidden_size and not (fused and dim == 0):
            padded.append(_round_up(size, MXFP4_HIDDEN_ALIGN))
        elif fused and dim == 0:
            padded.append(2 * _round_up(size // 2, MXFP4_INTERMEDIATE_ALIGN))
        else:
            padded.append(_round_up(size, MXFP4_INTERMEDIATE_ALIGN))
    return tuple(padded)


def _is_plain_float(tensor: TensorSpec) -> bool:
    """Stored as an ordinary float tensor (no packing, no scales): its runtime size follows `--dtype`."""
    return (
        tensor.stored_bytes is not None
        and tensor.dtype in PLAIN_FLOAT_DTYPES
        and tensor.stored_bytes == tensor.numel * DTYPE_BYTES[tensor.dtype]
    )


def tensor_bytes(tensor: TensorSpec, spec: ModelSpec) -> int:
    """Bytes of the whole tensor on the GPU (all experts, unsharded)."""
    if tensor.stored_bytes is not None and not _is_plain_float(tensor):
        return tensor.stored_bytes  # packed / quantized exactly as stored
    return _computed_bytes(tensor, spec, tensor.shape, tensor.experts)


def experts_on_rank(num_experts: int, ep_size: int, ep_rank: int) -> int:
    """vLLM determine_expert_map: floor(E / EP), one more on the first E mod EP ranks."""
    return num_experts // ep_size + (1 if ep_rank < num_experts % ep_size else 0)


def _sharded(tensor: TensorSpec, spec: ModelSpec, place: RankPlacement) -> tuple[tuple[int, ...], int]:
    """(per-expert shape, number of experts) this rank holds of one tensor."""
    shape = list(tensor.shape)
    tp = place.tp_size
    if tensor.split == Split.COLUMN:
        shape[0] = _ceil_div(shape[0], tp)
    elif tensor.split == Split.ROW and len(shape) >= 2:
        shape[-1] = _ceil_div(shape[-1], tp)
    elif tensor.split == Split.KV_COLUMN:
        heads = tensor.kv_heads or spec.num_key_value_heads
        per_head = shape[0] // heads if heads else shape[0]
        shape[0] = per_head * max(1, _ceil_div(heads, tp))
    elif tensor.split == Split.GROUPED_COLUMN:
        # MambaMixer2: groups padded to TP when TP does not divide them, so ceil(groups / TP) whole groups a
        # rank.
        per_group = tensor.group_rows // tensor.groups if tensor.groups else 0
        shape[0] = _ceil_div(shape[0] - tensor.group_rows, tp) + per_group * _ceil_div(tensor.groups, tp)
    elif tensor.split == Split.VOCAB:
        shape[0] = _ceil_div(pad_vocab(shape[0]), tp)
    elif tensor.split == Split.EXPERT:
        if place.ep_size > 1:
            return tuple(shape), experts_on_rank(
                tensor.experts + place.redundant_experts, place.ep_size, place.ep_rank
            )
        dim = tensor.shard_dim if tensor.shard_dim is not None else 0
        shape[dim] = _ceil_div(shape[dim], place.moe_tp_size or tp)
    return tuple(shape), tensor.experts


def _on_rank(tensor: TensorSpec, spec: ModelSpec, place: RankPlacement) -> bool:
    if tensor.role == Role.MTP:
        return place.load_mtp
    if tensor.role == Role.VISION:
        return place.load_vision and place.has_embedding
    if tensor.layer is not None:
        return place.layers is None or tensor.layer in place.layers
    if tensor.role == Role.EMBEDDING:
        return place.has_embedding
    return place.has_lm_head  # lm_head and the final norm


def rank_tensor_bytes(tensor: TensorSpec, spec: ModelSpec, place: RankPlacement) -> int:
    if not _on_rank(tensor, spec, place):
        return 0
    shape, experts = _sharded(tensor, spec, place)
    shape = _mxfp4_padded(tensor, spec, shape)
    if tensor.stored_bytes is not None and not _is_plain_float(tensor):
        # Quantized as stored: scales shard with their weights, so take the same fraction of the stored bytes.
        full = tensor.numel
        part = max(1, experts)
        for d in shape:
            part *= d
        return -(-tensor.stored_bytes * part // full) if full else 0
    return _computed_bytes(tensor, spec, shape, experts)


def checkpoint_weight_bytes(spec: ModelSpec, *, include_mtp: bool = True) -> WeightBytes:
    """Bytes of every tensor the checkpoint holds (in the dtype vLLM runs), by role."""
    return WeightBytes.collect(
        (t.role, tensor_bytes(t, spec)) for t in spec.tensors if include_mtp or t.role != Role.MTP
    )


def rank_weight_bytes(spec: ModelSpec, place: RankPlacement) -> WeightBytes:
    """Bytes of the tensors one GPU rank holds, by role (RoPE caches not included: see rope_cache_bytes)."""
    return WeightBytes.collect((t.role, rank_tensor_bytes(t, spec, place)) for t in spec.tensors)


def rope_cache_bytes(spec: ModelSpec) -> int:
    """vLLM's RoPE cos/sin cache buffers, counted in "Model loading took".

    vLLM get_rope() keeps one cache per distinct rotary config (head size, rotary dim, positions, base,
    scaling, dtype) shared by every layer that uses it: positions x rotary_dim elements (cos and sin halves)
    in
    the model dtype. Positions are max_position_embeddings, times the factor for linear/dynamic/YaRN scaling.
    Every rank holds the full caches (not divided by TP)."""
    return int(sum(positions * rot * spec.dtype_bytes for positions, rot in spec.rope_caches))
