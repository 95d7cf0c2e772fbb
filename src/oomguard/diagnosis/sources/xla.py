"""XLA's allocator on TPUs (vLLM's TPU backends, tpu-inference, sglang-jax, JAX): what it asked for and what
was free, and the compiler running out of a core's scratch memory (not the device's HBM).

Formats (XLA's PJRT TPU client, as torch_xla and JAX raise them; sizes in XLA's short binary units: "896.00M",
"1.2G", "0B"):
- "RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 896.00M. That was not possible.
  There are 295.08M free.; (0x0x0_HBM0)"
- "RESOURCE_EXHAUSTED: Error loading program: Attempting to reserve 12.34G at the bottom of memory. That was
  not possible. There are 10.20G free, 0B reserved, and 10.20G reservable."
- newer TPU runtimes add the largest piece: "... There are 3.97G free. The largest contiguous region of free
  memory is 1.10G due to fragmentation."
- "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.20G."
- "XLA:TPU compile permanent error. Ran out of memory in memory space smem. Used 1.00M of 1.00M smem." (also
  vmem): a kernel's parameters or temporaries overflow the core's small scalar/vector memory while it is
  compiled; no HBM is missing, so it is a limit of the platform (`platform-limit`), not an allocation failure.
- "XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 20.44G of 15.75G hbm. Exceeded
  hbm capacity by 4.70G.": the same words for the device's HBM itself: the program's buffers (weights, KV,
  temporaries) need more than the chip has: an out-of-memory on a device of that capacity.
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import AllocatorReport, LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_SIZE = r"(?P<{}>[\d.]+)(?P<{}_unit>[KMGTP]?)B?"
_ALLOCATE = re.compile(
    r"Attempting to (?:allocate|reserve) "
    + _SIZE.format("req", "req")
    + r"\b.{0,60}?That was not possible\. There are "
    + _SIZE.format("free", "free")
    + r" free"
)
_LARGEST = re.compile(r"largest contiguous region of free memory is " + _SIZE.format("big", "big"))
_TRYING = re.compile(r"Out of memory while trying to allocate " + _SIZE.format("req", "req"))
_SCRATCH = re.compile(r"Ran out of memory in memory space (?P<space>\w+)")
# The memory space that is the device's own memory, not a core's scratch.
DEVICE_SPACE = "hbm"
_USED_OF = re.compile(
    r"Used " + _SIZE.format("used", "used") + r" of " + _SIZE.format("cap", "cap") + r" hbm"
)
# XLA prints sizes with binary prefixes (tsl::strings::HumanReadableNumBytes).
_UNIT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def _bytes(m: re.Match[str], name: str) -> int:
    return round(float(m.group(name)) * _UNIT[m.group(f"{name}_unit")])


class Parser(LineParser):
    TRIGGERS = Triggers(words=("RESOURCE_EXHAUSTED", "Ran out of memory in memory space"))

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        scratch = _SCRATCH.search(body)
        if scratch and scratch.group("space").lower() == DEVICE_SPACE:
            # (What the program needed in all is no one allocation: only the capacity is kept.)
            used = _USED_OF.search(body)
            report = AllocatorReport("engine", total=_bytes(used, "cap") if used else None)
            self.ctx.oom(line, body, report, process_tag=msg.tag)
            return
        if scratch:
            self.ctx.signal(line, body, "platform-limit")
            return
        if "RESOURCE_EXHAUSTED" not in body:
            return
        if "Attempting to" in body and "not possible" not in body:
            # a pasted message wrapped before "That was not possible. There are ... free."
            body = " ".join([body, *(nxt.strip() for nxt in line.following()[:2])])
        m = _ALLOCATE.search(body)
        largest: int | None = None
        if m:
            requested, free = _bytes(m, "req"), _bytes(m, "free")
            big = _LARGEST.search(body)
            largest = _bytes(big, "big") if big else None
        else:
            m = _TRYING.search(body)
            if not m:
                return
            requested, free = _bytes(m, "req"), None
        self.ctx.oom(
            line,
            body,
            AllocatorReport("engine", requested=requested, free=free, largest_free=largest),
            process_tag=msg.tag,
        )
