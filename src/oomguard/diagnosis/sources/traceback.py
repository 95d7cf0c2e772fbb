"""Python tracebacks and allocator errors: PyTorch's OutOfMemoryError with all its parts, the
expandable-segments mapper, ROCm's HSA error, XPU, CUDA runtime errors, DeepEP/NVSHMEM/NCCL failures, host
ENOMEM; and the stack frames with the code under them. (32-bit limits: int32_limits.py; kernel memory
faults: gpu_faults.py.)
"""

from __future__ import annotations

import re

from oomguard.diagnosis.evidence import Frame
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources import allocator
from oomguard.diagnosis.sources.base import (
    ENGINE_OOM,
    AllocatorReport,
    LineParser,
    Message,
    continuation,
    log_size,
)
from oomguard.diagnosis.sources.triggers import Triggers
from oomguard.units import MiB as MIB


def _size(m: re.Match[str] | None, group: str = "v") -> int | None:
    return log_size(m.group(group)) if m else None


_HSA_FREE = re.compile(r"Available\s*Free\s*mem\s*:\s*(?P<v>[\d.]+\s*[KMGT]?B)", re.IGNORECASE)
# (A pasted fragment may elide the line number and the function: 'File ".../sampler.py", line ...'.)
_CURESULT_OOM = re.compile(r"CUresult error(?::\s*|\s+result=)2\b")
# (faulthandler's dump of a fatal error writes no comma: 'File "...", line 169 in resume')
_FRAME = re.compile(r'File\s+"(?P<path>[^"]+)",\s*line\s+(?P<no>\d+|\.\.\.)(?:,?\s*in\s+(?P<func>[\w<>.]+))?')
_BARE_WORD = re.compile(r"^[\w]+$")


