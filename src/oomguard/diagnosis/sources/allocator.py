"""One reader for every allocator out-of-memory message, whatever its year or wrapper: the quantities, not
the wording.

Formats read (all sizes in PyTorch's binary units):
- PyTorch >= 2.1 (CUDA and ROCm/HIP alike): "Tried to allocate X. GPU N has a total capacity of T of which F
  is free. [Process P has U memory in use.]* [Including non-PyTorch memory, this process has U memory in use.]
  Of the allocated memory A is allocated by PyTorch, [with P allocated in private pools (e.g., CUDA Graphs),]
  and R is reserved by PyTorch but unallocated."
- PyTorch 1.x-2.0: "Tried to allocate X (GPU N; T total capacity; A already allocated; F free; [M allowed;]
  R reserved in total by PyTorch)" and the oldest "...; F free; C cached)"; R there is the whole reservation.
  Ascend's torch_npu keeps this format with a "current active" term: "NPU out of memory. Tried to allocate X
  (NPU N; T total capacity; A already allocated; C current active; F free; R reserved in total by PyTorch)".
- c10's expandable-segments mapper: "memory mapping failed with OOM on device N while trying to map X bytes
  (free: F, total: T)" (plain byte counts).
- ggml's buffer allocation (llama.cpp, ollama): "allocating X on device N: cudaMalloc failed: out of memory".
- CUDA runtime errors from C++ code (TensorRT-LLM, NCCL, cuBLAS): "cudaMalloc ... out of memory",
  "CUBLAS_STATUS_ALLOC_FAILED", "cudaErrorMemoryAllocation": an OOM with no numbers.
"""

from __future__ import annotations

import re

from oomguard.diagnosis.sources.base import SIZE, log_size, to_int

# Re-exported: what this module reads a message into (rules.py builds one from an OomMessage).
from oomguard.diagnosis.sources.base import AllocatorReport as AllocatorReport  # noqa: PLC0414

_S = SIZE
_TRIED = re.compile(rf"Tried\s*to\s*allocate\s*(?P<v>{_S})", re.IGNORECASE)
_GPU = re.compile(
    rf"GPU\s*(?P<dev>\d+)\s*has\s*a\s*total\s*capac\w*\s*of\s*(?P<total>{_S})\s*of\s*which\s*"
    rf"(?P<free>{_S})\s*is\s*free",
    re.IGNORECASE,
)
_PROC = re.compile(rf"Process\s*(?P<pid>\d+)\s*has\s*(?P<v>{_S})\s*memory\s*in\s*use", re.IGNORECASE)
_THIS = re.compile(rf"this\s*process\s*has\s*(?P<v>{_S})\s*memory\s*in\s*use", re.IGNORECASE)
# The three quantities a size precedes are found by their words first, then the size just before them: a
# pattern that opens with a size is tried at every position of the message (~100x slower on a long line).
_ALLOCATED = re.compile(r"\s*is\s*allocated\s*by\s*PyTorch", re.IGNORECASE)
_PRIVATE = re.compile(r"\s*allocated\s*in\s*private\s*pools", re.IGNORECASE)
_RESERVED = re.compile(r"\s*is\s*reserved\s*by\s*PyTorch\s*but\s*unallocated", re.IGNORECASE)
_SIZE_AT_END = re.compile(rf"(?P<v>{_S})$", re.IGNORECASE)
# A size is at most this many characters ("1,234,567,890,123 bytes").
_SIZE_CHARS = 48
_OLD = re.compile(
    rf"\((?:GPU|NPU|XPU)\s*(?P<dev>\d+);\s*(?P<total>{_S})\s*total\s*capacity;\s*(?P<alloc>{_S})\s*already\s*"
    rf"allocated;\s*(?:(?:{_S})\s*current\s*active;\s*)?(?P<free>{_S})\s*free;\s*(?:(?:{_S})\s*allowed;\s*)?(?P<reserved>{_S})\s*(?:reserved|cached)",
    re.IGNORECASE,
)
_MAPPER = re.compile(
    r"memory\s*mapping\s*failed.*?device\s*(?P<dev>\d+).*?map\s*(?P<req>\d+)\s*bytes\s*\(free:\s*(?P<free>\d+),"
    r"\s*total:\s*(?P<total>\d+)\)",
    re.IGNORECASE,
)
# ggml's CUDA/HIP buffer allocation (llama.cpp, ollama): "allocating 372.08 MiB on device 0: cudaMalloc
# failed: out of memory" (ggml/src/ggml-cuda/ggml-cuda.cu, ggml_backend_cuda_buffer_type_alloc_buffer).
_GGML = re.compile(rf"allocating\s*(?P<v>{_S})\s*on\s*device\s*(?P<dev>\d+):\s*\w*[Mm]alloc\s*failed")
# C++ allocation failures on the GPU that carry no sizes (TensorRT-LLM, cuBLAS workspaces, raw cudaMalloc).
RUNTIME_OOM = re.compile(
    r"cudaMalloc\w*\(.*out of memory|CUDA runtime error in :*cudaMalloc|Cuda failure 2 'out of memory'|"
    r"CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|"
    r"CUDA error: out of memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemory|hipErrorOutOfMemory",
    re.IGNORECASE,
)


