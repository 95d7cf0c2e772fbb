"""ServeArgs + model + GPU + version -> EngineConfig: every engine setting resolved the way vLLM resolves it.

Each default records why it has its value (`EngineConfig.defaults`), so the plan can say
"max_num_seqs 1024: vLLM 0.33 default for `vllm serve` on a >= 70 GiB GPU".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from oomguard.engines.vllm.flags import ServeArgs
from oomguard.engines.vllm.versions import Behaviour, behaviour_for
from oomguard.errors import ConfigError, ParallelismError
from oomguard.kinds import Usage
from oomguard.models.spec import ModelSpec
from oomguard.units import GiB

# CacheConfig.DEFAULT_BLOCK_SIZE; FLASH_ATTN / FLASHINFER / TRITON / FLASH_ATTN_MLA / TRITON_MLA use 16.
DEFAULT_BLOCK_SIZE = 16
# Preferred KV block size of the attention backends that insist on their own (platforms:
# update_block_size_for_backend).
BACKEND_BLOCK_SIZE = {"FLASHMLA": 64, "FLASHMLA_SPARSE": 64, "CUTLASS_MLA": 128, "FLASHINFER_MLA": 32}
# EngineArgs.get_batch_defaults: (max_num_batched_tokens, max_num_seqs) per usage context and device tier.
BATCH_DEFAULTS = {
    ("llm", "huge"): (16384, 1024),
    ("serve", "huge"): (16384, 1024),  # >= 160 GiB (newer versions)
    ("llm", "large"): (16384, 1024),
    ("serve", "large"): (8192, 1024),  # >= 70 GiB, not A100, not GB10
    ("llm", "other"): (8192, 256),
    ("serve", "other"): (2048, 256),
}
V0_MAX_NUM_SEQS = 256
V0_MIN_BATCHED_TOKENS = 2048
# The DeepEP low-latency / NIXL EP batched-DP default
# (SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP).
BATCHED_DP_MAX_NUM_BATCHED_TOKENS = 256
BATCHED_DP_BACKENDS = ("deepep_low_latency", "nixl_ep")
DEFAULT_ALL2ALL = "allgather_reducescatter"
# Blackwell data-centre parts (B200, GB200): compute capability 10.x.
SM100_MAJOR = 10
# With max_num_partial_prefills > 1, older versions set long_prefill_token_threshold to 4% of max_model_len.
PARTIAL_PREFILL_THRESHOLD_FRACTION = 0.04
# How each phase reads a flag the user gave (ServeArgs.get).
Getter = Callable[..., Any]
CUDA_GRAPH_CEILING = 512
CUDA_GRAPH_CEILING_SM100 = 1024
MODEL_CAPTURE_CEILING = {"gpt_oss": 1024}
INTERACTIVITY_CAPTURE_MAX = 32
KV_CACHE_DTYPE_BYTES = {
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "fp8_ds_mla": 1,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float32": 4,
}


@dataclass(frozen=True)
class EngineConfig:
    """A vLLM engine's settings, resolved. Field names are vLLM's."""

    model: str
    vllm_version: str
    behaviour: Behaviour
    usage: Usage
    dtype: str
    quantization: str | None
    kv_cache_dtype: str  # resolved: "bfloat16", "float16", "fp8_e4m3", ...
    kv_cache_dtype_bytes: float
    max_model_len: int
    max_model_len_auto: bool
    gpu_memory_utilization: float
    kv_cache_memory_bytes: int | None
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    decode_context_parallel_size: int
    enable_expert_parallel: bool
    all2all_backend: str
    num_redundant_experts: int
    enforce_eager: bool
    cudagraph_mode: str
    cudagraph_capture_sizes: tuple[int, ...]
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    long_prefill_token_threshold: int
    async_scheduling: bool
    cpu_offload_gb: float
    enable_lora: bool
    max_loras: int
    max_lora_rank: int
    num_speculative_tokens: int
    speculative_method: str | None
    num_gpu_blocks_override: int | None
    disable_hybrid_kv_cache_manager: bool
    disable_custom_all_reduce: bool
    skip_mm_profiling: bool
    replicas_per_gpu: int
    env: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, str] = field(default_factory=dict)  # field -> why it has its value
    unknown_flags: tuple[str, ...] = ()
    args: ServeArgs | None = None

    @property
    def world_size(self) -> int:
        """GPUs one engine (one DP rank) spans."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def expert_parallel_size(self) -> int:
        # vLLM: EP = TP x DP (x PCP) when --enable-expert-parallel.
        return self.tensor_parallel_size * self.data_parallel_size if self.enable_expert_parallel else 1

    @property
    def total_gpus(self) -> int:
        """GPUs the deployment occupies: every engine's world, with co-located replicas sharing GPUs."""
        return max(1, -(-self.world_size * self.data_parallel_size // max(1, self.replicas_per_gpu)))

    @property
    def sampler_rows(self) -> int:
        """Rows of the profile run's sampler warm-up: min(max_num_batched_tokens, max_num_seqs)."""
        return min(self.max_num_batched_tokens, self.max_num_seqs)

    @property
    def max_concurrent_batches(self) -> int:
        """In-flight batches: 2 with async scheduling at PP = 1, else PP (vLLM `EngineCore` batch queue)."""
        if self.async_scheduling and self.pipeline_parallel_size == 1:
            return 2
        return self.pipeline_parallel_size

    def with_changes(self, **changes: Any) -> EngineConfig:
        return replace(self, **changes)


def derived_max_model_len(spec: ModelSpec) -> int:
    """vLLM derives max_model_len from the config's position limit (rope scaling already folded in)."""
    return spec.max_position_embeddings


def gpu_tier(
    total_bytes: int, gpu_name: str, compute_capability: tuple[int, int] | None, behaviour: Behaviour
) -> str:
    """The device tier of EngineArgs.get_batch_defaults."""
    name = gpu_name.upper()
    if behaviour.batch_default_tier_160gib and total_bytes >= 160 * GiB:
        return "huge"
    if total_bytes >= 70 * GiB and "A100" not in name and compute_capability != (12, 1):
        return "large"
    return "other"


def _resolve_dtype(
    requested: str | None, spec: ModelSpec, compute_capability: tuple[int, int] | None
) -> tuple[str, str]:
    """--dtype auto: the checkpoint's dtype; float32 checkpoints are served in bfloat16 (vLLM >= 0.5);
    GPUs without bf16 (compute capability < 8.0) fall back to float16."""
    if requested and requested != "auto":
        aliases = {
            "half": "float16",
            "bf16": "bfloat16",
            "fp16": "float16",
            "float": "float32",
            "fp32": "float32",
        }
        dtype = aliases.get(requested, requested)
        if dtype not in ("float16", "bfloat16", "float32"):
            raise ConfigError(
                f"--dtype {requested!r} is not one of auto, half, float16, bfloat16, float, float32"
            )
        return dtype, "--dtype"
    dtype = spec.dtype if spec.dtype in ("float16", "bfloat16") else "bfloat16"
    why = "the checkpoint's torch_dtype"
    if dtype == "bfloat16" and compute_capability is not None and compute_capability < (8, 0):
        return "float16", "bfloat16 is not supported below compute capability 8.0, so vLLM casts to float16"
    return dtype, why


def capture_sizes(
    behaviour: Behaviour,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    spec_tokens: int,
    compute_capability: tuple[int, int] | None,
    explicit_max: int | None = None,
) -> tuple[int, ...]:
    """The CUDA-graph capture sizes vLLM picks (config/vllm.py): [1, 2, 4] + 8..248 step 8 + 256..max step 16,
    max = min(2 x S x (1 + k), 512 (1024 on SM100 from ~0.26)), capped at max_num_batched_tokens.
    Before 0.11.1 the grid stepped by 8 all the way (67 sizes at 512)."""
    ceiling = CUDA_GRAPH_CEILING
    if (
        behaviour.capture_ceiling_1024_sm100
        and compute_capability is not None
        and compute_capability[0] == SM100_MAJOR
    ):
        ceiling = CUDA_GRAPH_CEILING_SM100
    largest = explicit_max or min(2 * max_num_seqs * (1 + spec_tokens), ceiling)
    largest = min(largest, max_num_batched_tokens)
    if not behaviour.fine_capture_grid:
        grid = [1, 2, 4] + list(range(8, largest + 1, 8))
    else:
        grid = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, largest + 1, 16))
    sizes = sorted({s for s in grid if s <= largest})
    if behaviour.capture_ceiling_1024_sm100:
        for extra in (max_num_batched_tokens, max_num_seqs):
            if extra <= largest and extra not in sizes:
                sizes.append(extra)
    return tuple(sorted(sizes))


