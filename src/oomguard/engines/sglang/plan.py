"""plan_sglang(): model + GPU + SGLang launch flags -> the per-rank ledger, the numbers SGLang will log, fit
or not.

The order follows SGLang's own startup (SGLang `model_runner.py`): free memory after init (P), weight load,
the static
share P x mem_fraction_static and the token pool sized from what is left of it, the request table, then CUDA
graph capture and the prefills, which live in the memory outside the static share.

`engine.py` turns the SglangPlan into the engine-neutral result that the renderers print.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from oomguard.engines.sglang import accounting as acc
from oomguard.engines.sglang import kv
from oomguard.engines.sglang.config import SglangConfig, resolve_config
from oomguard.engines.sglang.flags import LaunchArgs, args_from_mapping, parse_launch_command
from oomguard.errors import ConfigError
from oomguard.hardware import Gpu, resolve_gpu
from oomguard.kinds import Failure, Provenance, Verdict
from oomguard.ledger import (
    ACTIVATION,
    CONTEXT,
    CUDA_GRAPHS,
    KV_CACHE,
    WEIGHTS,
    Estimate,
    GpuLedger,
    LedgerLine,
)
from oomguard.margin import Margin, tightest, verdict_of
from oomguard.models import weights as model_weights
from oomguard.models.resolve import resolve_model
from oomguard.models.spec import ModelSpec
from oomguard.request import ChangesFlags
from oomguard.units import GiB

REQ_TO_TOKEN = "req_to_token_pool"  # a ledger line only SGLang has: the request -> token slot table
# SGLang measures P after the CUDA context and NCCL init, so neither is a line of its own.
NOT_SEPARATE_NON_TORCH = Estimate.zero("counted in the CUDA context / init line")
NOT_SEPARATE_COMM = Estimate.zero("NCCL buffers are created before P is measured (init line)")
ERROR_NOT_ENOUGH_MEMORY = (
    "Not enough memory. Please try to increase --mem-fraction-static. "
    "Current value: self.server_args.mem_fraction_static={fraction}"
)
ERROR_GRAPH_CAPTURE = (
    "Capture cuda graph failed: CUDA out of memory. Possible solutions: 1. set "
    "--mem-fraction-static to a smaller value (e.g., 0.8 or 0.7) 2. set --cuda-graph-max-bs to a "
    "smaller value (e.g., 16) 3. disable torch compile by not using --enable-torch-compile "
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)"
)


@dataclass(frozen=True)
class SglangRequest(ChangesFlags):
    """What to plan. `flags` use SGLang's ServerArgs names (tp_size=2); `args` is a parsed launch command."""

    model: str | None = None
    gpu: str | None = None
    gpu_memory: int | str | None = None
    flags: Mapping[str, Any] = field(default_factory=dict)
    args: LaunchArgs | None = None
    used_by_other_processes: int = 0  # bytes in use on the GPU before SGLang starts
    safety_bytes: int | None = None  # the margin a fit must keep (default: the summed estimate bands)

    @staticmethod
    def from_argv(command: Sequence[str] | str, **kwargs: Any) -> SglangRequest:
        return SglangRequest(args=parse_launch_command(command), **kwargs)

    def launch_args(self) -> LaunchArgs:
        base = self.args or LaunchArgs(None, {})
        extra = args_from_mapping(self.flags) if self.flags else LaunchArgs(None, {})
        merged = base.merged_with(extra)
        return replace(merged, model=self.model or merged.model)


@dataclass(frozen=True)
class SglangPlacement:
    """One distinct rank: its PP stage (TP ranks of a stage hold the same shapes)."""

    pp_rank: int
    layer_start: int
    layer_end: int
    ep_rank: int = 0

    @property
    def layers(self) -> range:
        return range(self.layer_start, self.layer_end)

    @property
    def label(self) -> str:
        return f"PP stage {self.pp_rank} (layers {self.layer_start}-{self.layer_end - 1})"