def _size(m: re.Match[str] | None, group: str = "v") -> int | None:
    return log_size(m.group(group)) if m else None


def _size_before(words: re.Pattern[str], text: str) -> int | None:
    """The size written just before the first occurrence of `words` that has one."""
    for m in words.finditer(text):
        size = _SIZE_AT_END.search(text, max(0, m.start() - _SIZE_CHARS), m.start())
        if size:
            return log_size(size.group("v"))
    return None


# Every RUNTIME_OOM alternative holds one of these (lower case): the pattern runs only where one is.
_RUNTIME_WORDS = (
    "cudamalloc",
    "cuda failure 2",
    "cublas_status_alloc_failed",
    "cudaerrormemory",
    "cuda error: out of memory",
    "cuda_error_out_of_memory",
    "hiperroroutofmemory",
)


def runtime_oom(text: str) -> bool:
    """A CUDA runtime allocation failure (RUNTIME_OOM), checked by its words before the pattern runs."""
    low = text.lower()
    return any(word in low for word in _RUNTIME_WORDS) and RUNTIME_OOM.search(text) is not None


def read(text: str) -> AllocatorReport | None:
    """The allocator message in `text` (one message with its wrapped continuation), or None."""
    mapper = _MAPPER.search(text)
    if mapper:
        return AllocatorReport(
            "expandable-segments",
            requested=to_int(mapper.group("req")),
            device=int(mapper.group("dev")),
            free=to_int(mapper.group("free")),
            total=to_int(mapper.group("total")),
        )
    tried = _TRIED.search(text)
    old = _OLD.search(text)
    if old:
        allocated = log_size(old.group("alloc"))
        reserved = log_size(old.group("reserved"))
        unallocated = max(0, reserved - allocated) if reserved is not None and allocated is not None else None
        return AllocatorReport(
            "torch-old",
            requested=_size(tried),
            device=int(old.group("dev")),
            total=log_size(old.group("total")),
            free=log_size(old.group("free")),
            allocated=allocated,
            reserved_unallocated=unallocated,
        )
    gpu = _GPU.search(text)
    if tried or gpu:
        return AllocatorReport(
            "torch",
            requested=_size(tried),
            device=int(gpu.group("dev")) if gpu else None,
            total=log_size(gpu.group("total")) if gpu else None,
            free=log_size(gpu.group("free")) if gpu else None,
            this_process=_size(_THIS.search(text)),
            processes=tuple((int(p.group("pid")), log_size(p.group("v")) or 0) for p in _PROC.finditer(text)),
            allocated=_size_before(_ALLOCATED, text),
            private_pools=_size_before(_PRIVATE, text),
            reserved_unallocated=_size_before(_RESERVED, text),
        )
    ggml = _GGML.search(text)
    if ggml:
        return AllocatorReport("engine", requested=_size(ggml), device=int(ggml.group("dev")))
    if runtime_oom(text):
        return AllocatorReport("cuda-runtime")
    return None


def outside_pytorch(report: AllocatorReport) -> int | None:
    """Bytes in use on the device that PyTorch's allocator of the failing process does not hold: other
    processes, and this process's non-PyTorch memory (CUDA context, NCCL, cuBLAS workspaces, other libraries).
    total - free - (allocated + reserved-but-unallocated); None when the message lacks a term."""
    if None in (report.total, report.free, report.allocated, report.reserved_unallocated):
        return None
    assert report.total is not None and report.free is not None
    assert report.allocated is not None and report.reserved_unallocated is not None
    return report.total - report.free - report.allocated - report.reserved_unallocated
