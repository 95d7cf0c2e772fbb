"""llama.cpp and the servers built on it (Ollama, LM Studio, llama-cpp-python): the KV cache for the context
failing to allocate.

llama.cpp sizes its KV cache for the whole context (n_ctx x layers x KV heads) when the context is created,
so an allocation failing there is the context length not fitting, as vLLM's "max seq len is larger than the
KV cache" is. Read: "llama_kv_cache_init: failed to allocate buffer for kv cache", "llama_kv_cache_init()
failed", an allocation failing right after the "KV buffer size = N MiB" lines, Ollama's "failed to create
context with model" and "Memory layout cannot be allocated".
"""

from __future__ import annotations

from oomguard.diagnose.scan import Line
from oomguard.diagnose.sources.base import Context, LineParser, Message
from oomguard.diagnose.sources.triggers import Triggers

# The engine names the KV cache in the failure itself.
_KV_FAILED = ("failed to allocate buffer for kv cache", "llama_kv_cache_init() failed")
# The lines that size the KV cache, and the allocation failures that can follow them.
_KV_SIZED = ("KV buffer size", "KV self size", "kv_size =")
_ALLOC_FAILED = ("cudaMalloc failed", "failed to allocate", "out of memory")
# An allocation this many lines after the KV sizing lines is the KV cache's own.
KV_FOLLOW_LINES = 3
# Ollama's wrappers of a context that could not be created (KV cache and compute buffers).
_CONTEXT_FAILED = ("failed to create context with model", "Memory layout cannot be allocated")


class Parser(LineParser):
    TRIGGERS = Triggers(words=(*_KV_FAILED, *_KV_SIZED, *_ALLOC_FAILED, *_CONTEXT_FAILED))

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.kv_sized_at: int | None = None  # the line of the last KV sizing line
        self.said = False

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        if any(k in body for k in _KV_SIZED):
            self.kv_sized_at = line.no
            return
        if any(k in body for k in _KV_FAILED):
            self._kv_failed(line, body)
        elif (
            self.kv_sized_at is not None
            and 0 < line.no - self.kv_sized_at <= KV_FOLLOW_LINES
            and any(k in body for k in _ALLOC_FAILED)
        ):
            self._kv_failed(line, body)  # the allocation of the KV cache just sized
        elif any(k in body for k in _CONTEXT_FAILED):
            self.ctx.signal(line, body, "context-create-failed")

    def _kv_failed(self, line: Line, body: str) -> None:
        if not self.said:  # one failure, however many lines repeat it
            self.said = True
            self.ctx.signal(line, body, "kv-cache-alloc-failed")
