"""A GPU API's cap on one allocation, stated by the error that refused a request (`platform-limit`).

Vulkan, Level Zero, OpenCL and WebGPU refuse any single buffer above a per-allocation limit, whatever is free:
Vulkan's maxMemoryAllocationSize (4 GiB on RADV and many drivers), Intel's 4 GB without relaxed allocation
limits, WebGPU's maxBufferSize. The refusal names the limit, not free memory, so it is not the device running
out; the fixes are a smaller single buffer (a smaller micro-batch, a split tensor) or the runtime's relaxed
limit (UR_L0_ENABLE_RELAXED_ALLOCATION_LIMITS=1, GGML_VK_FORCE_MAX_ALLOCATION_SIZE). Formats:
- llama.cpp's Vulkan backend (ggml/src/ggml-vulkan/ggml-vulkan.cpp ggml_vk_create_buffer, when size >
  max_memory_allocation_size): "ggml_vulkan: Requested buffer size exceeds device memory allocation limit:
  ErrorOutOfDeviceMemory";
- Level Zero / Unified Runtime / SYCL's PI / OpenCL size codes (a size above the device's maximum, not
  exhausted memory): ZE_RESULT_ERROR_UNSUPPORTED_SIZE, UR_RESULT_ERROR_UNSUPPORTED_SIZE,
  UR_RESULT_ERROR_INVALID_BUFFER_SIZE, PI_ERROR_INVALID_BUFFER_SIZE (-61), CL_INVALID_BUFFER_SIZE;
- WebGPU (wgpu; Dawn): "Buffer size 1073741824 is greater than the maximum buffer size (268435456)",
  "Buffer size (X) exceeds the max buffer size limit (Y)" (the request and the cap).
(Intel XPU PyTorch's own text, with the device's figures, is read by xpu.py; Metal's buffer count by
metal.py.)
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_STATED = re.compile(
    r"\bRequested buffer size exceeds device memory allocation limit\b"
    r"|\b(?:ZE|UR)_RESULT_ERROR_UNSUPPORTED_SIZE\b|\b(?:UR_RESULT|PI)_ERROR_INVALID_BUFFER_SIZE\b"
    r"|\bCL_INVALID_BUFFER_SIZE\b"
)
_WEBGPU = re.compile(
    r"\bBuffer size \(?(?P<req>\d+)\)? (?:is greater than|exceeds) the max(?:imum)? buffer size(?: limit)? "
    r"\((?P<cap>\d+)\)"
)


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "exceeds device memory allocation limit",
            "UNSUPPORTED_SIZE",
            "INVALID_BUFFER_SIZE",
            "max buffer size",
            "maximum buffer size",
        ),
    )

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        m = _WEBGPU.search(body)
        if m:
            self.ctx.signal(
                line,
                body,
                "platform-limit",
                per_allocation=1,
                limit_bytes=int(m.group("cap")),
                requested_bytes=int(m.group("req")),
            )
        elif _STATED.search(body):
            self.ctx.signal(line, body, "platform-limit", per_allocation=1)
