"""Device errors that are not a lack of memory, though reports of them often say it ran out.

- A kernel launch beyond the device's per-kernel limits (`platform-limit`, no bytes missing): CUDA's
  cudaErrorLaunchOutOfResources "too many resources requested for launch" (registers, shared memory per
  block), cudaErrorInvalidConfiguration "invalid configuration argument" (a grid or block dimension past the
  device's maximum, e.g. a grid of 92,029 rows where y/z stop at 65,535), Triton's
  "OutOfResources: out of resource: shared memory, Required: 196608, Hardware limit: 65536" (python/triton/
  runtime/errors.py; the kernel's need and the limit).
- The device or its software cannot run the work at all (`device-error`): cudaErrorNoKernelImageForDevice "no
  kernel image is available for execution on the device", cudaErrorInsufficientDriver "CUDA driver version is
  insufficient for CUDA runtime version", cudaErrorInvalidDevice "invalid device ordinal" (a device index the
  process cannot see: CUDA_VISIBLE_DEVICES), cudaErrorUnsupportedPtxVersion "the provided PTX was compiled
  with an unsupported toolchain", cudaErrorSystemDriverMismatch "system has unsupported display driver / cuda
  driver combination", cudaErrorCompatNotSupportedOnDevice "forward compatibility was attempted on non
  supported HW", cudaErrorNotSupported as "CUDA error: operation not supported"; HIP's
  hipErrorNoBinaryForGpu "Unable to find code object for all current devices", and "invalid device function"
  (no code for this GPU's architecture).
(The strings are cudaGetErrorString's, as PyTorch prints them after "CUDA error: ", and HIP's.)
- PyTorch's own invariant failing (`internal-assert`): TORCH_INTERNAL_ASSERT's "captures_underway.empty()
  INTERNAL ASSERT FAILED at ".../c10/cuda/CUDACachingAllocator.cpp":2967, please report a bug to PyTorch"
  (c10/util/Exception.cpp): the framework's bug (the caching allocator's pools and a graph capture, say),
  whatever a report around it says of memory.
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_LAUNCH_LIMIT = re.compile(
    r"\btoo many resources requested for launch\b|\bcudaErrorLaunchOutOfResources\b"
    r"|\binvalid configuration argument\b|\bcudaErrorInvalidConfiguration\b"
)
_TRITON_RESOURCES = re.compile(
    r"\bout of resource: (?P<what>[\w ]+?), Required: (?P<need>\d+), Hardware limit: (?P<limit>\d+)"
)
_NOT_RUNNABLE = re.compile(
    r"\bno kernel image is available for execution on the device\b|\bcudaErrorNoKernelImageForDevice\b"
    r"|\bCUDA driver version is insufficient for CUDA runtime version\b|\bcudaErrorInsufficientDriver\b"
    r"|\binvalid device ordinal\b|\bcudaErrorInvalidDevice\b"
    r"|\bPTX was compiled with an unsupported toolchain\b"
    r"|\bunsupported display driver / cuda driver combination\b"
    r"|\bforward compatibility was attempted on non supported HW\b"
    r"|\bCUDA error: operation not supported\b|\bcudaErrorNotSupported\b"
    r"|\bhipErrorNoBinaryForGpu\b|\bUnable to find code object for all current devices\b"
    r"|\b(?:HIP|CUDA) error: invalid device function\b"
)
_INTERNAL_ASSERT = re.compile(r"\bINTERNAL ASSERT FAILED at\b")


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "too many resources requested",
            "cudaErrorLaunchOutOfResources",
            "invalid configuration argument",
            "cudaErrorInvalidConfiguration",
            "out of resource:",
            "no kernel image",
            "cudaErrorNoKernelImageForDevice",
            "driver version is insufficient",
            "cudaErrorInsufficientDriver",
            "invalid device ordinal",
            "cudaErrorInvalidDevice",
            "unsupported toolchain",
            "unsupported display driver",
            "forward compatibility was attempted",
            "operation not supported",
            "cudaErrorNotSupported",
            "hipErrorNoBinaryForGpu",
            "Unable to find code object",
            "invalid device function",
            "INTERNAL ASSERT FAILED",
        ),
    )

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        m = _TRITON_RESOURCES.search(body)
        if m:
            self.ctx.signal(
                line,
                body,
                "platform-limit",
                kernel_needs=float(m.group("need")),
                kernel_limit=float(m.group("limit")),
            )
        elif _LAUNCH_LIMIT.search(body):
            self.ctx.signal(line, body, "platform-limit")
        elif _NOT_RUNNABLE.search(body):
            self.ctx.signal(line, body, "device-error")
        elif _INTERNAL_ASSERT.search(body):
            self.ctx.signal(line, body, "internal-assert")
