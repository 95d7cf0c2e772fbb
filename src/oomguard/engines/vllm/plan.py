"""vLLM's planner: model + GPU + `vllm serve` flags -> the per-rank ledger, the numbers vLLM will log, fit or
not.

The order follows vLLM's own startup (vLLM `v1/worker/gpu_worker.py`): the free-memory check against the
budget, weights,
the profile run, the KV pool (minimum over workers), the fit check, then CUDA-graph capture and the sampler
warm-up, which before v0.21 took memory outside the budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from oomguard.api_fields import (
    as_usage,
    check_byte_size,
    check_count,
    check_flags,
    check_measured,
    check_text,
)
from oomguard.engines.vllm import accounting as acc
from oomguard.engines.vllm import cli_flags, kv
from oomguard.engines.vllm.config import EngineConfig, resolve_engine_config
from oomguard.engines.vllm.drafter import drafter_for
from oomguard.engines.vllm.flags import ServeArgs, args_from_mapping, parse_serve_command
from oomguard.engines.vllm.parallel import RankPlacement, distinct_ranks
from oomguard.engines.vllm.versions import NEWEST_KNOWN, parse_version
from oomguard.errors import ConfigError
from oomguard.hardware import Gpu, resolve_gpu
from oomguard.host.ledger import HostLimits
from oomguard.kinds import Failure, Provenance, Usage, Verdict
from oomguard.ledger import (
    ACTIVATION,
    COMM_BUFFERS,
    CONTEXT,
    CUDA_GRAPHS,
    KV_CACHE,
    NON_TORCH,
    OTHER_PROCESSES,
    WEIGHTS,
    Estimate,
    GpuLedger,
    LedgerLine,
)
from oomguard.margin import Margin, tightest, verdict_of
from oomguard.models.resolve import resolve_model
from oomguard.models.spec import ModelSpec
from oomguard.request import ChangesFlags
from oomguard.units import GiB, MiB

# The V1 runner's sampler warm-up after capture needs fp32 [rows x vocab] copies in memory outside the budget.
# 1.3 copies is the most that leaves every successful v0.19 run of the llm-d sweep unflagged (Kimi-Dev-72B at
# TP=2 started with room for 1.45); it flags the gpt-oss-20b TP=2 run that failed there at u=0.95. The TP=1
# gpt-oss failure had room for 2.1 copies but 1.78 GiB of its cache was fragmented: not modelled.
POST_CAPTURE_SAMPLER_COPIES = 1.3


@dataclass(frozen=True)
class PlanRequest(ChangesFlags):
    """What to plan. `flags` use vLLM's field names (tensor_parallel_size=2) or its flags as a command."""

    model: str | None = None
    gpu: str | None = None
    gpu_memory: int | str | None = None
    flags: Mapping[str, Any] = field(default_factory=dict)
    args: ServeArgs | None = None
    vllm_version: str = NEWEST_KNOWN
    replicas_per_gpu: int = 1
    usage: Usage = Usage.SERVE
    measured: Mapping[str, int] = field(default_factory=dict)  # calibrated terms (bytes) from an earlier log
    used_by_other_processes: int = 0  # bytes in use on the GPU before vLLM starts
    other_processes_source: str = "--other-processes: given by the user"
    safety_bytes: int | None = None  # the margin a fit must keep (default: the summed estimate bands)
    host: HostLimits | None = None  # the node's memory limit and /dev/shm size, when known
    local_gpus: int | None = None  # GPUs on the planned node

    def __post_init__(self) -> None:
        # checked on arrival: the API's callers get a ConfigError naming the field, not a TypeError later
        check_text(self.model, "model")
        check_text(self.gpu, "gpu")
        check_text(self.vllm_version, "vllm_version")
        check_flags(self.flags)
        check_byte_size(self.gpu_memory, "gpu_memory", text_allowed=True)
        check_count(self.replicas_per_gpu, "replicas_per_gpu")
        check_count(self.local_gpus, "local_gpus", optional=True)
        check_measured(self.measured)
        check_byte_size(self.used_by_other_processes, "used_by_other_processes", text_allowed=False)
        object.__setattr__(self, "usage", as_usage(self.usage))

    @staticmethod
    def from_argv(command: Sequence[str] | str, **kwargs: Any) -> PlanRequest:
        return PlanRequest(args=parse_serve_command(command), **kwargs)

    def serve_args(self) -> ServeArgs:
        base = self.args or ServeArgs(None, {})
        extra = args_from_mapping(dict(self.flags), where="flags") if self.flags else ServeArgs(None, {})
        merged = base.merged_with(extra)
        return replace(merged, model=self.model or base.model or extra.model)


