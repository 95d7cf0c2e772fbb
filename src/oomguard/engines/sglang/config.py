"""LaunchArgs + model + GPU -> SglangConfig: every setting SGLang resolves at startup, with why it has its
value.

Defaults follow SGLang's `ServerArgs._handle_gpu_memory_settings` (server_args.py, PR #10975 and later):
the GPU's memory capacity (nvidia-smi `memory.total`, MiB, the smallest over the visible GPUs) picks
chunked_prefill_size and cuda_graph_max_bs by bucket, and mem_fraction_static, when not given, is

    reserved (MiB) = 512                                   constant metadata (attention backend)
                   + 1.5 x max(chunked_prefill_size, 2048)  activations of a large prefill
                   + 2 x cuda_graph_max_bs                  CUDA graph buffers
                   + tp x pp / 8 x 1024                     large parallel sizes
                   [+ 3 x cuda_graph_max_bs x dp, + 1.5 x that again above bs 300, with DP attention]
                   at least 10240 on GPUs over 60 GiB; + 2048 for EAGLE-style drafters, + 6144 for STANDALONE
    mem_fraction_static = round((capacity - reserved) / capacity, 3)

"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from oomguard.engines.sglang.flags import LaunchArgs
from oomguard.errors import ConfigError, ParallelismError
from oomguard.hardware import Gpu
from oomguard.models.spec import ModelSpec
from oomguard.units import MiB

ENGINE_VERSION = "main (2026)"  # the server_args.py / model_runner_kv_cache_mixin.py read for these rules

# (capacity below MiB, chunked_prefill_size, cuda_graph_max_bs at TP < 4, at TP >= 4): server_args.py buckets.
GPU_BUCKETS: tuple[tuple[float, int, int, int], ...] = (
    (20 * 1024, 2048, 8, 8),  # T4, RTX 4080
    (35 * 1024, 2048, 24, 80),  # A10, RTX 4090/5090
    (60 * 1024, 4096, 32, 160),  # A100 40GB, L40
    (90 * 1024, 8192, 256, 512),  # H100, A100 80GB
    (160 * 1024, 8192, 256, 512),  # H20, H200
    (float("inf"), 16384, 512, 512),  # B200, MI300
)
RESERVED_CONSTANT_MIB = 512
RESERVED_PER_PREFILL_TOKEN_MIB = 1.5
RESERVED_PREFILL_FLOOR_TOKENS = 2048
RESERVED_PER_GRAPH_BS_MIB = 2
RESERVED_PER_EIGHT_GPUS_MIB = 1024
RESERVED_DP_ATTENTION_PER_BS_MIB = 3
RESERVED_DP_ATTENTION_LARGE_BS = 300
RESERVED_DP_ATTENTION_LARGE_BS_MIB = 1.5
RESERVED_FLOOR_LARGE_GPU_MIB = 10 * 1024
LARGE_GPU_MIB = 60 * 1024
RESERVED_EAGLE_MIB = 2 * 1024
RESERVED_STANDALONE_MIB = 6 * 1024
DEFAULT_MAX_PREFILL_TOKENS = 16384  # ServerArgs.max_prefill_tokens
DEFAULT_PAGE_SIZE = 1  # ServerArgs.page_size resolves to 1 for the default CUDA backends
DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8  # ServerArgs.swa_full_tokens_ratio
FP8_KV_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")
BF16_KV_DTYPES = ("bf16", "bfloat16", "float16", "fp16", "half")


@dataclass(frozen=True)
class SglangConfig:
    """The resolved SGLang settings (ServerArgs names). `defaults` says why each derived value is what it
    is."""

    tp_size: int
    pp_size: int
    dp_size: int
    ep_size: int
    enable_dp_attention: bool
    mem_fraction_static: float
    context_length: int
    chunked_prefill_size: int
    max_prefill_tokens: int
    cuda_graph_max_bs: int
    disable_cuda_graph: bool
    max_running_requests: int | None  # None until the pool is sized (then SGLang's own default)
    max_total_tokens: int | None
    page_size: int
    kv_cache_dtype: str
    kv_cache_dtype_bytes: int
    dtype: str
    quantization: str | None
    speculative_algorithm: str | None
    swa_full_tokens_ratio: float
    disable_hybrid_swa_memory: bool
    gpu_capacity_mib: float
    args: LaunchArgs
    defaults: Mapping[str, str] = field(default_factory=dict)

    def with_changes(self, **changes: Any) -> SglangConfig:
        return replace(self, **changes)

    @property
    def attention_tp_size(self) -> int:
        """DP attention splits the TP group into dp attention groups of tp / dp GPUs (dp_attention.py)."""
        return self.tp_size // self.dp_size if self.enable_dp_attention else self.tp_size

    @property
    def total_gpus(self) -> int:
        # With DP attention the DP ranks live inside the TP group; without it each DP replica has its own
        # GPUs.
        return self.tp_size * self.pp_size * (1 if self.enable_dp_attention else self.dp_size)


def capture_batch_sizes(max_bs: int, speculative: bool) -> tuple[int, ...]:
    """_generate_cuda_graph_batch_sizes: 1, 2, 4, 8, 12, then steps of 8 to 256, 16 to 512, 32 beyond
    (speculative decoding: finer steps below 64)."""
    if speculative:
        sizes = (
            list(range(1, 9))
            + list(range(10, 33, 2))
            + list(range(40, 65, 4))
            + list(range(72, 257, 8))
            + list(range(272, max_bs + 1, 16))
        )
    else:
        sizes = (
            [1, 2, 4, 8, 12]
            + list(range(16, 257, 8))
            + list(range(272, 512, 16))
            + list(range(512, max_bs + 1, 32))
        )
    return tuple(s for s in sizes if s <= max_bs)


def gpu_capacity_mib(gpu: Gpu) -> tuple[float, str]:
    """SGLang sizes its defaults from nvidia-smi's memory.total (MiB), not from what CUDA reports."""
    if gpu.nvidia_smi_total_mib:
        return float(gpu.nvidia_smi_total_mib), "nvidia-smi memory.total"
    return gpu.total_bytes / MiB, "the CUDA total (nvidia-smi's total for this GPU is not in the catalog)"