@dataclass(frozen=True)
class SglangRank:
    """One distinct rank's ledger, as SGLang computes it."""

    placement: SglangPlacement
    free_at_init: int  # P: what SGLang measures after init, before loading weights
    budget_bytes: int  # the static share: P x mem_fraction_static (weights + KV pool)
    init: Estimate  # CUDA context + distributed init, before P
    weights: Estimate
    activation: Estimate
    cuda_graphs: Estimate
    available_kv_bytes: int  # profile_max_num_token's rest
    layout: kv.TokenPool
    profiled_tokens: int  # this rank's own pool size before the min over PP stages
    num_gpu_blocks: int  # pages after the min over ranks
    kv_cache_bytes: int  # the pool's buffers
    req_to_token_bytes: int
    gpu: GpuLedger


@dataclass(frozen=True)
class SglangKv:
    """The pool as SGLang sizes it (a block is a page of `page_size` tokens)."""

    num_gpu_blocks: int
    block_size: int
    bytes_per_block: int
    kv_cache_tokens: int  # max_total_num_tokens
    max_concurrency: float  # max_total_num_tokens / context_len
    groups: tuple[kv.PoolGroup, ...]
    layout: kv.TokenPool
    blocks_per_request: int
    max_running_requests: int
    swa: kv.SwaSplit | None


@dataclass(frozen=True)
class SglangPlan:
    request: SglangRequest
    model: ModelSpec
    gpu: Gpu
    engine: SglangConfig
    ranks: tuple[SglangRank, ...]
    kv: SglangKv
    fits: bool
    errors: tuple[str, ...]
    failure: Failure | None
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    margin: Margin | None = None  # the tightest startup constraint of a plan that starts

    @property
    def rank0(self) -> SglangRank:
        return self.ranks[0]

    @property
    def verdict(self) -> Verdict:
        return verdict_of(self.fits, self.margin)


def _placements(spec: ModelSpec, cfg: SglangConfig) -> list[SglangPlacement]:
    out = []
    for stage in range(cfg.pp_size):
        layers = model_weights.pp_layer_range(spec.num_hidden_layers, cfg.pp_size, stage)
        out.append(SglangPlacement(stage, layers.start, layers.stop))
    return out


def _rank(
    spec: ModelSpec, cfg: SglangConfig, gpu: Gpu, placement: SglangPlacement, others: int
) -> SglangRank:
    init = acc.init_bytes(cfg)
    free = gpu.total_bytes - init.bytes - others
    weights = acc.weights_estimate(
        spec, cfg, placement.layers, first=placement.pp_rank == 0, last=placement.pp_rank == cfg.pp_size - 1
    )
    rest = acc.static_rest_bytes(free, weights.bytes, cfg)
    pool = kv.token_pool(spec, cfg, placement.layers)
    tokens = kv.max_total_num_tokens(kv.profiled_tokens(rest, pool), cfg)
    return SglangRank(
        placement,
        free,
        int(free * cfg.mem_fraction_static),
        init,
        weights,
        acc.activation_estimate(spec, cfg, placement.layers),
        acc.cuda_graph_estimate(cfg),
        rest,
        pool,
        tokens,
        0,
        0,
        0,
        GpuLedger(gpu.total_bytes, ()),
    )


def _ledger(rank: SglangRank, gpu: Gpu) -> GpuLedger:
    pool = rank.layout
    lines = (
        LedgerLine(WEIGHTS, rank.weights.bytes, rank.weights.kind, rank.weights.source, rank.weights.band),
        LedgerLine(
            KV_CACHE,
            rank.kv_cache_bytes,
            Provenance.DERIVED,
            f"{rank.num_gpu_blocks * pool.page_size:,} tokens x {pool.cell_bytes:,} B (+1 padding page)",
        ),
        LedgerLine(
            REQ_TO_TOKEN,
            rank.req_to_token_bytes,
            Provenance.DERIVED,
            "max_running_requests x (context_len + 4) x int32, allocated after profiling",
            in_budget=False,
        ),
        LedgerLine(
            CUDA_GRAPHS,
            rank.cuda_graphs.bytes,
            rank.cuda_graphs.kind,
            rank.cuda_graphs.source,
            rank.cuda_graphs.band,
            in_budget=False,
        ),
        LedgerLine(
            ACTIVATION,
            rank.activation.bytes,
            rank.activation.kind,
            rank.activation.source,
            rank.activation.band,
            in_budget=False,
        ),
        LedgerLine(
            CONTEXT, rank.init.bytes, rank.init.kind, rank.init.source, rank.init.band, in_budget=False
        ),
    )
    return GpuLedger(gpu.total_bytes, lines, 1, rank.placement.label)