@dataclass(frozen=True)
class RankLedger:
    """One distinct worker's ledger, as vLLM computes it."""

    placement: RankPlacement
    budget_bytes: int
    weights: Estimate
    activation: Estimate
    non_torch: Estimate
    comm_buffers: Estimate
    cuda_graphs: Estimate
    context_bytes: int
    available_kv_bytes: int  # "Available KV cache memory"
    layout: kv.KvLayout
    num_gpu_blocks: int  # after the minimum over workers
    gpu: GpuLedger

    @property
    def kv_cache_bytes(self) -> int:
        return self.num_gpu_blocks * self.layout.bytes_per_block


@dataclass(frozen=True)
class KvPlan:
    num_gpu_blocks: int
    block_size: int
    bytes_per_block: int
    kv_cache_tokens: int
    max_concurrency: float
    groups: tuple[kv.KvGroup, ...]
    layout: kv.KvLayout
    blocks_per_request: int


@dataclass(frozen=True)
class Plan:
    request: PlanRequest
    model: ModelSpec
    gpu: Gpu
    engine: EngineConfig
    ranks: tuple[RankLedger, ...]
    kv: KvPlan
    fits: bool
    errors: tuple[str, ...]
    failure: Failure | None  # the startup check that fails first
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    margin: Margin | None = None  # the tightest constraint of a plan that fits

    @property
    def rank0(self) -> RankLedger:
        return self.ranks[0]

    @property
    def verdict(self) -> Verdict:
        return verdict_of(self.fits, self.margin)


def _refuse_what_vllm_refuses(args: ServeArgs, cfg: EngineConfig) -> None:
    """vLLM's parser exits before any memory is touched on a flag it does not have (for the planned version:
    flags older versions had are fine there, not in 0.33)."""
    if args.refused:
        raise cli_flags.RefusedFlagError(cli_flags.refusal_message(args.refused))
    if args.legacy_flags and cfg.behaviour.version >= cli_flags.FLAG_LIST_VERSION:
        names = ", ".join(dict.fromkeys(args.legacy_flags))
        raise cli_flags.RefusedFlagError(
            f"vLLM {cfg.vllm_version} would refuse this command: unrecognized arguments: {names} "
            "(a flag of older vLLM versions; plan for one with --vllm-version)"
        )


# The KV layout depends on the model and a few engine fields only; sweeps reuse it (spec kept alive in the
# value).
_LAYOUT_MEMO: dict[tuple[object, ...], tuple[ModelSpec, kv.KvLayout]] = {}


def _layout(spec: ModelSpec, cfg: EngineConfig, placement: RankPlacement) -> kv.KvLayout:
    drafter = drafter_for(spec, cfg) if placement.holds_lm_head else None
    extra = drafter.kv_layers if drafter else ()
    key = (
        id(spec),
        placement.layer_start,
        placement.layer_end,
        cfg.tensor_parallel_size,
        cfg.block_size,
        cfg.kv_cache_dtype,
        cfg.dtype,
        cfg.disable_hybrid_kv_cache_manager,
        cfg.enable_prefix_caching,
        cfg.behaviour.version,
        cfg.env.get("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"),
        extra,
    )
    hit = _LAYOUT_MEMO.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1]
    if len(_LAYOUT_MEMO) > 4096:
        _LAYOUT_MEMO.clear()
    layout = kv.group_layers(kv.layer_specs(spec, cfg, placement.layer_indices, extra))
    _LAYOUT_MEMO[key] = (spec, layout)
    return layout


