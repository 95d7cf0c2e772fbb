"""A KV offload connector's own pool with no room (`offload-pool-full`).

LMCache keeps offloaded KV in its own buffers, sized by its configuration (the local CPU backend's
max_local_cpu_size, the NIXL transfer buffer's nixl_buffer_size), not by the GPU's or the host's free memory.
When that pool is full its allocator says so in its own words (lmcache/v1/memory_management.py, the NIXL
connector), and the engine's GPU never ran out:
- "LMCache DEBUG: Failed to allocate memory for tensor(torch.Size([2, 24, 256, 128]), torch.bfloat16)
  because no memory is available (memory_management.py:672:lmcache.v1.memory_management)"
- "... because no free blocks is available", "Failed to allocate memory block of size N because no memory is
  available"
- "LMCache WARNING: Failed to allocate memory object, retrying... (nixl_connector_v3.py:567:...)"
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_LMCACHE = re.compile(r"\bLMCache\b|\blmcache\.", re.IGNORECASE)
_POOL_FULL = re.compile(r"\bFailed to allocate memory (?:for tensor|block of size|object)\b")


class Parser(LineParser):
    TRIGGERS = Triggers(words=("Failed to allocate memory",))

    def feed(self, line: Line, msg: Message) -> None:
        text = line.text
        if _POOL_FULL.search(text) and _LMCACHE.search(text):
            self.ctx.signal(line, msg.body, "offload-pool-full")
