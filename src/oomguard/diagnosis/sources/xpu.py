"""Intel GPUs (PyTorch XPU, IPEX, ipex-llm): the per-allocation cap some of them enforce.

Without relaxed allocation limits, Intel's Level Zero runtime refuses any single device allocation above
4 GB whatever is free, and PyTorch XPU / IPEX says so before its usual figures: "RuntimeError: Current
platform can NOT allocate memory block with size larger than 4GB! Tried to allocate 6.10 GiB (GPU  0; 15.11
GiB total capacity; 4.84 GiB already allocated; 5.41 GiB reserved in total by PyTorch)". This reader gives
the cap with the request, the device's total and what PyTorch reserved (`platform-limit`), so that a request
the device had the memory for is not read as the device running out.
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import SIZE, LineParser, Message, log_size
from oomguard.diagnosis.sources.triggers import Triggers

_CAP = re.compile(r"can NOT allocate memory block with size larger than (?P<n>\d+)\s*GB", re.IGNORECASE)
# The figures after it, in PyTorch's older allocator format (IPEX pads the device number).
# (A pasted message may stop before the reserved figure: the request and the total still say whether the
# device could have held it.)
_FIGURES = re.compile(
    r"Tried to allocate (?P<req>" + SIZE + r") \(GPU\s+\d+; (?P<total>" + SIZE + r") total capacity;"
    r"(?:.*?(?P<reserved>" + SIZE + r") reserved in total)?"
)
# Intel's cap is 4 GB in the decimal-looking but binary sense of its runtime (4 x 2**30 bytes).
_GB = 1 << 30


class Parser(LineParser):
    TRIGGERS = Triggers(words=(), caseless=("allocate memory block with size larger than",))

    def feed(self, line: Line, msg: Message) -> None:
        m = _CAP.search(msg.body)
        if not m:
            return
        f = _FIGURES.search(msg.body)
        self.ctx.signal(
            line,
            msg.body,
            "platform-limit",
            limit_bytes=int(m.group("n")) * _GB,
            requested_bytes=log_size(f.group("req")) if f else None,
            total_bytes=log_size(f.group("total")) if f else None,
            reserved_bytes=log_size(f.group("reserved")) if f and f.group("reserved") else None,
        )