def _context_bytes(cfg: EngineConfig) -> int:
    return acc.CONTEXT_BYTES_DISTRIBUTED if cfg.world_size > 1 else acc.CUDA_CONTEXT_BYTES


def _plan_rank(
    spec: ModelSpec, cfg: EngineConfig, gpu: Gpu, placement: RankPlacement, measured: Mapping[str, int]
) -> tuple[RankLedger, int]:
    budget = acc.budget_bytes(gpu.total_bytes, cfg)
    weights = acc.weights_estimate(spec, cfg, placement)
    activation = acc.activation_estimate(spec, cfg, placement)
    non_torch = acc.non_torch_estimate(cfg)
    comm = acc.comm_buffers_estimate(spec, cfg)
    graphs = acc.cuda_graph_estimate(spec, cfg, placement)
    for key, name in (
        ("weights", "weights"),
        ("activation", "activation"),
        ("non_torch", "non_torch"),
        ("cuda_graph", "cuda_graphs"),
    ):
        if key in measured:
            value = Estimate(
                int(measured[key]), Provenance.MEASURED, 0, "--calibrate: measured in an earlier run"
            )
            if name == "weights":
                weights = value
            elif name == "activation":
                activation = value
            elif name == "non_torch":
                non_torch = value
            else:
                graphs = value
    graphs_in_budget = cfg.behaviour.cuda_graphs_in_budget
    if cfg.kv_cache_memory_bytes is not None:
        available = int(cfg.kv_cache_memory_bytes)
        # vLLM skips the utilization budget: what the worker takes is the pool plus what it measured.
        budget = (
            available
            + weights.bytes
            + activation.bytes
            + non_torch.bytes
            + comm.bytes
            + (graphs.bytes if graphs_in_budget else 0)
        )
    else:
        available = (
            budget
            - weights.bytes
            - activation.bytes
            - non_torch.bytes
            - comm.bytes
            - (graphs.bytes if graphs_in_budget else 0)
        )
    layout = _layout(spec, cfg, placement)
    blocks = kv.num_blocks(available, layout)
    context = _context_bytes(cfg)
    rank = RankLedger(
        placement,
        budget,
        weights,
        activation,
        non_torch,
        comm,
        graphs,
        context,
        available,
        layout,
        blocks,
        GpuLedger(gpu.total_bytes, ()),
    )
    return rank, blocks


def _other_processes(request: PlanRequest) -> tuple[LedgerLine, ...]:
    """Memory other processes hold on the GPU: once per GPU, outside vLLM's budget, before it starts."""
    if request.used_by_other_processes <= 0:
        return ()
    return (
        LedgerLine(
            OTHER_PROCESSES,
            int(request.used_by_other_processes),
            Provenance.MEASURED
            if request.other_processes_source.startswith("nvidia-smi")
            else Provenance.GIVEN,
            request.other_processes_source,
            in_budget=False,
            per_replica=False,
        ),
    )


