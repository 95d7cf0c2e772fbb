"""ModelSpec: the facts about a model that decide its memory, independent of any engine.

A model is a stack of decoder layers, each with one attention kind (what its KV cache looks like) and one
MLP kind (dense or mixture of experts), plus an inventory of weight tensors (what its checkpoint holds and
how each tensor is split across tensor/expert-parallel ranks). Engines (vLLM, SGLang) read these facts and
apply their own accounting; nothing here knows about an engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "float": 4,
    "fp32": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "half": 2,
    "fp16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
    "uint8": 1,
    "int32": 4,
    "int64": 8,
    "bool": 1,
}


# ---------------------------------------------------------------------------------------------------------
# Attention kinds: what one layer keeps per token (or per sequence) in the KV cache.
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FullAttention:
    """Causal attention over the whole context: K and V per token per KV head."""

    num_kv_heads: int
    head_size: int
    head_size_v: int
    kind: Literal["full"] = "full"


@dataclass(frozen=True)
class SlidingWindowAttention:
    """Attention over the last `window` tokens only (Gemma-2/3 local layers, gpt-oss even layers, Mistral
    v0.1)."""

    num_kv_heads: int
    head_size: int
    head_size_v: int
    window: int
    kind: Literal["sliding_window"] = "sliding_window"


@dataclass(frozen=True)
class ChunkedLocalAttention:
    """Attention within fixed chunks of `chunk_size` tokens (Llama-4 RoPE layers)."""

    num_kv_heads: int
    head_size: int
    head_size_v: int
    chunk_size: int
    kind: Literal["chunked_local"] = "chunked_local"


@dataclass(frozen=True)
class MlaAttention:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): one latent of kv_lora_rank + rope dims per
    token,
    shared by all heads, so it is neither multiplied by heads nor divided by TP."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    kind: Literal["mla"] = "mla"

    @property
    def latent_size(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class MambaState:
    """A fixed-size recurrent state per sequence (Mamba2, Gated DeltaNet / linear attention).

    `state_shapes` are the per-sequence, per-rank-unsplit tensor shapes (conv state, SSM/recurrent state);
    `tp_split_dims` says which dimension of each shape TP divides (None: replicated)."""

    state_shapes: tuple[tuple[int, ...], ...]
    state_dtypes: tuple[str, ...]
    tp_split_dims: tuple[int | None, ...]
    kind: Literal["mamba"] = "mamba"


@dataclass(frozen=True)
class SharedKvAttention:
    """Attention that reads another layer's KV cache (Gemma-3n / Gemma-4 E-series last layers): it computes
    like `attends_like` but keeps no cache of its own, so vLLM allocates nothing for it."""

    attends_like: FullAttention | SlidingWindowAttention
    kind: Literal["shared_kv"] = "shared_kv"


@dataclass(frozen=True)
class NoAttention:
    """A layer without a token mixer (Nemotron-H MLP and MoE blocks, which vLLM numbers as layers of their
    own):
    no KV cache and no state."""

    kind: Literal["none"] = "none"


AttentionKind = (
    FullAttention
    | SlidingWindowAttention
    | ChunkedLocalAttention
    | MlaAttention
    | MambaState
    | SharedKvAttention
    | NoAttention
)


# ---------------------------------------------------------------------------------------------------------
# MLP kinds
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DenseMlp:
    intermediate_size: int
    kind: Literal["dense"] = "dense"


@dataclass(frozen=True)
class MoeMlp:
    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    kind: Literal["moe"] = "moe"


@dataclass(frozen=True)
class NoMlp:
    """A layer that is only a token mixer (Nemotron-H Mamba2 and attention blocks): no MLP weights, no MLP
    activations."""

    kind: Literal["none"] = "none"


MlpKind = DenseMlp | MoeMlp | NoMlp


@dataclass(frozen=True)
class DecoderLayer:
    attention: AttentionKind
    mlp: MlpKind


# ---------------------------------------------------------------------------------------------------------
# Weight tensors: the checkpoint, as an inventory that can be split across ranks.
# ---------------------------------------------------------------------------------------------------------


class Split(str, Enum):
    """How vLLM places one tensor across tensor-parallel (and expert-parallel) ranks."""

    COLUMN = "column"  # output dim divided by TP (q/k/v/gate/up projections)
    ROW = "row"  # input dim divided by TP (o/down projections); their bias is replicated
    KV_COLUMN = "kv_column"  # k/v projections: divided by TP, but replicated when TP > KV heads
    VOCAB = "vocab"  # embedding / lm_head rows: padded to a multiple of 64, then divided by TP
    REPLICATED = "replicated"  # norms, routers, MLA's fused q_a/kv_a, biases of row-parallel layers
    EXPERT = "expert"  # routed-expert weights: whole experts per EP rank, or TP-sharded inside
    GROUPED_COLUMN = (
        "grouped_column"  # Mamba2 in_proj / conv1d: divided by TP, but their B/C rows keep at least
    )
    # one whole group per rank (vLLM pads n_groups up to TP)


class Role(str, Enum):
    EMBEDDING = "embedding"
    LM_HEAD = "lm_head"
    ATTENTION = "attention"
    MLP = "mlp"
    EXPERTS = "experts"
    SHARED_EXPERTS = "shared_experts"
    ROUTER = "router"
    NORM = "norm"
    MAMBA = "mamba"
    VISION = "vision"
    MTP = "mtp"


@dataclass(frozen=True)
class TensorSpec:
    """One weight tensor. `layer` is None for tensors outside the decoder stack (embedding, head, final norm,
    vision tower). `experts` > 0 marks a stacked routed-expert tensor (shape is per expert)."""

    name: str
    shape: tuple[int, ...]
    role: Role
    split: Split
    layer: int | None = None
    experts: int = 0
    quantizable: bool = True
    dtype: str | None = None  # stored dtype when known exactly (safetensors headers); None: model dtype
    stored_bytes: int | None = None  # exact bytes from safetensors headers, all experts included
    kv_heads: int = 0  # KV_COLUMN: the KV heads along dim 0 (replicated when TP > kv_heads)
    shard_dim: int | None = None  # EXPERT: the dim TP divides without EP (0: gate/up, 1: down)
    groups: int = 0  # GROUPED_COLUMN: the B/C groups along dim 0
    group_rows: int = 0  # GROUPED_COLUMN: how many rows of dim 0 they span (all groups together)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * max(1, self.experts)


# ---------------------------------------------------------------------------------------------------------
# Quantization of the checkpoint
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Quantization:
    """How the linear weights are stored. `method` is vLLM's name (fp8, awq, gptq, compressed-tensors,
    bitsandbytes, mxfp4, modelopt_fp4, ...). `weight_bits` is what one weight costs before scales;
    `group_size` the number of weights sharing one scale along the input dim (-1: per channel);
    `block` the 2-D block of FP8 block scaling (DeepSeek-V3: 128x128)."""

    method: str
    weight_bits: int
    group_size: int = -1
    block: tuple[int, int] | None = None
    scale_bytes: int = 2
    zero_point: bool = False
    act_order: bool = False
    skip_modules: tuple[str, ...] = ()
    from_config: bool = True  # False for runtime `--quantization fp8` of a bf16 checkpoint
    scheme: str = ""  # sub-format: "float"/"int"/"nvfp4" (compressed-tensors), "nf4", "int8" (bnb)
    double_quant: bool = False  # bitsandbytes nested quantization of the absmax
    static_activations: bool = False  # an input_scale per layer is stored (FP8 static)


@dataclass(frozen=True)
class VisionTower:
    """A multimodal encoder that ships with the language model."""

    num_params: int
    hidden_size: int
    num_layers: int
    tokens_per_item: int | None = None


@dataclass(frozen=True)
class ModelSpec:
    """Everything a memory planner needs to know about a model, engine-independent."""

    name: str
    architecture: str
    model_type: str
    dtype: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    layers: tuple[DecoderLayer, ...]
    tensors: tuple[TensorSpec, ...]
    rotary_dim: int = 0
    rope_caches: tuple[tuple[int, int], ...] = ()  # (positions, rotary_dim) per distinct RoPE config
    checkpoint_dtype: str | None = None  # dtype the checkpoint stores unquantized tensors in
    quantization: Quantization | None = None
    vision: VisionTower | None = None
    mtp_layers: int = 0
    weights_source: str = "config.json"  # or "safetensors headers", "safetensors index total_size"
    checkpoint_bytes: int | None = None  # exact stored total when a source gives it (headers, index, catalog)
    notes: tuple[str, ...] = field(default=())

    @property
    def dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.dtype]

    @property
    def moe(self) -> MoeMlp | None:
        """The routed-expert shape of the first MoE layer (None for a dense model)."""
        for layer in self.layers:
            if isinstance(layer.mlp, MoeMlp):
                return layer.mlp
        return None

    @property
    def uses_mla(self) -> bool:
        return any(isinstance(layer.attention, MlaAttention) for layer in self.layers)

    @property
    def num_params(self) -> int:
        return sum(t.numel for t in self.tensors)

    @property
    def max_intermediate_size(self) -> int:
        widths = [self.intermediate_size]
        for layer in self.layers:
            if isinstance(layer.mlp, DenseMlp):
                widths.append(layer.mlp.intermediate_size)
        return max(widths)
