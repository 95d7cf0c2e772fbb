"""TensorRT-LLM's own lines (C++ runtime, its Triton backend): the KV pool it sized, the check that the pool
holds one sequence, and the executor step a runtime failure came in.

Formats (TensorRT-LLM cpp/tensorrt_llm/batch_manager, tensorrtllm_backend):
- "[TensorRT-LLM][INFO] Using 693 tokens in paged KV cache."
- "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 0.10 GiB for max tokens in paged KV cache (2112)."
- "maxTokensInPagedKvCache must be large enough to process at least 1 sequence to completion (i.e. must
  be larger than beam_width * tokensPerBlock * maxBlocksPerSeq)": the pool is below one engine-max-length
  sequence, which is what `max-model-len-exceeds-kv` means (the engine's max input + output length is the max
  model len).
- "[TensorRT-LLM][ERROR] Encountered an error in forwardAsync function: ...": the failure came in a step of
  the running executor, not at startup.
And TensorRT's own allocator (engine build and execution-context creation, which TensorRT-LLM engines go
through): "Requested amount of GPU memory (3887181312 bytes) could not be allocated. There may not be enough
free memory for allocation to succeed." and "Error Code 2: OutOfMemory (Requested size was N bytes.)" / "(no
further information)".
The memory figures of "Memory usage when calculating max tokens in paged kv cache" and the CUDA runtime errors
are read by the allocator reader (traceback.py, allocator.py).
"""

from __future__ import annotations

import re

from oomguard.diagnose.evidence import OomMessage
from oomguard.diagnose.scan import Line
from oomguard.diagnose.sources.base import Context, LineParser, Message
from oomguard.diagnose.sources.triggers import Triggers

_USING_TOKENS = re.compile(r"Using (?P<n>\d+) tokens in paged KV cache")
_ALLOCATED = re.compile(r"Allocated (?P<v>[\d.]+ [KMG]iB) for max tokens in paged KV cache \((?P<n>\d+)\)")
_BELOW_ONE_SEQUENCE = "must be large enough to process at least 1 sequence"
_TRT_REQUESTED = re.compile(
    r"Requested amount of GPU memory \((?P<n>\d+) bytes\) could not be allocated|"
    r"Error Code 2: OutOfMemory \((?:Requested size was (?P<size>\d+) bytes)?"
)


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "tokens in paged KV cache",
            "for max tokens in paged KV cache",
            _BELOW_ONE_SEQUENCE,
            "error in forwardAsync",
            "Requested amount of GPU memory",
            "Error Code 2: OutOfMemory",
        )
    )

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.kv_tokens: int | None = None
        self.serving = False

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        if "tokens in paged KV cache" in body:
            m = _USING_TOKENS.search(body)
            if m:
                self.kv_tokens = int(m.group("n"))
                self.ctx.startup_number(line, msg, "kv_cache_tokens", self.kv_tokens)
        if "for max tokens in paged KV cache" in body:
            m = _ALLOCATED.search(body)
            if m:
                self.kv_tokens = int(m.group("n"))
                self.ctx.startup_number(line, msg, "kv_cache_tokens", self.kv_tokens)
        if _BELOW_ONE_SEQUENCE in body:
            self.ctx.signal(line, body, "max-model-len-exceeds-kv", kv_cache_tokens=self.kv_tokens)
        if "Requested amount of GPU memory" in body or "Error Code 2: OutOfMemory" in body:
            m = _TRT_REQUESTED.search(body)
            if m:
                size = m.group("n") or m.group("size")
                self.ctx.emit(
                    OomMessage(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(body),
                        flavor="engine",
                        requested=int(size) if size else None,
                    )
                )
        if "error in forwardAsync" in body and not self.serving:
            self.serving = True  # the executor's step loop: the server had been running requests
            self.ctx.signal(line, body, "milestone-serving")