def _gpu_ledger(
    rank: RankLedger, cfg: EngineConfig, gpu: Gpu, spec: ModelSpec, request: PlanRequest
) -> GpuLedger:
    kv_bytes = rank.kv_cache_bytes
    graphs_in_budget = cfg.behaviour.cuda_graphs_in_budget
    lines = (
        LedgerLine(WEIGHTS, rank.weights.bytes, rank.weights.kind, rank.weights.source, rank.weights.band),
        LedgerLine(
            KV_CACHE,
            kv_bytes,
            Provenance.DERIVED,
            f"{rank.num_gpu_blocks:,} blocks x {rank.layout.bytes_per_block:,} B",
        ),
        LedgerLine(
            ACTIVATION,
            rank.activation.bytes,
            rank.activation.kind,
            rank.activation.source,
            rank.activation.band,
        ),
        LedgerLine(
            COMM_BUFFERS,
            rank.comm_buffers.bytes,
            rank.comm_buffers.kind,
            rank.comm_buffers.source,
            rank.comm_buffers.band,
        ),
        LedgerLine(
            CUDA_GRAPHS,
            rank.cuda_graphs.bytes,
            rank.cuda_graphs.kind,
            rank.cuda_graphs.source,
            rank.cuda_graphs.band,
            in_budget=graphs_in_budget,
        ),
        LedgerLine(
            NON_TORCH, rank.non_torch.bytes, rank.non_torch.kind, rank.non_torch.source, rank.non_torch.band
        ),
        LedgerLine(
            CONTEXT,
            rank.context_bytes,
            Provenance.ESTIMATED,
            "CUDA context and init buffers, before vLLM's budget",
            acc.CONTEXT_BAND,
            in_budget=False,
        ),
    ) + _other_processes(request)
    return GpuLedger(gpu.total_bytes, lines, cfg.replicas_per_gpu, rank.placement.label)


def _engine_for(request: PlanRequest, args: ServeArgs, spec: ModelSpec, gpu: Gpu) -> EngineConfig:
    return resolve_engine_config(
        args,
        spec,
        gpu_total_bytes=gpu.total_bytes,
        gpu_name=gpu.name,
        compute_capability=gpu.compute_capability,
        vllm_version=request.vllm_version,
        usage=request.usage,
        replicas_per_gpu=request.replicas_per_gpu,
    )


def plan(request: PlanRequest) -> Plan:
    """Plan one deployment. Raises OomguardError subclasses for bad input; never prints."""
    notes: list[str] = []
    warnings: list[str] = []
    args = request.serve_args()
    if not args.model:
        raise ConfigError("no model given: name a Hugging Face id or a local directory with config.json")
    spec = resolve_model(args.model, dtype=args.get("dtype"), quantization=args.get("quantization"))
    gpu = resolve_gpu(request.gpu, request.gpu_memory, notes)
    cfg = _engine_for(request, args, spec, gpu)
    _refuse_what_vllm_refuses(args, cfg)
    if cfg.behaviour.version > parse_version(NEWEST_KNOWN):
        notes.append(
            f"vLLM {request.vllm_version} is newer than oomguard knows; using {NEWEST_KNOWN}'s rules"
        )
    placements = distinct_ranks(spec, cfg)
    measured = dict(request.measured)

    ranks_and_blocks = [_plan_rank(spec, cfg, gpu, p, measured) for p in placements]
    model_limit = spec.max_position_embeddings
    if cfg.max_model_len_auto:
        fitted = min(
            kv.auto_fit_max_model_len(r.available_kv_bytes, r.layout, cfg, model_limit)
            for r, _ in ranks_and_blocks
        )
        if fitted <= 0:
            raise_text = (
                "Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single "
                "token. Try increasing `gpu_memory_utilization`."
            )
            return _failed(
                request, spec, gpu, cfg, ranks_and_blocks, Failure.NO_KV_MEMORY, raise_text, notes, warnings
            )
        if fitted < model_limit:
            notes.append(
                f"--max-model-len auto: reduced from {model_limit:,} to {fitted:,} to fit the KV cache"
            )
        cfg = cfg.with_changes(max_model_len=fitted)
        ranks_and_blocks = [_plan_rank(spec, cfg, gpu, p, measured) for p in placements]

    blocks = min(b for _, b in ranks_and_blocks)
    if cfg.num_gpu_blocks_override is not None:
        blocks = int(cfg.num_gpu_blocks_override)
        notes.append(f"--num-gpu-blocks-override {blocks}: the pool size is fixed, not measured")
    ranks = tuple(replace(r, num_gpu_blocks=blocks) for r, _ in ranks_and_blocks)
    ranks = tuple(replace(r, gpu=_gpu_ledger(r, cfg, gpu, spec, request)) for r in ranks)

    failure, errors = _startup_failure(request, spec, gpu, cfg, ranks, model_limit, warnings)
    margin = tightest(_margins(request, gpu, cfg, ranks)) if failure is None else None
    rank0 = ranks[0]
    layout = rank0.layout
    kv_plan = KvPlan(
        num_gpu_blocks=blocks,
        block_size=layout.min_block_size if layout.groups else cfg.block_size,
        bytes_per_block=layout.bytes_per_block,
        kv_cache_tokens=kv.reported_kv_tokens(blocks, layout, cfg),
        max_concurrency=kv.max_concurrency(blocks, layout, cfg),
        groups=layout.groups,
        layout=layout,
        blocks_per_request=layout.blocks_per_request(cfg.max_model_len, cfg),
    )
    if layout.padding_layers:
        notes.append(
            f"Add {layout.padding_layers} padding layers, may waste at most "
            f"{100 * layout.padding_layers / (layout.num_layers + layout.padding_layers):.2f}% KV cache "
            "memory"
        )
    drafter = drafter_for(spec, cfg)
    if drafter is not None:
        notes.append(drafter.note)
    if gpu.unified_memory:
        warnings.append(
            f"{gpu.name} shares memory with the host: vLLM's free-memory check reads the host's available "
            "memory, "
            "other host processes shrink it, and the KV cache takes the whole budget however small the "
            "workload; "
            "cap it with --kv-cache-memory-bytes (max_num_seqs x max_model_len tokens is all a workload can "
            "use)"
        )
    if cfg.unknown_flags:
        notes.append("flags not modelled (kept as given): " + " ".join(cfg.unknown_flags))
    return Plan(
        request,
        spec,
        gpu,
        cfg,
        ranks,
        kv_plan,
        failure is None,
        tuple(errors),
        failure,
        tuple(warnings),
        tuple(notes),
        margin,
    )


