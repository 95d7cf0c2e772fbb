"""Tenstorrent's tt-metal bank allocator (TT-NN, tt-xla, tt-forge, vLLM's and tt-inference-server's TT
backends): what one bank had to hold, what it had free, and its largest free block.

A buffer is interleaved across the banks of DRAM or L1, each bank holding the same share, so the allocator
needs that share in one piece in every bank. Format (tt_metal/impl/allocator/bank_manager.cpp; older tt-metal
ends at "bank size is [only] {} B", without the statistics):
"Out of Memory: Not enough space to allocate 335544320 B DRAM buffer across 8 banks, where each bank needs to
store 41943040 B, but bank size is 4273390016 B (allocated: 4196976832 B, free: 76413184 B, largest free
block: 37030336 B)". Free at least the share with the largest block below it is a bank in pieces
(fragmentation); free below the share is a bank that is full.
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import AllocatorReport, Context, LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_BANK_OOM = re.compile(
    r"Not enough space to allocate (?P<size>\d+) B (?P<kind>\w+) buffer across (?P<banks>\d+) banks?, "
    r"where each bank needs to store (?P<per_bank>\d+) B, but bank size is (?:only )?(?P<bank>\d+) B"
    r"(?: \(allocated: (?P<allocated>\d+) B, free: (?P<free>\d+) B, "
    r"largest free block: (?P<largest>\d+) B\))?"
)


def _int(m: re.Match[str], name: str) -> int | None:
    value = m.group(name)
    return int(value) if value is not None else None


# vLLM's TT worker allocating the KV cache it sized from its settings (max_tokens_all_users), layer by layer,
# behind a progress bar (tt-metal models/tt_transformers, vLLM's TT model runner).
_KV_ALLOCATING = "Allocating TT kv caches"


class Parser(LineParser):
    TRIGGERS = Triggers(words=("Not enough space to allocate", _KV_ALLOCATING))

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.allocating = False

    def feed(self, line: Line, msg: Message) -> None:
        if _KV_ALLOCATING in msg.body and not self.allocating:
            self.allocating = True
            self.ctx.signal(line, msg.body, "milestone-kv-allocating")
        if "Not enough space to allocate" not in msg.body:
            return
        # The message wraps over lines in pasted logs: the statistics may be on the next one.
        text = (
            msg.body if "largest free block" in msg.body else msg.body + " " + " ".join(line.following()[:2])
        )
        m = _BANK_OOM.search(" ".join(text.split()))
        if not m:
            return
        report = AllocatorReport(
            "engine",
            requested=int(m.group("per_bank")),
            total=int(m.group("bank")),
            free=_int(m, "free"),
            allocated=_int(m, "allocated"),
            largest_free=_int(m, "largest"),
        )
        self.ctx.oom(line, msg.body, report, process_tag=msg.tag)
