"""Text Generation Inference (and its forks, LoRAX): the launcher's steps and how its processes ended.

TGI starts a shard (downloads and loads the weights), waits for it to be ready, warms it up (a prefill of
`--max-batch-prefill-tokens` through the model: its profile run), sizes the KV blocks from what is left, and
serves through the router. Formats (text-generation-inference launcher/src/main.rs, router/src, server/):
- "Starting shard rank=0" / "Starting download process." (weights)
- "Waiting for shard to be ready... rank=0" (every few seconds while a shard loads its weights)
- "Shard ready in 12.3s rank=0" / "Shard 0 ready in ..." (the weights are in; warm-up next)
- "Warming up model" (router) / "Method Warmup encountered an error." (server)
- "KV-cache blocks: 52719, size: 1" (the pool sized from what the warm-up left), then "Cuda Graphs are enabled
  for sizes [1, 2, 4, 8, 16, 32]" (the decode graphs are captured next, inside the same warm-up), and "Decode
  cuda graph warmup failed" (a capture ran out of memory: TGI logs it and goes on without that graph;
  server/text_generation_server/models/flash_causal_lm.py)
- "Connected" (the router is serving) and request spans "batch{batch_size=1}:prefill" / ":decode"
- "Shard 0 failed to start" / "Error: ShardCannotStart": with an out-of-memory error before it and no shard
  ready, the weights did not load (`load-model-failed`).
- "... process was signaled to shutdown with signal 9" (SIGKILL: the OOM killer) and "... signal 7" (SIGBUS:
  a write past the end of /dev/shm, too small in a container without `--shm-size`).
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import Context, LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_SIGNALED = re.compile(r"process was signaled to shutdown with signal (?P<sig>\d+)")
_READY = re.compile(r"\bShard (?:\d+ )?ready in\b")
_WAITING = re.compile(r"(?i)\bwaiting for shard to be ready\b")
_FAILED_TO_START = ("failed to start", "ShardCannotStart")
_OOM = ("out of memory", "OutOfMemoryError")
_REQUEST_SPAN = re.compile(r"\bbatch\{batch_size=\d+\}:(?:prefill|decode)")
_KV_BLOCKS = re.compile(r"\bKV-cache blocks: \d+, size: \d+")
_GRAPHS = "Cuda Graphs are enabled for sizes"
_GRAPH_FAILED = "Decode cuda graph warmup failed"
SIGKILL, SIGBUS = 9, 7


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "Starting shard",
            "Starting download process",
            "aiting for shard to be ready",
            "ready in",
            "Warming up model",
            "Method Warmup",
            "KV-cache blocks:",
            _GRAPHS,
            _GRAPH_FAILED,
            "Connected",
            "batch{batch_size=",
            *_FAILED_TO_START,
            *_OOM,
            "signaled to shutdown",
        )
    )

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.oom_seen = False
        self.ready = False
        self.said: set[str] = set()

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        if any(w in body for w in _OOM):
            self.oom_seen = True
        if (
            "Starting shard" in body
            or "Starting download process" in body
            or ("aiting for shard" in body and _WAITING.search(body))
        ):
            self._once(line, body, "milestone-weights-loading")
        if "ready in" in body and _READY.search(body):
            self.ready = True
            self._once(line, body, "milestone-weights-loaded")
        if "Warming up model" in body or "Method Warmup" in body:
            self.ready = True
            self._once(line, body, "milestone-profile")
        if "KV-cache blocks:" in body and _KV_BLOCKS.search(body):
            self._once(line, body, "milestone-kv-sized")
        if _GRAPHS in body:
            self._once(line, body, "milestone-cudagraph-start")
        if _GRAPH_FAILED in body:
            self.ctx.signal(line, body, "cudagraph-capture-failed")
        if ("Connected" in body and "text_generation_router" in body) or (
            "batch{batch_size=" in body and _REQUEST_SPAN.search(body)
        ):
            self._once(line, body, "milestone-serving")
        if any(w in body for w in _FAILED_TO_START) and self.oom_seen and not self.ready:
            self._once(line, body, "load-model-failed")
        if "signaled to shutdown" in body:
            m = _SIGNALED.search(body)
            if m and int(m.group("sig")) == SIGKILL:
                self.ctx.signal(line, body, "host-killed")
            elif m and int(m.group("sig")) == SIGBUS:
                self.ctx.signal(line, body, "host-enomem")  # shared memory (/dev/shm) exhausted

    def _once(self, line: Line, body: str, name: str) -> None:
        if name not in self.said:
            self.said.add(name)
            self.ctx.signal(line, body, name)