def kv_band_bytes(rank_terms: tuple[Estimate, ...], cfg: EngineConfig, gpu: Gpu) -> int:
    """The band of the available-KV figure: every in-budget estimate, plus the device total's scaled by u."""
    return sum(term.band for term in rank_terms) + int(gpu.total_band * cfg.gpu_memory_utilization)


def kv_need_bytes(max_model_len: int, layout: kv.KvLayout, cfg: EngineConfig) -> int:
    """What the fit check asks of the pool for one request, with the null block where the version holds it."""
    need = kv.needed_bytes(max_model_len, layout, cfg)
    if cfg.behaviour.null_block_in_fit_check:
        need += layout.bytes_per_block
    return need


def in_budget_terms(rank: RankLedger, cfg: EngineConfig) -> tuple[Estimate, ...]:
    """The estimates the available-KV figure is computed from (budget minus these)."""
    graphs = (rank.cuda_graphs,) if cfg.behaviour.cuda_graphs_in_budget else ()
    return (rank.weights, rank.activation, rank.non_torch, rank.comm_buffers, *graphs)


def kv_reserve_bytes(result: Plan) -> int:
    """What the KV pool must keep beyond one max-length request: --safety, else the bands it depends on."""
    if result.request.safety_bytes is not None:
        return result.request.safety_bytes
    return max(
        kv_band_bytes(in_budget_terms(r, result.engine), result.engine, result.gpu) for r in result.ranks
    )