# Out-of-memory words that start an allocator message worth reading whole.
_OOM_WORDS = ("out of memory", "OutOfMemory", "Tried to allocate", "memory mapping failed")
# Other engines' explicit memory errors: TGI's warm-up ("Not enough memory to handle N prefill tokens"),
# TensorRT-LLM's ("[TensorRT-LLM][ERROR] ... out of memory" / "OutOfMemory"), llama.cpp-style "failed to
# allocate ... buffer".
# TensorRT-LLM: "Memory usage when calculating max tokens in paged kv cache: total: 22.19 GiB, available: 0.11
# GiB"
_TRT_KV = re.compile(
    r"max tokens in paged kv cache: total: (?P<total>[\d.]+ [KMG]iB), available: (?P<avail>[\d.]+ [KMG]iB)"
)
# Below this (or 2% of the device) TensorRT-LLM's KV pool has next to nothing.
TRT_KV_TINY = 1 << 29
# LMDeploy's PyTorch engine sizing its pools (lmdeploy/pytorch/engine/executor/base.py, update_configs): free
# memory less the recurrent-state cache ("No enough gpu memory for state cache. Please reduce
# max_batch_size."), less the runtime reservation for the largest prefill ("No enough gpu memory for
# runtime."), left no KV blocks ("No enough gpu memory for kv cache.").
_LMDEPLOY_NO_POOL = re.compile(r"\bNo enough gpu memory for (?:kv cache|state cache|runtime)\b")
# An engine's exception saying its KV pool did not fit what was left ("AssertionError: Not enough memory for
# KV cache, try reducing --num-pages", FreeToken's startup check): an exception's own message, not a
# reporter's guess in a sentence.
_NO_KV_ROOM = re.compile(
    r"\b\w*(?:Error|Exception): Not enough (?:GPU |device )?memory for (?:the )?KV cache\b"
)
# FlashInfer carving a kernel's temporary buffer out of the workspace the engine gave it (include/flashinfer/
# allocator.h, AlignedAllocator::aligned_alloc): "Failed to allocate memory for batch_prefill_tmp_v with size
# 435814400 and alignment 16 in AlignedAllocator"; since 2025 "Buffer overflow when allocating memory for
# batch_prefill_tmp_v with size 536346624 and alignment 16, but only 413138944 bytes available in
# AlignedAllocator. Increase the workspace buffer size." (the message may be wrapped over lines).
_WORKSPACE_FULL = re.compile(r"\bin AlignedAllocator\b|\bIncrease the workspace buffer size\b")
_WORKSPACE_LEFT = re.compile(r"\bonly (?P<n>\d+) bytes available in AlignedAllocator\b")
# KV pools that hold not one sequence, as the engines refuse them at startup: TensorRT-LLM's PyTorch backend
# (_torch/pyexecutor/resource_manager.py, get_max_atten_window_upper_bound: "Impossible to fit in any sequence
# in kvCache", the primary pool below one block per sequence), LMDeploy TurboMind's sequence manager
# (src/turbomind/models/llama/SequenceManager.cc: "Insufficient memory for KV cache blocks.", and "[SeqMgr]
# Linear-state memory (1536.00 MB) >= cache budget (1228.80 MB)": the recurrent states of max_batch_size
# sequences take the whole cache_max_entry_count budget).
_KV_NO_SEQUENCE = re.compile(
    r"\bImpossible to fit in any sequence in kvCache\b|\bInsufficient memory for KV cache blocks\b"
)
_LINEAR_STATE_BUDGET = re.compile(
    r"Linear-state memory \((?P<state>[\d.]+) MB\) >= cache budget \((?P<budget>[\d.]+) MB\)"
)
_PREFILL_TOKENS = re.compile(r"Not enough memory to handle (?P<n>\d+) prefill tokens")
# TGI's router after the warm-up (backends/v3/src/lib.rs, V3Error::NotEnoughMemory): the KV blocks left hold
# fewer tokens than one request of --max-total-tokens: "Not enough memory to handle `max_total_tokens=32768`",
# printed by the launcher as "Error: Backend(NotEnoughMemory(32768))".
_MAX_TOTAL_TOKENS = re.compile(
    r"Not enough memory to handle `max_total_tokens=(?P<n>\d+)`|\bNotEnoughMemory\((?P<m>\d+)\)"
)
# TGI's KV budget: "Not enough memory to handle 16000 total tokens with 2 prefill tokens".
_TOTAL_TOKENS = re.compile(r"Not enough memory to handle (?P<n>\d+) total tokens")
# The KV pool ran dry at runtime: vLLM V0's swap space on preemption, SGLang's allocator, kvcached's pool,
# TGI's block allocator ("Out of available cache blocks: asked 107, only 4 free blocks"), TurboMind's sequence
# cache ("[TM][ERROR] No enough cache entries"), atlas's ("KV cache exhausted: no free blocks").
_KV_DRY = re.compile(
    r"lack of CPU swap space|No space left for only one request|available_size\(\)=[\d.]+ < need_size|"
    r"not enough KV cache space|Out of memory\. Please try to increase --mem-fraction-static|"
    r"Out of available cache blocks|No enough cache entries|KV cache exhausted: no free blocks|"
    # llama.cpp's decode finding no room in its KV cache for a batch (llama_decode returns 1), as llama.cpp
    # and node-llama-cpp word it
    r"failed to find (?:a )?(?:memory|KV cache) slot|failed to find free space in the KV cache|"
    r"could not find a KV slot|"
    # TensorRT-LLM's KV cache manager: "Can't allocate new blocks. No free blocks left."
    r"No free blocks left|"
    # vLLM V0's block managers: v1 "Out of memory! No free blocks are available." (core/block_manager_v1.py),
    # v2 "BlockAllocator.NoFreeBlocksError" (core/block/interfaces.py); V1's block pool "Cannot get 12 free
    # blocks from the pool" (v1/core/block_pool.py)
    r"\bNo free blocks are available\b|\bNoFreeBlocksError\b|\bfree blocks from the pool\b|"
    # vllm-metal's own block allocator before it used vLLM's scheduler ('RuntimeError("Not enough free
    # blocks")', https://github.com/vllm-project/vllm-metal/pull/128)
    r"\bNot enough free blocks\b|"
    # LMDeploy TurboMind's batch "No enough blocks." (models/llama/LlamaBatch.cc,
    # https://github.com/InternLM/lmdeploy/issues/720); LightLLM's token pool "warn no enough cache need_size
    # 1024 left_size 37" (common/mem_manager.py)
    r"\bNo enough blocks\b|\bno enough cache need_size\b|"
    # SGLang's request-slot pool, sized by --max-running-requests: "alloc_req_slots runs out of memory. Please
    # set a smaller number for `--max-running-requests`." (mem_cache/common.py); its token pool before 0.2:
    # "Prefill out of memory. This should never happen." (managers/router/infer_batch.py)
    r"\balloc_req_slots runs out of memory\b|\bPrefill out of memory\. This should never happen\b"
)
# vLLM V0 (and forks) sizing the CPU swap space (pinned host blocks, --swap-space GiB per GPU) against the
# host: "Too large swap space. 32.00 GiB out of the 31.27 GiB total CPU memory is allocated for the swap
# space."
_SWAP_TOO_LARGE = re.compile(
    r"Too large swap space\. (?P<swap>[\d.]+ ?[KMGT]i?B) out of the "
    r"(?P<total>[\d.]+ ?[KMGT]i?B) total CPU memory"
)
# vLLM V0's softer check of the same (vllm/config.py, CacheConfig.verify_with_parallel_config): above 40% of
# the host's memory it warns "Possibly too large swap space. 16.00 GiB out of the 31.27 GiB total CPU memory
# is allocated for the swap space." and starts, pinning that much host RAM per GPU.
_SWAP_LARGE = re.compile(
    r"Possibly too large swap space\. (?P<swap>[\d.]+ ?[KMGT]i?B) out of the "
    r"(?P<total>[\d.]+ ?[KMGT]i?B) total CPU memory"
)
# The host refused memory, as each runtime words it:
# PyTorch's CPU allocator (c10/core/impl/alloc_cpu.cpp): "DefaultCPUAllocator: can't allocate memory: you
# tried to allocate 2359296 bytes. Error code 12 (Cannot allocate memory)", before 1.6 "DefaultCPUAllocator:
# not enough memory: you tried to allocate 1073741824 bytes.";
# NumPy's _ArrayMemoryError: "Unable to allocate 3.00 GiB for an array with shape (32000, 25165) and data type
# float32";
# Rust's default alloc error handler (tokenizers, TGI's router, candle, mistral.rs): "memory allocation of
# 17179869184 bytes failed";
# Go's runtime (ollama): "fatal error: runtime: out of memory";
# Windows' commit limit: "OSError: [WinError 1455] The paging file is too small for this operation to
# complete";
# ggml's pinned host buffer (ggml-cuda.cu, ggml_cuda_host_malloc): "failed to allocate 16607.35 MiB of pinned
# memory: out of memory";
# shared memory (/dev/shm, a container's 64 MB default): NCCL's "Error while creating shared memory segment
# /dev/shm/nccl-4hXb3s (size 9637888)", PyTorch's DataLoader "This might be caused by insufficient shared
# memory (shm)", and "No space left on device" writing under /dev/shm.
_HOST_REFUSED = re.compile(
    r"\bDefaultCPUAllocator: (?:can't allocate memory|not enough memory)\b|"
    r"\bUnable to allocate (?P<array>[\d.]+ ?[KMGTP]i?B) for an array\b|"
    r"\bmemory allocation of (?P<bytes>\d+) bytes failed\b|"
    r"\bruntime: out of memory\b|"
    r"\bThe paging file is too small\b|"
    r"\bfailed to allocate (?P<pinned>[\d.]+ ?[KMG]i?B) of pinned memory\b|"
    r"\bError while creating shared memory segment\b|\binsufficient shared memory \(shm\)|"
    r"/dev/shm\b.{0,120}\bNo space left on device\b|\bNo space left on device\b.{0,120}/dev/shm\b"
)
_TRIED_BYTES = re.compile(r"you tried to allocate (?P<n>\d+) bytes")
# The shape NumPy names for the array it could not allocate: "(32768, 152064)". A 2-D one's last dimension is
# kept (`array_width`): a vocabulary there makes it a table of logits (llama-cpp-python's scores, n_ctx x
# n_vocab in fp32).
_ARRAY_SHAPE = re.compile(r"for an array with shape \((?P<rows>\d+), ?(?P<width>\d+)\)")
_ALLOC_BUFFER = re.compile(r"(?i)failed to allocate .{0,80}buffer|unable to allocate .{0,40}(memory|buffer)")
# An exception line: "torch.OutOfMemoryError: ...", "ValueError: ...", "ray.exceptions.ActorDiedError: ...".
_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?(?P<name>(?:[A-Z]\w*)?(?:Error|Exception))\b(?::|$)")
# Ray: an actor died (its worker process exited, often SIGKILLed by the OOM killer) and the raylet's report
# of workers killed for memory pressure.
_RAY_ACTOR_DIED = (
    "ActorDiedError",
    "The actor died unexpectedly",
    "actor is dead because its worker process",
)
# NCCL's failing result codes as ncclGetErrorString and the NCCL_DEBUG lines name them (a CUDA call inside
# NCCL, often its own buffer allocation, failed; a system call failed; an internal check failed).
_NCCL_RESULTS = ("ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError")
# The same communicator failures on Ascend NPUs (torch_npu's ProcessGroupHCCL and its HCCL calls).
_HCCL = ("HCCL error in:", "HCCL function error")
_PINNED_FAILED = re.compile(r"\bfailed to allocate [\d.]+ ?[KMG]i?B of pinned memory\b")
_RAY_PRESSURE = re.compile(r"killed due to memory pressure \(OOM\)")
# The rest of the memory monitor's kill message (python/ray/_private/memory_monitor.py and the raylet's
# node_manager.cc, Ray 2.2+), any line of which survives a truncated paste: its table header "Top 10 memory
# users:", its advice "Refer to the documentation on how to address the out of memory issue:
# https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html ... To adjust the kill threshold,
# set the environment variable `RAY_memory_usage_threshold`", and the dead worker's exit type
# "Worker exit type: NODE_OUT_OF_MEMORY" (src/ray/protobuf/common.proto, WorkerExitType).
_RAY_MONITOR = (
    "Top 10 memory users",
    "ray-oom-prevention",
    "RAY_memory_usage_threshold",
    "NODE_OUT_OF_MEMORY",
)


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            'File "',
            "ray.exceptions.OutOfMemoryError",
            "running low on memory",
            "out of memory",
            "OutOfMemory",
            "Tried to allocate",
            "memory mapping failed",
            "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
            "HSA_STATUS_ERROR_OUT_OF_MEMORY",
            "OUT_OF_DEVICE_MEMORY",
            "NCCL error",
            "Cannot allocate memory",
            "bad_alloc",
            "DefaultCPUAllocator: not enough memory",
            "MemoryError",
            "requires more system memory",
            "HostRegister failed",
            "of pinned memory",
            "Too large swap space",
            "too large swap space",
            "DefaultCPUAllocator",
            "memory allocation of",
            "paging file",
            "shared memory segment",
            "insufficient shared memory",
            "No space left on device",
            "No enough gpu memory",
            "AlignedAllocator",
            "Increase the workspace buffer size",
            # exception lines (any failure gets an answer), Ray actor deaths and raylet kills
            "Error",
            "Exception",
            "The actor died unexpectedly",
            "actor is dead because",
            "killed due to memory pressure",
            *_RAY_MONITOR,
            # CUDA runtime allocation failures of C++ code (allocator.RUNTIME_OOM) and other engines' errors
            "cudaMalloc",
            "CUBLAS_STATUS_ALLOC_FAILED",
            "cudaErrorMemory",
            "CUDA_ERROR_OUT_OF_MEMORY",
            "hipErrorOutOfMemory",
            "Not enough memory to handle",
            "exceeds the memory usage threshold",
            "NCCL WARN Cuda failure",
            *_NCCL_RESULTS,
            *_HCCL,
            "NCCL WARN Failed to CUDA",
            "max tokens in paged kv cache",
            "lack of CPU swap space",
            "No space left for only one request",
            "need_size",
            "not enough KV cache space",
            "Out of available cache blocks",
            "No enough cache entries",
            "KV cache exhausted",
            "failed to find",
            "could not find a KV slot",
            "No free blocks left",
            "No free blocks are available",
            "NoFreeBlocksError",
            "Not enough free blocks",
            "free blocks from the pool",
            "No enough blocks",
            "no enough cache need_size",
            "alloc_req_slots runs out of memory",
            "Prefill out of memory",
            "Not enough host memory available",
            "RuntimeBuffers::reshape",
            "CUresult error",
            "NotEnoughMemory(",
            "Impossible to fit in any sequence",
            "Insufficient memory for KV cache blocks",
            "Linear-state memory",
            "model request too large for system",
        ),
        caseless=("deep_ep", "deepep", "nvshmem", "failed to allocate", "unable to allocate"),
    )

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        if 'File "' in body:
            self._frame(line, msg)
            return
        if self._ray(line, body):
            return
        self._allocator(line, msg)
        self._memory_saver(line, body)
        self._engine_memory_errors(line, body)
        self._kernel_errors(line, body)
        self._host_enomem(line, body)
        self._exception(line, body)

    def _ray(self, line: Line, body: str) -> bool:
        """Ray's memory monitor (host RAM, not the GPU) and its actor deaths."""
        if (
            "ray.exceptions.OutOfMemoryError" in body
            or "running low on memory" in body
            or "exceeds the memory usage threshold" in body
            or _RAY_PRESSURE.search(body)
            or any(k in body for k in _RAY_MONITOR)
        ):
            self.ctx.signal(line, body, "ray-memory-kill")
            return True
        if any(k in body for k in _RAY_ACTOR_DIED):
            self.ctx.signal(line, body, "ray-actor-died")
            return True
        return False

    def _allocator(self, line: Line, msg: Message) -> None:
        body = msg.body
        if not any(w in body for w in _OOM_WORDS) and not allocator.runtime_oom(body):
            return
        if "warming up" in body:
            return  # vLLM's own sampler/pooler warm-up message, read by the vLLM parser
        if "Container killed due to memory usage" in body:
            return  # AWS ECS's stopped reason ("OutOfMemoryError: Container killed ..."): kubectl.py's
        text = _join_head(body, line)
        report = allocator.read(text)
        if report is None:
            if not (
                "CUDA out of memory" in body
                or "OutOfMemoryError" in body
                or "HIP out of memory" in body
                or re.search(r"(?i)\b(GPU|CUDA|HIP|device)\b.{0,40}\bout of memory\b", body)
            ):
                return
            report = AllocatorReport("torch")
        self.ctx.oom(line, text, report, process_tag=msg.tag)
        if "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS" in text:
            self.ctx.signal(line, text, "cudagraph-estimate-hint")
        if "cumem_allocator" in text:
            self.ctx.signal(line, text, "sleep-mode-oom")

    def _memory_saver(self, line: Line, body: str) -> None:
        """SGLang's sleep mode (torch_memory_saver, what verl/slime pause and resume it with) failing to map
        memory back: its CURESULT_CHECK prints the driver's result, 2 being CUDA_ERROR_OUT_OF_MEMORY
        (torch_memory_saver csrc/utils.h: "CUresult error: 2 (out of memory) file=... func=cu_mem_create";
        before 0.0.6 "CUresult error  result=2 file=... func=cu_mem_create")."""
        if "CUresult error" in body and "torch_memory_saver" in body and _CURESULT_OOM.search(body):
            self.ctx.oom(line, body, AllocatorReport("engine"))
            self.ctx.signal(line, body, "sleep-mode-oom")

    def _engine_memory_errors(self, line: Line, body: str) -> None:
        """ROCm's HSA and XPU's device errors, other engines' explicit memory errors."""
        if "HSA_STATUS_ERROR_OUT_OF_RESOURCES" in body or "HSA_STATUS_ERROR_OUT_OF_MEMORY" in body:
            free = _size(_HSA_FREE.search(body))
            self.ctx.oom(line, body, AllocatorReport("hsa", free=free))
            self.ctx.signal(line, body, "hsa-out-of-resources")
        if "OUT_OF_DEVICE_MEMORY" in body:
            self.ctx.oom(line, body, AllocatorReport("xpu"))
        m = _TRT_KV.search(body)
        if m:
            total, available = log_size(m.group("total")), log_size(m.group("avail"))
            if total and available is not None and available <= max(TRT_KV_TINY, 0.02 * total):
                self.ctx.signal(line, body, "no-kv-cache-memory", kv_available_bytes=available)
        if _LMDEPLOY_NO_POOL.search(body) or _NO_KV_ROOM.search(body):
            self.ctx.signal(line, body, "no-kv-cache-memory")
        if _WORKSPACE_FULL.search(body):
            left = _WORKSPACE_LEFT.search(body)
            self.ctx.signal(
                line, body, "workspace-too-small", available_bytes=int(left.group("n")) if left else None
            )
        m = _TOTAL_TOKENS.search(body)
        if m:
            self.ctx.signal(line, body, "no-kv-cache-memory", kv_tokens=float(m.group("n")))
        if _KV_DRY.search(body):
            self.ctx.signal(line, body, "kv-pool-dry")
        if "RuntimeBuffers::reshape" in body:
            self.ctx.signal(line, body, "trt-runtime-buffers")
        m = _PREFILL_TOKENS.search(body)
        if m:
            self.ctx.signal(line, body, "prefill-tokens-dont-fit", tokens=float(m.group("n")))
        m = _MAX_TOTAL_TOKENS.search(body)
        if m:
            tokens = int(m.group("n") or m.group("m"))
            self.ctx.signal(line, body, "max-model-len-exceeds-kv", max_model_len=tokens)
        if _KV_NO_SEQUENCE.search(body):
            self.ctx.signal(line, body, "no-kv-cache-memory")
        m = _LINEAR_STATE_BUDGET.search(body)
        if m:
            self.ctx.signal(
                line,
                body,
                "no-kv-cache-memory",
                state_bytes=float(m.group("state")) * MIB,
                kv_budget_bytes=float(m.group("budget")) * MIB,
            )
        if _ALLOC_BUFFER.search(body) and "cpu_buffer_type" not in body and "CPU buffer" not in body:
            self.ctx.oom(line, body, ENGINE_OOM)  # (ggml's CPU buffers are host RAM: llama_cpp.py)

    def _kernel_errors(self, line: Line, body: str) -> None:
        low = body.lower()
        if ("deep_ep" in low or "deepep" in low) and any(
            w in low for w in ("error", "invalid", "fail", "assert")
        ):
            self.ctx.signal(line, body, "deepep-error")
        if "nvshmem" in low and any(w in low for w in ("alloc", "fail", "error", "out of")):
            self.ctx.signal(line, body, "nvshmem-alloc")
        if (
            "NCCL error" in body
            or "NCCL WARN Cuda failure" in body
            or "NCCL WARN Failed to CUDA" in body  # alloc.h: "Failed to CUDA calloc N bytes"
            or any(r in body for r in _NCCL_RESULTS + _HCCL)
        ):
            self.ctx.signal(line, body, "nccl-error")

    def _host_enomem(self, line: Line, body: str) -> None:
        refused = _HOST_REFUSED.search(body) if _could_be_refused(body) else None
        if refused:
            tried = _TRIED_BYTES.search(body)
            size = refused.group("array") or refused.group("pinned")
            requested = (
                int(tried.group("n"))
                if tried
                else int(refused.group("bytes"))
                if refused.group("bytes")
                else log_size(size)
                if size
                else None
            )
            # ggml only warns and falls back to pageable memory when pinning fails: a sign, not the failure
            name = "pinned-alloc-failed" if refused.group("pinned") else "host-enomem"
            shape = _ARRAY_SHAPE.search(body) if refused.group("array") else None
            self.ctx.signal(
                line,
                body,
                name,
                requested_bytes=requested,
                array_rows=int(shape.group("rows")) if shape else None,
                array_width=int(shape.group("width")) if shape else None,
            )
            return
        large = _SWAP_LARGE.search(body) if "too large swap space" in body else None
        if large:
            self.ctx.signal(
                line,
                body,
                "swap-space-large",
                swap_bytes=log_size(large.group("swap")),
                host_total_bytes=log_size(large.group("total")),
            )
            return
        # glibc's loader: "libgomp.so.1: cannot allocate memory in static TLS block" (a library loaded late,
        # typically on aarch64), not a host out of memory.
        if "in static TLS block" in body:
            self.ctx.signal(line, body, "static-tls")
            return
        # ENOSPC writing a file (a download cache, a checkpoint): the disk, not memory; under /dev/shm it is
        # shared memory, which the host-allocation pattern below takes.
        if "No space left on device" in body and "/dev/shm" not in body and "shm" not in body.lower():
            self.ctx.signal(line, body, "disk-full")
            return
        if (
            "Cannot allocate memory" in body
            or "bad_alloc" in body
            or "DefaultCPUAllocator: not enough memory" in body
            or "requires more system memory" in body
            # ollama's check before it starts a runner (llm/server.go, 0.4-0.5), logged before the error
            # above: msg="model request too large for system" requested="15.3 GiB" available=12025995264 ...
            or "model request too large for system" in body
            or "HostRegister failed" in body  # pinning host memory for device transfers (CUDA/HIP)
            # ggml's pinned host buffer (ggml-cuda.cu ggml_cuda_host_malloc): "failed to allocate 16607.35
            # MiB of pinned memory: out of memory" (older: "WARNING: failed to allocate 1024.00 MB of pinned
            # memory")
            or ("of pinned memory" in body and _PINNED_FAILED.search(body) is not None)
            # SGLang's hierarchical cache sizing its host pool: "Not enough host memory available.
            # Requesting 40.00 GB but only have 44.87 GB free."
            or "Not enough host memory available" in body
            or ("MemoryError" in body and re.search(r"\bMemoryError\b", body))
        ) and "CUDA" not in body:
            self.ctx.signal(line, body, "host-enomem")
            return
        swap = _SWAP_TOO_LARGE.search(body)
        if swap:  # the engine refused pinned CPU swap blocks larger than the host's memory
            self.ctx.signal(
                line,
                body,
                "host-enomem",
                swap_bytes=log_size(swap.group("swap")),
                host_total_bytes=log_size(swap.group("total")),
            )

    def _exception(self, line: Line, body: str) -> None:
        """Any exception line is a failure: with nothing else recognised it still gets an answer ('other',
        with the evidence to collect)."""
        m = _EXCEPTION.match(body.strip())
        if m:
            self.ctx.signal(line, body, "exception")

    def _frame(self, line: Line, msg: Message) -> None:
        m = _FRAME.search(msg.body)
        if not m:
            return
        func = m.group("func") or ""
        after = line.following()
        code = ""
        if after:
            nxt = split_body(after[0])
            if func.endswith("_") and _BARE_WORD.match(nxt):  # "in get_" wrapped onto "kv_cache_configs"
                func += nxt
                after = after[1:]
                nxt = split_body(after[0]) if after else ""
            if (
                nxt
                and not nxt.startswith(("File ", "Traceback"))
                and ":" not in nxt[:40].split("(")[0]
                or nxt
                and not nxt.startswith(("File ", "Traceback"))
                and "=" in nxt
            ):
                code = nxt.strip()[:200]
        self.ctx.emit(
            Frame(
                where=self.ctx.where(line),
                text=self.ctx.clip(msg.body),
                path=m.group("path"),
                lineno=int(m.group("no")) if m.group("no").isdigit() else 0,
                function=func,
                code=code,
            )
        )


