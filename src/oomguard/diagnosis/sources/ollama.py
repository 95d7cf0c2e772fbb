"""ollama's memory estimate, logged before it starts a runner: what the model needs on the GPUs by part,
against what each GPU has free (`MemoryPlan`).

ollama sizes a model's placement itself before llama.cpp allocates anything (llm/memory.go EstimateGPULayers,
logged by MemoryEstimate.log; llm/server.go from 0.6): the KV cache for the whole context (num_ctx x the
parallel slots), the compute graph's reserve, and a multimodal projector's weights and its graph on the
largest image, which it places on the first GPU before any layer. One slog line, often wrapped when pasted:
  msg="offload to cuda" layers.requested=-1 layers.model=33 layers.offload=0 layers.split="" memory.available=
  "[4.6 GiB]" memory.required.full="35.3 GiB" memory.required.partial="0 B" memory.required.kv="31.2 GiB"
  memory.required.allocations="[0 B]" memory.weights.total="34.9 GiB" memory.graph.full="..." ...
  projector.weights="769.3 MiB" projector.graph="8.8 GiB"          (0.6+: msg=offload library=cuda ...)
The parts are keyed, so the lines of one estimate are read together, whatever wraps them; a key seen again
starts the next estimate.

ollama's own engine (0.11+) panics when an allocation of the layout it tried fails (ml/backend.go ErrNoMem):
"insufficient memory - required allocations: {InputWeights:411041792A CPU:{...} GPUs:[{DeviceID:{ID:GPU-...
Library:CUDA} Name:CUDA0 Weights:[199229440A 199229440A ...] Cache:[134217728A ...] Graph:4294967296F}]}",
each size followed by its status (U not tried, A allocated, F failed). It allocates the weights, then the KV
cache (sized by num_ctx x the parallel slots), then the worst-case compute graph, so the first part holding a
failed size is the one that did not fit: the weights (`load-model-failed`), the cache
(`max-model-len-exceeds-kv`) or the graph (`prefill-tokens-dont-fit`: the batch's activations).
"""

from __future__ import annotations

import re

from oomguard.diagnosis.evidence import MemoryPlan, Where
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import (
    ENGINE_OOM,
    AllocatorReport,
    Context,
    LineParser,
    Message,
    log_size,
    to_int,
)
from oomguard.diagnosis.sources.triggers import Triggers

_KEY = re.compile(
    r"(?<![\w.])(?P<k>layers\.(?:model|offload)|memory\.(?:available|required\.full|required\.kv|"
    r"weights\.total|graph\.full|graph\.partial)|projector\.(?:weights|graph))=(?P<v>\"[^\"]*\"|\S+)"
)
_SIZE = re.compile(r"[\d.]+\s*[KMGT]?i?B\b")
_NO_MEM = "insufficient memory - required allocations"
_PART = re.compile(r"\b(?P<part>Weights|Cache):\[(?P<sizes>[^\]]*)\]|\bGraph:(?P<graph>\d+[UAF])\b")
_FAILED_SIZE = re.compile(r"(?P<n>\d+)F\b")
# The part that failed, in the order ollama allocates them, and the signal that names it.
_PART_SIGNAL = (
    ("Weights", "load-model-failed", "requested_bytes"),
    ("Cache", "max-model-len-exceeds-kv", "kv_needed_bytes"),
    ("Graph", "prefill-tokens-dont-fit", "requested_bytes"),
)


class Parser(LineParser):
    TRIGGERS = Triggers(words=("layers.model=", "layers.offload=", "memory.", "projector.", _NO_MEM))

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.parts: dict[str, str] = {}
        self.where: Where | None = None
        self.text = ""

    def feed(self, line: Line, msg: Message) -> None:
        if _NO_MEM in msg.body:
            self._no_mem(line, msg.body)
            return
        for m in _KEY.finditer(msg.body):
            key = m.group("k")
            if key in self.parts:
                self._emit()  # the next estimate (another model, or the same one again)
            if self.where is None:
                self.where, self.text = self.ctx.where(line), msg.body
            self.parts[key] = m.group("v").strip('"')

    def finish(self) -> None:
        self._emit()

    def _no_mem(self, line: Line, body: str) -> None:
        """The runner's ErrNoMem: the first part (weights, cache, graph) with a failed allocation."""
        failed: dict[str, int] = {}
        for m in _PART.finditer(body):
            part = m.group("part") or "Graph"
            sizes = m.group("sizes") if m.group("part") else m.group("graph")
            bytes_failed = sum(int(f.group("n")) for f in _FAILED_SIZE.finditer(sizes))
            if bytes_failed:
                failed[part] = failed.get(part, 0) + bytes_failed
        for part, name, quantity in _PART_SIGNAL:
            if part in failed:
                self.ctx.oom(line, body, AllocatorReport("engine", requested=failed[part]))
                self.ctx.signal(line, body, name, **{quantity: failed[part]})
                return
        self.ctx.oom(line, body, ENGINE_OOM)

    def _emit(self) -> None:
        parts, where, text = self.parts, self.where, self.text
        self.parts, self.where, self.text = {}, None, ""
        if where is None or "memory.available" not in parts:
            return  # not ollama's estimate: nothing to weigh the parts against

        def size(key: str) -> int | None:
            return log_size(parts[key]) if key in parts else None

        graphs = [g for g in (size("memory.graph.full"), size("memory.graph.partial")) if g is not None]
        projector = [p for p in (size("projector.weights"), size("projector.graph")) if p is not None]
        available = tuple(
            v for v in (log_size(s) for s in _SIZE.findall(parts["memory.available"])) if v is not None
        )
        self.ctx.emit(
            MemoryPlan(
                where=where,
                text=self.ctx.clip(text),
                available=available,
                required=size("memory.required.full"),
                weights=size("memory.weights.total"),
                kv=size("memory.required.kv"),
                graph=max(graphs) if graphs else None,
                projector=sum(projector) if projector else None,
                layers=to_int(parts["layers.model"]) if "layers.model" in parts else None,
                offloaded=to_int(parts["layers.offload"]) if "layers.offload" in parts else None,
            )
        )