def _margins(
    request: PlanRequest, gpu: Gpu, cfg: EngineConfig, ranks: tuple[RankLedger, ...]
) -> list[Margin]:
    """The slack of each startup constraint on each rank, against the bands it depends on (margin.py)."""
    margins: list[Margin] = []
    safety = request.safety_bytes
    budget_sized = cfg.kv_cache_memory_bytes is None and cfg.num_gpu_blocks_override is None
    for r in ranks:
        label = r.placement.label
        if budget_sized and not cfg.max_model_len_auto:
            band = kv_band_bytes(in_budget_terms(r, cfg), cfg, gpu)
            slack = r.available_kv_bytes - kv_need_bytes(cfg.max_model_len, r.layout, cfg)
            margins.append(Margin("KV sizing", label, slack, band, band if safety is None else safety))
        # An in-budget error moves KV, not the device total, when KV is sized from the budget.
        moving = [line for line in r.gpu.lines if not (budget_sized and line.in_budget)]
        band = (
            sum(line.band * (r.gpu.replicas if line.per_replica else 1) for line in moving) + gpu.total_band
        )
        margins.append(
            Margin("device at peak", label, r.gpu.free_bytes, band, band if safety is None else safety)
        )
        if cfg.kv_cache_memory_bytes is None:
            free_at_start = (
                gpu.total_bytes
                - r.context_bytes
                - request.used_by_other_processes
                - (cfg.replicas_per_gpu - 1) * r.gpu.per_replica_bytes
            )
            band = acc.CONTEXT_BAND + gpu.total_band
            margins.append(
                Margin(
                    "free memory at start",
                    label,
                    free_at_start - r.budget_bytes,
                    band,
                    band if safety is None else safety,
                )
            )
    return margins


# ---------------------------------------------------------------------------------------------------------
# The startup checks, in the order vLLM meets them; the first that fails ends the start.
# ---------------------------------------------------------------------------------------------------------


def _startup_failure(
    request: PlanRequest,
    spec: ModelSpec,
    gpu: Gpu,
    cfg: EngineConfig,
    ranks: tuple[RankLedger, ...],
    model_limit: int,
    warnings: list[str],
) -> tuple[Failure | None, list[str]]:
    found = (
        _check_free_memory(request, gpu, cfg, ranks)
        or _check_weights(request, spec, gpu, ranks)
        or _check_kv_pool(cfg, ranks, model_limit)
        or _check_kv_allocation(request, gpu, cfg, ranks)
        or _check_outside_budget(spec, gpu, cfg, ranks, warnings)
        or _check_device(gpu, cfg, ranks)
    )
    return (found[0], [found[1]]) if found else (None, [])


def _check_free_memory(
    request: PlanRequest, gpu: Gpu, cfg: EngineConfig, ranks: tuple[RankLedger, ...]
) -> tuple[Failure, str] | None:
    """request_memory: free memory at start (after the CUDA context, other processes and the replicas started
    before this one) must cover the budget."""
    if cfg.kv_cache_memory_bytes is not None:
        return None
    for r in ranks:
        free_at_start = (
            gpu.total_bytes
            - r.context_bytes
            - request.used_by_other_processes
            - (cfg.replicas_per_gpu - 1) * r.gpu.per_replica_bytes
        )
        if free_at_start < r.budget_bytes:
            return Failure.STARTUP_FREE_MEMORY, (
                f"Free memory on device cuda:0 ({free_at_start / GiB:.2f}/{gpu.total_bytes / GiB:.2f} GiB) "
                "on "
                f"startup is less than desired GPU memory utilization ({cfg.gpu_memory_utilization}, "
                f"{r.budget_bytes / GiB:.2f} GiB). Decrease GPU memory utilization or reduce GPU memory used "
                "by "
                "other processes."
            )
    return None


