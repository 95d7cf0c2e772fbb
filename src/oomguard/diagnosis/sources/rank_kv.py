"""KV capacity stated per rank in one line ("Rank 0: 2111 blocks", "rank 1 num_kvcache_blocks=63", "DP rank 3:
# GPU blocks: 4096"): each rank's own count, as the engines that size the KV pool per rank (data-parallel
engines, attention-DP ranks, nano-vllm's tensor-parallel ranks before they agreed on the minimum) report it,
and as reporters list them. A count tagged with its rank is what `dp-replica-kv-accounting` compares; a line
prefixed by the engine's own rank tag (`[rank1]:`, `DP0`) is read by the engine's reader already.
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import LineParser, Message, to_int
from oomguard.diagnosis.sources.triggers import Triggers

# "<rank N> ... <count> [KV cache] blocks" or "<rank N> ... <blocks name> [:=] <count>"; the rank and the
# count within one clause (no sentence in between).
_RANK = r"\b(?:(?P<dp>dp|data[- ]parallel)\s*)?rank\s*[#_]?\s*(?P<rank>\d{1,4})\b"
_COUNT_BLOCKS = re.compile(
    _RANK + r"[^.;\n]{0,40}?\b(?P<n>\d[\d,]*)\s+(?:kv[ -]?cache\s+|gpu\s+)?blocks\b", re.IGNORECASE
)
_BLOCKS_COUNT = re.compile(
    _RANK + r"[^.;\n]{0,60}?\b(?:num_gpu_blocks|num_kvcache_blocks|num_blocks|#\s*gpu blocks|gpu blocks)"
    r"\s*[:=]?\s*(?P<n>\d[\d,]*)\b",
    re.IGNORECASE,
)


class Parser(LineParser):
    TRIGGERS = Triggers(words=(), caseless=("rank",))

    def feed(self, line: Line, msg: Message) -> None:
        if msg.tag or "block" not in msg.body.lower():
            return  # the engine's own tagged line (its reader keeps the tag), or no block count
        m = _COUNT_BLOCKS.search(msg.body) or _BLOCKS_COUNT.search(msg.body)
        if not m:
            return
        blocks = to_int(m.group("n"))
        if blocks is None:
            return
        prefix = "DP" if m.group("dp") else "rank"
        tagged = Message(f"{prefix}{m.group('rank')}", msg.level, msg.body, msg.prefixed, msg.time)
        self.ctx.startup_number(line, tagged, "num_gpu_blocks", blocks)
