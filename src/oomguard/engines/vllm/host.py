"""vLLM's host memory on one node: the processes `vllm serve` starts and what each holds in RAM, step by step.

Facts read from vLLM v0.33's code (the newest version the project knows; older versions are noted where they
differ):
- processes (entrypoints/cli/serve.py, v1/engine/utils.py `launch_core_engines`, config/parallel.py,
  v1/executor/): `--api-server-count` API servers (default: the DP size with internal load balancing, the
  local
  DP size with hybrid, 1 with external; 0 with `--headless`), plus the launching process when there are
  several;
  one engine core per local DP rank; a DP coordinator on DP rank 0 when DP > 1; one worker process per local
  GPU
  with the multiprocessing executor (the default whenever TP x PP x DP > 1); with TP = PP = DP = 1 the `uni`
  executor runs the worker inside the engine core; with Ray, Ray's own services plus one actor per GPU.
- loading (model_executor/model_loader/default_loader.py, weight_utils.py): every worker reads every shard and
  keeps its slice. safetensors shards are `safe_open`ed (memory-mapped: the node's page cache holds one copy
  for all workers, and the kernel drops it before killing anything); `.bin`/`.pt` shards go through
  `torch.load(map_location="cpu")`, the whole shard unpickled into each worker; `--safetensors-load-strategy
  eager` reads a shard's bytes and deserializes them (two copies); `enable_multithread_load` loads
  `num_threads`
  (default 8) whole shards at once; the Run:ai streamer buffers up to RUNAI_STREAMER_MEMORY_LIMIT (40 GB per
  process by default, runai-model-streamer 0.17.1 requests_iterator.py) and clone()s each tensor. All local
  workers load at once: `--max-parallel-loading-workers` "is currently not supported and will be ignored"
  (config/parallel.py); only V0's Ray executor honoured it (PR #1395).
- host buffers: `--cpu-offload-gb` is per GPU, pinned (config/offload.py); each worker's request state holds
  max_num_seqs x max_model_len int32 token ids in pinned memory with the V2 model runner
  (v1/worker/gpu/states.py,
  `all_token_ids` as UVA) and int32 + bool in pageable memory with the V1 runner
  (v1/worker/gpu_input_batch.py),
  allocated when the worker builds its model runner, before the weights load (v1/worker/gpu_worker.py);
  `--kv-offloading-size` GiB per engine (all TP ranks together) in one /dev/shm region on CUDA
  (v1/kv_offload/cpu/shared_offload_region.py); V0's `--swap-space` (default 4 GiB) pinned per worker; the
  multimodal processor cache, `--mm-processor-cache-gb` (default 4) "duplicated for each API process and
  engine
  core process" (config/multimodal.py), one shared copy in /dev/shm with `--mm-processor-cache-type shm`;
  sleep level 1 backs every weight tensor up in pinned host memory (device_allocator/cumem.py `sleep`).
- /dev/shm (distributed/device_communicators/shm_broadcast.py, v1/executor/multiproc_executor.py,
  distributed/parallel_state.py): the executor's broadcast queue, VLLM_MQ_MAX_CHUNK_BYTES_MB (16) MiB x 10
  chunks
  per engine; a response queue of 24 MiB x 10 per worker; a 4 MiB x 6 broadcaster per TP group; each checked
  against the free space of /dev/shm before it is created ("Insufficient space in /dev/shm ..."; older
  versions
  die later with a Bus error). NCCL adds its own segments (~7 MiB each, seen in vLLM issue reports).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from oomguard.engines.vllm.config import EngineConfig
from oomguard.host.ledger import (
    MARGINAL_HEADROOM_BYTES,
    HostFix,
    HostLedger,
    HostLimits,
    HostLine,
    HostProcess,
    HostStep,
    HostVerdict,
)
from oomguard.kinds import Provenance
from oomguard.models.checkpoint_files import (
    CheckpointFiles,
    WeightFormat,
    assumed_checkpoint_files,
    read_checkpoint_files,
)
from oomguard.models.spec import ModelSpec
from oomguard.models.weights import checkpoint_weight_bytes, tensor_bytes
from oomguard.units import GiB, MiB

# --- baseline resident size of each process (estimated: interpreter, torch, CUDA libraries) -----------------
# NOTE: not measured by this project; chosen from the usual RSS of a Python process importing torch and vLLM
# (~1 GiB) and of one that also holds a CUDA context, cuBLAS/NCCL and compiled kernels (~3 GiB). Wide bands.
API_SERVER_RSS = (1 * GiB, GiB // 2)
LAUNCHER_RSS = (GiB // 2, GiB // 4)
ENGINE_CORE_RSS = (3 * GiB // 2, 3 * GiB // 4)  # scheduler, tokenizer, no CUDA context
GPU_WORKER_RSS = (3 * GiB, 3 * GiB // 2)
COORDINATOR_RSS = (GiB // 2, GiB // 4)
RAY_HEAD_RSS = (1 * GiB, GiB // 2)  # GCS, raylet, dashboard, log monitor on the head node
RAY_NODE_RSS = (GiB // 3, GiB // 6)  # raylet on the other nodes

# --- loading ------------------------------------------------------------------------------------------------
MULTITHREAD_LOAD_THREADS = 8  # DefaultModelLoader.DEFAULT_NUM_THREADS
RUNAI_DEFAULT_MEMORY_LIMIT = 40_000_000_000  # runai-model-streamer 0.17.1, DEFAULT_MEMORY_LIMIT_STRING

# --- host buffers -------------------------------------------------------------------------------------------
V0_DEFAULT_SWAP_SPACE_GIB = 4.0  # CacheConfig.swap_space (V0)
MM_PROCESSOR_CACHE_DEFAULT_GIB = 4.0  # MultiModalConfig.mm_processor_cache_gb
TOKEN_ID_BYTES = 4  # int32
V1_RUNNER_TOKEN_BYTES = 4 + 1  # int32 token ids + the bool is_token_ids mask

# --- /dev/shm -----------------------------------------------------------------------------------------------
MQ_CHUNKS = 10  # MessageQueue max_chunks
MQ_DEFAULT_CHUNK_MIB = 16  # VLLM_MQ_MAX_CHUNK_BYTES_MB
MQ_RESPONSE_CHUNK_BYTES = 24 * MiB  # MessageQueue's default max_chunk_bytes (worker response queues)
TP_GROUP_MQ_BYTES = 6 * (
    4 * MiB
)  # GroupCoordinator: MessageQueue.create_from_process_group(cpu_group, 1 << 22, 6)
NCCL_SHM_SEGMENT_BYTES = 7 * MiB  # "creating shared memory segment /dev/shm/nccl-* (size 7340384)"


@dataclass(frozen=True)
class HostSettings:
    """The flags that shape host memory, resolved as vLLM resolves them."""

    api_servers: int
    headless: bool
    executor: str  # "uni" | "mp" | "ray"
    local_engines: int
    load_format: str
    safetensors_load_strategy: str
    multithread_threads: int  # 0: the single-threaded iterator
    max_parallel_loading_workers: int | None
    kv_offloading_gib: float
    kv_offloading_backend: str
    swap_space_gib: float
    sleep_mode: bool
    mm_cache_gib: float
    mm_cache_type: str  # "lru" | "shm"
    mq_chunk_bytes: int
    runai_memory_limit: int | None  # RUNAI_STREAMER_MEMORY_LIMIT (-1: unlimited; None: not set)
    runai_distributed: bool  # --model-loader-extra-config '{"distributed": true}'


def _values(cfg: EngineConfig) -> Mapping[str, Any]:
    return cfg.args.values if cfg.args is not None else {}


def _executor(cfg: EngineConfig, values: Mapping[str, Any]) -> str:
    given = values.get("distributed_executor_backend")
    if given in ("ray", "mp", "uni", "external_launcher"):
        return "mp" if given == "external_launcher" else str(given)
    if values.get("data_parallel_backend") == "ray":
        return "ray"
    # ParallelConfig.__post_init__: "mp" whenever the world across DP is > 1, else "uni".
    return "mp" if cfg.world_size * cfg.data_parallel_size > 1 else "uni"


def host_settings(cfg: EngineConfig) -> HostSettings:
    values = _values(cfg)
    headless = bool(values.get("headless"))
    dp = cfg.data_parallel_size
    dp_local = int(values.get("data_parallel_size_local") or dp)
    external_lb = (
        bool(values.get("data_parallel_external_lb")) or values.get("data_parallel_rank") is not None
    )
    hybrid_lb = (
        bool(values.get("data_parallel_hybrid_lb")) or values.get("data_parallel_start_rank") is not None
    )
    if headless:
        api_servers = 0
    elif values.get("api_server_count") is not None:
        api_servers = int(values["api_server_count"])
    elif not cfg.behaviour.api_servers_follow_dp or external_lb:
        api_servers = 1  # NOTE: the DP-sized default is from the 0.11 era (v0.33 entrypoints/cli/serve.py)
    else:
        api_servers = dp_local if hybrid_lb else dp
    extra = values.get("model_loader_extra_config")
    extra = extra if isinstance(extra, Mapping) else {}
    threads = (
        int(extra.get("num_threads") or MULTITHREAD_LOAD_THREADS)
        if extra.get("enable_multithread_load")
        else 0
    )
    runai = cfg.env.get("RUNAI_STREAMER_MEMORY_LIMIT")
    mq_mib = cfg.env.get("VLLM_MQ_MAX_CHUNK_BYTES_MB")
    mm_gib = values.get("mm_processor_cache_gb")
    return HostSettings(
        api_servers=api_servers,
        headless=headless,
        executor=_executor(cfg, values),
        local_engines=max(1, min(dp_local, dp)),
        load_format=str(values.get("load_format") or "auto"),
        safetensors_load_strategy=str(values.get("safetensors_load_strategy") or "lazy"),
        multithread_threads=threads,
        max_parallel_loading_workers=values.get("max_parallel_loading_workers"),
        kv_offloading_gib=float(values.get("kv_offloading_size") or 0.0),
        kv_offloading_backend=str(values.get("kv_offloading_backend") or "native"),
        swap_space_gib=float(values.get("swap_space", V0_DEFAULT_SWAP_SPACE_GIB)),
        sleep_mode=bool(values.get("enable_sleep_mode")),
        mm_cache_gib=MM_PROCESSOR_CACHE_DEFAULT_GIB if mm_gib is None else float(mm_gib),
        mm_cache_type=str(values.get("mm_processor_cache_type") or "lru"),
        mq_chunk_bytes=int(mq_mib) * MiB if mq_mib and mq_mib.isdigit() else MQ_DEFAULT_CHUNK_MIB * MiB,
        runai_memory_limit=int(runai) if runai and runai.lstrip("-").isdigit() else None,
        runai_distributed=bool(extra.get("distributed")),
    )


@dataclass(frozen=True)
class NodeShape:
    """What runs on the node being planned: engines, worker processes, and API servers."""

    engines: int
    workers: int  # GPU worker processes besides the engine cores
    worker_in_core: bool  # each engine core also runs a GPU worker (uni executor; V0's driver worker)
    gpus: int
    api_servers: int
    is_leader: bool

    @property
    def gpu_processes(self) -> int:
        """The processes that hold a GPU: each loads the weights and keeps its own host buffers."""
        return self.workers + (self.engines if self.worker_in_core else 0)


def node_shape(cfg: EngineConfig, settings: HostSettings, local_gpus: int | None) -> NodeShape:
    """Engines and workers on this node. `local_gpus`: the GPUs the node's container gets (all, when None)."""
    world = cfg.world_size
    engines_wanted = settings.local_engines
    gpus = world * engines_wanted if local_gpus is None else max(1, min(local_gpus, world * engines_wanted))
    engines = max(1, gpus // world) if gpus >= world else 1
    per_engine = min(world, gpus)
    if settings.executor == "uni":
        return NodeShape(engines, 0, True, gpus, settings.api_servers, not settings.headless)
    if cfg.behaviour.engine == "v0" and settings.executor == "mp":
        # V0's engine process runs the driver worker (rank 0) itself and starts the others.
        return NodeShape(
            engines, engines * (per_engine - 1), True, gpus, settings.api_servers, not settings.headless
        )
    return NodeShape(engines, engines * per_engine, False, gpus, settings.api_servers, not settings.headless)


def _line(
    key: str,
    label: str,
    each: int,
    count: int,
    kind: Provenance,
    source: str,
    step: HostStep,
    *,
    band: int = 0,
    transient: bool = False,
    shm: bool = False,
    reclaimable: bool = False,
) -> HostLine:
    return HostLine(
        key, label, int(each), int(count), kind, source, step, int(band), transient, shm, reclaimable
    )


# ---------------------------------------------------------------------------------------------------------
# The processes and their baseline
# ---------------------------------------------------------------------------------------------------------


def processes(cfg: EngineConfig, settings: HostSettings, shape: NodeShape) -> tuple[HostProcess, ...]:
    found: list[HostProcess] = []
    if shape.api_servers:
        found.append(HostProcess("API server", shape.api_servers, "HTTP, tokenizer, multimodal processing"))
    if shape.api_servers > 1:
        found.append(HostProcess("launcher", 1, "the `vllm serve` process that starts the API servers"))
    if cfg.data_parallel_size > 1 and shape.is_leader:
        found.append(HostProcess("DP coordinator", 1, "load balancing across DP ranks"))
    in_core = " (a GPU worker runs inside it)" if shape.worker_in_core else ""
    found.append(HostProcess("engine core", shape.engines, "scheduler, KV cache manager" + in_core))
    if shape.workers:
        kind = "Ray actor" if settings.executor == "ray" else "worker process"
        per = "per local GPU besides the engine's own" if shape.worker_in_core else "per local GPU"
        found.append(HostProcess("GPU worker", shape.workers, f"one {kind} {per}"))
    if settings.executor == "ray":
        found.append(HostProcess("Ray services", 1, "GCS, raylet, dashboard on the head node"))
    return tuple(found)


def baseline_lines(cfg: EngineConfig, settings: HostSettings, shape: NodeShape) -> list[HostLine]:
    src = "estimated: Python, torch and vLLM imported"
    lines: list[HostLine] = []

    def add(key: str, label: str, rss: tuple[int, int], count: int, why: str) -> None:
        if count > 0:
            lines.append(
                _line(key, label, rss[0], count, Provenance.ESTIMATED, why, HostStep.STARTUP, band=rss[1])
            )

    add("api_server_rss", "API server baseline", API_SERVER_RSS, shape.api_servers, src)
    add("launcher_rss", "launcher baseline", LAUNCHER_RSS, 1 if shape.api_servers > 1 else 0, src)
    add(
        "coordinator_rss",
        "DP coordinator baseline",
        COORDINATOR_RSS,
        1 if cfg.data_parallel_size > 1 and shape.is_leader else 0,
        src,
    )
    if shape.worker_in_core:
        core = (ENGINE_CORE_RSS[0] + GPU_WORKER_RSS[0] - API_SERVER_RSS[0], GPU_WORKER_RSS[1])
        add(
            "engine_core_rss",
            "engine core + worker baseline",
            core,
            shape.engines,
            "estimated: a GPU worker (CUDA context, cuBLAS, kernels) inside the engine core",
        )
    else:
        add("engine_core_rss", "engine core baseline", ENGINE_CORE_RSS, shape.engines, src)
    if shape.workers:
        add(
            "worker_rss",
            "GPU worker baseline",
            GPU_WORKER_RSS,
            shape.workers,
            "estimated: CUDA context, cuBLAS, NCCL and compiled kernels on the host",
        )
    if settings.executor == "ray":
        add(
            "ray_rss",
            "Ray services",
            RAY_HEAD_RSS if shape.is_leader else RAY_NODE_RSS,
            1,
            "estimated: GCS, raylet, dashboard (Ray's object store is /dev/shm, filled on use)",
        )
    return lines


# ---------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------


def largest_checkpoint_tensor(spec: ModelSpec) -> int:
    """The largest tensor the checkpoint stores (experts are stored one by one)."""
    return max((tensor_bytes(t, spec) // max(1, t.experts) for t in spec.tensors), default=0)


@dataclass(frozen=True)
class LoadPeak:
    per_worker: int
    band: int
    kind: Provenance
    how: str  # what holds the bytes
    page_cache: int  # reclaimable file pages on the node


def load_peak(
    spec: ModelSpec, files: CheckpointFiles, settings: HostSettings, world_size: int = 1
) -> LoadPeak:
    """What one worker holds in anonymous memory while it reads the checkpoint (see the module docstring)."""
    largest_tensor = largest_checkpoint_tensor(spec)
    shard = files.largest_shard_bytes
    total = files.total_bytes
    if settings.load_format == "dummy":
        return LoadPeak(0, 0, Provenance.EXACT, "--load-format dummy reads nothing", 0)
    if settings.load_format == "runai_streamer" and settings.runai_distributed:
        # The distributed streamer splits the files among the ranks and, unless the variable is set, lifts the
        # memory limit (runai-model-streamer distributed_streamer.py): each rank buffers its share.
        share = total // max(1, world_size)
        given = settings.runai_memory_limit
        limit = share if given is None or given < 0 else min(given, share)
        return LoadPeak(
            limit + largest_tensor,
            limit // 2,
            Provenance.ESTIMATED,
            "the distributed Run:ai streamer: each rank buffers its share of the files",
            0,
        )
    if settings.load_format == "runai_streamer":
        given = (
            RUNAI_DEFAULT_MEMORY_LIMIT if settings.runai_memory_limit is None else settings.runai_memory_limit
        )
        limit = total if given < 0 else min(given, total)
        return LoadPeak(
            limit + largest_tensor,
            limit // 2,
            Provenance.ESTIMATED,
            "the Run:ai streamer's buffer (min(RUNAI_STREAMER_MEMORY_LIMIT, checkpoint)) + one clone()d "
            "tensor",
            0,
        )
    if settings.multithread_threads:
        threads = settings.multithread_threads
        held = files.largest(threads)
        return LoadPeak(
            held,
            max(0, total - held),
            Provenance.ESTIMATED,
            f"enable_multithread_load: {threads} whole shards loaded at once (threads read ahead of the "
            "copy)",
            0,
        )
    if not files.format.mapped:
        return LoadPeak(
            shard,
            0,
            Provenance.DERIVED if files.exact else Provenance.ESTIMATED,
            f"torch.load of the largest .{files.format.value} shard, whole, in each worker",
            0,
        )
    if settings.safetensors_load_strategy == "eager":
        return LoadPeak(
            2 * shard,
            0,
            Provenance.DERIVED,
            "--safetensors-load-strategy eager: a shard's bytes + its tensors",
            0,
        )
    return LoadPeak(
        largest_tensor,
        largest_tensor,
        Provenance.ESTIMATED,
        "safetensors shards memory-mapped; at most about one tensor copied at a time",
        total,
    )


def workers_loading_at_once(cfg: EngineConfig, settings: HostSettings, shape: NodeShape) -> int:
    loaders = max(1, shape.gpu_processes)
    limit = settings.max_parallel_loading_workers
    if limit and cfg.behaviour.engine == "v0" and settings.executor == "ray":
        return max(1, min(loaders, int(limit)))
    return loaders


def load_lines(peak: LoadPeak, loaders: int, files: CheckpointFiles) -> list[HostLine]:
    lines = [
        _line(
            "load_peak",
            "loading peak",
            peak.per_worker,
            loaders,
            peak.kind,
            f"{peak.how}; {files.source}",
            HostStep.LOAD,
            band=peak.band,
            transient=True,
        ),
    ]
    if peak.page_cache:
        lines.append(
            _line(
                "page_cache",
                "page cache of the mapped shards",
                peak.page_cache,
                1,
                Provenance.DERIVED,
                "file pages, shared by every worker; reclaimed before any OOM kill",
                HostStep.LOAD,
                reclaimable=True,
            )
        )
    return lines


# ---------------------------------------------------------------------------------------------------------
# Host buffers the flags ask for
# ---------------------------------------------------------------------------------------------------------


def buffer_lines(
    cfg: EngineConfig,
    spec: ModelSpec,
    settings: HostSettings,
    shape: NodeShape,
    weights_per_worker: Sequence[int],
) -> list[HostLine]:
    lines: list[HostLine] = []
    workers = max(1, shape.gpu_processes)
    weights = max(weights_per_worker, default=0)
    if cfg.cpu_offload_gb > 0:
        each = min(int(cfg.cpu_offload_gb * GiB), weights) if weights else int(cfg.cpu_offload_gb * GiB)
        lines.append(
            _line(
                "cpu_offload",
                "--cpu-offload-gb (pinned weights)",
                each,
                workers,
                Provenance.DERIVED,
                "vLLM v0.33 config/offload.py: per GPU, at most the worker's weights",
                HostStep.LOAD,
            )
        )
    if cfg.behaviour.engine == "v1":
        v2 = cfg.behaviour.v2_model_runner_default
        # NOTE: the V1 runner's bool mask came with prompt embeddings (~0.11); before, int32 ids alone.
        per_slot = TOKEN_ID_BYTES if v2 or not cfg.behaviour.runner_token_mask else V1_RUNNER_TOKEN_BYTES
        where = (
            "v1/worker/gpu/states.py all_token_ids (pinned, UVA)"
            if v2
            else "v1/worker/gpu_input_batch.py token_ids_cpu + is_token_ids"
        )
        lines.append(
            _line(
                "token_buffer",
                "request token-id buffer",
                cfg.max_num_seqs * cfg.max_model_len * per_slot,
                workers,
                Provenance.EXACT,
                f"max_num_seqs x max_model_len x {per_slot} B; vLLM {where}",
                HostStep.STARTUP,
            )
        )
    if cfg.behaviour.engine == "v0" and settings.swap_space_gib > 0:
        lines.append(
            _line(
                "swap_space",
                "--swap-space (pinned CPU KV blocks)",
                int(settings.swap_space_gib * GiB),
                workers,
                Provenance.EXACT,
                "V0 CacheEngine: swap_space GiB per worker, default 4",
                HostStep.INIT,
            )
        )
    if settings.kv_offloading_gib > 0 and settings.kv_offloading_backend == "native":
        lines.append(
            _line(
                "kv_offload",
                "--kv-offloading-size (CPU KV tier)",
                int(settings.kv_offloading_gib * GiB),
                shape.engines,
                Provenance.EXACT,
                "per engine, all TP ranks together; vLLM v0.33 v1/kv_offload/cpu/"
                "shared_offload_region.py: one region in /dev/shm",
                HostStep.INIT,
                shm=True,
            )
        )
    lines += _mm_cache_lines(spec, settings, shape)
    if settings.sleep_mode and weights_per_worker:
        lines.append(
            _line(
                "sleep_backup",
                "sleep level 1: weights backed up",
                sum(weights_per_worker) // max(1, len(weights_per_worker)),
                len(weights_per_worker),
                Provenance.DERIVED,
                "CuMemAllocator.sleep copies every 'weights' allocation to pinned host memory",
                HostStep.SLEEP,
            )
        )
    return lines


def _mm_cache_lines(spec: ModelSpec, settings: HostSettings, shape: NodeShape) -> list[HostLine]:
    if spec.vision is None or settings.mm_cache_gib <= 0 or shape.api_servers == 0:
        return []
    size = int(settings.mm_cache_gib * GiB)
    # multimodal/cache/factories.py: IPC caching (a mirrored copy in the engine core) only with one API server
    # and one DP rank (or external LB); otherwise each API server keeps a processor-only cache.
    ipc = shape.api_servers == 1 and shape.engines == 1
    if settings.mm_cache_type == "shm" and ipc:
        return [
            _line(
                "mm_cache",
                "multimodal processor cache (shm)",
                size,
                1,
                Provenance.DERIVED,
                "--mm-processor-cache-gb, one shared ring buffer",
                HostStep.SERVING,
                shm=True,
            )
        ]
    copies = shape.api_servers + (shape.engines if ipc else 0)
    return [
        _line(
            "mm_cache",
            "multimodal processor cache",
            size,
            copies,
            Provenance.DERIVED,
            "--mm-processor-cache-gb x (API servers + engine cores); vLLM v0.33 config/multimodal.py; "
            "fills as new images arrive",
            HostStep.SERVING,
        )
    ]


def shm_lines(cfg: EngineConfig, settings: HostSettings, shape: NodeShape) -> list[HostLine]:
    """The /dev/shm segments created at startup (they also count against the memory limit)."""
    lines: list[HostLine] = []
    if shape.workers and cfg.behaviour.engine == "v1":
        lines += [
            _line(
                "shm_broadcast",
                "executor broadcast queue",
                MQ_CHUNKS * settings.mq_chunk_bytes,
                shape.engines,
                Provenance.EXACT,
                "MessageQueue: VLLM_MQ_MAX_CHUNK_BYTES_MB x 10 chunks per engine",
                HostStep.STARTUP,
                shm=True,
            ),
            _line(
                "shm_responses",
                "worker response queues",
                MQ_CHUNKS * MQ_RESPONSE_CHUNK_BYTES,
                shape.workers,
                Provenance.EXACT,
                "MessageQueue(1, 1): 24 MiB x 10 chunks per worker",
                HostStep.STARTUP,
                shm=True,
            ),
        ]
    tp = cfg.tensor_parallel_size
    if tp > 1:
        groups = max(1, shape.gpu_processes // tp)
        lines.append(
            _line(
                "shm_tp_group",
                "TP group broadcaster",
                TP_GROUP_MQ_BYTES,
                groups,
                Provenance.EXACT,
                "parallel_state: 4 MiB x 6 chunks per TP group",
                HostStep.STARTUP,
                shm=True,
            )
        )
        local = min(tp, shape.gpu_processes)
        if local > 1:
            lines.append(
                _line(
                    "shm_nccl",
                    "NCCL shared-memory segments",
                    NCCL_SHM_SEGMENT_BYTES,
                    groups * local * (local - 1),
                    Provenance.ESTIMATED,
                    "one ~7 MiB segment per local peer pair (NCCL's host-memory transport)",
                    HostStep.STARTUP,
                    band=NCCL_SHM_SEGMENT_BYTES,
                    shm=True,
                )
            )
    return lines


def unified_memory_lines(
    shape: NodeShape, weights_per_worker: Sequence[int], gpu_used_per_worker: Sequence[int]
) -> list[HostLine]:
    """On unified-memory GPUs (GB10, Thor, Orin) the GPU's allocations are host RAM."""
    gpus = max(1, shape.gpus)
    weights = max(weights_per_worker, default=0)
    used = max(gpu_used_per_worker, default=0)
    return [
        _line(
            "gpu_weights",
            "GPU weights (unified memory)",
            weights,
            gpus,
            Provenance.DERIVED,
            "the GPU ledger's weights; unified memory is host memory",
            HostStep.LOAD,
        ),
        _line(
            "gpu_rest",
            "GPU KV cache and buffers (unified memory)",
            max(0, used - weights),
            gpus,
            Provenance.DERIVED,
            "the GPU ledger's other lines",
            HostStep.INIT,
        ),
    ]


# ---------------------------------------------------------------------------------------------------------
# The ledger and its fixes
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostPlanInputs:
    """Everything the vLLM host ledger needs beyond the engine config."""

    spec: ModelSpec
    files: CheckpointFiles
    limits: HostLimits
    local_gpus: int | None = None
    weights_per_worker: tuple[int, ...] = ()
    gpu_used_per_worker: tuple[int, ...] = ()
    unified_memory: bool = False
    node: str = "node"


def checkpoint_files_for(cfg: EngineConfig, spec: ModelSpec) -> CheckpointFiles:
    """The files vLLM would load: read from a local model directory, else safetensors of the model's size."""
    load_format = host_settings(cfg).load_format
    directory = Path(cfg.model)
    found = read_checkpoint_files(directory, load_format) if directory.is_dir() else None
    if found is not None:
        return found
    total = spec.checkpoint_bytes or checkpoint_weight_bytes(spec).total
    return assumed_checkpoint_files(
        total, WeightFormat.SAFETENSORS, f"{spec.weights_source} total, safetensors"
    )


def local_worker_values(per_stage: Sequence[int], cfg: EngineConfig, shape: NodeShape) -> tuple[int, ...]:
    """One value per GPU process on the node, from one value per PP stage: vLLM numbers ranks PP-major
    (rank = pp_rank x TP + tp_rank), so a node holding the first GPUs of an engine holds its first stages."""
    if not per_stage:
        return ()
    per_engine = shape.gpu_processes // max(1, shape.engines)
    tp = cfg.tensor_parallel_size
    one = tuple(per_stage[min(i // tp, len(per_stage) - 1)] for i in range(per_engine))
    return one * shape.engines


def plan_host_inputs(
    cfg: EngineConfig,
    spec: ModelSpec,
    limits: HostLimits,
    *,
    stage_weights: Sequence[int],
    stage_gpu_used: Sequence[int] = (),
    unified_memory: bool = False,
    local_gpus: int | None = None,
    node: str = "node",
) -> HostPlanInputs:
    """The host inputs of a planned start: per-stage weights and GPU use from the GPU ledger."""
    shape = node_shape(cfg, host_settings(cfg), local_gpus)
    return HostPlanInputs(
        spec,
        checkpoint_files_for(cfg, spec),
        limits,
        local_gpus=local_gpus,
        weights_per_worker=local_worker_values(stage_weights, cfg, shape),
        gpu_used_per_worker=local_worker_values(stage_gpu_used, cfg, shape),
        unified_memory=unified_memory,
        node=node,
    )


def host_ledger(cfg: EngineConfig, inputs: HostPlanInputs) -> HostLedger:
    settings = host_settings(cfg)
    shape = node_shape(cfg, settings, inputs.local_gpus)
    peak = load_peak(inputs.spec, inputs.files, settings, cfg.world_size)
    loaders = workers_loading_at_once(cfg, settings, shape)
    lines = (
        baseline_lines(cfg, settings, shape)
        + shm_lines(cfg, settings, shape)
        + load_lines(peak, loaders, inputs.files)
        + buffer_lines(cfg, inputs.spec, settings, shape, inputs.weights_per_worker)
    )
    if inputs.unified_memory:
        lines += unified_memory_lines(shape, inputs.weights_per_worker, inputs.gpu_used_per_worker)
    notes = _notes(cfg, settings, shape)
    ledger = HostLedger(
        inputs.node,
        processes(cfg, settings, shape),
        tuple(lines),
        inputs.limits,
        (),
        tuple(notes),
        loaders,
        peak.per_worker,
    )
    return replace(ledger, engine_fixes=engine_fixes(ledger, settings, inputs.files))


def _notes(cfg: EngineConfig, settings: HostSettings, shape: NodeShape) -> list[str]:
    notes: list[str] = []
    if settings.max_parallel_loading_workers and not (
        cfg.behaviour.engine == "v0" and settings.executor == "ray"
    ):
        notes.append(
            "--max-parallel-loading-workers is ignored by this executor: every local worker loads at once"
        )
    if settings.kv_offloading_gib > 0 and settings.kv_offloading_backend != "native":
        notes.append("LMCache keeps the offloaded KV in its own server process, not counted here")
    if settings.executor == "ray":
        notes.append(
            "Ray's object store lives in /dev/shm (up to 30% of RAM by default) and is filled on use"
        )
    if settings.sleep_mode:
        notes.append("sleep mode: level 1 assumed (weights kept in host memory); level 2 discards them")
    if shape.worker_in_core and shape.workers == 0:
        notes.append("TP = PP = DP = 1: the uni executor runs the GPU worker inside the engine core")
    return notes


def _cut_needed(ledger: HostLedger) -> int:
    """Bytes to take off the step that dies (with the marginal headroom) to fit the limit."""
    limit = ledger.limits.memory_limit or 0
    step = ledger.dies_at or ledger.peak_step
    return max(0, ledger.used_at(step) + MARGINAL_HEADROOM_BYTES - limit)


def engine_fixes(ledger: HostLedger, settings: HostSettings, files: CheckpointFiles) -> tuple[HostFix, ...]:
    """Flag changes that shrink the line the failing step is made of, sized to fit where the figures allow."""
    if ledger.verdict not in (HostVerdict.OOM_KILLED, HostVerdict.MARGINAL) and ledger.shm_fits is not False:
        return ()
    step = ledger.dies_at or ledger.peak_step
    cut = _cut_needed(ledger)
    held = {line.key: line for line in ledger.lines if line.held_at(step)}
    fixes: list[HostFix] = []
    load = held.get("load_peak")
    if load is not None and load.bytes > 0:
        if not files.format.mapped:
            fixes.append(
                HostFix(
                    "convert the checkpoint to safetensors (or use a safetensors revision of the model)",
                    f"each of {load.count} workers unpickles a whole {files.largest_shard_bytes / GiB:.1f} "
                    "GiB "
                    f".{files.format.value} shard at once; mapped safetensors share one page-cache copy",
                )
            )
        if settings.multithread_threads:
            fixes.append(
                HostFix(
                    "drop enable_multithread_load from --model-loader-extra-config",
                    f"{settings.multithread_threads} whole shards per worker at once",
                )
            )
        if settings.safetensors_load_strategy == "eager":
            fixes.append(HostFix("--safetensors-load-strategy lazy", "eager reads each shard twice over"))
        if settings.load_format == "runai_streamer":
            per = max(1, (load.bytes_each - cut // max(1, load.count)) * load.count)
            fixes.append(
                HostFix(
                    f"RUNAI_STREAMER_MEMORY_LIMIT={per} (bytes, the node total)",
                    "the streamer buffers up to 40 GB per worker by default",
                )
            )
    for key, flag, unit in (
        ("mm_cache", "--mm-processor-cache-gb", GiB),
        ("kv_offload", "--kv-offloading-size", GiB),
        ("cpu_offload", "--cpu-offload-gb", GiB),
        ("swap_space", "--swap-space", GiB),
    ):
        line = held.get(key)
        if line is None or line.bytes == 0:
            continue
        smaller = line.bytes_each - math.ceil(cut / max(1, line.count))
        if smaller >= 0:
            fixes.append(
                HostFix(
                    f"{flag} {math.floor(smaller / unit * 10) / 10:g}",
                    f"{line.label}: {line.count} x {line.bytes_each / GiB:.1f} GiB",
                )
            )
        if key == "mm_cache" and line.count > 1:
            fixes.append(
                HostFix("--mm-processor-cache-type shm", "one shared copy instead of one per process")
            )
    token = held.get("token_buffer")
    if token is not None and token.bytes >= cut > 0 and token.bytes_each >= GiB:
        fixes.append(
            HostFix(
                "lower --max-num-seqs or --max-model-len",
                f"each worker holds max_num_seqs x max_model_len token ids "
                f"({token.bytes_each / GiB:.1f} GiB)",
            )
        )
    if step is HostStep.SLEEP:
        fixes.append(
            HostFix("sleep with level=2", "level 2 discards the weights instead of copying them to RAM")
        )
    return tuple(fixes)