def _check_weights(
    request: PlanRequest, spec: ModelSpec, gpu: Gpu, ranks: tuple[RankLedger, ...]
) -> tuple[Failure, str] | None:
    """load_model: the weights are allocated tensor by tensor with no regard for the budget, so they fail only
    when the device itself is full (the CUDA context and other processes already hold their share), with
    PyTorch's own out-of-memory error, before any KV sizing."""
    for r in ranks:
        usable = gpu.total_bytes - r.context_bytes - request.used_by_other_processes
        if r.weights.bytes <= usable:
            continue
        layers = max(1, len(r.placement.layer_indices))
        layer_bytes = max(1, r.weights.bytes // (layers + 2))  # decoder layers, plus embedding and lm_head
        free = max(0, usable) % layer_bytes
        others = (
            f" and {request.used_by_other_processes / GiB:.2f} GiB of other processes"
            if (request.used_by_other_processes)
            else ""
        )
        return Failure.WEIGHTS_DONT_FIT, (
            f"CUDA out of memory. Tried to allocate {layer_bytes / MiB:.2f} MiB. GPU 0 has a total capacity "
            "of "
            f"{gpu.total_bytes / GiB:.2f} GiB of which {free / MiB:.2f} MiB is free. (in load_model: "
            f"{r.weights.bytes / GiB:.2f} GiB of weights on {r.placement.label}, but the device holds "
            f"{max(0, usable) / GiB:.2f} GiB after the CUDA context{others}; "
            f"the allocation size is one layer's share, the exact tensor depends on the load order)"
        )
    return None


def _replicas_exceed(r: RankLedger, cfg: EngineConfig, gpu: Gpu) -> tuple[Failure, str]:
    """Co-located replicas: the incident where KV was budgeted for one replica while each holds its own."""
    each = " + ".join(
        f"{line.label} {line.bytes / GiB:.2f}" for line in r.gpu.lines if line.per_replica and line.bytes
    )
    return Failure.REPLICAS_EXCEED_GPU, (
        f"{cfg.replicas_per_gpu} replicas on one GPU need {r.gpu.used_bytes / GiB:.2f} GiB at their peaks, "
        f"more than the device's {gpu.total_bytes / GiB:.2f} GiB: each replica holds its own KV cache "
        f"and buffers ({each} GiB), so a budget for one replica "
        f"({r.gpu.with_replicas(1).used_bytes / GiB:.2f} GiB) fits while {cfg.replicas_per_gpu} do not"
    )


def _check_kv_allocation(
    request: PlanRequest, gpu: Gpu, cfg: EngineConfig, ranks: tuple[RankLedger, ...]
) -> tuple[Failure, str] | None:
    """initialize_kv_cache: a pool forced by --kv-cache-memory-bytes (or --num-gpu-blocks-override) is
    allocated
    whatever the budget says, after the profile run freed its activations and before graph capture."""
    if cfg.kv_cache_memory_bytes is None and cfg.num_gpu_blocks_override is None:
        return None
    for r in ranks:
        held = (
            r.weights.bytes
            + r.non_torch.bytes
            + r.comm_buffers.bytes
            + r.context_bytes
            + request.used_by_other_processes
            + (cfg.replicas_per_gpu - 1) * r.gpu.per_replica_bytes
        )
        if held + r.kv_cache_bytes > gpu.total_bytes:
            if cfg.replicas_per_gpu > 1:
                return _replicas_exceed(r, cfg, gpu)
            return Failure.KV_CACHE_ALLOCATION, (
                f"CUDA out of memory allocating the KV cache: {r.num_gpu_blocks:,} blocks x "
                f"{r.layout.bytes_per_block:,} B = {r.kv_cache_bytes / GiB:.2f} GiB, while weights, buffers "
                f"and context already hold {held / GiB:.2f} GiB of the device's {gpu.total_bytes / GiB:.2f} "
                "GiB"
            )
    return None


def _check_kv_pool(
    cfg: EngineConfig, ranks: tuple[RankLedger, ...], model_limit: int
) -> tuple[Failure, str] | None:
    """_check_enough_kv_cache_memory, per worker."""
    for r in ranks:
        check = kv.check_fits(r.available_kv_bytes, r.layout, cfg, model_limit)
        if not check.ok:
            return (
                Failure.NO_KV_MEMORY if r.available_kv_bytes <= 0 else Failure.MAX_MODEL_LEN
            ), check.error or ""
    return None


def _check_outside_budget(
    spec: ModelSpec, gpu: Gpu, cfg: EngineConfig, ranks: tuple[RankLedger, ...], warnings: list[str]
) -> tuple[Failure, str] | None:
    """Memory outside the budget: the CUDA context, CUDA graphs before v0.21, and (V1 runner) the sampler
    warm-up after capture. One fp32 logits copy that cannot fit is a certain OOM; the copies the warm-up
    usually holds are a risk (the caching allocator can often reuse reserved blocks)."""
    for r in ranks:
        outside = r.context_bytes + (0 if cfg.behaviour.cuda_graphs_in_budget else r.cuda_graphs.bytes)
        logits_copy = 0
        if r.placement.holds_lm_head and not cfg.behaviour.v2_model_runner_default:
            logits_copy = cfg.sampler_rows * spec.vocab_size * acc.FP32_BYTES
        headroom = gpu.total_bytes - r.budget_bytes
        if cfg.kv_cache_memory_bytes is not None:
            headroom = gpu.total_bytes - (
                r.weights.bytes
                + r.activation.bytes
                + r.non_torch.bytes
                + r.comm_buffers.bytes
                + cfg.kv_cache_memory_bytes
            )
        if outside + logits_copy > headroom:
            if logits_copy:
                return Failure.SAMPLER_WARMUP, (
                    f"CUDA out of memory occurred when warming up sampler with {cfg.sampler_rows} dummy "
                    "requests. "
                    "Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the "
                    "engine."
                )
            return Failure.CUDA_GRAPH_CAPTURE, (
                "CUDA out of memory during CUDA graph capture: the graph pool does not "
                "fit in the memory the utilization budget leaves free."
            )
        likely = outside + int(logits_copy * POST_CAPTURE_SAMPLER_COPIES)
        if likely > headroom:
            warnings.append(
                f"thin headroom outside the budget: total - budget leaves {headroom / GiB:.2f} GiB for the "
                "CUDA "
                "context, CUDA graphs and the sampler warm-up after capture, which may need "
                f"{likely / GiB:.2f} GiB: "
                "risk of 'CUDA out of memory occurred when warming up sampler'"
            )
    return None


def _check_device(gpu: Gpu, cfg: EngineConfig, ranks: tuple[RankLedger, ...]) -> tuple[Failure, str] | None:
    """Every line at its peak must fit the device: co-located replicas each at their peak, or a KV pool forced
    by --num-gpu-blocks-override (vLLM allocates it whatever the budget says)."""
    for r in ranks:
        if r.gpu.fits:
            continue
        if cfg.replicas_per_gpu > 1:
            return _replicas_exceed(r, cfg, gpu)
        return Failure.KV_CACHE_ALLOCATION, (
            f"CUDA out of memory allocating the KV cache: {r.num_gpu_blocks:,} blocks x "
            f"{r.layout.bytes_per_block:,} B = {r.kv_cache_bytes / GiB:.2f} GiB, with the rest of the ledger "
            f"{r.gpu.used_bytes / GiB:.2f} GiB, more than the device's {gpu.total_bytes / GiB:.2f} GiB"
        )
    return None


def _failed(
    request: PlanRequest,
    spec: ModelSpec,
    gpu: Gpu,
    cfg: EngineConfig,
    ranks_and_blocks: list[tuple[RankLedger, int]],
    failure: Failure,
    error: str,
    notes: list[str],
    warnings: list[str],
) -> Plan:
    ranks = tuple(replace(r, num_gpu_blocks=0) for r, _ in ranks_and_blocks)
    ranks = tuple(replace(r, gpu=_gpu_ledger(r, cfg, gpu, spec, request)) for r in ranks)
    layout = ranks[0].layout
    kv_plan = KvPlan(
        0,
        layout.min_block_size if layout.groups else cfg.block_size,
        layout.bytes_per_block,
        0,
        0.0,
        layout.groups,
        layout,
        layout.blocks_per_request(cfg.max_model_len, cfg),
    )
    return Plan(
        request, spec, gpu, cfg, ranks, kv_plan, False, (error,), failure, tuple(warnings), tuple(notes)
    )
