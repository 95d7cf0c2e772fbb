"""Typed facts read from the evidence, each with the `source:line` it came from, and the bounded store.

Facts are small frozen dataclasses, one per thing a parser can see. The store keeps the first and the last
few of each kind (a 1 GB log has a million stats lines; the diagnosis needs the ones near the crash and the
trend), so memory does not grow with the input.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar

from oomguard.diagnosis.engine_marks import Engine

# How many facts of one kind are kept from the start and from the end of the evidence.
KEEP_FIRST = 64
KEEP_LAST = 256
# A fact's text is kept for display only; nobody needs a 10 MB line back.
MAX_FACT_TEXT = 400


@dataclass(frozen=True, order=True)
class Where:
    """Where a fact was read: a document name (path, `archive.tgz!member`, `<stdin>`) and a 1-based line."""

    source: str
    line: int
    time: float | None = field(default=None, compare=False)  # the line's timestamp (seconds into the year)

    def __str__(self) -> str:
        return f"{self.source}:{self.line}"


def clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_FACT_TEXT else text[: MAX_FACT_TEXT - 3] + "..."


@dataclass(frozen=True, kw_only=True)
class Fact:
    where: Where
    text: str


@dataclass(frozen=True, kw_only=True)
class OomMessage(Fact):
    """An allocator out-of-memory report: PyTorch's, the expandable-segments mapper's, ROCm's HSA, XPU's.

    PyTorch: "Tried to allocate X. GPU N has a total capacity of T of which F is free. [Process P has U memory
    in use.]* [Including non-PyTorch memory, this process has U memory in use.] Of the allocated memory A is
    allocated by PyTorch, [with P allocated in private pools (e.g., CUDA Graphs),] and R is reserved by
    PyTorch but unallocated."
    """

    flavor: str  # 'torch' | 'torch-old' | 'expandable-segments' | 'hsa' | 'cuda-runtime' | 'xpu' | 'engine'
    requested: int | None = None
    device: int | None = None
    total: int | None = None
    free: int | None = None
    this_process: int | None = None  # "this process has U memory in use"
    processes: tuple[tuple[int, int], ...] = ()  # ("Process P has U memory in use") as (pid, bytes)
    allocated: int | None = None
    private_pools: int | None = None
    reserved_unallocated: int | None = None
    # The largest contiguous free block, where the allocator prints one (Tenstorrent's bank allocator).
    largest_free: int | None = None
    process_tag: str = ""  # "(Worker_TP1_EP1 pid=..)" etc. when the line carried one


@dataclass(frozen=True, kw_only=True)
class Frame(Fact):
    """One `File "...", line N, in func` of a Python traceback, with the code line under it when present."""

    path: str
    lineno: int
    function: str
    code: str = ""


@dataclass(frozen=True, kw_only=True)
class Signal(Fact):
    """A recognised error or event that names a mechanism, with the numbers its text carries.

    `name` is one of the SIGNALS below; `numbers` are named values in plain units (bytes, tokens, fractions).
    """

    name: str
    numbers: tuple[tuple[str, float], ...] = ()

    def number(self, key: str) -> float | None:
        for k, v in self.numbers:
            if k == key:
                return v
        return None


# The closed set of signal names parsers may emit (rules key on these, never on raw wording).
SIGNALS = frozenset(
    {
        # vLLM startup
        "free-memory-below-utilization",  # request_memory: free < gmu x total at start
        "no-kv-cache-memory",  # "No available memory for the cache blocks"
        "negative-kv-memory",  # "Available KV cache memory: -2.69 GiB"
        # a hybrid model's recurrent-state pool has fewer blocks than max_num_seqs (one per sequence)
        "state-blocks-below-max-seqs",
        "max-model-len-exceeds-kv",  # "max seq len ... larger than ..." (both texts)
        "cannot-auto-fit",  # --max-model-len auto found nothing
        "load-model-failed",  # "Failed to load model - not enough GPU memory"
        "sampler-warmup-oom",  # "CUDA out of memory occurred when warming up sampler"
        "pooler-warmup-oom",
        "profiling-memory-released",  # "Error in memory profiling ... other processes ... release"
        "cudagraph-estimate-hint",  # OOM text suggesting VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
        "engine-dead",
        "engine-init-failed",  # "Engine core initialization failed" / "EngineCore failed to start"
        "kv-preempted",
        # the KV pool had no room for a running request (swap space, SGLang/kvcached allocators); V0:
        # "Sequence group ... is preempted by PreemptionMode... not enough KV cache"
        "kv-pool-dry",
        # kernels / indexing
        "int32-index-math",  # canUse32BitIndexMath, INT32_MAX, 32-bit offsets
        "int64-widening",  # a quoted diff whose added line widens an index or offset to 64 bits
        "illegal-memory-access",
        "hsa-out-of-resources",
        # EP / communication
        "deepep-error",
        "nvshmem-alloc",
        "nccl-error",
        # the device or its software cannot run the work (no kernel image for the GPU, a driver too old, a
        # device index the process cannot see): an error that is not a lack of memory
        "device-error",
        # PyTorch's own invariant check failed (TORCH_INTERNAL_ASSERT: "... INTERNAL ASSERT FAILED at
        # FILE:LINE, please report a bug to PyTorch"): a bug in the framework, not a lack of memory
        "internal-assert",
        # a wrapper guessed memory ("this might be due to insufficient GPU memory") over an exception no
        # allocation raises (KeyError, TypeError, ImportError), with no out-of-memory text anywhere; or a
        # model load that failed for its file or architecture (llama.cpp), whatever ollama then guesses
        "misreported-oom",
        # a KV offload connector's own pool (LMCache's CPU or NIXL buffer, sized by its configuration) had no
        # room: not the GPU's memory, not the host's
        "offload-pool-full",
        # SGLang
        "sglang-negative-token-budget",  # "profiled value -N" / negative max_total_num_tokens
        "sglang-not-enough-memory",  # "Not enough memory. Please try to increase --mem-fraction-static."
        "sglang-unbalanced-memory",  # "The memory capacity is unbalanced"
        "engine-leak-check",  # the engine's own check found KV slots never returned (SGLang check_memory)
        "sglang-cudagraph-failed",  # "Capture cuda graph failed: ..." (its own message, with the OOM inside)
        "cudagraph-capture-failed",  # TGI: "Decode cuda graph warmup failed" (it caught a capture's OOM)
        "sglang-retract",  # KV pool full, requests retracted
        "sglang-kv-alloc-failed",  # "Prefill/Decode out of memory. Try to lower your batch size."
        # host
        "host-killed",  # a bare "Killed" line from the shell / kernel SIGKILL
        "exit-137",
        "oom-killed",  # Kubernetes OOMKilled
        "kernel-oom-kill",  # dmesg "Out of memory: Killed process" / "oom-kill:"
        "host-enomem",  # mmap/malloc ENOMEM, std::bad_alloc, MemoryError
        "unified-memory-exhausted",  # NVRM NV_ERR_NO_MEMORY on UMA parts
        "cgroup-oom-kill",  # memory.events oom_kill > 0 (also as Slurm's cgroup plugin reports it)
        "oomd-kill",  # a userspace OOM killer (systemd-oomd) killed the cgroup under memory pressure
        "cgroup-at-limit",  # memory.current within a few % of memory.max
        "host-memory-low",  # free -m: available tiny
        # vLLM V0 warns its pinned CPU swap space takes over 40% of the host's memory (not a failure itself)
        "swap-space-large",
        # pinning host memory failed and the engine fell back to pageable memory (ggml: "failed to allocate
        # 512.00 MB of pinned memory"): host RAM or the platform's page-locked limit, a warning only
        "pinned-alloc-failed",
        # the engine runs on vLLM's CPU backend: its weights and KV cache are host RAM
        "cpu-platform",
        "ray-memory-kill",  # Ray's memory monitor killed the worker (ray.exceptions.OutOfMemoryError)
        # a Ray actor's worker process died (SIGKILL by the OOM killer is Ray's first guess)
        "ray-actor-died",
        "sleep-residual",  # vLLM sleep mode: memory still in use after falling asleep (residual_bytes)
        "trt-runtime-buffers",  # TensorRT-LLM: RuntimeBuffers::reshape on the failing stack
        "sleep-mode-oom",  # an OOM raised by vLLM's sleep-mode allocator (cumem_allocator.cpp)
        # other engines
        # the engine's reservation for its largest prefill batch failed: TGI's warm-up ("Not enough memory to
        # handle N prefill tokens"), llama.cpp's compute buffer for the worst-case micro-batch
        "prefill-tokens-dont-fit",
        # a limit of the platform other than free device memory refused it: a per-allocation cap (Intel XPU's
        # 4 GB, limit_bytes; Vulkan's, Level Zero's, WebGPU's, per_allocation=1), a count of live buffers
        # (Metal's resource limit), a core's scratch memory at compile time (XLA's SMEM/VMEM)
        "platform-limit",
        # an engine's fixed workspace (FlashInfer's AlignedAllocator over the workspace buffer the engine
        # allocated once, at its configured size) could not hold a kernel's temporary buffer: the workspace's
        # size refused it, not the device's free memory
        "workspace-too-small",
        # the engine's buffer for the logits it returns failed to allocate (llama.cpp's output buffer:
        # n_vocab x outputs x fp32, "llama_output_reserve: failed to allocate output buffer of size N MiB")
        "logits-buffer-failed",
        # a request asks for the logprobs of its prompt tokens (a vocabulary row per prompt token)
        "prompt-logprobs-requested",
        # the engine failed while a request's image (or audio) was in its encoder (llama.cpp's mtmd: "encoding
        # image slice..." with no "image slice encoded" after it)
        "encoder-step-failed",
        # a LoRA adapter cache (TensorRT-LLM's PEFT cache) cannot hold the adapters a request needs
        "lora-cache-full",
        # any exception line (a failure with nothing else recognised still gets an answer)
        "exception",
        # milestones (phase markers)
        "milestone-weights-loading",
        "milestone-drafter-loading",  # vLLM: "Loading drafter model..." (the speculative draft's weights)
        "milestone-weights-loaded",
        "milestone-profile",
        # the engine began allocating a KV cache it sized from its settings, not from the memory left
        # (llama.cpp's context for n_ctx tokens, Tenstorrent's per-layer caches)
        "milestone-kv-allocating",
        "milestone-kv-sized",
        "milestone-cudagraph-start",
        "milestone-cudagraph-done",
        "milestone-serving",
        "milestone-mm-profile",
        # prose (narrative text around the logs: issue bodies, notes)
        "prose-leak",
        "prose-growth",
        "prose-measured-growth",  # a growth word with a memory quantity and the span it grew over
        "prose-not-freed",  # memory not given back (after a delete, a shutdown, a request)
        "prose-fragmentation",
        "prose-host-memory",
        "prose-killed",  # the reporter says the process was killed (no exception of its own)
        "prose-activation",
        "prose-weights",  # the weights do not fit, or are held twice while loading or refitting
        "prose-spec-decode",
        "prose-lora",
        "prose-ep-buffer",
        "prose-dp-blocks-differ",
        "prose-cudagraph",
        "prose-library-regression",
        "prose-logprobs",
        "prose-kv-full",
        "prose-context-kv",  # a context length said with the KV memory it needs, or with the OOM it causes
        "prose-other-process",
        "prose-not-cudagraph",
        "prose-multimodal",
        "prose-int32",
        "prose-kernel-fault",  # an illegal memory access / out-of-bounds read / GPU page fault, in words
        "prose-launch-limit",  # a kernel grid past the device's 65,535 limit, in words
        "prose-dp-attention",
        "prose-oom",  # the reporter says it ran out of memory (no mechanism named)
        "failure-words",  # nothing recognised, but a line names a failure (out_of_memory=1 when it says OOM)
    }
)


# The signals of the host/container killing the process or refusing it memory (not the GPU).
HOST_SIGNALS = frozenset(
    {
        "host-killed",
        "exit-137",
        "oom-killed",
        "kernel-oom-kill",
        "host-enomem",
        "unified-memory-exhausted",
        "cgroup-oom-kill",
        "oomd-kill",
        "ray-memory-kill",
    }
)


@dataclass(frozen=True, kw_only=True)
class StartupNumber(Fact):
    """A number vLLM/SGLang logged while sizing memory at startup (plain units: bytes, blocks, tokens, x)."""

    quantity: str  # see STARTUP_QUANTITIES
    value: float
    process_tag: str = ""


STARTUP_QUANTITIES = frozenset(
    {
        "weights_bytes",
        "kv_available_bytes",
        "activation_bytes",
        "non_torch_bytes",
        # the device's used memory less the process's PyTorch allocations (vLLM 0.6.2-0.6.3's
        # non_torch_memory: every other process's memory is in it)
        "device_outside_torch_bytes",
        "cuda_graph_estimate_bytes",
        "cuda_graph_actual_bytes",
        "gpu_total_bytes",
        "gpu_memory_utilization",
        "budget_bytes",
        "num_gpu_blocks",
        "kv_cache_tokens",
        "max_concurrency",
        "concurrency_tokens",
        "free_at_start_bytes",
        "estimated_max_model_len",
        "kv_needed_bytes",
        "sglang_avail_after_load_bytes",
        "sglang_weights_bytes",
        "sglang_max_total_tokens",
    }
)


@dataclass(frozen=True, kw_only=True)
class MemoryPlan(Fact):
    """An engine's own estimate, before it places anything, of what the model needs on the GPUs by part,
    against what each GPU has free (ollama's offload line). Bytes; None where the line does not say."""

    available: tuple[int, ...]  # free memory per GPU, in the engine's order
    required: int | None = None  # everything on the GPUs at full offload (the weights, KV, graph, projector)
    weights: int | None = None  # the layers' weights (ollama before 0.6 counts each layer's KV in them)
    kv: int | None = None  # the KV cache for the whole context (num_ctx x parallel slots)
    graph: int | None = None  # the compute graph's reserve (the larger of full and partial offload)
    projector: int | None = None  # a multimodal projector's weights plus its graph, on the first GPU
    layers: int | None = None  # the model's layers (with the output layer)
    offloaded: int | None = None  # the layers the estimate places on the GPUs


@dataclass(frozen=True, kw_only=True)
class FailedStep(Fact):
    """The startup step an engine's own wrapper says raised: vLLM's worker wrappers name the worker method
    they were running ("Error executing method 'load_model'. This might cause deadlock...", "Exception in
    worker VllmWorkerProcess while processing method initialize_cache"). `step` is the phase that method is
    (rules.Situation.phase); the stack, where it was kept, says the same or more."""

    method: str
    step: str  # 'startup-weights' | 'startup-profile' | 'startup-kv-alloc' | 'startup-cudagraph'


@dataclass(frozen=True, kw_only=True)
class Flags(Fact):
    """Engine flags as the evidence spelled them (vLLM field names, values as text)."""

    origin: str  # 'non-default-args' | 'engine-config' | 'llm-kwargs' | 'command-line' | 'sglang-args'
    flags: tuple[tuple[str, str], ...]


@dataclass(frozen=True, kw_only=True)
class ModelNamed(Fact):
    """A model the report names in words ("I load the Qwen3-30B-A3B-GPTQ-Int4 model", "Model: Qwen3-32B");
    `text` is the name as written. Launch commands and code give the model as a flag (`Flags`)."""

    name: str


@dataclass(frozen=True, kw_only=True)
class DeviceNamed(Fact):
    """GPUs the report names in words or setting lines ("a 4090 24GB", "8*A6000(48G)", "2x H100 NVL 94GB",
    "8 GPU with 23GB VRAM each"): bytes per device (the GPU table's CUDA total for the part, else the size
    written beside it) and how many, where it says."""

    name: str  # the part as written ("4090", "A6000", "H100 NVL")
    part: str | None  # the GPU table's name for it ("NVIDIA GeForce RTX 4090"), None when it has none
    total: int | None
    count: int | None


class TriedLever(Enum):
    """What a reporter changed and says whether it helped: each is the cure of one mechanism."""

    SHORTER_CONTEXT = "a shorter context"
    LARGER_KV_SHARE = "a larger share of memory for the engine"
    SMALLER_STEP = "fewer tokens per prefill step"
    QUANTIZED_KV = "a quantized KV cache"
    FEWER_GPU_LAYERS = "fewer layers on the GPU"
    MORE_GPUS = "the model split over more GPUs"
    QUANTIZED_WEIGHTS = "quantized weights"
    NO_CUDA_GRAPHS = "fewer or no CUDA graphs"
    FLASH_ATTENTION = "flash attention"
    EXPANDABLE_SEGMENTS = "expandable segments"
    SMALLER_MM_INPUT = "fewer or smaller images, videos or audio"
    NO_SPECULATION = "less speculative decoding"
    LESS_LORA = "fewer or smaller LoRA adapters"
    NO_PROMPT_LOGPROBS = "no prompt logprobs"
    MORE_HOST_MEMORY = "more host memory or shared memory, or less swap"
    GPU_TO_ITSELF = "the GPU to itself"
    RESTART = "a periodic restart"


@dataclass(frozen=True, kw_only=True)
class LeverTried(Fact):
    """A reporter's sentence saying a change was tried and whether it helped ("-c 30000 fits and has no
    issues", "--enforce-eager does not work either")."""

    lever: TriedLever
    helped: bool


@dataclass(frozen=True, kw_only=True)
class Version(Fact):
    engine: str  # 'vllm' | 'sglang' | 'torch' | 'nccl'
    version: str


@dataclass(frozen=True, kw_only=True)
class LoadSample(Fact):
    """One periodic load report: vLLM's stats line, SGLang's batch line, a /metrics scrape, a scheduler
    dump."""

    running: int | None = None
    waiting: int | None = None
    kv_usage: float | None = None  # fraction 0..1
    preemptions: float | None = None
    engine: str = ""  # "Engine 000", a DP tag or a metrics label


@dataclass(frozen=True, kw_only=True)
class ScheduledStep(Fact):
    """A scheduler output: the tokens scheduled per request in one step (padding shape for activations)."""

    tokens_per_request: tuple[int, ...]
    kv_usage: float | None = None


@dataclass(frozen=True, kw_only=True)
class GpuProcess(Fact):
    """A process holding GPU memory (nvidia-smi process table or --query-compute-apps)."""

    gpu: int | None
    pid: int | None
    name: str
    used: int


@dataclass(frozen=True, kw_only=True)
class GpuMemory(Fact):
    """A GPU's memory as nvidia-smi reported it; `cuda_total` is what CUDA reports for that model (the
    catalog's), which vLLM sizes from, when the name is known."""

    gpu: int | None
    name: str
    total: int
    used: int
    cuda_total: int | None = None


@dataclass(frozen=True, kw_only=True)
class HostMemory(Fact):
    """A host / container memory figure (cgroup, free -m, kubectl limits, kernel OOM report)."""

    quantity: (
        str  # 'limit' | 'current' | 'peak' | 'total' | 'available' | 'used' | 'killed_rss' | 'oom_kill_count'
    )
    value: float
    scope: str = ""  # cgroup path, pod/container, process name


@dataclass(frozen=True, kw_only=True)
class Snapshot(Fact):
    """A PyTorch memory snapshot's summary (torch.cuda.memory._snapshot())."""

    reserved: int
    allocated: int
    largest_free_block: int
    segments: int
    top_sites: tuple[tuple[str, int], ...]  # (frame "file:line func", bytes)
    failed_request: int | None = None


F = TypeVar("F", bound=Fact)


class _Kept:
    """The first KEEP_FIRST and the last KEEP_LAST facts of one kind, and how many were seen."""

    __slots__ = ("first", "last", "seen")

    def __init__(self) -> None:
        self.first: list[Fact] = []
        self.last: deque[Fact] = deque(maxlen=KEEP_LAST)
        self.seen = 0

    def add(self, fact: Fact) -> None:
        self.seen += 1
        if len(self.first) < KEEP_FIRST:
            self.first.append(fact)
        else:
            self.last.append(fact)

    def all(self) -> list[Fact]:
        return self.first + list(self.last)

    def skip(self, n: int) -> None:
        """n facts seen and not kept: only valid when `first` is full and KEEP_LAST facts follow them."""
        if n and len(self.first) < KEEP_FIRST:
            raise ValueError("skipped facts would have been kept among the first")
        self.seen += n


@dataclass
class Document:
    """What was read from one input, for the report's 'read' list."""

    name: str
    kind: str
    lines: int = 0
    bytes: int = 0
    facts: int = 0
    skipped: list[str] = field(default_factory=list)


# The text documents whose heads are kept for the prior's words (the first ones read).
MAX_HEADS = 32


class Evidence:
    """All facts from all inputs, bounded per kind, plus what was read and what was skipped."""

    def __init__(self) -> None:
        self._kept: dict[type, _Kept] = {}
        self.documents: list[Document] = []
        self.skipped: list[str] = []
        # Each engine's marks in the heads of the text documents read (engine_marks.py).
        self.engine_marks: Counter[Engine] = Counter()
        # The heads of the text documents read (the part engine_marks reads, of the first MAX_HEADS
        # documents): the learned prior reads their words (prior.features), a reporter's sentences among
        # them. A pasted report is a few KiB; a long log's head holds its start-up lines, and its failure
        # lines reach the prior as the facts' own lines.
        # Keyed by the document's name, so an incident's diagnosis reads its own documents' heads.
        self.heads: dict[str, str] = {}

    def add_head(self, name: str, text: str) -> None:
        if len(self.heads) < MAX_HEADS:
            self.heads.setdefault(name, text)

    def add(self, fact: Fact) -> None:
        kept = self._kept.get(type(fact))
        if kept is None:
            kept = self._kept[type(fact)] = _Kept()
        kept.add(fact)

    def room_first(self, kind: type[Fact]) -> int:
        """How many more facts of `kind` would be kept as the first ones."""
        kept = self._kept.get(kind)
        return KEEP_FIRST - (len(kept.first) if kept else 0)

    def skip(self, kind: type[Fact], n: int) -> None:
        """Count n facts of `kind` that a reader saw in bulk and did not build: the store would not keep them
        (its first ones are taken and at least KEEP_LAST more of the kind follow them)."""
        kept = self._kept.get(kind)
        if kept is None:
            kept = self._kept[kind] = _Kept()
        kept.skip(n)

    def absorb(self, other: Evidence) -> None:
        """Another store's documents and facts after this one's, kept as if its facts had been added here one
        by
        one (what a parallel read of several files merges)."""
        for kind, kept in other._kept.items():
            mine = self._kept.get(kind)
            if mine is None:
                mine = self._kept[kind] = _Kept()
            for fact in kept.first:
                mine.add(fact)
            mine.skip(kept.seen - len(kept.first) - len(kept.last))
            for fact in kept.last:
                mine.add(fact)
        self.documents += other.documents
        self.engine_marks.update(other.engine_marks)
        for name, head in other.heads.items():
            self.add_head(name, head)

    def extend(self, facts: Iterable[Fact]) -> None:
        for fact in facts:
            self.add(fact)

    def of(self, kind: type[F]) -> list[F]:
        kept = self._kept.get(kind)
        return [f for f in kept.all()] if kept else []  # type: ignore[misc]

    def count(self, kind: type[Fact]) -> int:
        kept = self._kept.get(kind)
        return kept.seen if kept else 0

    def signals(self, *names: str) -> list[Signal]:
        wanted = set(names)
        return [s for s in self.of(Signal) if not wanted or s.name in wanted]

    def has(self, *names: str) -> bool:
        return bool(self.signals(*names))

    def __iter__(self) -> Iterator[Fact]:
        for kept in self._kept.values():
            yield from kept.all()

    def __len__(self) -> int:
        return sum(k.seen for k in self._kept.values())