def plan_sglang(request: SglangRequest) -> SglangPlan:
    """Plan one SGLang deployment. Raises OomguardError subclasses for bad input; never prints."""
    notes: list[str] = []
    warnings: list[str] = []
    args = request.launch_args()
    if not args.model:
        raise ConfigError(
            "no model given: name a Hugging Face id or a local directory with config.json (--model-path)"
        )
    spec = resolve_model(args.model, dtype=args.get("dtype"), quantization=args.get("quantization"))
    gpu = resolve_gpu(request.gpu, request.gpu_memory, notes)
    cfg = resolve_config(args, spec, gpu)
    others = int(request.used_by_other_processes)
    ranks = [_rank(spec, cfg, gpu, p, others) for p in _placements(spec, cfg)]
    # PP stages agree on the smallest pool (all_reduce MIN); TP ranks of a stage are identical here.
    tokens = min(r.profiled_tokens for r in ranks)
    pool0 = ranks[0].layout
    split = kv.swa_split(tokens, pool0, cfg) if pool0.is_hybrid_swa and tokens > 0 else None
    if split is not None:
        tokens = split.full_tokens
    max_running = cfg.max_running_requests or kv.default_max_running_requests(
        max(tokens, 0), cfg.context_length
    )
    if cfg.max_running_requests is None:
        cfg = cfg.with_changes(max_running_requests=max_running)
        cfg = cfg.with_changes(
            defaults={
                **cfg.defaults,
                "max_running_requests": (
                    f"{max_running}: SGLang's default, min(max(tokens / context_len x 512, 2048), 4096)"
                ),
            }
        )
    req_bytes = kv.req_to_token_bytes(max_running, cfg) if tokens > 0 else 0
    sized = []
    for r in ranks:
        pages = max(tokens, 0) // cfg.page_size
        r = replace(
            r,
            num_gpu_blocks=pages,
            kv_cache_bytes=kv.allocated_bytes(max(tokens, 0), r.layout, split),
            req_to_token_bytes=req_bytes,
        )
        sized.append(replace(r, gpu=_ledger(r, gpu)))
    final = tuple(sized)
    failure, error = _startup_failure(cfg, final, tokens, warnings)
    if any(layer.attention.kind == "mamba" for layer in spec.layers):
        notes.append(
            "Mamba / linear-attention state pools are not modelled for SGLang: the token pool counts the "
            "attention layers only, so it is an upper bound"
        )
    if cfg.args.unknown_flags:
        notes.append("flags not modelled (kept as given): " + " ".join(cfg.args.unknown_flags))
    kv_plan = SglangKv(
        num_gpu_blocks=max(tokens, 0) // cfg.page_size,
        block_size=cfg.page_size,
        bytes_per_block=pool0.bytes_per_block,
        kv_cache_tokens=max(tokens, 0),
        max_concurrency=max(tokens, 0) / cfg.context_length,
        groups=pool0.groups,
        layout=pool0,
        blocks_per_request=kv.pages_per_request(cfg.context_length, cfg.page_size),
        max_running_requests=max_running,
        swa=split,
    )
    return SglangPlan(
        request,
        spec,
        gpu,
        cfg,
        final,
        kv_plan,
        failure is None,
        (error,) if error else (),
        failure,
        tuple(warnings),
        tuple(notes),
        tightest(_margins(request, gpu, cfg, final)) if failure is None else None,
    )


# ---------------------------------------------------------------------------------------------------------
# The margin of a plan that starts (margin.py): each constraint's slack against the bands it depends on
# ---------------------------------------------------------------------------------------------------------

