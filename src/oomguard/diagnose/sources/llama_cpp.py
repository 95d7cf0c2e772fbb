"""llama.cpp's own startup and failure lines, as llama-server, ik_llama.cpp and ollama's runner print them:
the step the failure came in (loading the model, creating the context, a vision encoder's warm-up, serving),
the context size, the KV buffer, and the function ggml's CUDA check names.

llama.cpp sizes its KV cache and compute buffers from the context (`-c` / `n_ctx`, times the parallel slots:
ollama's `num_ctx` x `OLLAMA_NUM_PARALLEL`), not from the memory left, so an allocation that fails while the
context is being created means the context asks more than the memory holds: the `max-model-len-exceeds-kv`
signal, whose remedy is a smaller context. One that fails while the model's tensors are allocated is the
weights (`load-model-failed`). Formats (llama.cpp src/llama-context.cpp, src/llama-kv-cache*.cpp,
ggml/src/ggml-backend.cpp, ggml/src/ggml-cuda/ggml-cuda.cu, tools/mtmd/clip.cpp, tools/server/server.cpp):
- "llm_load_tensors: ..." / "load_tensors: loading model tensors, ..." (weights)
- "llama_new_context_with_model: n_ctx = N" / "llama_context: n_ctx = N" / "llama_init_from_model: n_ctx"
- "llama_kv_cache_unified: CUDA0 KV buffer size = 51200.00 MiB" (also llama_kv_cache_init / llama_kv_cache)
- "llama_kv_cache_init: failed to allocate buffer for kv cache", "... llama_kv_cache_init() failed for ...",
  "failed to create context with model", "failed to allocate compute buffers", "ggml_gallocr_reserve_n...:
  failed to allocate CUDA0 buffer of size N", "... allocating X MiB on device N: cudaMalloc failed"
- "error loading model: unable to allocate backend buffer", "llama_model_load: error loading model"
- "warmup: warmup with image size = W x H" (the multimodal projector's warm-up)
- "main: server is listening on ...", "slot launch_slot_: ...", ollama's "llama runner started in"
- ggml's CUDA check: "CUDA error: out of memory" then "current device: N, in function F at PATH:LINE"
- ollama's planner: "memory layout cannot be allocated"
- ggml's Vulkan backend: "ggml_vulkan: Device memory allocation of size N failed." (the bytes it asked for)
"""

from __future__ import annotations

import enum
import re

from oomguard.diagnose.evidence import Frame, OomMessage
from oomguard.diagnose.scan import Line
from oomguard.diagnose.sources.base import Context, LineParser, Message, log_size
from oomguard.diagnose.sources.triggers import Triggers


class Step(enum.Enum):
    """The startup step llama.cpp had reached, as its own lines say."""

    NONE = "none"
    LOAD = "load"  # allocating and reading the model's tensors
    CONTEXT = "context"  # creating the context: KV cache and compute buffers, sized by n_ctx
    MM_WARMUP = "mm-warmup"  # the multimodal projector's warm-up on its largest image
    SERVING = "serving"


_N_CTX = re.compile(r"\bn_ctx\s*=\s*(?P<n>\d+)")
_KV_BUFFER = re.compile(r"\bKV buffer size\s*=\s*(?P<v>[\d.]+\s*[KMG]iB)")
_CUDA_ALLOC = re.compile(r"allocating (?P<v>[\d.]+\s*[KMG]iB) on device (?P<dev>\d+): \w*[Mm]alloc failed")
_BUFFER_OF_SIZE = re.compile(r"failed to allocate (?:(?P<dev>\w+) )?buffer of size (?P<v>\d+)")
_VULKAN_ALLOC = re.compile(r"Device memory allocation of size (?P<v>\d+) failed")
_IN_FUNCTION = re.compile(r"current device: \d+, in function (?P<func>\w+) at (?P<path>[^\s:]+):(?P<no>\d+)")

