"""SGLang's token pool: bytes per token ("cell"), max_total_num_tokens, the SWA split, max_running_requests.

Facts (SGLang `model_runner_kv_cache_mixin.py`, `mem_cache/memory_pool.py`), paraphrased:
- cell, MHA   = kv_heads_per_rank x (head_dim + v_head_dim) x layers x kv bytes; kv_heads_per_rank =
                max(1, kv_heads // attention TP)
- cell, MLA   = (kv_lora_rank + qk_rope_head_dim) x layers x kv bytes (one latent, not split by TP)
- cell, SWA   = (full per token x full layers + swa per token x swa layers) x kv bytes
- tokens      = int(rest GiB x 2**30) // cell, capped by --max-total-tokens, page-aligned, min over PP ranks
- SWA split   = full tokens = tokens x cell / (F x n_full + r x S x n_swa), swa tokens = r x full tokens
- each pool buffer holds size + page_size token slots (slot 0 is the padding slot)
- max_running_requests = min(max(int(tokens / context_len x 512), 2048), 4096) unless given
Mamba / linear-attention state is not modelled here: only the attention layers' cells are counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from oomguard.engines.sglang.config import SglangConfig
from oomguard.models.spec import (
    ChunkedLocalAttention,
    FullAttention,
    MlaAttention,
    ModelSpec,
    SlidingWindowAttention,
)

# init_memory: the default request slots per context-length worth of pool, and its bounds.
REQUESTS_PER_CONTEXT = 512
MIN_DEFAULT_RUNNING_REQUESTS = 2048
MAX_DEFAULT_RUNNING_REQUESTS = 4096
# ReqToTokenPool: one int32 slot per token of context (+4 spare, more with speculative draft tokens) per
# request.
REQ_TO_TOKEN_BYTES = 4
REQ_TO_TOKEN_EXTRA_LEN = 4


@dataclass(frozen=True)
class PoolGroup:
    """Layers of one kind in the pool."""

    kind: str  # full | sliding_window | mla
    num_layers: int
    block_size: int  # the page size
    sliding_window: int | None
    page_bytes: int  # one page of this group's layers
    bytes_per_token: int  # the group's share of the cell
    padding_layers: int = 0


@dataclass(frozen=True)
class TokenPool:
    """One rank's pool layout: the cell and its groups."""

    groups: tuple[PoolGroup, ...]
    cell_bytes: int  # bytes per token over this rank's layers (SGLang's cell_size)
    page_size: int
    num_layers: int

    @property
    def bytes_per_block(self) -> int:
        return self.cell_bytes * self.page_size

    @property
    def is_mla(self) -> bool:
        return any(g.kind == "mla" for g in self.groups)

    @property
    def is_hybrid_swa(self) -> bool:
        return any(g.kind == "sliding_window" for g in self.groups) and any(
            g.kind == "full" for g in self.groups
        )

    def bytes_of(self, kind: str) -> int:
        return sum(g.bytes_per_token for g in self.groups if g.kind == kind)


