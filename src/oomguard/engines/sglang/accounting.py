"""SGLang's startup memory accounting, term by term (SGLang model_runner*.py).

    P  free memory per GPU after the CUDA context and torch.distributed init      estimated (context, NCCL)
    W  weights this rank loads ("Load weight end ... mem usage")                  exact from the checkpoint
    rest = (P - W) - P x (1 - mem_fraction_static)  =  P x mfs - W                derived
    KV pool = max_total_num_tokens x cell (kv.py)                                 derived
    outside the static share: CUDA graphs, prefill activations, req_to_token      estimated

The static share is a fraction of P, not of the device total: memory other processes hold at start shrinks
it, and TP's NCCL buffers come off P before the fraction is applied.
"""

from __future__ import annotations

from oomguard.engines.sglang.config import SglangConfig
from oomguard.ledger import Estimate
from oomguard.models import weights as model_weights
from oomguard.models.spec import DenseMlp, ModelSpec, MoeMlp
from oomguard.units import GiB, MiB

# CUDA context per process before SGLang measures P (H100, CUDA 12 lazy loading: ~0.5-0.6 GiB).
CONTEXT_BYTES = int(0.55 * GiB)
# torch.distributed + NCCL init at TP/PP >= 2: "Init torch distributed ends. mem usage=1.77-2.01 GB" on 8 x
# H200
# (sglang PR #11716 log, TP 8).
DISTRIBUTED_INIT_BYTES = int(1.95 * GiB)
INIT_BAND = int(0.3 * GiB)
# CUDA graph buffers: SGLang's own reserve is 2 MiB per captured batch size step up to cuda_graph_max_bs
# (server_args.py), which its maintainers size so capture fits; used here as the estimate, +-50 %.
GRAPH_BYTES_PER_MAX_BS = 2 * MiB
GRAPH_BAND_FRACTION = 0.5
# Prefill activations: hidden/residual streams (3H) and the MLP's gate_up + activation (3 I) per token of the
# largest chunk, in the model dtype; attention workspaces and logits are smaller at chunked sizes. +-50 %.
HIDDEN_STREAMS = 3
ACTIVATION_BAND_FRACTION = 0.5


def init_bytes(cfg: SglangConfig) -> Estimate:
    """Memory in use before P is measured: the CUDA context, plus NCCL/custom all-reduce at TP/PP >= 2."""
    distributed = cfg.tp_size * cfg.pp_size > 1
    num = CONTEXT_BYTES + (DISTRIBUTED_INIT_BYTES if distributed else 0)
    source = "CUDA context" + (
        " + torch.distributed/NCCL init (8 x H200 logs: 1.77-2.01 GB)" if distributed else ""
    )
    return Estimate.estimated(num, INIT_BAND, source)


def weights_estimate(
    spec: ModelSpec, cfg: SglangConfig, layers: range, *, first: bool, last: bool
) -> Estimate:
    """W: the tensors this rank loads. Attention and dense MLPs split over TP; experts over EP when --ep-size
    > 1 (each EP rank holds num_experts / ep whole experts, split again over tp / ep), else over TP."""
    place = model_weights.RankPlacement(
        tp_size=cfg.tp_size,
        ep_size=cfg.ep_size,
        ep_rank=0,
        moe_tp_size=max(1, cfg.tp_size // cfg.ep_size),
        layers=layers,
        has_embedding=first or (spec.tie_word_embeddings and last),
        has_lm_head=last,
    )
    breakdown = model_weights.rank_weight_bytes(spec, place)
    parts = [f"{role.value} {num / GiB:.2f}" for role, num in breakdown.by_role if num >= 0.005 * GiB]
    source = f"{spec.weights_source}: " + ", ".join(parts) + " GiB"
    if cfg.enable_dp_attention:
        # DP attention replicates attention weights inside each attention-TP group of tp / dp GPUs.
        return Estimate.estimated(
            breakdown.total,
            breakdown.total // 10,
            source + "; DP attention: attention weights counted as TP-split",
        )
    return Estimate.exact(breakdown.total, source)


def static_rest_bytes(free_at_init: int, weights: int, cfg: SglangConfig) -> int:
    """profile_max_num_token's rest: (P - W) - P x (1 - mem_fraction_static)."""
    return int((free_at_init - weights) - free_at_init * (1 - cfg.mem_fraction_static))


def cuda_graph_estimate(cfg: SglangConfig) -> Estimate:
    if cfg.disable_cuda_graph:
        return Estimate.zero("--disable-cuda-graph")
    num = cfg.cuda_graph_max_bs * GRAPH_BYTES_PER_MAX_BS
    return Estimate.estimated(
        num,
        int(num * GRAPH_BAND_FRACTION),
        f"SGLang's graph reserve: 2 MiB x cuda_graph_max_bs {cfg.cuda_graph_max_bs}",
    )


def activation_estimate(spec: ModelSpec, cfg: SglangConfig, layers: range) -> Estimate:
    """The forward of one prefill chunk (chunked_prefill_size tokens) at its widest layer on this rank."""
    tokens = cfg.chunked_prefill_size if cfg.chunked_prefill_size > 0 else cfg.max_prefill_tokens
    dt = spec.dtype_bytes
    tp = cfg.tp_size
    widest = 0.0
    for index in layers:
        mlp = spec.layers[index].mlp
        if isinstance(mlp, DenseMlp):
            widest = max(widest, 3 * (mlp.intermediate_size / tp))
        elif isinstance(mlp, MoeMlp):
            inter = mlp.expert_intermediate_size / max(1, tp // cfg.ep_size)
            widest = max(widest, mlp.experts_per_token * (3 * inter + spec.hidden_size))
    num = int(tokens * (HIDDEN_STREAMS * spec.hidden_size + widest) * dt)
    return Estimate.estimated(
        num,
        int(num * ACTIVATION_BAND_FRACTION),
        f"prefill chunk of {tokens:,} tokens: hidden streams + widest MLP on this rank",
    )
