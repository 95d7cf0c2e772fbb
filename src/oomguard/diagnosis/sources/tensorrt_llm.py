"""TensorRT-LLM's own lines (C++ runtime, its Triton backend): the KV pool it sized, the check that the pool
holds one sequence, and the executor step a runtime failure came in.

Formats (TensorRT-LLM cpp/tensorrt_llm/batch_manager, tensorrtllm_backend):
- "[TensorRT-LLM][INFO] Using 693 tokens in paged KV cache."
- "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 0.10 GiB for max tokens in paged KV cache (2112)."
- "maxTokensInPagedKvCache must be large enough to process at least 1 sequence to completion (i.e. must
  be larger than beam_width * tokensPerBlock * maxBlocksPerSeq)": the pool is below one engine-max-length
  sequence, which is what `max-model-len-exceeds-kv` means (the engine's max input + output length is the max
  model len).
- "maxAttentionWindow and maxSequenceLen are too large for at least one sequence to fit in kvCache. they are
  reduced to N" (a warning since 2024: the engine shortens its max length to what the pool holds once): the
  same mechanism, the engine's max length against the pool it sized.
- "[TensorRT-LLM][ERROR] Encountered an error in forwardAsync function: ...": the failure came in a step of
  the running executor, not at startup.
- "[TensorRT-LLM][ERROR] Assertion failed: Can't allocate new blocks. No free blocks left."
  (batch_manager/kvCacheManager.cpp): a running request found the paged KV pool empty (`kv-pool-dry`).
- "Error storing task=1 in PEFT cache -- ...": the LoRA (PEFT) cache cannot hold the adapter
  (`lora-cache-full`); "Using N bytes for LoRA host cache" / "LoRA device cache" give its sizes.
- The PyTorch backend's executor creation (tensorrt_llm/_torch/pyexecutor/py_executor_creator.py): "Executor
  creation failed due to insufficient GPU memory." then "The following component could not be created: C",
  "Total GPU memory (GiB): T" and one "Component: free before / free after" line per component created before
  it. The component is the step: "Model" the weights, "Sampler" the sampler's buffers, "Initial KV cache" and
  "KV cache" the KV pool, "Additional executor resources" the warm-up of the largest batch (activations and
  CUDA graphs; "Model resources created during usage" likewise sized by max_num_tokens), "Drafter" / "Draft
  model for speculative decoding" the speculative decoder (its step: what fails there is the draft's).
And TensorRT's own allocator (engine build and execution-context creation, which TensorRT-LLM engines go
through): "Requested amount of GPU memory (3887181312 bytes) could not be allocated. There may not be enough
free memory for allocation to succeed." and "Error Code 2: OutOfMemory (Requested size was N bytes.)" / "(no
further information)"; and its builder skipping a kernel tactic whose workspace does not fit: "Tactic Device
request: 41472MB Available: 40338MB. Device memory is insufficient to use tactic." (the engine's largest
shapes, set by max_batch_size x max_input_len at build time, need that much activation memory).
The memory figures of "Memory usage when calculating max tokens in paged kv cache" and the CUDA runtime errors
are read by the allocator reader (traceback.py, allocator.py).
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import ENGINE_OOM, AllocatorReport, Context, LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers
from oomguard.units import GiB as GIB
from oomguard.units import MiB as MIB

# "Using 693 tokens in paged KV cache." and, in the releases of 2024, "Using 256 total tokens in paged KV
# cache, and 2 blocks per sequence".
_USING_TOKENS = re.compile(r"Using (?P<n>\d+) (?:total )?tokens in paged KV cache")
# The KV cache manager (batch_manager/kvCacheManager.cpp, and _torch/pyexecutor/resource_manager.py) finding
# its primary pool below one sequence of the engine's max length shrinks that length: "maxAttentionWindow
# and maxSequenceLen are too large for at least one sequence to fit in kvCache. they are reduced to 5185".
_LENGTH_REDUCED = re.compile(
    r"maxSequenceLen are too large for at least one sequence to fit in kvCache\. [Tt]hey are reduced to "
    r"(?P<n>\d+)"
)
_ALLOCATED = re.compile(r"Allocated (?P<v>[\d.]+ [KMG]iB) for max tokens in paged KV cache \((?P<n>\d+)\)")
_BELOW_ONE_SEQUENCE = "must be large enough to process at least 1 sequence"
_NO_FREE_BLOCKS = "No free blocks left"
# The KV cache manager's other spellings of an empty pool (batch_manager/kvCacheManager.cpp): "Can't allocate
# new blocks for window size 8. No free blocks left." (0.15+, cut after its first sentence in pastes) and the
# assertions on a free block of older releases ("Assertion failed: freeBlockIterator.has_value()
# (.../kvCacheManager.cpp:249)", https://github.com/NVIDIA/TensorRT-LLM/issues/1279).
_CANT_ALLOCATE_BLOCKS = "Can't allocate new blocks"
_FREE_BLOCK_ASSERT = re.compile(r"\bAssertion failed: [^()]*\b(?:freeBlock\w*|hasFreeBlocks|free blocks?)\b")
# batch_manager/peftCacheManager.cpp: "Error storing task=1 in PEFT cache -- <why>" (the pages are full).
_PEFT_FULL = re.compile(r"Error storing task=\S+ in PEFT cache")
_LORA_CACHE = re.compile(r"Using (?P<n>\d+) bytes for LoRA (?P<where>host|device) cache")
_CREATION_FAILED = "Executor creation failed due to insufficient GPU memory"
_COMPONENT = re.compile(r"The following component could not be created: (?P<c>[^\n(]+)")
_TOTAL_GIB = re.compile(r"Total GPU memory \(GiB\): (?P<v>[\d.]+)")
_MODEL_STEP = re.compile(r"^Model: (?P<before>[\d.]+) / (?P<after>[\d.]+)\s*$")
# What the executor's component that failed to be created means, as the signal whose class it is.
_COMPONENT_SIGNAL = (
    ("Initial KV cache", "no-kv-cache-memory"),
    ("KV cache", "no-kv-cache-memory"),
    ("Additional executor resources", "prefill-tokens-dont-fit"),
    # the model's buffers created on first use, sized by max_num_tokens (its tuning knob)
    ("Model resources created during usage", "prefill-tokens-dont-fit"),
    ("Sampler", "sampler-warmup-oom"),
    # the speculative decoder: its drafter, or a separate draft model with its own weights
    ("Drafter", "milestone-drafter-loading"),
    ("Draft model", "milestone-drafter-loading"),
)
# The report's lines after its first: the component, the total, one line per component created before it.
_CREATION_REPORT_LINES = 12
# The PyTorch backend's executor captures its decode graphs after the KV cache is created
# (_torch/pyexecutor/model_engine.py): "Run generation only CUDA graph warmup for batch size=8" (later
# "Run generation-only CUDA graph warmup for batch size=4, draft_len=0").
_GRAPH_WARMUP = "CUDA graph warmup for batch size"
# Its KV sizing, after the estimation forward and before the cache manager and the graphs
# (_torch/pyexecutor/_util.py): "Estimated max tokens in KV cache : 1669816".
_KV_ESTIMATED = "Estimated max tokens in KV cache"
# The engine read (its size is the rank's weights), deserialized onto the GPU, then its execution context (the
# activations of the engine's largest shapes), before the KV pool is sized from what is left
# (runtime/tllmRuntime.cpp): "Loaded engine size: 6214 MiB", "[MemUsageChange] TensorRT-managed allocation in
# engine deserialization: CPU +0, GPU +15309, now: ...", "[MemUsageChange] Allocated 928.77 MiB for execution
# context memory."
_ENGINE_SIZE = re.compile(r"\bLoaded engine size: (?P<v>[\d.]+) MiB\b")
_CONTEXT_MEMORY = re.compile(r"\bAllocated (?P<v>[\d.]+) MiB for execution context memory\b")
_TACTIC = re.compile(r"Tactic Device request: (?P<req>\d+)MB Available: (?P<free>\d+)MB")
_TRT_REQUESTED = re.compile(
    r"Requested amount of GPU memory \((?P<n>\d+) bytes\) could not be allocated|"
    r"Error Code 2: OutOfMemory \((?:Requested size was (?P<size>\d+) bytes)?"
)


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "tokens in paged KV cache",
            "at least one sequence to fit in kvCache",
            "for max tokens in paged KV cache",
            _BELOW_ONE_SEQUENCE,
            "error in forwardAsync",
            "Requested amount of GPU memory",
            "Error Code 2: OutOfMemory",
            _NO_FREE_BLOCKS,
            _CANT_ALLOCATE_BLOCKS,
            "kvCacheManager",
            "PEFT cache",
            "for LoRA",
            _CREATION_FAILED,
            "Tactic Device request",
            _GRAPH_WARMUP,
            _KV_ESTIMATED,
            "Loaded engine size",
            "in engine deserialization",
            "for execution context memory",
        )
    )

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.kv_tokens: int | None = None
        self.serving = False
        self.report_lines = 0  # lines left of the PyTorch executor's creation-failure report
        self.lora_cache: dict[str, int] = {}

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
        if "at least one sequence to fit in kvCache" in body:
            m = _LENGTH_REDUCED.search(body)
            self.ctx.signal(
                line,
                body,
                "max-model-len-exceeds-kv",
                estimated_max_model_len=float(m.group("n")) if m else None,
            )
        if _BELOW_ONE_SEQUENCE in body:
            self.ctx.signal(line, body, "max-model-len-exceeds-kv", kv_cache_tokens=self.kv_tokens)
        if "Requested amount of GPU memory" in body or "Error Code 2: OutOfMemory" in body:
            m = _TRT_REQUESTED.search(body)
            if m:
                size = m.group("n") or m.group("size")
                self.ctx.oom(line, body, AllocatorReport("engine", requested=int(size) if size else None))
        if (
            _NO_FREE_BLOCKS in body
            or _CANT_ALLOCATE_BLOCKS in body
            or ("kvCacheManager" in body and _FREE_BLOCK_ASSERT.search(body))
        ):
            self.ctx.signal(line, body, "kv-pool-dry", kv_cache_tokens=self.kv_tokens)
        if "for LoRA" in body:
            m = _LORA_CACHE.search(body)
            if m:
                self.lora_cache[m.group("where")] = int(m.group("n"))
        if "PEFT cache" in body and _PEFT_FULL.search(body):
            self.ctx.signal(
                line,
                body,
                "lora-cache-full",
                host_cache_bytes=self.lora_cache.get("host"),
                device_cache_bytes=self.lora_cache.get("device"),
            )
        self._executor_creation(line, msg)
        if "Tactic Device request" in body:
            m = _TACTIC.search(body)
            if m:
                requested, free = int(m.group("req")) << 20, int(m.group("free")) << 20  # MiB
                self.ctx.oom(line, body, AllocatorReport("engine", requested=requested, free=free))
        if "Loaded engine size" in body:
            m = _ENGINE_SIZE.search(body)
            if m:
                self.ctx.startup_number(line, msg, "weights_bytes", float(m.group("v")) * MIB)
                self.ctx.signal(line, body, "milestone-weights-loading")
        if "in engine deserialization" in body:
            self.ctx.signal(line, body, "milestone-weights-loaded")
        if "for execution context memory" in body:
            m = _CONTEXT_MEMORY.search(body)
            if m:
                self.ctx.startup_number(line, msg, "activation_bytes", float(m.group("v")) * MIB)
        if _KV_ESTIMATED in body:
            self.ctx.signal(line, body, "milestone-kv-sized")
        if _GRAPH_WARMUP in body:
            self.ctx.signal(line, body, "milestone-cudagraph-start")
        if "error in forwardAsync" in body and not self.serving:
            self.serving = True  # the executor's step loop: the server had been running requests
            self.ctx.signal(line, body, "milestone-serving")

    def busy(self) -> bool:
        return self.report_lines > 0

    def _executor_creation(self, line: Line, msg: Message) -> None:
        """The PyTorch executor's report of the component it could not create, and the memory before it."""
        body = msg.body.strip()
        if _CREATION_FAILED in body:
            self.report_lines = _CREATION_REPORT_LINES
            return
        if not self.report_lines:
            return
        self.report_lines -= 1
        if "could not be created:" in body:
            m = _COMPONENT.search(body)
            if m:
                component = m.group("c").strip()
                names = [n for prefix, n in _COMPONENT_SIGNAL if component.startswith(prefix)]
                if component == "Model":
                    names = ["load-model-failed"]
                if names:
                    self.ctx.signal(line, body, names[0])
                if names and names[0].startswith("milestone-"):
                    # a step, not a failure: the out-of-memory error the executor caught came in it
                    self.ctx.oom(line, body, ENGINE_OOM)
        elif "Total GPU memory (GiB)" in body:
            m = _TOTAL_GIB.search(body)
            if m:
                self.ctx.startup_number(line, msg, "gpu_total_bytes", float(m.group("v")) * GIB)
        elif body.startswith("Model: "):
            m = _MODEL_STEP.match(body)
            if m:
                weights = (float(m.group("before")) - float(m.group("after"))) * GIB
                self.ctx.startup_number(line, msg, "weights_bytes", weights)