def reserved_mib(cfg: SglangConfig) -> float:
    """The memory SGLang keeps out of the static pool when it picks mem_fraction_static (module docstring)."""
    prefill = cfg.chunked_prefill_size if cfg.chunked_prefill_size > 0 else cfg.max_prefill_tokens
    reserved = (
        RESERVED_CONSTANT_MIB
        + RESERVED_PER_PREFILL_TOKEN_MIB * max(prefill, RESERVED_PREFILL_FLOOR_TOKENS)
        + RESERVED_PER_GRAPH_BS_MIB * cfg.cuda_graph_max_bs
        + cfg.tp_size * cfg.pp_size / 8 * RESERVED_PER_EIGHT_GPUS_MIB
    )
    if cfg.enable_dp_attention:
        reserved += RESERVED_DP_ATTENTION_PER_BS_MIB * cfg.cuda_graph_max_bs * cfg.dp_size
        if cfg.cuda_graph_max_bs > RESERVED_DP_ATTENTION_LARGE_BS:
            reserved += RESERVED_DP_ATTENTION_LARGE_BS_MIB * cfg.cuda_graph_max_bs * cfg.dp_size
    if cfg.gpu_capacity_mib > LARGE_GPU_MIB:
        reserved = max(reserved, RESERVED_FLOOR_LARGE_GPU_MIB)
    algorithm = (cfg.speculative_algorithm or "").upper()
    if algorithm == "STANDALONE":
        reserved += RESERVED_STANDALONE_MIB
    elif algorithm and algorithm != "NGRAM":
        reserved += RESERVED_EAGLE_MIB
    return reserved


def _kv_dtype(name: str, spec: ModelSpec) -> tuple[str, int]:
    if name == "auto":
        return spec.dtype, int(spec.dtype_bytes)
    if name in FP8_KV_DTYPES:
        return name, 1
    if name in BF16_KV_DTYPES:
        return name, 2
    raise ConfigError(
        f"--kv-cache-dtype {name!r} is not one oomguard models for SGLang (auto, fp8_e4m3, fp8_e5m2, bf16)"
    )


def _positive(name: str, value: int) -> int:
    if value < 1:
        raise ParallelismError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    return value


