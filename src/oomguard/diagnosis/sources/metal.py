"""Apple Metal (MLX, mlx-lm, llama.cpp's Metal backend): the GPU's out-of-memory errors.

Formats (mlx/backend/metal/allocator.cpp, device.cpp; the IOKit command-buffer status):
- "[METAL] Command buffer execution failed: Insufficient Memory
  (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)": the unified memory the GPU may wire ran out while
  a command buffer ran; no sizes. llama.cpp's Metal backend prints the same status ("error: Insufficient
  Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)").
- "[metal::malloc] Attempting to allocate 137438953472 bytes which is greater than the maximum allowed buffer
  size of 77309411328 bytes.": one buffer larger than Metal allows (the requested bytes are known).
- "[metal::malloc] Resource limit (499000) exceeded.": MLX counts the Metal buffers alive against the device's
  resource limit; a count of buffers, not bytes (`platform-limit`).
- "[malloc_or_wait] Unable to allocate 9000000000 bytes." (mlx/allocator.cpp before MLX 0.22: the allocator
  waited for running tasks to free memory and still got none; the bytes it asked for).
- mlx-lm's warning before it generates (mlx_lm/generate.py wired_limit), when the weights pass 90% of the
  GPU's recommended working set (what Metal lets it wire): "[WARNING] Generating with a model that requires
  30521 MB which is close to the maximum recommended size of 22906 MB. This can be slow." The two sizes are
  the weights and the GPU's usable memory (read as the weights and the device total).
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import AllocatorReport, LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers
from oomguard.units import MiB as MIB

_MALLOC = re.compile(r"\[metal::malloc\] Attempting to allocate (?P<req>\d+) bytes")
_RESOURCE_LIMIT = re.compile(r"\[metal::malloc\] Resource limit \((?P<n>\d+)\) exceeded")
_MALLOC_OR_WAIT = re.compile(r"\[malloc_or_wait\] Unable to allocate (?P<req>\d+) bytes")
_NEAR_WORKING_SET = re.compile(
    r"Generating with a model that requires (?P<model>[\d.]+) MB which is close to the maximum recommended "
    r"size of (?P<limit>[\d.]+) ?MB"
)
IOGPU_OOM = "kIOGPUCommandBufferCallbackErrorOutOfMemory"  # Apple's GPU driver status, whoever prints it


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=("[metal::malloc]", IOGPU_OOM, "close to the maximum recommended size", "[malloc_or_wait]")
    )

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        near = _NEAR_WORKING_SET.search(body) if "close to the maximum recommended size" in body else None
        if near:
            self.ctx.startup_number(line, msg, "weights_bytes", float(near.group("model")) * MIB)
            self.ctx.startup_number(line, msg, "gpu_total_bytes", float(near.group("limit")) * MIB)
            return
        waited = _MALLOC_OR_WAIT.search(body) if "[malloc_or_wait]" in body else None
        if waited:
            self.ctx.oom(line, body, AllocatorReport("engine", requested=int(waited.group("req"))))
            return
        requested: int | None = None
        if "[metal::malloc]" in body:
            limit = _RESOURCE_LIMIT.search(body)
            if limit:
                self.ctx.signal(line, body, "platform-limit", metal_buffers=int(limit.group("n")))
                return
            m = _MALLOC.search(body)
            if not m:
                return
            requested = int(m.group("req"))
        elif IOGPU_OOM not in body:
            return
        self.ctx.oom(line, body, AllocatorReport("engine", requested=requested))
