"""ExLlamaV2 / ExLlamaV3 (and TabbyAPI over them): the cache allocation and the auto-split's refusal.

ExLlama sizes its cache from `max_seq_len` (default: the model config's context, 131072 for Llama 3.1) times
the batch size, not from the memory left, so an out-of-memory error raised while the cache's tensors are
created (a traceback frame in exllamav2/cache.py or exllamav3/cache/) means the context asks more than the
GPU holds: `max-model-len-exceeds-kv`, whose remedy is a smaller max_seq_len (or a quantized cache).
"Insufficient VRAM in split for model and cache" is the auto-split loader giving up (exllamav2 model.py,
exllamav3 model loader): an allocation failure with no sizes.
The dynamic generator refuses a job longer than its whole paged cache: "Job requires 33 pages (only 32
available) and cannot be enqueued. Total cache allocated is 32 * 256 = 8192 tokens" (exllamav2
generator/dynamic.py; "available" is every page the cache has): one request needs more KV than the pool
holds, `max-model-len-exceeds-kv` (TabbyAPI's cache_size below what one request takes, CFG's two sequences).
The model's forward checks the same against a static cache: "Total sequence length exceeds cache size in
model.forward" (exllamav2 model.py: the prompt plus what was generated outgrew the cache's max_seq_len).
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import ENGINE_OOM, Context, LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_CACHE_FRAME = re.compile(r'File "[^"]*exllamav[23]/cache\b')
_OOM = ("out of memory", "OutOfMemoryError")
_SPLIT = "Insufficient VRAM in split"
_EXCEEDS_CACHE = "sequence length exceeds cache size"
_JOB_PAGES = re.compile(r"\bJob requires (?P<need>\d+) pages \(only (?P<have>\d+) available\)")


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "exllamav2/cache",
            "exllamav3/cache",
            "Traceback",
            *_OOM,
            _SPLIT,
            "Job requires",
            _EXCEEDS_CACHE,
        )
    )

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.in_cache = False  # the traceback being read passed through the cache's allocation
        self.said = False

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        if "Traceback" in body:
            self.in_cache = False
        if ("exllamav2/cache" in body or "exllamav3/cache" in body) and _CACHE_FRAME.search(body):
            self.in_cache = True
        if self.in_cache and not self.said and any(w in body for w in _OOM):
            self.said = True
            self.ctx.signal(line, body, "max-model-len-exceeds-kv")
        if _SPLIT in body:
            self.ctx.oom(line, body, ENGINE_OOM)
        if _EXCEEDS_CACHE in body and not self.said:
            self.said = True
            self.ctx.signal(line, body, "max-model-len-exceeds-kv")
        job = _JOB_PAGES.search(body) if "Job requires" in body else None
        if job and not self.said:
            self.said = True
            need, have = int(job.group("need")), int(job.group("have"))
            self.ctx.signal(line, body, "max-model-len-exceeds-kv", pages_needed=need, pages_in_cache=have)