# Each phase below resolves one group of settings as vLLM's EngineArgs.create_engine_config does, recording in
# `why` the reason each value is what it is; resolve_engine_config runs them in vLLM's order.


# More GPUs than any cluster holds: a parallel size this large is a typo (and would size per-rank tables).
MAX_DEPLOYMENT_GPUS = 1 << 17


def _parallel_sizes(get: Getter) -> tuple[int, int, int, int, bool]:
    """TP, PP, DP, DCP (each at least 1) and expert parallelism."""
    sizes = [
        int(get("tensor_parallel_size", 1)),
        int(get("pipeline_parallel_size", 1)),
        int(get("data_parallel_size", 1)),
        int(get("decode_context_parallel_size", 1)),
    ]
    names = (
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
        "--data-parallel-size",
        "--decode-context-parallel-size",
    )
    for name, value in zip(names, sizes):
        if value < 1:
            raise ParallelismError(f"{name} must be at least 1, got {value}")
    tp, pp, dp, dcp = sizes
    if tp * pp * dp > MAX_DEPLOYMENT_GPUS:
        raise ParallelismError(
            f"TP {tp} x PP {pp} x DP {dp} is {tp * pp * dp:,} GPUs, more than any deployment "
            f"(oomguard plans up to {MAX_DEPLOYMENT_GPUS:,}): a typo in a parallel size?"
        )
    return tp, pp, dp, dcp, bool(get("enable_expert_parallel", False))