def resolve_config(args: LaunchArgs, spec: ModelSpec, gpu: Gpu) -> SglangConfig:
    """Every setting SGLang derives before it loads the model, in server_args.py's order."""
    why: dict[str, str] = {}
    tp = _positive("tp_size", int(args.get("tp_size", 1)))
    pp = _positive("pp_size", int(args.get("pp_size", 1)))
    dp = _positive("dp_size", int(args.get("dp_size", 1)))
    ep = _positive("ep_size", int(args.get("ep_size", 1)))
    dp_attention = bool(args.get("enable_dp_attention", False))
    if dp_attention and tp % dp:
        raise ParallelismError(f"--enable-dp-attention needs --tp-size ({tp}) divisible by --dp-size ({dp})")
    if spec.num_hidden_layers < pp:
        raise ParallelismError(f"--pp-size {pp} is more than the model's {spec.num_hidden_layers} layers")
    capacity, capacity_source = gpu_capacity_mib(gpu)
    limit = next(b for b in GPU_BUCKETS if capacity < b[0])
    chunked = args.get("chunked_prefill_size")
    if chunked is None:
        chunked = limit[1]
        why["chunked_prefill_size"] = (
            f"{chunked}: SGLang's default for a {capacity:,.0f} MiB GPU ({capacity_source})"
        )
    graph_bs = args.get("cuda_graph_max_bs")
    if graph_bs is None:
        graph_bs = limit[2] if tp < 4 else limit[3]
        why["cuda_graph_max_bs"] = f"{graph_bs}: SGLang's default for a {capacity:,.0f} MiB GPU at TP {tp}"
    context = args.get("context_length")
    if context is None:
        context = spec.max_position_embeddings
        why["context_length"] = f"{context:,}: the model's max_position_embeddings"
    if int(context) < 1:
        raise ConfigError(f"--context-length must be positive, got {context}")
    page = int(args.get("page_size") or DEFAULT_PAGE_SIZE)
    if page < 1:
        raise ConfigError(f"--page-size must be positive, got {page}")
    kv_name, kv_bytes = _kv_dtype(str(args.get("kv_cache_dtype", "auto")), spec)
    ratio = float(args.get("swa_full_tokens_ratio", DEFAULT_SWA_FULL_TOKENS_RATIO))
    if not 0 < ratio <= 1:
        raise ConfigError(f"--swa-full-tokens-ratio must be in (0, 1], got {ratio}")
    max_total = args.get("max_total_tokens")
    max_running = args.get("max_running_requests")
    if max_running is not None and int(max_running) < 1:
        raise ConfigError(f"--max-running-requests must be positive, got {max_running}")
    cfg = SglangConfig(
        tp_size=tp,
        pp_size=pp,
        dp_size=dp,
        ep_size=ep,
        enable_dp_attention=dp_attention,
        mem_fraction_static=0.0,
        context_length=int(context),
        chunked_prefill_size=int(chunked),
        max_prefill_tokens=int(args.get("max_prefill_tokens", DEFAULT_MAX_PREFILL_TOKENS)),
        cuda_graph_max_bs=int(graph_bs),
        disable_cuda_graph=bool(args.get("disable_cuda_graph", False)),
        max_running_requests=int(max_running) if max_running is not None else None,
        max_total_tokens=int(max_total) if max_total is not None else None,
        page_size=page,
        kv_cache_dtype=kv_name,
        kv_cache_dtype_bytes=kv_bytes,
        dtype=str(args.get("dtype") or spec.dtype),
        quantization=args.get("quantization"),
        speculative_algorithm=args.get("speculative_algorithm"),
        swa_full_tokens_ratio=ratio,
        disable_hybrid_swa_memory=bool(args.get("disable_hybrid_swa_memory", False)),
        gpu_capacity_mib=capacity,
        args=args,
    )
    fraction = args.get("mem_fraction_static")
    if fraction is None:
        reserved = reserved_mib(cfg)
        fraction = round((capacity - reserved) / capacity, 3)
        why["mem_fraction_static"] = (
            f"{fraction}: SGLang's default, (capacity {capacity:,.0f} MiB - reserved "
            f"{reserved:,.0f} MiB) / capacity"
        )
    if not 0 < float(fraction) <= 1:
        raise ConfigError(f"--mem-fraction-static must be in (0, 1], got {fraction}")
    return cfg.with_changes(mem_fraction_static=float(fraction), defaults=why)