def kv_heads_per_rank(num_kv_heads: int, attention_tp: int) -> int:
    """ModelConfig.get_num_kv_heads: heads are split over attention TP, at least one (replicated beyond)."""
    return max(1, num_kv_heads // attention_tp)


def token_pool(spec: ModelSpec, cfg: SglangConfig, layers: range) -> TokenPool:
    """The cell of the layers one rank holds (get_cell_size_per_token)."""
    s = cfg.kv_cache_dtype_bytes
    full = swa = mla = 0
    n_full = n_swa = n_mla = 0
    window: int | None = None
    for index in layers:
        attn = spec.layers[index].attention
        if isinstance(attn, MlaAttention):
            mla += attn.latent_size * s
            n_mla += 1
        elif isinstance(attn, SlidingWindowAttention) and not cfg.disable_hybrid_swa_memory:
            swa += (
                kv_heads_per_rank(attn.num_kv_heads, cfg.attention_tp_size)
                * (attn.head_size + attn.head_size_v)
                * s
            )
            n_swa += 1
            window = attn.window
        elif isinstance(attn, FullAttention | SlidingWindowAttention | ChunkedLocalAttention):
            # NOTE: with --disable-hybrid-swa-memory (and for chunked-local layers) every layer keeps every
            # token.
            full += (
                kv_heads_per_rank(attn.num_kv_heads, cfg.attention_tp_size)
                * (attn.head_size + attn.head_size_v)
                * s
            )
            n_full += 1
    page = cfg.page_size
    groups = tuple(
        PoolGroup(kind, n, page, win, per_token * page, per_token)
        for kind, n, win, per_token in (
            ("full", n_full, None, full),
            ("sliding_window", n_swa, window, swa),
            ("mla", n_mla, None, mla),
        )
        if n
    )
    return TokenPool(groups, full + swa + mla, page, len(layers))


def profiled_tokens(rest_bytes: int, pool: TokenPool) -> int:
    """profile_max_num_token: int(rest GiB x 2**30) // cell (negative when weights exceed the static
    share)."""
    if pool.cell_bytes <= 0:
        return 0
    return rest_bytes // pool.cell_bytes


def max_total_num_tokens(profiled: int, cfg: SglangConfig) -> int:
    """init_memory: --max-total-tokens caps the profiled value, then page alignment (floor)."""
    tokens = profiled if cfg.max_total_tokens is None else min(profiled, cfg.max_total_tokens)
    return tokens // cfg.page_size * cfg.page_size


@dataclass(frozen=True)
class SwaSplit:
    full_tokens: int
    swa_tokens: int


def swa_split(tokens: int, pool: TokenPool, cfg: SglangConfig) -> SwaSplit:
    """set_num_tokens_hybrid_swa: the same bytes re-divided so that swa tokens = ratio x full tokens."""
    page = cfg.page_size
    full_bytes, swa_bytes = pool.bytes_of("full"), pool.bytes_of("sliding_window")
    if not swa_bytes:
        return SwaSplit(tokens, 0)
    if not full_bytes:
        return SwaSplit(0, tokens // page * page)
    total = tokens * (full_bytes + swa_bytes)
    full = int(total / (full_bytes + cfg.swa_full_tokens_ratio * swa_bytes))
    swa = int(full * cfg.swa_full_tokens_ratio)
    return SwaSplit(full // page * page, swa // page * page)


def allocated_bytes(tokens: int, pool: TokenPool, split: SwaSplit | None = None) -> int:
    """The pool's buffers: (size + page_size) slots per layer group (slot 0 pads)."""
    page = pool.page_size
    if split is not None and pool.is_hybrid_swa:
        return (split.full_tokens + page) * pool.bytes_of("full") + (split.swa_tokens + page) * pool.bytes_of(
            "sliding_window"
        )
    return (tokens + page) * pool.cell_bytes if tokens > 0 else 0


def default_max_running_requests(tokens: int, context_len: int) -> int:
    """init_memory's default: the pool's worth of context-length requests x 512, within [2048, 4096]."""
    return min(
        max(int(tokens / context_len * REQUESTS_PER_CONTEXT), MIN_DEFAULT_RUNNING_REQUESTS),
        MAX_DEFAULT_RUNNING_REQUESTS,
    )


def req_to_token_bytes(max_running: int, cfg: SglangConfig) -> int:
    """ReqToTokenPool: max_running x (context_len + 4 [+ draft tokens]) int32 slots, allocated after profiling
    (so it comes out of the memory outside the static share)."""
    draft = int(cfg.args.get("speculative_num_draft_tokens") or 0)
    return max_running * (cfg.context_length + REQ_TO_TOKEN_EXTRA_LEN + draft) * REQ_TO_TOKEN_BYTES


def pages_per_request(length: int, page_size: int) -> int:
    return math.ceil(length / page_size)