def _kv_cache_dtype(get: Getter, dtype: str, why: dict[str, str]) -> tuple[str, float]:
    """--kv-cache-dtype (auto: the model dtype) and its bytes per element."""
    flag = str(get("kv_cache_dtype", "auto"))
    if flag == "auto":
        why["kv_cache_dtype"] = "auto: the model dtype"
        return dtype, KV_CACHE_DTYPE_BYTES[dtype]
    if flag in KV_CACHE_DTYPE_BYTES:
        why["kv_cache_dtype"] = "--kv-cache-dtype"
        return ("fp8_e4m3" if flag == "fp8" else flag), KV_CACHE_DTYPE_BYTES[flag]
    raise ConfigError(
        f"--kv-cache-dtype {flag!r} is not one oomguard knows "
        f"(auto, {', '.join(k for k in KV_CACHE_DTYPE_BYTES if k.startswith('fp8'))}, bfloat16, float16)"
    )


def _max_model_len(args: ServeArgs, spec: ModelSpec, why: dict[str, str]) -> tuple[int, bool]:
    """--max-model-len (or auto) against the model's limit: (length, auto-fit later)."""
    requested = args.get("max_model_len")
    model_limit = derived_max_model_len(spec)
    auto = requested == "auto"
    if requested is None or auto:
        why["max_model_len"] = f"the model's limit ({model_limit:,} positions)" + (
            ", auto-fit" if auto else ""
        )
        return model_limit, auto
    length = int(requested)
    why["max_model_len"] = "--max-model-len"
    if length > model_limit and args.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") not in ("1", "true"):
        raise ConfigError(
            f"--max-model-len {length:,} exceeds the model's limit of {model_limit:,} positions; vLLM "
            "refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (and the model's RoPE scaling supports it)"
        )
    return length, False


def _utilization(get: Getter, behaviour: Behaviour, why: dict[str, str]) -> float:
    util = get("gpu_memory_utilization")
    if util is None:
        why["gpu_memory_utilization"] = f"vLLM {behaviour.version} default"
        return behaviour.default_gpu_memory_utilization
    why["gpu_memory_utilization"] = "--gpu-memory-utilization"
    return float(util)


