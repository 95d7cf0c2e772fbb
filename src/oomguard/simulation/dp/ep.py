"""A lockstep step's activation peak on one rank when MoE layers gather the tokens of every DP rank.

The planner sizes the profile run as if every DP rank ran `max_num_batched_tokens` tokens at once
(`accounting.forward_peak_bytes`: the fused-MoE caches per routed token copy, with expert parallelism over
the tokens gathered from all DP ranks). In service the ranks step together (vLLM's `DPEngineCoreProc`), each
with its own batch, and an idle rank runs a one-token dummy batch (`execute_dummy_batch`) so that the
collectives complete. So a rank's step peak has two parts:

    forward = hidden streams x its own tokens
            + max over layers of (dense MLP x own tokens | MoE: shared experts x own tokens
                                                        + routed caches x gathered tokens)

where, with EP and vLLM's default all-gather/reduce-scatter dispatch, the gathered tokens are the sum over the
ranks' tokens that step; when every rank's batch fits a CUDA graph, vLLM pads all ranks to the largest one
first (vLLM v0.33.0, vllm/v1/worker/dp_utils.py: `_post_process_cudagraph_mode` takes the minimum mode over
ranks; `_post_process_dp_padding` pads to the max when it is not NONE). The dispatch and combine buffers hold
the gathered tokens x hidden x dtype each way. At the profile shape this equals the planner's number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oomguard.engines.vllm.accounting import FORWARD_HIDDEN_STREAMS
from oomguard.simulation.step_memory import ActivationModel

if TYPE_CHECKING:
    from oomguard.planning import Plan, RankLedger

DUMMY_BATCH_TOKENS = (
    1  # vLLM gpu_worker.execute_dummy_batch: uniform_decode_query_len (1 without spec decode)
)


@dataclass(frozen=True)
class MoeTerm:
    """One MoE layer's transient: bytes per own token (shared experts) and per gathered token (routed)."""

    local_bytes_per_token: float
    gathered_bytes_per_token: float


@dataclass(frozen=True)
class LockstepMemory:
    """Per-token costs of a rank's step when the DP ranks step together (see the module docstring)."""

    hidden_bytes_per_token: float  # the hidden streams of the rank's own tokens
    dense_bytes_per_token: float  # the widest dense MLP transient
    moe: tuple[MoeTerm, ...]
    sampler_bytes_per_row: float
    fixed_bytes: int
    dispatch_bytes_per_token: float  # hidden x dtype, per gathered token, each way
    gathers_all_ranks: bool  # expert parallel: MoE layers see every rank's tokens
    max_graph_tokens: int  # largest CUDA graph batch; 0: no graphs (eager), never padded

    def gathered_tokens(self, tokens: Sequence[int]) -> tuple[int | None, int]:
        """(the batch every rank is padded to, or None when each runs its own; the tokens each MoE layer
        gathers) for the ranks' batches of one step."""
        largest = max(tokens)
        if self.max_graph_tokens > 0 and largest <= self.max_graph_tokens:
            return largest, largest * len(tokens)
        return None, sum(tokens)

    def peak_bytes(self, own_tokens: int, gathered: int, sampling_rows: int) -> int:
        """The rank's activation peak for `own_tokens` of its own and `gathered` tokens at its MoE layers."""
        seen = gathered if self.gathers_all_ranks else own_tokens
        widest = self.dense_bytes_per_token * own_tokens
        for term in self.moe:
            widest = max(
                widest, term.local_bytes_per_token * own_tokens + term.gathered_bytes_per_token * seen
            )
        forward = int(self.hidden_bytes_per_token * own_tokens + widest)
        return max(forward, int(self.sampler_bytes_per_row * sampling_rows)) + self.fixed_bytes

    def dispatch_bytes(self, gathered: int) -> int:
        return int(gathered * self.dispatch_bytes_per_token) if self.gathers_all_ranks else 0


def lockstep_memory(result: Plan, rank: RankLedger, activation: ActivationModel) -> LockstepMemory:
    """`accounting.forward_peak_bytes` split into own and gathered tokens, for the planner's rank."""
    from oomguard.models.spec import DenseMlp, MoeMlp

    spec, cfg, placement = result.model, result.engine, rank.placement
    dt = activation.dtype_bytes
    tp = cfg.tensor_parallel_size
    dense = 0.0
    moe: set[MoeTerm] = set()
    for index in placement.layer_indices:
        mlp = spec.layers[index].mlp
        if isinstance(mlp, DenseMlp):
            dense = max(dense, 3 * (mlp.intermediate_size // tp) * dt)
        elif isinstance(mlp, MoeMlp):
            inter = mlp.expert_intermediate_size // (1 if cfg.enable_expert_parallel else tp)
            routed = mlp.experts_per_token * (3 * inter + spec.hidden_size) * dt
            shared = 3 * (mlp.shared_expert_intermediate_size * max(1, mlp.num_shared_experts) // tp) * dt
            moe.add(MoeTerm(float(shared), float(routed)))
    graphs = 0 if cfg.cudagraph_mode == "NONE" else max(cfg.cudagraph_capture_sizes, default=0)
    return LockstepMemory(
        hidden_bytes_per_token=float(FORWARD_HIDDEN_STREAMS * spec.hidden_size * dt),
        dense_bytes_per_token=dense,
        moe=tuple(sorted(moe, key=lambda t: (t.local_bytes_per_token, t.gathered_bytes_per_token))),
        sampler_bytes_per_row=activation.sampler_bytes_per_row,
        fixed_bytes=activation.fixed_bytes,
        dispatch_bytes_per_token=float(spec.hidden_size * dt),
        gathers_all_ranks=bool(cfg.enable_expert_parallel),
        max_graph_tokens=int(graphs),
    )
