"""vLLM's startup memory accounting, term by term (vLLM `v1/worker/gpu_worker.py`, `utils/mem_utils.py`).

    budget R      = ceil(total x gpu_memory_utilization)                     exact
    weights W     = torch allocated by load_model on this rank               exact from the checkpoint
    activation A  = torch peak of the profile run over its start             estimated (mechanism below)
    non-torch N   = growth of non-torch memory since the init snapshot       estimated (NCCL, cuBLAS)
    comm buffers  = EP all2all buffers, created before profiling, non-torch  derived from the backend's sizes
    CUDA graphs G = the capture estimate, subtracted from v0.21 on           estimated
    KV            = R - W - A - N - comm - G                                  (0.33: R - (C + H) - G, same
    total)

Each estimate is a mechanism with its constants fitted across many runs (bench/startup_accuracy.py), never
to one case; the error band each carries is the spread seen there.
"""

from __future__ import annotations

import math

from oomguard.engines.vllm.config import EngineConfig
from oomguard.engines.vllm.drafter import drafter_for
from oomguard.engines.vllm.parallel import RankPlacement
from oomguard.ledger import Estimate
from oomguard.models import weights as model_weights
from oomguard.models.spec import DenseMlp, MlaAttention, ModelSpec, MoeMlp, Role
from oomguard.units import GiB, MiB

# --- activation (profile run) -------------------------------------------------------------------------------
FP32_BYTES = 4
# The forward pass of max_num_batched_tokens tokens, at its largest layer: the MLP's gate_up output (2I),
# the activation output (I) and the hidden/residual streams (3H) alive together, per token.
FORWARD_HIDDEN_STREAMS = 3
# Allocator rounding and small buffers of the profile run that no term names (fitted across the sweep).
PROFILE_RESIDUAL_BYTES = int(0.05 * GiB)
# MLA (determine_chunked_prefill_workspace_size): rows = max(min(max(8L, 4 S B), 65536), S B).
MLA_WORKSPACE_MAX_ROWS = 65536

# --- non-torch ----------------------------------------------------------------------------------------------
# cuBLAS/cuBLASLt workspaces and kernel modules created during profiling, one GPU: a field of the version
# table (llm-d v0.15-0.19 sweep: 0.13 GiB up to v0.17, 0.25 GiB from v0.18).
# Lazily created NCCL communicators and custom all-reduce buffers at TP/PP >= 2 (v0.19: 2.07-2.11 GiB total
# at TP=2, 2.21 at TP=4, including the single-GPU part).
NCCL_BUFFERS_FIRST_PEER = int(1.83 * GiB)
NCCL_BUFFERS_PER_EXTRA_PEER = int(0.065 * GiB)
# Memory in use before vLLM's startup check, per process: the CUDA context (~0.5 GiB, v0.19 logs: init
# non-torch 0.51 GiB at TP=1) and, at TP/PP >= 2, NCCL and custom all-reduce init buffers (1.5-2.0 GiB).
# Versions that charged the whole process (V0 <= 0.6.4, V1 0.8.0-0.9.0) also charged the CUDA context.
CUDA_CONTEXT_BYTES = int(0.5 * GiB)
CONTEXT_BYTES_DISTRIBUTED = int(1.5 * GiB)
CONTEXT_BAND = int(0.2 * GiB)

# --- EP all2all (vLLM `all2all.py`)
# ---------------------------------------------------------------------------
DEEPEP_NVL_BUFFER = 1024 * MiB  # VLLM_DEEPEP_BUFFER_SIZE_MB default
FLASHINFER_MNNVL_WORKSPACE = 512 * MiB
DEEPEP_LL_TOKENS_BEFORE_MNBT = 256  # VLLM_MOE_DP_CHUNK_SIZE, until 2026-04-14