# Lines that say an allocation of llama.cpp failed (the step decides what it means).
_ALLOC_FAILED = (
    "cudaMalloc failed",
    "hipMalloc failed",
    "failed to allocate buffer",  # ggml_backend_cpu/metal: "failed to allocate buffer of size N"
    "buffer of size",  # ggml_gallocr_reserve_n, alloc_tensor_range: "failed to allocate CUDA0 buffer of size"
    "unable to allocate",
    "failed to allocate compute",
    "Device memory allocation of size",  # ggml_vulkan: "Device memory allocation of size N failed."
)
_LOAD_FAILED = ("error loading model", "failed to load model")
_CONTEXT_FAILED = (
    "failed to create context",
    "failed to initialize the context",
    "llama_kv_cache_init() failed",
)
# Once per start or per request, not per batch (a day's log holds millions of "update_slots" lines).
_SERVING = ("server is listening", "all slots are idle", "launch_slot_", "llama runner started in")


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "load_tensors:",
            *_LOAD_FAILED,
            "n_ctx",
            "KV buffer size",
            "llama_kv_cache",
            *_CONTEXT_FAILED,
            *_ALLOC_FAILED,
            "warmup with image size",
            *_SERVING,
            "current device:",
        ),
        caseless=("memory layout cannot be allocated",),
    )

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.step = Step.NONE
        self.n_ctx: int | None = None
        self.kv_bytes = 0
        self.said: set[str] = set()  # signals and milestones already emitted (once per document)

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        self._steps(line, body)
        if "KV buffer size" in body:
            m = _KV_BUFFER.search(body)
            if m and "failed" not in body:
                self.kv_bytes += log_size(m.group("v")) or 0
        if "current device:" in body:
            self._ggml_check(line, body)
        if "memory layout cannot be allocated" in body.lower():
            self.ctx.emit(OomMessage(where=self.ctx.where(line), text=self.ctx.clip(body), flavor="engine"))
        if "Device memory allocation of size" in body:
            m = _VULKAN_ALLOC.search(body)
            if m:
                self.ctx.emit(
                    OomMessage(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(body),
                        flavor="engine",
                        requested=int(m.group("v")),
                    )
                )
        if any(w in body for w in _LOAD_FAILED + _CONTEXT_FAILED) or (
            any(w in body for w in _ALLOC_FAILED) and ("fail" in body or "unable" in body)
        ):
            self._failure(line, body)

    def _steps(self, line: Line, body: str) -> None:
        """Follow the startup steps; the first line of each step is its milestone."""
        if "load_tensors:" in body and self.step is Step.NONE:
            self.step = Step.LOAD
            self._once(line, body, "milestone-weights-loading")
        if "n_ctx" in body or "llama_kv_cache" in body:
            m = _N_CTX.search(body)
            if m:
                self.n_ctx = int(m.group("n"))
            if m or "KV buffer size" in body:
                self.step = Step.CONTEXT
        if "warmup with image size" in body:
            self.step = Step.MM_WARMUP
            self._once(line, body, "milestone-mm-profile")
        if any(w in body for w in _SERVING):
            self.step = Step.SERVING
            self._once(line, body, "milestone-serving")

    def _failure(self, line: Line, body: str) -> None:
        """An allocation or load failure: what it means depends on the step it came in."""
        requested = None
        m = _CUDA_ALLOC.search(body) or _BUFFER_OF_SIZE.search(body) or _VULKAN_ALLOC.search(body)
        if m:
            requested = log_size(m.group("v"))
        if any(w in body for w in _LOAD_FAILED) or (
            self.step is Step.LOAD and not any(w in body for w in _CONTEXT_FAILED)
        ):
            self._once(line, body, "load-model-failed", requested_bytes=requested)
        elif any(w in body for w in _CONTEXT_FAILED) or "kv cache" in body or self.step is Step.CONTEXT:
            self._once(
                line,
                body,
                "max-model-len-exceeds-kv",
                max_model_len=self.n_ctx,  # the context is what llama.cpp sizes the KV cache by
                kv_needed_bytes=requested if "kv cache" in body or "llama_kv_cache" in body else None,
                kv_buffer_bytes=self.kv_bytes or None,  # KV buffers allocated before the failure
                requested_bytes=requested,
            )

    def _ggml_check(self, line: Line, body: str) -> None:
        """ggml's CUDA_CHECK names the function whose call failed: the engine's own stack frame."""
        m = _IN_FUNCTION.search(body)
        if not m:
            return
        after = line.following()
        self.ctx.emit(
            Frame(
                where=self.ctx.where(line),
                text=self.ctx.clip(body),
                path=m.group("path"),
                lineno=int(m.group("no")),
                function=m.group("func"),
                code=after[0].strip()[:200] if after else "",
            )
        )

    def _once(self, line: Line, body: str, name: str, **numbers: float | None) -> None:
        if name not in self.said:
            self.said.add(name)
            self.ctx.signal(line, body, name, **numbers)