# The two constraints SGLang's start depends on: a non-empty token pool in the static share, and the memory
# outside it holding the request table, CUDA graphs and a prefill chunk.
TOKEN_POOL = "token pool"
DEVICE_AT_PEAK = "device at peak"


def _margins(
    request: SglangRequest, gpu: Gpu, cfg: SglangConfig, ranks: tuple[SglangRank, ...]
) -> list[Margin]:
    """P = total - init - other processes is split by mem_fraction_static: an error in the device total or
    the init line moves the static share by `fraction` of it and the rest by `1 - fraction`; a weights error
    moves the pool only (the static share is fixed), an error outside the share moves the peak only."""
    margins: list[Margin] = []
    safety = request.safety_bytes
    fraction = cfg.mem_fraction_static
    for r in ranks:
        label = r.placement.label
        shared = r.init.band + gpu.total_band
        smallest_pool = r.layout.cell_bytes * cfg.page_size
        band = r.weights.band + int(shared * fraction)
        margins.append(
            Margin(
                TOKEN_POOL,
                label,
                r.available_kv_bytes - smallest_pool,
                band,
                band if safety is None else safety,
            )
        )
        outside = r.free_at_init - r.weights.bytes - r.kv_cache_bytes - r.req_to_token_bytes
        slack = outside - r.cuda_graphs.bytes - r.activation.bytes
        band = r.cuda_graphs.band + r.activation.band + int(shared * (1 - fraction))
        margins.append(Margin(DEVICE_AT_PEAK, label, slack, band, band if safety is None else safety))
    return margins


# ---------------------------------------------------------------------------------------------------------
# The startup checks, in the order SGLang meets them; the first that fails ends the start.
# ---------------------------------------------------------------------------------------------------------


def _startup_failure(
    cfg: SglangConfig, ranks: tuple[SglangRank, ...], tokens: int, warnings: list[str]
) -> tuple[Failure | None, str | None]:
    for r in ranks:
        if r.weights.bytes > r.free_at_init:
            return Failure.WEIGHTS_DONT_FIT, (
                f"CUDA out of memory while loading weights: this rank's {r.weights.bytes / GiB:.2f} GiB do "
                "not fit "
                f"the {r.free_at_init / GiB:.2f} GiB free after init"
            )
    if tokens <= 0:
        return Failure.NO_KV_MEMORY, ERROR_NOT_ENOUGH_MEMORY.format(fraction=cfg.mem_fraction_static)
    for r in ranks:
        after_pool = r.free_at_init - r.weights.bytes - r.kv_cache_bytes - r.req_to_token_bytes
        if after_pool < 0:
            return Failure.KV_CACHE_ALLOCATION, (
                "CUDA out of memory allocating the KV pool and request table: "
                f"{(r.kv_cache_bytes + r.req_to_token_bytes) / GiB:.2f} GiB "
                f"with {max(0, r.free_at_init - r.weights.bytes) / GiB:.2f} GiB free after the weights"
            )
        if r.cuda_graphs.bytes > after_pool:
            return Failure.CUDA_GRAPH_CAPTURE, ERROR_GRAPH_CAPTURE
        after_graphs = after_pool - r.cuda_graphs.bytes
        if r.activation.bytes > after_graphs:
            warnings.append(
                f"thin headroom outside the static share: {after_graphs / GiB:.2f} GiB left after CUDA "
                "graphs for a "
                f"prefill chunk that may need {r.activation.bytes / GiB:.2f} GiB: risk of 'CUDA out of "
                "memory' at the "
                "first long prefill (lower --mem-fraction-static or --chunked-prefill-size)"
            )
            break
    if tokens < cfg.context_length:
        warnings.append(
            f"the pool holds {tokens:,} tokens, fewer than context_len {cfg.context_length:,}: SGLang "
            "rejects prompts "
            f"longer than about {tokens - 1:,} tokens ('Input length ... exceeds the maximum allowed length')"
        )
    return None, None
