"""Python tracebacks and allocator errors: PyTorch's OutOfMemoryError with all its parts, the
expandable-segments mapper, ROCm's HSA error, XPU, CUDA runtime errors, int32 index math, illegal memory
access, DeepEP/NVSHMEM/NCCL failures, host ENOMEM; and the stack frames with the code under them.
"""

from __future__ import annotations

import re

from oomguard.diagnose.evidence import Frame, OomMessage
from oomguard.diagnose.scan import Line
from oomguard.diagnose.sources.base import SIZE, LineParser, Message, continuation, log_size, to_int
from oomguard.diagnose.sources.triggers import Triggers

_S = SIZE
_TRIED = re.compile(rf"Tried\s*to\s*allocate\s*(?P<v>{_S})", re.IGNORECASE)
_GPU = re.compile(
    rf"GPU\s*(?P<dev>\d+)\s*has\s*a\s*total\s*capac\s*ity\s*of\s*(?P<total>{_S})\s*of\s*which\s*(?P<free>{_S})\s*is\s*free",
    re.IGNORECASE,
)
_PROC = re.compile(rf"Process\s*(?P<pid>\d+)\s*has\s*(?P<v>{_S})\s*memory\s*in\s*use", re.IGNORECASE)
_THIS = re.compile(rf"this\s*process\s*has\s*(?P<v>{_S})\s*memory\s*in\s*use", re.IGNORECASE)
_ALLOCATED = re.compile(rf"(?P<v>{_S})\s*is\s*allocated\s*by\s*PyTorch", re.IGNORECASE)
_PRIVATE = re.compile(rf"(?P<v>{_S})\s*allocated\s*in\s*private\s*pools", re.IGNORECASE)
_RESERVED = re.compile(rf"(?P<v>{_S})\s*is\s*reserved\s*by\s*PyTorch\s*but\s*unallocated", re.IGNORECASE)
# PyTorch 1.x: "(GPU 0; 15.78 GiB total capacity; 14.56 GiB already allocated; 3.44 MiB free; 14.78 GiB reserved
# in total by PyTorch)"
_OLD = re.compile(
    rf"\(GPU\s*(?P<dev>\d+);\s*(?P<total>{_S})\s*total\s*capacity;\s*(?P<alloc>{_S})\s*already\s*allocated;\s*"
    rf"(?P<free>{_S})\s*free;\s*(?:(?:{_S})\s*allowed;\s*)?(?P<reserved>{_S})\s*reserved",
    re.IGNORECASE,
)
# c10 expandable segments: "memory mapping failed with OOM on device 0 while trying to map 20971520 bytes
# (free: 20578304, total: 25272516608)"
_MAPPER = re.compile(
    r"memory\s*mapping\s*failed.*?device\s*(?P<dev>\d+).*?map\s*(?P<req>\d+)\s*bytes\s*\(free:\s*(?P<free>\d+),\s*"
    r"total:\s*(?P<total>\d+)\)",
    re.IGNORECASE,
)
_HSA_FREE = re.compile(r"Available\s*Free\s*mem\s*:\s*(?P<v>[\d.]+\s*[KMGT]?B)", re.IGNORECASE)
_FRAME = re.compile(r'File\s+"(?P<path>[^"]+)",\s*line\s+(?P<no>\d+),\s*in\s+(?P<func>[\w<>.]+)')
_BARE_WORD = re.compile(r"^[\w]+$")


