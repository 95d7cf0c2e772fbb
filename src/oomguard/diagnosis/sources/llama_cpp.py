"""llama.cpp's own startup and failure lines, as llama-server, ik_llama.cpp and ollama's runner print them:
the step the failure came in (loading the model, creating the context, a vision encoder's warm-up, serving),
the context size, the KV buffer, and the function ggml's CUDA check names.

llama.cpp sizes its KV cache and compute buffers from the context (`-c` / `n_ctx`, times the parallel slots:
ollama's `num_ctx` x `OLLAMA_NUM_PARALLEL`), not from the memory left, so an allocation that fails while the
context is being created means the context asks more than the memory holds: the `max-model-len-exceeds-kv`
signal, whose remedy is a smaller context. One that fails while the model's tensors are allocated is the
weights (`load-model-failed`). The compute buffer is the exception within the context step: ggml reserves it
for the worst-case micro-batch (`n_ubatch` tokens attending over the whole context, the "pp" graph), so when
that reservation is what fails, and it asks more than the KV buffers already placed on the device, it is the
activation peak (`prefill-tokens-dont-fit`: smaller `-ub` / flash attention), not the KV cache. At runtime, a
batch that finds no free KV cells is the pool running dry (`kv-pool-dry`).
Formats (llama.cpp src/llama-context.cpp, src/llama-kv-cache*.cpp, ggml/src/ggml-backend.cpp,
ggml/src/ggml-cuda/ggml-cuda.cu, tools/mtmd/clip.cpp, tools/server/server.cpp):
- "llm_load_tensors: ..." / "load_tensors: loading model tensors, ..." (weights)
- "llama_new_context_with_model: n_ctx = N" / "llama_context: n_ctx = N" / "llama_init_from_model: n_ctx"
- "llama_kv_cache_unified: CUDA0 KV buffer size = 51200.00 MiB" (also llama_kv_cache_init / llama_kv_cache)
- "llama_kv_cache_init: failed to allocate buffer for kv cache", "... llama_kv_cache_init() failed for ...",
  "failed to create context with model", "failed to allocate compute buffers" (also "compute pp buffers",
  "graph_reserve: failed to allocate compute buffers"), "ggml_gallocr_reserve_n...: failed to allocate CUDA0
  buffer of size N", "... allocating X MiB on device N: cudaMalloc failed"
- decode at runtime: "decode: failed to find a memory slot for batch of size N", "failed to find free space in
  the KV cache, retrying with smaller batch size", "failed to find KV cache slot for ubatch of size N";
  node-llama-cpp's "could not find a KV slot for the batch"; ollama's runner (llama/llama.go Decode) "failed
  to decode batch: could not find a kv cache slot"
- the logits output buffer: "llama_output_reserve: failed to allocate output buffer of size N MiB"
- ollama's runner dying while it loads: "llama runner exited, you may not have enough available memory to run
  this model" (ollama llm/server.go)
- "error loading model: unable to allocate backend buffer", "llama_model_load: error loading model"
- "warmup: warmup with image size = W x H" (the multimodal projector's warm-up)
- a request's image through the encoder (tools/mtmd/mtmd-helper.cpp, mtmd-cli.cpp; llava's clip.cpp before
  mtmd): "encoding image slice...", then "image slice encoded in N ms" or "failed to encode image slice";
  "decoding image batch i/n" ... "image decoded (batch i/n) in N ms"; "encode_image_with_clip: ..."
- "main: server is listening on ...", "slot launch_slot_: ...", ollama's "llama runner started in"
- ggml's CUDA check: "CUDA error: out of memory" then "current device: N, in function F at PATH:LINE"
- ollama's planner: "memory layout cannot be allocated" (0.11+ llm/server.go; "... with num_gpu = 999" when
  the user's num_gpu fixed how many layers go to the GPUs: those layers do not fit, `load-model-failed`)
- the server refusing a request longer than the context (tools/server/server.cpp, exceed_context_size_error):
  "request (9100 tokens) exceeds the available context size (8192 tokens), try increasing it" (older: "the
  request exceeds the available context size, try increasing it"): the KV cache llama.cpp allocated for
  n_ctx holds less than the request, `max-model-len-exceeds-kv`
- ggml's Vulkan backend: "ggml_vulkan: Device memory allocation of size N failed." (the bytes it asked for)
- ggml's SYCL backend (ggml/src/ggml-sycl/ggml-sycl.cpp, ggml_backend_sycl_buffer_type_alloc_buffer): "can't
  allocate 6442450944 Bytes of memory on device" (the bytes it asked for)
- the speculative draft's load after the target's context (tools/server/server.cpp): "srv load_model: loading
  draft model '...'", "creating MTP draft context against the target model", "failed to load draft model"; a
  failure from there on is the draft's (its weights, its KV cache and compute buffers), not the target's
- what each device had free before the model's first tensor: "llama_model_load_from_file_impl: using device
  CUDA0 (NVIDIA GeForce RTX 3090) - 23307 MiB free" (src/llama.cpp), and ollama's discovery at server start,
  before any model: msg="inference compute" ... name="NVIDIA GeForce RTX 3090" total="23.7 GiB"
  available="23.4 GiB" (ollama discover/types.go; 0.12+ writes description="..." and type=discrete|iGPU)
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass

from oomguard.diagnosis.evidence import DeviceNamed, Frame, Signal, StartupNumber, Where
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources import metal
from oomguard.diagnosis.sources.base import (
    ENGINE_OOM,
    AllocatorReport,
    Context,
    LineParser,
    Message,
    log_size,
)
from oomguard.diagnosis.sources.triggers import Triggers
from oomguard.errors import UnknownGpuError
from oomguard.hardware import find_gpu
from oomguard.units import MiB


class Step(enum.Enum):
    """The startup step llama.cpp had reached, as its own lines say."""

    NONE = "none"
    LOAD = "load"  # allocating and reading the model's tensors
    CONTEXT = "context"  # creating the context: KV cache and compute buffers, sized by n_ctx
    MM_WARMUP = "mm-warmup"  # the multimodal projector's warm-up on its largest image
    MM_ENCODE = "mm-encode"  # a request's image (or audio) through the vision encoder and projector
    SERVING = "serving"


_N_CTX = re.compile(r"\bn_ctx\s*=\s*(?P<n>\d+)")
_KV_BUFFER = re.compile(r"(?P<dev>[\w-]+) KV buffer size\s*=\s*(?P<v>[\d.]+\s*[KMG]iB)")
# KV buffers in host memory (no GPU offload of the cache): they take nothing from the device.
_HOST_BUFFERS = ("CPU", "_Host")
_CUDA_ALLOC = re.compile(r"allocating (?P<v>[\d.]+\s*[KMG]iB) on device (?P<dev>\d+): \w*[Mm]alloc failed")
_BUFFER_OF_SIZE = re.compile(r"failed to allocate (?:(?P<dev>\w+) )?buffer of size (?P<v>\d+)")
# The CPU backend's buffers are host RAM (the layers not offloaded to a GPU, or all of them):
# "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 42628415488",
# "ggml_aligned_malloc: insufficient memory (attempted to allocate 40652.88 MB)" (ggml/src/ggml-cpu, ggml.c).
_CPU_BUFFER_FAILED = re.compile(
    r"\bggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate\b|"
    r"\bggml_aligned_malloc: insufficient memory\b|\bfailed to allocate CPU buffer\b"
)
# ggml's reservation of the compute graph's buffer (llama-context.cpp graph_reserve / sched_reserve), and the
# graph allocator's own line (ggml-alloc.c ggml_gallocr_reserve_n, "_impl" in 2025+ builds): the graph
# allocator places only a graph's intermediate tensors, never weights or KV (those are allocated by
# ggml_backend_alloc_ctx_tensors), so its failure is the compute buffer even where no "compute buffers" line
# follows (ollama's own engine prints none).
_COMPUTE_FAILED = ("failed to allocate compute", "ggml_gallocr_reserve_n")
# ggml_aligned_malloc's own size (ggml/src/ggml.c): "insufficient memory (attempted to allocate 40652.88 MB)".
_ALIGNED_SIZE = re.compile(r"attempted to allocate (?P<v>[\d.]+ ?[KMG]i?B)")
_EXCEEDS_CONTEXT = "exceeds the available context size"
_EXCEEDS_CONTEXT_SIZES = re.compile(
    r"request \((?P<req>\d+) tokens\) exceeds the available context size \((?P<ctx>\d+) tokens\)"
)
_LAYOUT_NUM_GPU = re.compile(r"(?i)memory layout cannot be allocated with num_gpu = (?P<n>-?\d+)")
_SYCL_ALLOC = re.compile(r"can't allocate (?P<v>\d+) Bytes of memory on device")
_VULKAN_ALLOC = re.compile(r"Device memory allocation of size (?P<v>\d+) failed")
# (2026 builds add the PCI address: "using device CUDA0 (NVIDIA GeForce GTX 1080 Ti) (0000:03:00.0) - ...")
_USING_DEVICE = re.compile(
    r"using device (?P<dev>[\w-]+) \((?P<desc>[^)]*)\)(?: \([^)]*\))? - (?P<free>\d+) MiB free"
)
_OLLAMA_COMPUTE = re.compile(
    r'total="(?P<total>[\d.]+ ?[KMGT]?i?B)" available="(?P<avail>[\d.]+ ?[KMGT]?i?B)"'
)
_OLLAMA_NAME = re.compile(r'\b(?:description|name)="(?P<name>[^"]+)"')
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
    "Bytes of memory on device",  # ggml-sycl: "can't allocate N Bytes of memory on device"
)
_LOAD_FAILED = ("error loading model", "failed to load model")
# A load that failed for the model file or its architecture, not for memory (src/llama-model-loader.cpp,
# llama-model.cpp, llama-vocab.cpp, ggml/src/gguf.cpp): ollama then still says "you may not have enough
# available memory", a guess over a reason that names none (`misreported-oom`).
_NOT_MEMORY_LOAD = re.compile(
    r"\bunknown model architecture\b|\binvalid magic characters\b|\bwrong number of tensors\b"
    r"|\bhas wrong shape\b|\bunknown pre-tokenizer type\b|\bnot within the file bounds\b"
)
_NOT_MEMORY_WORDS = (
    "unknown model architecture",
    "invalid magic characters",
    "wrong number of tensors",
    "has wrong shape",
    "unknown pre-tokenizer type",
    "not within the file bounds",
)
_CONTEXT_FAILED = (
    "failed to create context",
    "failed to initialize the context",
    "llama_kv_cache_init() failed",
)
# A decode that finds no free cells in the KV cache (llama-context.cpp decode, the server's retry, old
# llama.cpp and its bindings).
_NO_KV_SLOT = (
    "failed to find a memory slot for batch",
    "failed to find free space in the KV cache",
    "failed to find KV cache slot",
    "find a KV slot for the batch",
    "could not find a kv cache slot",
)
# A request's image entering the encoder, and the encoder done with it.
_MM_ENCODE_START = ("encoding image", "decoding image batch", "encode_image_with_clip")
_MM_ENCODE_DONE = ("image slice encoded", "image decoded", "image embedding created")
_MM_ENCODE_FAILED = "failed to encode image"
# The server loading the speculative draft, after the target model and its context (server.cpp load_model).
_DRAFT_START = ("loading draft model", "draft context")
_DRAFT_FAILED = "failed to load draft model"
# ollama's runner exited before it was ready (it was loading the model).
_RUNNER_LOAD_EXIT = "you may not have enough available memory to run this model"
# llama_output_reserve (src/llama-context.cpp): the buffer the logits are returned in, n_vocab x the outputs
# of a batch x fp32 (plus the embeddings when asked): "failed to allocate output buffer of size 1187.50 MiB".
_OUTPUT_BUFFER = re.compile(r"failed to allocate output buffer of size (?P<v>[\d.]+ ?[KMG]iB)")
# Once per start or per request, not per batch (a day's log holds millions of "update_slots" lines).
_SERVING = ("server is listening", "all slots are idle", "launch_slot_", "llama runner started in")


@dataclass(frozen=True)
class _Failure:
    """A failed allocation (or any line a signal is emitted at): where, its text and what it asked for."""

    where: Where
    body: str
    requested: int | None
    device: str  # the ggml buffer type ("CUDA0", "ROCm0") when the line named it


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "load_tensors:",
            *_LOAD_FAILED,
            *_NOT_MEMORY_WORDS,
            "n_ctx",
            "KV buffer size",
            "llama_kv_cache",
            *_CONTEXT_FAILED,
            *_ALLOC_FAILED,
            "warmup with image size",
            "failed to allocate output buffer",
            *_SERVING,
            "current device:",
            *_DRAFT_START,
            _DRAFT_FAILED,
            *_MM_ENCODE_START,
            *_MM_ENCODE_DONE,
            _MM_ENCODE_FAILED,
            "MiB free",
            "inference compute",
            *_NO_KV_SLOT,
            _RUNNER_LOAD_EXIT,
            metal.IOGPU_OOM,
            "ggml_aligned_malloc",
            _EXCEEDS_CONTEXT,
        ),
        caseless=("memory layout cannot be allocated",),
    )

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.step = Step.NONE
        self.drafting = False  # the draft model is being loaded: what fails now is the draft's
        self.n_ctx: int | None = None
        self.kv_bytes = 0  # KV buffers placed on devices (not host memory) before the failure
        self.kv_by_device: dict[str, int] = {}
        self.said: set[str] = set()  # signals and milestones already emitted (once per document)
        # An allocation that failed while the context was created, held until the lines after it say which
        # buffer it was (the KV cache, or the compute buffer) or the text ends.
        self.pending: _Failure | None = None

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        self._steps(line, body)
        if "KV buffer size" in body:
            m = _KV_BUFFER.search(body)
            if m and "failed" not in body and not any(h in m.group("dev") for h in _HOST_BUFFERS):
                size = log_size(m.group("v")) or 0
                self.kv_bytes += size
                self.kv_by_device[m.group("dev")] = self.kv_by_device.get(m.group("dev"), 0) + size
        output = _OUTPUT_BUFFER.search(body)
        if output:
            self._once(line, body, "logits-buffer-failed", requested_bytes=log_size(output.group("v")))
        if any(w in body for w in _NO_KV_SLOT):
            self._once(line, body, "kv-pool-dry", n_ctx=self.n_ctx)
        if _NOT_MEMORY_LOAD.search(body):
            self._once(line, body, "misreported-oom")
            self.said.add("load-model-failed")  # the load failed for this reason: no weights-memory failure
        if _RUNNER_LOAD_EXIT in body and self.step in (Step.NONE, Step.LOAD):
            self._once(line, body, "load-model-failed")
        if "current device:" in body:
            self._ggml_check(line, body)
        if "MiB free" in body or "inference compute" in body:
            self._free_at_start(line, msg)
        if "memory layout cannot be allocated" in body.lower():
            self.ctx.oom(line, body, ENGINE_OOM)
            forced = _LAYOUT_NUM_GPU.search(body)
            if forced:
                self._once(line, body, "load-model-failed", gpu_layers_forced=int(forced.group("n")))
        if _EXCEEDS_CONTEXT in body:
            sizes = _EXCEEDS_CONTEXT_SIZES.search(body)
            self._once(
                line,
                body,
                "max-model-len-exceeds-kv",
                request_tokens=int(sizes.group("req")) if sizes else None,
                max_model_len=int(sizes.group("ctx")) if sizes else self.n_ctx,
            )
        if "Device memory allocation of size" in body or "Bytes of memory on device" in body:
            m = _VULKAN_ALLOC.search(body) or _SYCL_ALLOC.search(body)
            if m:
                self.ctx.oom(line, body, AllocatorReport("engine", requested=int(m.group("v"))))
        if (
            any(w in body for w in (*_LOAD_FAILED, *_CONTEXT_FAILED, _DRAFT_FAILED))
            or (
                any(w in body for w in _ALLOC_FAILED)
                and ("fail" in body or "unable" in body or "can't allocate" in body)
            )
            or ("ggml_aligned_malloc" in body and _CPU_BUFFER_FAILED.search(body))
        ):
            self._failure(line, body)
        elif metal.IOGPU_OOM in body and self.step is Step.CONTEXT and self.pending is None:
            # The Metal backend runs the warm-up decode right after creating the context and reports the
            # working set running out there, without a size: a failure of the context step.
            self.pending = self._failed_here(line, body, None, "")

    def _steps(self, line: Line, body: str) -> None:
        """Follow the startup steps; the first line of each step is its milestone."""
        if any(w in body for w in (*_DRAFT_START, _DRAFT_FAILED)) and self.step is not Step.SERVING:
            if not self.drafting:
                self.pending = None
            self.drafting = True
            self.step = Step.LOAD
            self._once(line, body, "milestone-drafter-loading")
        if "load_tensors:" in body and self.step is Step.NONE:
            self.step = Step.LOAD
            self._once(line, body, "milestone-weights-loading")
        if "n_ctx" in body or "llama_kv_cache" in body:
            m = _N_CTX.search(body)
            if m:
                self.n_ctx = int(m.group("n"))
            if m or "KV buffer size" in body:
                self.step = Step.CONTEXT
                if not self.drafting:
                    self._once(line, body, "milestone-kv-allocating", n_ctx=self.n_ctx, sized_by_context=1)
        if any(w in body for w in _MM_ENCODE_START) and self.step is not Step.MM_WARMUP:
            self.step = Step.MM_ENCODE
        elif any(w in body for w in _MM_ENCODE_DONE) and self.step is Step.MM_ENCODE:
            self.step = Step.SERVING
        if _MM_ENCODE_FAILED in body:
            self._encoder_failed(line, body)
        if "warmup with image size" in body:
            self.step = Step.MM_WARMUP
            self._once(line, body, "milestone-mm-profile")
        if any(w in body for w in _SERVING):
            self.step = Step.SERVING
            self._once(line, body, "milestone-serving")

    def _failure(self, line: Line, body: str) -> None:
        """An allocation or load failure: what it means depends on the step it came in and on the buffer."""
        requested, device = None, ""
        m = (
            _CUDA_ALLOC.search(body)
            or _BUFFER_OF_SIZE.search(body)
            or _VULKAN_ALLOC.search(body)
            or _ALIGNED_SIZE.search(body)
            or _SYCL_ALLOC.search(body)
        )
        if m:
            requested = log_size(m.group("v"))
            device = (m.groupdict().get("dev") or "") if m.re is _BUFFER_OF_SIZE else ""
        if self.step is Step.MM_ENCODE:
            self._encoder_failed(line, body)
            return
        if self.step in (Step.NONE, Step.LOAD) and not self.drafting and _CPU_BUFFER_FAILED.search(body):
            # loading the weights into a CPU buffer: the host's RAM refused them (the context step's CPU KV
            # buffer is the context's, read below)
            self._once(line, body, "host-enomem", requested_bytes=requested)
            return
        if "host-enomem" in self.said and any(w in body for w in _LOAD_FAILED):
            return  # "error loading model: unable to allocate backend buffer" after the CPU buffer failed
        if self.drafting:
            # The draft's weights, KV cache or compute buffer: the step (milestone-drafter-loading) names it.
            if "draft failure" not in self.said:
                self.said.add("draft failure")
                self.ctx.oom(line, body, AllocatorReport("engine", requested=requested))
            return
        if any(w in body for w in _COMPUTE_FAILED):
            if self.pending is None:
                self.pending = self._failed_here(line, body, requested, device)
            elif device and not self.pending.device:
                self.pending = dataclasses.replace(self.pending, device=device)
            self._compute_failed(line, body)
            return
        if self.said & {"max-model-len-exceeds-kv", "prefill-tokens-dont-fit"}:
            return  # the server's "failed to load model" after the context failed: the same failure
        kv_words = "kv cache" in body or "llama_kv_cache" in body
        if any(w in body for w in _LOAD_FAILED) or (
            self.step is Step.LOAD and not any(w in body for w in _CONTEXT_FAILED)
        ):
            self._once(line, body, "load-model-failed", requested_bytes=requested)
        elif any(w in body for w in _CONTEXT_FAILED) or kv_words:
            pending, self.pending = self.pending, None
            here = pending is None
            failure = pending or self._failed_here(line, body, requested, device)
            self._context(failure, kv_needed=requested if kv_words and here else None)
        elif self.pending is None and self.step in (Step.NONE, Step.CONTEXT):
            # A bare allocation: the next lines say which buffer (ggml names the compute buffer after it).
            self.pending = self._failed_here(line, body, requested, device)
        elif self.pending is not None and device and not self.pending.device:
            # ggml's allocator repeating the failure with the buffer type's name ("CUDA0", "ROCm0").
            self.pending = dataclasses.replace(self.pending, device=device)

    def _failed_here(self, line: Line, body: str, requested: int | None, device: str) -> _Failure:
        return _Failure(self.ctx.where(line), body, requested, device)

    def _compute_failed(self, line: Line, body: str) -> None:
        """The compute buffer could not be reserved: the worst-case micro-batch's activations, unless the KV
        buffers already on that device are larger than what it asked (then the context is what filled it)."""
        if self.step not in (Step.NONE, Step.CONTEXT):
            return  # the projector's warm-up or a request: read by the step, not as the context's reservation
        failure = self.pending or self._failed_here(line, body, None, "")
        self.pending = None
        kv = self.kv_by_device.get(failure.device, 0) if failure.device else self.kv_bytes
        if failure.requested is not None and kv > failure.requested:
            self._context(failure, kv_needed=None)
            return
        if "max-model-len-exceeds-kv" not in self.said:
            self._once_at(
                failure,
                "prefill-tokens-dont-fit",
                requested_bytes=failure.requested,
                kv_buffer_bytes=kv or None,
                max_model_len=self.n_ctx,
            )

    def _context(self, failure: _Failure, kv_needed: int | None) -> None:
        self._once_at(
            failure,
            "max-model-len-exceeds-kv",
            max_model_len=self.n_ctx,  # the context is what llama.cpp sizes the KV cache by
            kv_needed_bytes=kv_needed,
            kv_buffer_bytes=self.kv_bytes or None,  # KV buffers allocated before the failure
            requested_bytes=failure.requested,
        )

    def finish(self) -> None:
        """An allocation that failed while the context was created, with no line after it naming the buffer:
        the KV cache and the compute buffer are both sized by the context."""
        if self.pending is not None and self.step is Step.CONTEXT and not self.drafting:
            self._context(self.pending, kv_needed=None)
        self.pending = None

    def _free_at_start(self, line: Line, msg: Message) -> None:
        """What a device had free before this engine placed anything on it (the device is named, so the
        total comes from the catalog for llama.cpp's line; ollama's line carries it). Host "devices" (ollama's
        library=cpu) and integrated GPUs, whose memory is the host's, say nothing of another tenant."""
        body = msg.body
        m = _USING_DEVICE.search(body)
        if m:
            self._device_free(line, msg, m.group("dev"), int(m.group("free")) * MiB, None, m.group("desc"))
            return
        o = _OLLAMA_COMPUTE.search(body) if "inference compute" in body else None
        if o is None or "library=cpu" in body or "type=iGPU" in body:
            return
        name = _OLLAMA_NAME.search(body)
        self._device_free(
            line,
            msg,
            "",
            log_size(o.group("avail")),
            log_size(o.group("total")),
            name.group("name") if name else "",
        )

    def _device_free(
        self, line: Line, msg: Message, dev: str, free: int | None, total: int | None, name: str
    ) -> None:
        gpu = None
        try:
            gpu = find_gpu(name) if name else None
        except UnknownGpuError:
            pass
        if gpu is not None and gpu.unified_memory:
            return
        if free is None:
            return
        tag = " ".join(x for x in (msg.tag, dev) if x)
        for quantity, value in (("free_at_start_bytes", free), ("gpu_total_bytes", total)):
            if value is not None:
                self.ctx.emit(
                    StartupNumber(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(msg.body),
                        quantity=quantity,
                        value=value,
                        process_tag=tag,
                    )
                )
        if total is None and gpu is not None:
            self.ctx.emit(
                DeviceNamed(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(msg.body),
                    name=name,
                    part=gpu.name,
                    total=gpu.total_bytes,
                    count=None,
                )
            )

    def _encoder_failed(self, line: Line, body: str) -> None:
        """A failure while a request's image was in the encoder: the encoder's step (once)."""
        self._once(line, body, "encoder-step-failed")

    def _ggml_check(self, line: Line, body: str) -> None:
        """ggml's CUDA_CHECK names the function whose call failed: the engine's own stack frame."""
        m = _IN_FUNCTION.search(body)
        if not m:
            return
        if self.step is Step.MM_ENCODE:
            self._encoder_failed(line, body)
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
        self._once_at(_Failure(self.ctx.where(line), body, None, ""), name, **numbers)

    def _once_at(self, at: _Failure, name: str, **numbers: float | None) -> None:
        if name not in self.said:
            self.said.add(name)
            nums = tuple((k, float(v)) for k, v in numbers.items() if v is not None)
            self.ctx.emit(Signal(where=at.where, text=self.ctx.clip(at.body), name=name, numbers=nums))
