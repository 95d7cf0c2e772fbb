"""vLLM's KV cache arithmetic: page bytes per layer, groups, blocks, capacity, the fit check.

Mirrors `vllm/v1/kv_cache_interface.py` (one spec class per attention kind, each answering: bytes per page,
blocks one request needs) and `v1/core/kv_cache_planning.py` / `kv_cache_utils.py` (grouping, num_blocks,
the reported "GPU KV cache size" and "Maximum concurrency", the fit check and its estimated max length).
Everything here is exact given the available memory; cross-checked against vLLM 0.33.0's own functions
(`bench/kv_oracle_check.py`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from oomguard.engines.vllm.config import EngineConfig
from oomguard.models.spec import (
    DTYPE_BYTES,
    AttentionKind,
    ChunkedLocalAttention,
    MambaState,
    MlaAttention,
    ModelSpec,
    NoAttention,
    SharedKvAttention,
    SlidingWindowAttention,
)

# MLAAttention.get_kv_cache_spec: fp8_ds_mla stores 656 bytes per token (DeepSeek-V3.2 layout).
FP8_DS_MLA_BYTES_PER_TOKEN = 656
# get_kv_cache_groups: when the largest per-type layer count is under 1.5x the smallest, pad to the largest.
GROUP_PADDING_RATIO = 1.5
# Hybrid Mamba models: the attention block is a multiple of the smallest kernel block (16).
KERNEL_BLOCK_ALIGN = 16


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------------------------------------------------
# Per-layer specs (one per attention kind), as vLLM's kv_cache_interface has them
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FullSpec:
    block_size: int
    page_bytes: int
    kind: Literal["full"] = "full"
    window: int | None = None

    def blocks_per_request(self, max_model_len: int, cfg: EngineConfig) -> int:
        return cdiv(cdiv(max_model_len, cfg.decode_context_parallel_size), self.block_size)


@dataclass(frozen=True)
class MlaSpec(FullSpec):
    kind: Literal["mla"] = "mla"  # type: ignore[assignment]


@dataclass(frozen=True)
class SlidingWindowSpec:
    block_size: int
    page_bytes: int
    window: int
    kind: Literal["sliding_window"] = "sliding_window"

    def blocks_per_request(self, max_model_len: int, cfg: EngineConfig) -> int:
        """cdiv(min(W - 1 + T, L), B) + 1, where T is max_num_batched_tokens, and from ~0.26 the in-flight
        tokens (max_concurrent_batches x max_num_batched_tokens) (PR #47728)."""
        tokens = cfg.max_num_batched_tokens
        if cfg.behaviour.sliding_window_uses_in_flight:
            tokens *= cfg.max_concurrent_batches
        return cdiv(min(self.window - 1 + tokens, max_model_len), self.block_size) + 1


@dataclass(frozen=True)
class ChunkedLocalSpec:
    block_size: int
    page_bytes: int
    window: int  # the chunk size
    kind: Literal["chunked_local"] = "chunked_local"

    def blocks_per_request(self, max_model_len: int, cfg: EngineConfig) -> int:
        tokens = cfg.max_num_batched_tokens
        if cfg.behaviour.sliding_window_uses_in_flight:
            tokens *= cfg.max_concurrent_batches
        return cdiv(min(self.window + tokens, max_model_len), self.block_size)


@dataclass(frozen=True)
class MambaSpec:
    block_size: int
    page_bytes: int
    state_bytes: int
    cache_mode: str
    kind: Literal["mamba"] = "mamba"
    window: int | None = None

    def blocks_per_request(self, max_model_len: int, cfg: EngineConfig) -> int:
        """'none': 1 state block; 'align': 2 (running + checkpoint); each + one per speculative token."""
        base = 2 if self.cache_mode == "align" else 1
        return base + cfg.num_speculative_tokens


LayerKvSpec = FullSpec | MlaSpec | SlidingWindowSpec | ChunkedLocalSpec | MambaSpec


def kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """ModelConfig.get_num_kv_heads: max(1, kv_heads // TP): heads are replicated when TP > kv_heads."""
    return max(1, num_kv_heads // tp)


def _attention_page(heads: int, head_size: int, head_size_v: int, block_size: int, cfg: EngineConfig) -> int:
    """AttentionSpec.page_size_bytes = B x H x (Dk + Dv) x s (K and V)."""
    return int(block_size * heads * (head_size + head_size_v) * cfg.kv_cache_dtype_bytes)


def _mamba_state_bytes(state: MambaState, tp: int, cfg: EngineConfig) -> int:
    total = 0
    for shape, dtype, split in zip(state.state_shapes, state.state_dtypes, state.tp_split_dims):
        dims = list(shape)
        if split is not None:
            dims[split] = cdiv(dims[split], tp)
        numel = math.prod(dims)
        element = (
            DTYPE_BYTES.get(dtype, cfg.kv_cache_dtype_bytes) if dtype != "auto" else DTYPE_BYTES[cfg.dtype]
        )
        total += int(numel * element)
    return total


def layer_specs(
    spec: ModelSpec,
    cfg: EngineConfig,
    layer_indices: Sequence[int],
    extra_layers: Sequence[AttentionKind] = (),
) -> list[LayerKvSpec]:
    """The KV spec of each decoder layer on one rank (one PP stage, one TP shard), plus `extra_layers`
    (a speculative drafter's attention layers, which share the pool)."""
    tp = cfg.tensor_parallel_size
    block = cfg.block_size
    specs: list[LayerKvSpec] = []
    hybrid_allocator = cfg.behaviour.hybrid_kv_cache_manager and not cfg.disable_hybrid_kv_cache_manager
    attentions = [spec.layers[index].attention for index in layer_indices] + list(extra_layers)
    for attention in attentions:
        if isinstance(attention, (SharedKvAttention, NoAttention)):
            continue  # NOTE: KV-sharing layers read an earlier layer's cache, MLP-only layers keep none
        if isinstance(attention, MlaAttention):
            if cfg.kv_cache_dtype == "fp8_ds_mla":
                page = block * FP8_DS_MLA_BYTES_PER_TOKEN
            else:
                # MLA: one latent per token, not x2 and not divided by TP.
                page = int(block * attention.latent_size * cfg.kv_cache_dtype_bytes)
            specs.append(MlaSpec(block, page))
        elif isinstance(attention, MambaState):
            state = _mamba_state_bytes(attention, tp, cfg)
            mode = "align" if cfg.enable_prefix_caching else "none"
            specs.append(MambaSpec(block, state, state, mode))
        else:
            heads = kv_heads_per_rank(attention.num_kv_heads, tp)
            page = _attention_page(heads, attention.head_size, attention.head_size_v, block, cfg)
            if isinstance(attention, SlidingWindowAttention) and hybrid_allocator:
                specs.append(SlidingWindowSpec(block, page, attention.window))
            elif (
                isinstance(attention, ChunkedLocalAttention)
                and hybrid_allocator
                and cfg.env.get("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE") in ("1", "true")
            ):
                specs.append(ChunkedLocalSpec(block, page, attention.chunk_size))
            else:
                # NOTE: without the hybrid allocator (and for Llama-4's chunked-local layers by default)
                # windowed layers are stored as full attention layers.
                specs.append(FullSpec(block, page))
    return _align_mamba_pages(specs)


def _align_mamba_pages(specs: list[LayerKvSpec]) -> list[LayerKvSpec]:
    """Hybrid Mamba models: raise the attention block so one attention page holds at least one Mamba state,
    then pad the Mamba page to the attention page (platforms: HybridAttentionMambaModelConfig)."""
    mamba = [s for s in specs if isinstance(s, MambaSpec)]
    attention = [s for s in specs if not isinstance(s, MambaSpec)]
    if not mamba or not attention:
        return specs
    state = max(s.state_bytes for s in mamba)
    per_token = max(s.page_bytes // s.block_size for s in attention)
    align = max(KERNEL_BLOCK_ALIGN, min(s.block_size for s in attention))
    block = align * cdiv(state, align * per_token)
    out: list[LayerKvSpec] = []
    for s in specs:
        if isinstance(s, MambaSpec):
            out.append(MambaSpec(block, block * per_token, s.state_bytes, s.cache_mode))
        elif isinstance(s, MlaSpec):
            out.append(MlaSpec(block, s.page_bytes // s.block_size * block))
        elif isinstance(s, FullSpec):
            out.append(FullSpec(block, s.page_bytes // s.block_size * block))
        elif isinstance(s, SlidingWindowSpec):
            out.append(SlidingWindowSpec(block, s.page_bytes // s.block_size * block, s.window))
        else:
            out.append(ChunkedLocalSpec(block, s.page_bytes // s.block_size * block, s.window))
    return out


# ---------------------------------------------------------------------------------------------------------
# Groups
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KvGroup:
    """One KV cache group: layers that share block tables. `layer_spec` is its representative layer."""

    kind: str
    num_layers: int
    block_size: int
    sliding_window: int | None
    page_bytes: int
    layer_spec: LayerKvSpec
    padding_layers: int = 0

    def blocks_per_request(self, max_model_len: int, cfg: EngineConfig) -> int:
        return self.layer_spec.blocks_per_request(max_model_len, cfg)


@dataclass(frozen=True)
class KvLayout:
    """The groups of one rank and the bytes one block costs across all of them."""

    groups: tuple[KvGroup, ...]
    bytes_per_block: int
    num_layers: int
    uniform: bool  # one group over every layer (possibly of different page sizes)

    @property
    def min_block_size(self) -> int:
        return min(g.block_size for g in self.groups)

    def blocks_per_request(self, max_model_len: int, cfg: EngineConfig) -> int:
        return sum(g.blocks_per_request(max_model_len, cfg) for g in self.groups)

    def bytes_per_request(self, max_model_len: int, cfg: EngineConfig) -> int:
        return self.bytes_per_block * self.blocks_per_request(max_model_len, cfg)

    @property
    def padding_layers(self) -> int:
        return sum(g.padding_layers for g in self.groups)


def _bucket(spec: LayerKvSpec) -> tuple[str, int | None]:
    return (spec.kind, spec.window)


def group_layers(specs: Sequence[LayerKvSpec]) -> KvLayout:
    """get_kv_cache_groups: one group when every layer has the same spec (or the same type with different
    page sizes); for hybrids, groups of `group_size` layers per type, sharing `group_size` tensors, so one
    block costs page x group_size whatever the number of groups."""
    if not specs:
        return KvLayout((), 0, 0, True)
    buckets: dict[tuple[str, int | None], list[LayerKvSpec]] = {}
    for s in specs:
        buckets.setdefault(_bucket(s), []).append(s)
    if len(buckets) == 1:
        first = specs[0]
        pages = {s.page_bytes for s in specs}
        group = KvGroup(first.kind, len(specs), first.block_size, first.window, first.page_bytes, first)
        # Same type, different sizes (e.g. per-layer head sizes): one group, a block costs the sum of pages.
        return KvLayout(
            (group,),
            sum(s.page_bytes for s in specs) if len(pages) > 1 else first.page_bytes * len(specs),
            len(specs),
            True,
        )
    # Hybrid: unify page sizes (vLLM scales block sizes when pages divide; pads otherwise).
    page = max(s.page_bytes for s in specs)
    counts = {key: len(layers) for key, layers in buckets.items()}
    smallest, largest = min(counts.values()), max(counts.values())
    group_size = largest if largest < GROUP_PADDING_RATIO * smallest else smallest
    groups: list[KvGroup] = []
    for layers in buckets.values():
        rep = layers[0]
        if rep.page_bytes != page and page % rep.page_bytes == 0:
            scale = page // rep.page_bytes
            rep = _with_block(rep, rep.block_size * scale, page)
        # layers[i::n] striping: n groups whose sizes differ by at most one; the padding fills the short ones.
        n_groups = cdiv(len(layers), group_size)
        for g in range(n_groups):
            in_group = len(layers[g::n_groups])
            groups.append(
                KvGroup(rep.kind, in_group, rep.block_size, rep.window, page, rep, group_size - in_group)
            )
    return KvLayout(tuple(groups), page * group_size, len(specs), False)


def _with_block(spec: LayerKvSpec, block: int, page: int) -> LayerKvSpec:
    if isinstance(spec, SlidingWindowSpec):
        return SlidingWindowSpec(block, page, spec.window)
    if isinstance(spec, ChunkedLocalSpec):
        return ChunkedLocalSpec(block, page, spec.window)
    if isinstance(spec, MambaSpec):
        return MambaSpec(block, page, spec.state_bytes, spec.cache_mode)
    if isinstance(spec, MlaSpec):
        return MlaSpec(block, page)
    return FullSpec(block, page)


# ---------------------------------------------------------------------------------------------------------
# Capacity, as vLLM reports it
# ---------------------------------------------------------------------------------------------------------


def num_blocks(available_bytes: int, layout: KvLayout) -> int:
    """floor(available / bytes_per_block); 0 when nothing is available."""
    if available_bytes <= 0 or layout.bytes_per_block <= 0:
        return 0
    return available_bytes // layout.bytes_per_block


def max_concurrency(blocks: int, layout: KvLayout, cfg: EngineConfig) -> float:
    """num_blocks / (blocks one request of max_model_len needs, summed over groups)."""
    per_request = layout.blocks_per_request(cfg.max_model_len, cfg)
    return blocks / per_request if per_request else 0.0


def reported_kv_tokens(blocks: int, layout: KvLayout, cfg: EngineConfig) -> int:
    """The number in 'GPU KV cache size: N tokens', per version:
    V1 <= 0.9.0: num_blocks x B; 0.9.1-0.20: (num_blocks // n_groups) x min_B x DCP;
    0.21+: int(max_concurrency x max_model_len) (PR #41069)."""
    mode = cfg.behaviour.kv_tokens_report
    if mode == "blocks" or cfg.behaviour.engine == "v0":
        return blocks * layout.min_block_size
    if mode == "per_group":
        return (blocks // len(layout.groups)) * layout.min_block_size * cfg.decode_context_parallel_size
    return int(max_concurrency(blocks, layout, cfg) * cfg.max_model_len)


def needed_bytes(max_model_len: int, layout: KvLayout, cfg: EngineConfig) -> int:
    """Bytes the fit check asks for one request of max_model_len: bytes_per_block x sum of group blocks."""
    return layout.bytes_per_block * layout.blocks_per_request(max_model_len, cfg)


def usable_bytes(available_bytes: int, layout: KvLayout, cfg: EngineConfig) -> int:
    """From ~0.26 one block's bytes are held back for the null block before the fit check (PR #47272)."""
    if cfg.behaviour.null_block_in_fit_check:
        return available_bytes - layout.bytes_per_block
    return available_bytes


def estimate_max_model_len(available_bytes: int, layout: KvLayout, cfg: EngineConfig, upper: int) -> int:
    """vLLM's estimate_max_model_len: binary search for the longest length whose one request fits."""
    budget = usable_bytes(available_bytes, layout, cfg)
    if needed_bytes(1, layout, cfg) > budget:
        return 0
    low, high = 1, upper
    while low < high:
        mid = (low + high + 1) // 2
        if needed_bytes(mid, layout, cfg) <= budget:
            low = mid
        else:
            high = mid - 1
    return low


@dataclass(frozen=True)
class FitCheck:
    ok: bool
    needed_bytes: int
    available_bytes: int
    estimated_max_model_len: int
    error: str | None


def check_fits(available_bytes: int, layout: KvLayout, cfg: EngineConfig, model_limit: int) -> FitCheck:
    """_check_enough_kv_cache_memory, with vLLM's own error text for the version."""
    need = needed_bytes(cfg.max_model_len, layout, cfg)
    if available_bytes <= 0:
        return FitCheck(False, need, available_bytes, 0, no_memory_error(cfg))
    budget = usable_bytes(available_bytes, layout, cfg)
    if need <= budget:
        return FitCheck(True, need, available_bytes, cfg.max_model_len, None)
    estimate = estimate_max_model_len(available_bytes, layout, cfg, max(cfg.max_model_len, model_limit))
    return FitCheck(
        False, need, available_bytes, estimate, max_len_error(need, available_bytes, estimate, cfg, layout)
    )


# From 2025-12 (~v0.13) both KV errors end by pointing at the docs.
DOCS_SUFFIX = " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


def _docs(cfg: EngineConfig) -> str:
    return DOCS_SUFFIX if cfg.behaviour.error_docs_link else ""


def no_memory_error(cfg: EngineConfig) -> str:
    if cfg.behaviour.engine == "v0":
        return (
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine."
        )
    cpu = (
        " (this flag also controls CPU memory reservation on the CPU backend, despite its name)"
        if cfg.behaviour.error_text_2026_05
        else ""
    )
    return (
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        f"initializing the engine{cpu}.{_docs(cfg)}"
    )


def max_len_error(need: int, available: int, estimate: int, cfg: EngineConfig, layout: KvLayout) -> str:
    if cfg.behaviour.engine == "v0":
        tokens = reported_kv_tokens(num_blocks(available, layout), layout, cfg)
        return (
            f"The model's max seq len ({cfg.max_model_len}) is larger than the maximum number of tokens that "
            f"can be stored in KV cache ({tokens}). Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine."
        )
    new_text = cfg.behaviour.error_text_2026_05
    owner = "model's" if new_text else "models's"
    cpu = " (which also controls CPU memory on the CPU backend)" if new_text else ""
    return (
        f"To serve at least one request with the {owner} max seq len ({cfg.max_model_len}), "
        f"({cfg.behaviour.gib_text(need)} GiB KV cache is needed, which is larger than the available KV "
        "cache memory "
        f"({cfg.behaviour.gib_text(available)} GiB). Based on the available memory, the estimated maximum "
        "model "
        f"length is {estimate}. Try increasing `gpu_memory_utilization`{cpu} or decreasing `max_model_len` "
        f"when initializing the engine.{_docs(cfg)}"
    )


def auto_fit_max_model_len(
    available_bytes: int, layout: KvLayout, cfg: EngineConfig, model_limit: int
) -> int:
    """--max-model-len auto: the model's full length if it fits, else the longest that does."""
    budget = usable_bytes(available_bytes, layout, cfg)
    if needed_bytes(model_limit, layout, cfg) <= budget:
        return model_limit
    return estimate_max_model_len(available_bytes, layout, cfg, model_limit)
