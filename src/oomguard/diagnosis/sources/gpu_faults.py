"""A kernel that read or wrote outside every allocation, as each platform reports it
(`illegal-memory-access`).

Not an allocation failure: the memory was there, a kernel's address was wrong. Among reports that look like
out-of-memory this is how an offset past 2^31 shows when no check caught it (the 32-bit product wrapped). The
same fault, in each platform's words:
- CUDA runtime and driver: "CUDA error: an illegal memory access was encountered" (cudaErrorIllegalAddress,
  CUDA_ERROR_ILLEGAL_ADDRESS), "misaligned address" (cudaErrorMisalignedAddress); cuda-gdb "CUDA Exception:
  Warp Illegal Address" / "Warp Out-of-range Address"; compute-sanitizer "Invalid __global__ read of size 4";
- the NVIDIA kernel driver: "NVRM: Xid (PCI:0000:01:00): 31, ... MMU Fault: ENGINE GRAPHICS ..." (Xid 31 is
  a GPU memory page fault);
- ROCm/HIP (ROCR runtime): "Memory access fault by GPU node-2 (Agent handle: 0x...) on address 0x...
  Reason: Page not present or supervisor privilege.", hipErrorIllegalAddress;
- Intel GPUs (i915/Xe kernel driver, as Level Zero programs print it): "Segmentation fault from GPU at
  0xff00000b65ba2000, ctx_id: 1 (CCS) type: 0 (NotPresent)".
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_FAULT = re.compile(
    r"\billegal memory access\b|\b(?:cuda|hip)ErrorIllegalAddress\b|\bCUDA_ERROR_ILLEGAL_ADDRESS\b"
    r"|\b(?:cudaErrorMisalignedAddress|CUDA_ERROR_MISALIGNED_ADDRESS)\b|\berror: misaligned address\b"
    r"|\bWarp (?:Illegal|Out-of-range|Misaligned) Address\b|\bInvalid __global__ (?:read|write) of size\b"
    r"|\bMemory access fault by GPU node-\d+|\bSegmentation fault from GPU at 0x[0-9a-f]+"
)
# NVIDIA's kernel driver: the Xid number; 31 is "GPU memory page fault" (NVIDIA's Xid catalog).
_XID = re.compile(r"\bNVRM: Xid \([^)]*\): (?P<xid>\d+)\b")
XID_PAGE_FAULT = 31


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "illegal memory access",
            "IllegalAddress",
            "ILLEGAL_ADDRESS",
            "MISALIGNED_ADDRESS",
            "MisalignedAddress",
            "misaligned address",
            "Warp Illegal Address",
            "Warp Out-of-range Address",
            "Warp Misaligned Address",
            "Invalid __global__",
            "Memory access fault by GPU",
            "Segmentation fault from GPU",
            "NVRM: Xid",
        ),
    )

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        xid = _XID.search(body)
        if _FAULT.search(body) or (xid and int(xid.group("xid")) == XID_PAGE_FAULT):
            self.ctx.signal(line, body, "illegal-memory-access")