# --- CUDA graphs --------------------------------------------------------------------------------------------
# Graph pool of FULL_AND_PIECEWISE capture, fitted on the v0.19 "CUDA graph pool memory (actual)" figures of
# 20 runs: a per-layer part (the pieces between attention ops), a per-graph part, and more for MoE layers.
GRAPH_BYTES_PER_LAYER = int(0.0167 * GiB)
GRAPH_BYTES_PER_MOE_LAYER = int(0.03 * GiB)
GRAPH_BYTES_PER_CAPTURE = int(3.7 * MiB)


def budget_bytes(total_bytes: int, cfg: EngineConfig) -> int:
    """request_memory: R = ceil(total x utilization)."""
    return math.ceil(total_bytes * cfg.gpu_memory_utilization)


def weights_estimate(spec: ModelSpec, cfg: EngineConfig, placement: RankPlacement) -> Estimate:
    """W: the tensors this rank holds (TP/EP/PP placement) + the RoPE caches + LoRA slots - CPU offload.
    Exact from the checkpoint's tensors (safetensors headers when given, else config.json arithmetic)."""
    drafter = drafter_for(spec, cfg)
    place = model_weights.RankPlacement(
        tp_size=cfg.tensor_parallel_size,
        ep_size=placement.ep_size,
        ep_rank=placement.ep_rank,
        moe_tp_size=None if cfg.enable_expert_parallel else cfg.tensor_parallel_size * cfg.data_parallel_size,
        layers=placement.layer_indices,
        has_embedding=placement.holds_embedding or (spec.tie_word_embeddings and placement.holds_lm_head),
        has_lm_head=placement.holds_lm_head,
        redundant_experts=cfg.num_redundant_experts,
        load_mtp=placement.holds_lm_head and drafter is not None and drafter.loads_mtp,
    )
    breakdown = _rank_weights(spec, place)
    rope = model_weights.rope_cache_bytes(spec)
    lora = lora_bytes(spec, cfg, placement)
    offload = int(cfg.cpu_offload_gb * GiB)
    draft = drafter.extra_weight_bytes if drafter is not None and placement.holds_lm_head else 0
    eplb = eplb_buffer_bytes(spec, cfg, placement, breakdown)
    total = max(0, breakdown.total + rope + lora + draft + eplb - offload)
    parts = [f"{role.value} {num / GiB:.2f}" for role, num in breakdown.by_role if num >= 0.005 * GiB]
    source = f"{spec.weights_source}: " + ", ".join(parts) + f" GiB; RoPE cache {rope / MiB:.0f} MiB"
    if lora:
        source += f"; LoRA slots {lora / GiB:.2f} GiB"
    if offload:
        source += f"; --cpu-offload-gb {cfg.cpu_offload_gb:g} moves {offload / GiB:.2f} GiB to the host"
    if eplb:
        source += f"; EPLB expert buffer {eplb / GiB:.2f} GiB"
    if draft:
        source += f"; {cfg.speculative_method} drafter {draft / GiB:.2f} GiB (estimated)"
        return Estimate.estimated(total, draft // 4, source)
    return Estimate.exact(total, source)


def eplb_buffer_bytes(
    spec: ModelSpec, cfg: EngineConfig, placement: RankPlacement, breakdown: model_weights.WeightBytes
) -> int:
    """EPLB keeps one MoE layer's worth of this rank's experts as a staging buffer for rebalancing."""
    enabled = bool(cfg.args and cfg.args.get("enable_eplb"))
    moe_layers = sum(1 for i in placement.layer_indices if isinstance(spec.layers[i].mlp, MoeMlp))
    if not enabled or not moe_layers:
        return 0
    return breakdown.of(Role.EXPERTS) // moe_layers


# Sweeps re-plan the same model on the same placement thousands of times; summing ~1,000 tensors each time
# would dominate. Keyed by the spec object (kept alive in the value so its id cannot be reused).
_WEIGHTS_MEMO: dict[tuple[int, model_weights.RankPlacement], tuple[ModelSpec, model_weights.WeightBytes]] = {}
_WEIGHTS_MEMO_LIMIT = 4096


def _rank_weights(spec: ModelSpec, place: model_weights.RankPlacement) -> model_weights.WeightBytes:
    key = (id(spec), place)
    hit = _WEIGHTS_MEMO.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1]
    if len(_WEIGHTS_MEMO) >= _WEIGHTS_MEMO_LIMIT:
        _WEIGHTS_MEMO.clear()
    result = model_weights.rank_weight_bytes(spec, place)
    _WEIGHTS_MEMO[key] = (spec, result)
    return result