@dataclass(frozen=True)
class _Hardware:
    total_bytes: int
    name: str
    compute_capability: tuple[int, int] | None


def _batch_defaults(
    get: Getter,
    behaviour: Behaviour,
    usage: Usage,
    hw: _Hardware,
    *,
    ep: bool,
    dp: int,
    max_model_len: int,
) -> tuple[int, int, str]:
    """EngineArgs.get_batch_defaults: (max_num_batched_tokens, max_num_seqs, why) for this usage and GPU."""
    if behaviour.engine != "v1":
        return (
            max(max_model_len, V0_MIN_BATCHED_TOKENS),
            V0_MAX_NUM_SEQS,
            f"vLLM {behaviour.version} (V0) default",
        )
    tier = gpu_tier(hw.total_bytes, hw.name, hw.compute_capability, behaviour)
    mnbt, seqs = BATCH_DEFAULTS[(usage, tier)]
    tier_text = {"huge": ">= 160 GiB", "large": ">= 70 GiB", "other": "< 70 GiB or A100"}[tier]
    all2all = str(get("all2all_backend") or DEFAULT_ALL2ALL)
    if ep and dp > 1 and all2all in BATCHED_DP_BACKENDS and behaviour.batched_dp_moe_defaults:
        mnbt = BATCHED_DP_MAX_NUM_BATCHED_TOKENS
        tier_text = "batched-DP MoE with " + all2all
    launcher = "vllm serve" if usage == Usage.SERVE else "LLM()"
    why = f"vLLM {behaviour.version} default for `{launcher}` on {tier_text} GPUs"
    if str(get("performance_mode") or "balanced").lower() == "throughput":
        # EngineArgs.get_batch_defaults: performance_mode=throughput doubles both defaults.
        mnbt, seqs = 2 * mnbt, 2 * seqs
        why += ", doubled by --performance-mode throughput"
    return mnbt, seqs, why


def _batch_limits(
    get: Getter,
    defaults: tuple[int, int, str],
    *,
    max_model_len: int,
    enable_chunked: bool,
    why: dict[str, str],
) -> tuple[int, int]:
    """max_num_seqs and max_num_batched_tokens: the flags, else the defaults, checked as SchedulerConfig
    does."""
    default_mnbt, default_seqs, default_why = defaults
    seqs_flag, mnbt_flag = get("max_num_seqs"), get("max_num_batched_tokens")
    max_num_seqs = int(seqs_flag) if seqs_flag is not None else default_seqs
    why["max_num_seqs"] = "--max-num-seqs" if seqs_flag is not None else default_why
    if mnbt_flag is not None:
        mnbt = int(mnbt_flag)
        why["max_num_batched_tokens"] = "--max-num-batched-tokens"
    else:
        mnbt = default_mnbt
        why["max_num_batched_tokens"] = default_why
        if not enable_chunked:
            mnbt = max(mnbt, max_model_len)
            why["max_num_batched_tokens"] += ", raised to max_model_len (chunked prefill off)"
    if seqs_flag is None and max_num_seqs > mnbt:
        max_num_seqs = mnbt
    if not enable_chunked and mnbt < max_model_len:
        raise ConfigError(
            f"max_num_batched_tokens ({mnbt:,}) is smaller than max_model_len ({max_model_len:,}) with "
            "chunked "
            "prefill disabled: vLLM refuses this; raise --max-num-batched-tokens or enable chunked prefill"
        )
    if mnbt < max_num_seqs:
        raise ConfigError(
            f"max_num_batched_tokens ({mnbt:,}) must be at least max_num_seqs ({max_num_seqs:,}), as vLLM "
            "requires"
        )
    return max_num_seqs, mnbt