def _size(m: re.Match[str] | None, group: str = "v") -> int | None:
    return log_size(m.group(group)) if m else None


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
            "canUse32BitIndexMath",
            "INT32_MAX",
            "illegal memory access",
            "NCCL error",
            "Cannot allocate memory",
            "bad_alloc",
            "DefaultCPUAllocator: not enough memory",
            "MemoryError",
        ),
        caseless=("deep_ep", "deepep", "nvshmem"),
    )

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        if 'File "' in body:
            self._frame(line, msg)
            return
        if "ray.exceptions.OutOfMemoryError" in body or "running low on memory" in body:
            self.ctx.signal(line, body, "ray-memory-kill")  # Ray's memory monitor: host RAM, not the GPU
            return
        oom_words = "out of memory" in body or "OutOfMemory" in body
        if "Tried to allocate" in body or (oom_words and "Tried to allocate" in _join_head(body, line)):
            self._torch_oom(line, msg)
        elif oom_words and "warming up" not in body:
            self._bare_oom(line, msg)
        if "memory mapping failed" in body:
            self._mapper(line, msg)
        if "HSA_STATUS_ERROR_OUT_OF_RESOURCES" in body or "HSA_STATUS_ERROR_OUT_OF_MEMORY" in body:
            free = _size(_HSA_FREE.search(body))
            self.ctx.emit(
                OomMessage(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(body),
                    flavor="hsa",
                    free=free,
                    process_tag=msg.tag,
                )
            )
            self.ctx.signal(line, body, "hsa-out-of-resources")
        if "OUT_OF_DEVICE_MEMORY" in body:
            self.ctx.emit(
                OomMessage(
                    where=self.ctx.where(line), text=self.ctx.clip(body), flavor="xpu", process_tag=msg.tag
                )
            )
        if "canUse32BitIndexMath" in body or "INT32_MAX" in body:
            self.ctx.signal(line, body, "int32-index-math")
        if "illegal memory access" in body:
            self.ctx.signal(line, body, "illegal-memory-access")
        low = body.lower()
        if ("deep_ep" in low or "deepep" in low) and any(
            w in low for w in ("error", "invalid", "fail", "assert")
        ):
            self.ctx.signal(line, body, "deepep-error")
        if "nvshmem" in low and any(w in low for w in ("alloc", "fail", "error", "out of")):
            self.ctx.signal(line, body, "nvshmem-alloc")
        if "NCCL error" in body:
            self.ctx.signal(line, body, "nccl-error")
        if (
            "Cannot allocate memory" in body
            or "bad_alloc" in body
            or "DefaultCPUAllocator: not enough memory" in body
            or re.search(r"\bMemoryError\b", body)
        ) and "CUDA" not in body:
            self.ctx.signal(line, body, "host-enomem")

    def _frame(self, line: Line, msg: Message) -> None:
        m = _FRAME.search(msg.body)
        if not m:
            return
        func = m.group("func")
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
                lineno=int(m.group("no")),
                function=func,
                code=code,
            )
        )

    def _torch_oom(self, line: Line, msg: Message) -> None:
        text = _join_head(msg.body, line)
        tried = _TRIED.search(text)
        gpu = _GPU.search(text)
        old = _OLD.search(text)
        processes = tuple((int(p.group("pid")), log_size(p.group("v")) or 0) for p in _PROC.finditer(text))
        allocated = _size(_ALLOCATED.search(text))
        reserved_unalloc = _size(_RESERVED.search(text))
        total = log_size(gpu.group("total")) if gpu else None
        free = log_size(gpu.group("free")) if gpu else None
        device = int(gpu.group("dev")) if gpu else None
        if old:
            device = int(old.group("dev"))
            total, free = log_size(old.group("total")), log_size(old.group("free"))
            allocated = log_size(old.group("alloc"))
            reserved = log_size(old.group("reserved"))
            if reserved is not None and allocated is not None:
                reserved_unalloc = max(0, reserved - allocated)
        self.ctx.emit(
            OomMessage(
                where=self.ctx.where(line),
                text=self.ctx.clip(text),
                flavor="torch",
                requested=_size(tried),
                device=device,
                total=total,
                free=free,
                this_process=_size(_THIS.search(text)),
                processes=processes,
                allocated=allocated,
                private_pools=_size(_PRIVATE.search(text)),
                reserved_unallocated=reserved_unalloc,
                process_tag=msg.tag,
            )
        )
        if "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS" in text:
            self.ctx.signal(line, text, "cudagraph-estimate-hint")

    def _bare_oom(self, line: Line, msg: Message) -> None:
        body = msg.body
        if (
            "CUDA out of memory" not in body
            and "OutOfMemoryError" not in body
            and "HIP out of memory" not in body
        ):
            return
        flavor = "cuda-runtime" if "CUDA error: out of memory" in body else "torch"
        self.ctx.emit(
            OomMessage(
                where=self.ctx.where(line), text=self.ctx.clip(body), flavor=flavor, process_tag=msg.tag
            )
        )

    def _mapper(self, line: Line, msg: Message) -> None:
        text = _join_head(msg.body, line)
        m = _MAPPER.search(text)
        self.ctx.emit(
            OomMessage(
                where=self.ctx.where(line),
                text=self.ctx.clip(text),
                flavor="expandable-segments",
                requested=to_int(m.group("req")) if m else None,
                device=int(m.group("dev")) if m else None,
                free=to_int(m.group("free")) if m else None,
                total=to_int(m.group("total")) if m else None,
                process_tag=msg.tag,
            )
        )


def split_body(raw: str) -> str:
    from oomguard.diagnose.sources.base import split_prefix

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
    from oomguard.diagnose.sources.base import split_prefix

    m = split_prefix(raw)
    return bool(m.level or m.tag)


__all__ = ["Parser", "continuation"]
