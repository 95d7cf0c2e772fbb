"""MLC-LLM's serve engine: the memory parts it sums before it sizes the KV cache, and its refusal when nothing
is left for the cache.

MLC-LLM (python/mlc_llm/serve/engine_base.py) estimates the KV capacity as the GPU's memory times its
utilization, less the weights (`params_bytes`), the compiled model's temporary buffer for one prefill chunk
(`temp_func_bytes`), the KV auxiliary and model workspaces and the logit processor's workspace. When that
leaves nothing it raises "Cannot estimate KV cache capacity. The model weight size {params_bytes} may be
larger than GPU memory size {gpu_size_bytes}" whatever the largest part is (the message blames the weights;
older releases printed the placeholders unformatted). The parts are printed one per line,
"temp_func_bytes: 21852323840". The largest part is what left no room: the weights (`load-model-failed`), the
prefill chunk's temporary buffer (`prefill-tokens-dont-fit`: a smaller prefill chunk), the logit processor's
workspace (`sampler-warmup-oom`); without the parts, the KV pool had nothing (`no-kv-cache-memory`).
"""

from __future__ import annotations

import re

from oomguard.diagnosis.evidence import Signal, Where, clip
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import Context, LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_REFUSAL = "Cannot estimate KV cache capacity"
_PART = re.compile(r"\b(?P<part>\w+_bytes)\s*[:=]\s*(?P<v>[\d.]+)")
# What each part's being the largest means, as the signal whose class it is.
_PART_SIGNAL = {
    "params_bytes": "load-model-failed",
    "temp_func_bytes": "prefill-tokens-dont-fit",
    "logit_processor_workspace_bytes": "sampler-warmup-oom",
}
_PARTS = (
    "params_bytes",
    "temp_func_bytes",
    "kv_aux_workspace_bytes",
    "model_workspace_bytes",
    "logit_processor_workspace_bytes",
)


class Parser(LineParser):
    TRIGGERS = Triggers(words=(_REFUSAL, *(f"{p}:" for p in _PARTS), *(f"{p} =" for p in _PARTS)))

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.parts: dict[str, float] = {}
        self.refused: tuple[Where, str] | None = None

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        if _REFUSAL in body and self.refused is None:
            self.refused = (self.ctx.where(line), body)
        for m in _PART.finditer(body):
            if m.group("part") in _PARTS:
                self.parts[m.group("part")] = float(m.group("v"))

    def finish(self) -> None:
        if self.refused is None:
            return
        where, body = self.refused
        name = "no-kv-cache-memory"
        if self.parts:
            largest = max(self.parts, key=lambda p: self.parts[p])
            name = _PART_SIGNAL.get(largest, name)
        numbers = tuple((p, v) for p, v in sorted(self.parts.items()))
        self.ctx.emit(Signal(where=where, text=clip(body), name=name, numbers=numbers))
