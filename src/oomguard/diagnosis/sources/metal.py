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
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import AllocatorReport, LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_MALLOC = re.compile(r"\[metal::malloc\] Attempting to allocate (?P<req>\d+) bytes")
_RESOURCE_LIMIT = re.compile(r"\[metal::malloc\] Resource limit \((?P<n>\d+)\) exceeded")
IOGPU_OOM = "kIOGPUCommandBufferCallbackErrorOutOfMemory"  # Apple's GPU driver status, whoever prints it


class Parser(LineParser):
    TRIGGERS = Triggers(words=("[metal::malloc]", IOGPU_OOM))

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
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