def lora_bytes(spec: ModelSpec, cfg: EngineConfig, placement: RankPlacement) -> int:
    """LoRA stacks: per wrapped linear, max_loras x rank x (in + out) x dtype, TP-sharded with the linear."""
    if not cfg.enable_lora:
        return 0
    tp = cfg.tensor_parallel_size
    total = 0
    for tensor in spec.tensors:
        if tensor.role not in (Role.ATTENTION, Role.MLP) or len(tensor.shape) != 2 or tensor.layer is None:
            continue
        if tensor.layer not in placement.layer_indices:
            continue
        out_features, in_features = tensor.shape
        total += cfg.max_loras * cfg.max_lora_rank * (out_features // tp + in_features) * 2
    return total


# ---------------------------------------------------------------------------------------------------------
# Activation peak of the profile run
# ---------------------------------------------------------------------------------------------------------


def sampler_warmup_bytes(spec: ModelSpec, cfg: EngineConfig) -> int:
    """The sampler warm-up over min(max_num_batched_tokens, max_num_seqs) rows of the full vocabulary
    (gathered
    on every TP rank), in fp32, with the copies its top-k/top-p path keeps alive (versions.py)."""
    return int(cfg.sampler_rows * spec.vocab_size * FP32_BYTES * cfg.behaviour.sampler_logit_copies)


def forward_peak_bytes(spec: ModelSpec, cfg: EngineConfig, placement: RankPlacement) -> int:
    """The largest transient of a forward over max_num_batched_tokens tokens on this rank."""
    tokens = cfg.max_num_batched_tokens
    dt = spec.dtype_bytes if cfg.dtype == spec.dtype else (4 if cfg.dtype == "float32" else 2)
    tp = cfg.tensor_parallel_size
    hidden = tokens * spec.hidden_size * dt * FORWARD_HIDDEN_STREAMS
    widest = 0.0
    for index in placement.layer_indices:
        mlp = spec.layers[index].mlp
        if isinstance(mlp, DenseMlp):
            widest = max(widest, tokens * 3 * (mlp.intermediate_size // tp) * dt)
        elif isinstance(mlp, MoeMlp):
            # fused_moe's three caches per routed token copy (top-k per token): gate_up (2I), activation (I)
            # and the expert outputs before the weighted sum (H); without EP the intermediate dim is
            # TP-sharded.
            # AG/RS gathers the DP ranks' tokens first.
            gathered = tokens * (cfg.data_parallel_size if cfg.enable_expert_parallel else 1)
            inter = mlp.expert_intermediate_size // (1 if cfg.enable_expert_parallel else tp)
            routed = gathered * mlp.experts_per_token * (3 * inter + spec.hidden_size) * dt
            shared = (
                tokens * 3 * (mlp.shared_expert_intermediate_size * max(1, mlp.num_shared_experts) // tp) * dt
            )
            widest = max(widest, routed + shared)
    return int(hidden + widest)


def mla_workspace_bytes(spec: ModelSpec, cfg: EngineConfig, placement: RankPlacement) -> int:
    """MLA layers allocate a simulated up-projection buffer in the profile run:
    rows x heads_per_rank x (qk_nope + v_head) x dtype, rows = max(min(max(8L, 4 S B), 65536), S B)."""
    if not any(isinstance(spec.layers[i].attention, MlaAttention) for i in placement.layer_indices):
        return 0
    L, S, B = cfg.max_model_len, cfg.max_num_seqs, cfg.block_size
    rows = max(min(max(8 * L, 4 * S * B), MLA_WORKSPACE_MAX_ROWS), S * B)
    heads = spec.num_attention_heads // cfg.tensor_parallel_size
    # qk_nope + v_head: the per-head width of the up-projection (DeepSeek: 128 + 128).
    width = 2 * spec.head_dim if spec.head_dim else 256
    return int(rows * heads * width * (2 if cfg.dtype != "float32" else 4))


def encoder_cache_bytes(spec: ModelSpec, cfg: EngineConfig) -> int:
    """Multimodal profiling stores the encoder outputs of max-size items: budget tokens x hidden x dtype."""
    if spec.vision is None or cfg.skip_mm_profiling or not spec.vision.tokens_per_item:
        return 0
    per_item = spec.vision.tokens_per_item
    budget = max(cfg.max_num_batched_tokens, per_item)
    return int(budget * spec.hidden_size * 2)


def activation_estimate(spec: ModelSpec, cfg: EngineConfig, placement: RankPlacement) -> Estimate:
    """A = max(forward peak, sampler warm-up on the last stage) + MLA workspace + encoder cache + residual."""
    forward = forward_peak_bytes(spec, cfg, placement)
    sampler = sampler_warmup_bytes(spec, cfg) if placement.holds_lm_head else 0
    extra = mla_workspace_bytes(spec, cfg, placement) + encoder_cache_bytes(spec, cfg)
    peak = max(forward, sampler) + extra + PROFILE_RESIDUAL_BYTES
    if not placement.holds_lm_head:
        source = (
            f"profile run: forward pass of {cfg.max_num_batched_tokens:,} tokens (the sampler runs on the "
            "last stage)"
        )
    else:
        which = "sampler warm-up" if sampler >= forward else "forward pass"
        source = (
            f"profile run: {which} dominates ({cfg.sampler_rows} rows x {spec.vocab_size:,} vocab x fp32 x "
            f"{cfg.behaviour.sampler_logit_copies} copies vs {cfg.max_num_batched_tokens:,}-token forward)"
        )
    band = max(int(0.25 * GiB), int(0.12 * peak))
    return Estimate.estimated(peak, band, source)


# ---------------------------------------------------------------------------------------------------------
# Non-torch, communication buffers, CUDA graphs
# ---------------------------------------------------------------------------------------------------------


def non_torch_estimate(cfg: EngineConfig) -> Estimate:
    base = cfg.behaviour.non_torch_single_gpu_bytes
    peers = cfg.world_size - 1
    nccl = 0
    if peers > 0:
        nccl = NCCL_BUFFERS_FIRST_PEER + NCCL_BUFFERS_PER_EXTRA_PEER * (peers - 1)
    source = "cuBLAS workspaces and kernels created while profiling"
    if nccl:
        source += f"; NCCL communicators / custom all-reduce buffers across {cfg.world_size} GPUs"
    if cfg.behaviour.charges_whole_process:
        base += CUDA_CONTEXT_BYTES
        source += "; CUDA context (this version charges all memory the process uses)"
    band = int(0.1 * GiB) + (int(0.3 * GiB) if nccl else 0)
    return Estimate.estimated(base + nccl, band, source)


def deepep_low_latency_rdma_bytes(hidden: int, num_experts: int, tokens: int) -> int:
    """DeepEP get_low_latency_rdma_size_hint: 2 x [max(T m_d, E T m_c) + E T max(m_d, m_c) + ceil128(4E)],
    m_d = 16 + max(2H, H + H/32) (dispatch message), m_c = 2H (combine), rounded up to 128 bytes."""
    msg_dispatch = 16 + max(2 * hidden, hidden + hidden // 32)
    msg_combine = 2 * hidden
    signalling = -(-4 * num_experts // 128) * 128
    total = 2 * (
        max(tokens * msg_dispatch, num_experts * tokens * msg_combine)
        + num_experts * tokens * max(msg_dispatch, msg_combine)
        + signalling
    )
    return -(-total // 128) * 128


def comm_buffers_estimate(spec: ModelSpec, cfg: EngineConfig) -> Estimate:
    """Expert-parallel all2all buffers: created after the weights and before profiling, non-torch, so they
    come
    out of the KV pool. allgather_reducescatter (the default) keeps none; DeepEP keeps its NVL (and RDMA)
    buffers."""
    moe = spec.moe
    if moe is None or not cfg.enable_expert_parallel or cfg.expert_parallel_size <= 1:
        return Estimate.zero("no expert-parallel all2all")
    backend = cfg.all2all_backend
    if backend in ("allgather_reducescatter", "naive", "pplx", "passthrough"):
        return Estimate.zero(
            f"{backend}: no persistent all2all buffers (gathered tokens count in the activation)"
        )
    if backend == "deepep_high_throughput":
        size = int(cfg.env.get("VLLM_DEEPEP_BUFFER_SIZE_MB", DEEPEP_NVL_BUFFER // MiB)) * MiB
        return Estimate.exact(
            size, "DeepEP high-throughput NVL buffer (VLLM_DEEPEP_BUFFER_SIZE_MB); RDMA only across nodes"
        )
    if backend in ("deepep_low_latency", "nixl_ep"):
        tokens = (
            cfg.max_num_batched_tokens
            if cfg.behaviour.deepep_ll_tokens_follow_mnbt
            else DEEPEP_LL_TOKENS_BEFORE_MNBT
        )
        rdma = deepep_low_latency_rdma_bytes(
            spec.hidden_size, moe.num_experts + cfg.num_redundant_experts, tokens
        )
        return Estimate.exact(
            DEEPEP_NVL_BUFFER + rdma,
            f"DeepEP low-latency: 1 GiB NVL + RDMA size hint for {tokens} tokens x "
            f"{moe.num_experts} experts x hidden {spec.hidden_size}",
        )
    if backend.startswith("flashinfer"):
        return Estimate.estimated(
            FLASHINFER_MNNVL_WORKSPACE, 256 * MiB, "FlashInfer MNNVL all2all workspaces"
        )
    return Estimate.estimated(
        DEEPEP_NVL_BUFFER,
        DEEPEP_NVL_BUFFER // 2,
        f"{backend}: buffer size not modelled; assuming a DeepEP-sized 1 GiB",
    )


def cuda_graph_estimate(spec: ModelSpec, cfg: EngineConfig, placement: RankPlacement) -> Estimate:
    """Graph pool of the capture: per layer on this rank, per captured graph, more for MoE layers."""
    if not cfg.cudagraph_capture_sizes or cfg.cudagraph_mode == "NONE":
        return Estimate.zero("eager mode: no CUDA graphs")
    modes = 2 if cfg.cudagraph_mode == "FULL_AND_PIECEWISE" else 1
    graphs = len(cfg.cudagraph_capture_sizes) * modes
    moe_layers = sum(1 for i in placement.layer_indices if isinstance(spec.layers[i].mlp, MoeMlp))
    size = (
        GRAPH_BYTES_PER_LAYER * placement.num_layers
        + GRAPH_BYTES_PER_MOE_LAYER * moe_layers
        + GRAPH_BYTES_PER_CAPTURE * graphs
    )
    counted = (
        "subtracted from the KV budget (v0.21+)"
        if cfg.behaviour.cuda_graphs_in_budget
        else "outside the budget before v0.21: must fit in total - budget"
    )
    return Estimate.estimated(
        size,
        max(int(0.3 * GiB), size // 3),
        f"{graphs} graphs ({cfg.cudagraph_mode}, {len(cfg.cudagraph_capture_sizes)} sizes); {counted}",
    )