# Words one of which every _HOST_REFUSED spelling holds (a search tries every position of every line).
_REFUSED_WORDS = (
    "DefaultCPUAllocator",
    "Unable to allocate",
    "memory allocation of",
    "runtime: out of memory",
    "paging file",
    "pinned memory",
    "shared memory",
    "No space left",
)


def _could_be_refused(body: str) -> bool:
    return any(w in body for w in _REFUSED_WORDS)


def split_body(raw: str) -> str:
    from oomguard.diagnosis.sources.base import split_prefix

    return split_prefix(raw).body.strip()


def _join_head(body: str, line: Line) -> str:
    """The message plus its wrapped continuation lines (joined without a separator; regexes allow \\s*)."""
    parts = [body.rstrip()]
    for raw in line.following()[:3]:
        nxt = split_body(raw)
        if (
            not nxt
            or nxt.startswith(("File ", "Traceback"))
            or "Tried to allocate" in nxt
            or "OutOfMemory" in nxt
        ):
            break  # a new message (another rank's OOM), not a continuation
        if any(
            k in nxt
            for k in (
                "is free",
                "memory in use",
                "by PyTorch",
                "private pools",
                "capacity",
                "which",
                "bytes",
                "total:",
                "unallocated",
            )
        ) or not split_prefix_flag(raw):
            parts.append(nxt)
        else:
            break
    return "".join(parts) if len(parts) > 1 else body


def split_prefix_flag(raw: str) -> bool:
    from oomguard.diagnosis.sources.base import split_prefix

    m = split_prefix(raw)
    return bool(m.level or m.tag)


__all__ = ["Parser", "continuation"]