def _block_size(
    args: ServeArgs, spec: ModelSpec, behaviour: Behaviour, hw: _Hardware, why: dict[str, str]
) -> int:
    """--block-size, else the attention backend's (the flag, VLLM_ATTENTION_BACKEND, or the default one)."""
    flag = args.get("block_size")
    backend = str(args.get("attention_backend") or args.env.get("VLLM_ATTENTION_BACKEND") or "").upper()
    sm100 = hw.compute_capability is not None and hw.compute_capability[0] == SM100_MAJOR
    if flag is not None:
        block_size = int(flag)
        why["block_size"] = "--block-size"
    elif backend in BACKEND_BLOCK_SIZE:
        block_size = BACKEND_BLOCK_SIZE[backend]
        why["block_size"] = f"the {backend} backend's block size"
    elif spec.uses_mla and sm100 and behaviour.flashinfer_mla_default_sm100:
        block_size = BACKEND_BLOCK_SIZE["FLASHINFER_MLA"]
        why["block_size"] = "FLASHINFER_MLA, the default MLA backend on SM100"
    else:
        block_size = DEFAULT_BLOCK_SIZE
        why["block_size"] = "vLLM default (FLASH_ATTN / FLASH_ATTN_MLA / TRITON backends)"
    if block_size <= 0 or block_size % 8:
        raise ConfigError(
            f"--block-size must be a positive multiple of 8 (vLLM's kernels need it), got {block_size}"
        )
    return block_size


def _speculative(get: Getter) -> tuple[int, str | None]:
    """Draft tokens per step and the drafter (--speculative-config wins over the older flags)."""
    spec_cfg = get("speculative_config")
    tokens = int(get("num_speculative_tokens") or 0)
    method: str | None = get("speculative_model")
    if isinstance(spec_cfg, Mapping):
        tokens = int(spec_cfg.get("num_speculative_tokens", tokens) or 0)
        method = str(spec_cfg.get("method") or spec_cfg.get("model") or "draft")
    return tokens, method


def _cuda_graphs(
    get: Getter,
    spec: ModelSpec,
    behaviour: Behaviour,
    hw: _Hardware,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    spec_tokens: int,
) -> tuple[bool, str, tuple[int, ...]]:
    """--enforce-eager, the CUDA-graph mode and the capture sizes (CompilationConfig)."""
    enforce_eager = bool(get("enforce_eager", False))
    compilation = get("compilation_config") or {}
    if not isinstance(compilation, Mapping):
        compilation = {}
    mode = str(compilation.get("cudagraph_mode") or ("NONE" if enforce_eager else "FULL_AND_PIECEWISE"))
    if enforce_eager:
        mode = "NONE"
    explicit_sizes = compilation.get("cudagraph_capture_sizes")
    if mode.upper() == "NONE":
        return enforce_eager, mode.upper(), ()
    if isinstance(explicit_sizes, list) and explicit_sizes:
        return enforce_eager, mode.upper(), tuple(sorted(int(s) for s in explicit_sizes))
    if str(get("performance_mode") or "balanced").lower() == "interactivity":
        return enforce_eager, mode.upper(), tuple(range(1, INTERACTIVITY_CAPTURE_MAX + 1))
    explicit_max = compilation.get("max_cudagraph_capture_size") or compilation.get("max_capture_size")
    if explicit_max is None and spec.model_type in MODEL_CAPTURE_CEILING:
        # NOTE: vLLM's per-model config hooks raise gpt-oss's default capture ceiling to 1024
        # (the v0.19 llm-d runs logged 83 sizes, largest 1024).
        explicit_max = MODEL_CAPTURE_CEILING[spec.model_type]
    sizes = capture_sizes(
        behaviour,
        max_num_batched_tokens,
        max_num_seqs,
        spec_tokens,
        hw.compute_capability,
        int(explicit_max) if explicit_max else None,
    )
    return enforce_eager, mode.upper(), sizes


def _long_prefill_threshold(get: Getter, behaviour: Behaviour, max_model_len: int) -> int:
    threshold = get("long_prefill_token_threshold")
    if threshold is not None:
        return int(threshold)
    partial = int(get("max_num_partial_prefills") or 1)
    if partial > 1 and behaviour.partial_prefill_threshold_default:
        return int(PARTIAL_PREFILL_THRESHOLD_FRACTION * max_model_len)
    return 0


def resolve_engine_config(
    args: ServeArgs,
    spec: ModelSpec,
    *,
    gpu_total_bytes: int,
    gpu_name: str,
    compute_capability: tuple[int, int] | None,
    vllm_version: str,
    usage: Usage | str = Usage.SERVE,
    replicas_per_gpu: int = 1,
) -> EngineConfig:
    """Every setting vLLM resolves at startup for this command, model, GPU and version, with why."""
    behaviour = behaviour_for(vllm_version)
    usage = Usage(usage)
    get = args.get
    hw = _Hardware(gpu_total_bytes, gpu_name, compute_capability)
    why: dict[str, str] = {}
    if replicas_per_gpu < 1:
        raise ParallelismError(f"--replicas-per-gpu must be at least 1, got {replicas_per_gpu}")

    tp, pp, dp, dcp, ep = _parallel_sizes(get)
    dtype, why["dtype"] = _resolve_dtype(get("dtype"), spec, compute_capability)
    kv_dtype, kv_bytes = _kv_cache_dtype(get, dtype, why)
    max_model_len, auto_len = _max_model_len(args, spec, why)
    util = _utilization(get, behaviour, why)

    chunked = get("enable_chunked_prefill")
    enable_chunked = True if behaviour.engine == "v1" and chunked is None else bool(chunked)
    defaults = _batch_defaults(get, behaviour, usage, hw, ep=ep, dp=dp, max_model_len=max_model_len)
    max_num_seqs, mnbt = _batch_limits(
        get, defaults, max_model_len=max_model_len, enable_chunked=enable_chunked, why=why
    )
    block_size = _block_size(args, spec, behaviour, hw, why)
    spec_tokens, spec_method = _speculative(get)
    enforce_eager, cudagraph_mode, sizes = _cuda_graphs(
        get,
        spec,
        behaviour,
        hw,
        max_num_batched_tokens=mnbt,
        max_num_seqs=max_num_seqs,
        spec_tokens=spec_tokens,
    )
    async_flag = get("async_scheduling")
    async_scheduling = bool(async_flag) if async_flag is not None else (behaviour.engine == "v1" and pp == 1)
    prefix = get("enable_prefix_caching")
    enable_prefix = (behaviour.engine == "v1") if prefix is None else bool(prefix)

    return EngineConfig(
        model=args.model or spec.name,
        vllm_version=str(behaviour.version),
        behaviour=behaviour,
        usage=usage,
        dtype=dtype,
        quantization=get("quantization"),
        kv_cache_dtype=kv_dtype,
        kv_cache_dtype_bytes=kv_bytes,
        max_model_len=max_model_len,
        max_model_len_auto=auto_len,
        gpu_memory_utilization=util,
        kv_cache_memory_bytes=get("kv_cache_memory_bytes"),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=mnbt,
        block_size=block_size,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        data_parallel_size=dp,
        decode_context_parallel_size=dcp,
        enable_expert_parallel=ep,
        all2all_backend=str(get("all2all_backend") or DEFAULT_ALL2ALL),
        num_redundant_experts=int(get("num_redundant_experts") or 0),
        enforce_eager=enforce_eager,
        cudagraph_mode=cudagraph_mode,
        cudagraph_capture_sizes=sizes,
        enable_prefix_caching=enable_prefix,
        enable_chunked_prefill=enable_chunked,
        long_prefill_token_threshold=_long_prefill_threshold(get, behaviour, max_model_len),
        async_scheduling=async_scheduling,
        cpu_offload_gb=float(get("cpu_offload_gb") or 0.0),
        enable_lora=bool(get("enable_lora", False)),
        max_loras=int(get("max_loras") or 1),
        max_lora_rank=int(get("max_lora_rank") or 16),
        num_speculative_tokens=spec_tokens,
        speculative_method=spec_method,
        num_gpu_blocks_override=get("num_gpu_blocks_override"),
        disable_hybrid_kv_cache_manager=bool(get("disable_hybrid_kv_cache_manager", False)),
        disable_custom_all_reduce=bool(get("disable_custom_all_reduce", False)),
        skip_mm_profiling=bool(get("skip_mm_profiling", False)),
        replicas_per_gpu=replicas_per_gpu,
        env=dict(args.env),
        defaults=why,
        unknown_flags=args.unknown_flags,
        args=args,
    )
