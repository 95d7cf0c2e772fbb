"""The causes, as mechanisms: each rule looks at typed facts (never at a report's wording) and adds weight,
for or against, to the cause classes the facts bear on.

What separates the classes (the generic "Tried to allocate" appears in most of them):
- the phase: which startup step had been reached (milestones), which frames were on the stack;
- the allocator's own numbers: requested vs free, reserved-but-unallocated (fragmentation), other processes;
- the KV usage at the crash (exhaustion vs a transient activation), the step shape (padding);
- host signals: exit 137, OOMKilled, oom_kill counters, ENOMEM, NVRM on unified memory;
- the engine's own errors and their numbers (free memory at start, KV needed vs available, CUDA-graph
estimate);
- configuration risks, weakly (gmu 0.99, huge batched tokens, 1024 sampler rows, VLM limits, spec decode).
Weights: STRONG for a mechanism the evidence states, MEDIUM for one it implies, WEAK for config risks and
priors.
Each (class, reason) counts once, however many lines repeat it.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

from oomguard.diagnosis.causes import CauseClass
from oomguard.diagnosis.engine_marks import Engine
from oomguard.diagnosis.evidence import (
    HOST_SIGNALS,
    DeviceNamed,
    Evidence,
    Fact,
    FailedStep,
    Frame,
    GpuMemory,
    GpuProcess,
    HostMemory,
    LeverTried,
    LoadSample,
    MemoryPlan,
    OomMessage,
    ScheduledStep,
    Signal,
    Snapshot,
    StartupNumber,
    TriedLever,
)
from oomguard.diagnosis.setup import EngineSetup
from oomguard.diagnosis.sizing import catalog_vocab, host_logits_table
from oomguard.diagnosis.sources.allocator import AllocatorReport
from oomguard.diagnosis.sources.allocator import outside_pytorch as _outside
from oomguard.diagnosis.step_shape import StepAnalysis
from oomguard.units import GiB as GIB
from oomguard.units import MiB as MIB

# The ranked classes in their tie-break order (the enum's).
CLASSES: tuple[CauseClass, ...] = tuple(CauseClass)

STRONG, MEDIUM, WEAK, PRIOR = 3.0, 1.5, 0.7, 0.3

# KV usage at or above this at the crash means the pool was full (vLLM preempts from ~100%).
KV_FULL = 0.90
# At or below this the pool had room: an OOM then is not KV.
KV_ROOMY = 0.60
# At or above this, with requests waiting and few running, the pool is what keeps them out: a waiting prompt
# is admitted only when all its blocks fit (vLLM's can_allocate, less a 1% watermark), so a fifth of the
# pool left cannot take a long one.
KV_ADMISSION = 0.80
# Fewer running than this is below any engine's default cap on running sequences (vLLM 128-1024 by version
# and GPU, SGLang's max_running_requests from the pool): not the batch-size cap holding the waiting back.
FEW_RUNNING = 32
# Reserved-but-unallocated at least this and at least the request: the allocator had the bytes, not one piece.
FRAGMENTED_MIN = 512 * MIB
# Below this (or 10% of the request) reserved-but-unallocated rules fragmentation out.
FRAGMENTED_NEGLIGIBLE = 256 * MIB
# Memory in use outside the failing process's PyTorch allocator beyond what a CUDA context, NCCL and cuBLAS
# workspaces take (~0.5-2.5 GiB per process): another process or a non-PyTorch library holds it.
OUTSIDE_PYTORCH_MIN = 3 * GIB
OUTSIDE_PYTORCH_SHARE = 0.10
# The failing process's own memory outside PyTorch's allocator at this share of the device is no CUDA
# context or workspace (those are ~0.5-2.5 GiB): an engine's weights allocated outside PyTorch.
OWN_OUTSIDE_SHARE = 0.5
# Residual memory after sleep growing by this much across cycles is memory not given back.
RESIDUAL_GROWTH = 512 * MIB
# Another process holding this much of the GPU is worth naming.
OTHER_PROCESS_MIN = 1 * GIB
# A failed allocation at or under this share of the device (under 400 MiB of 80 GiB, 120 MiB of 24 GiB) is no
# step's peak: the device was full before the step, and a smaller batch or prompt would not have made room.
TINY_REQUEST_SHARE = 0.005
# Captured graphs an engine budgets take a few percent of the device (vLLM logs 0.5-5 GiB on 80-180 GB GPUs);
# private pools beyond this share are more than such graphs, so they may be what filled it.
GRAPH_POOLS_SHARE = 0.1
# PyTorch's caching allocator keeps what a program frees as reserved-but-unallocated; a forward step frees
# its temporaries (tens of MiB and up): at or under this the program had freed nothing, block rounding only.
NOTHING_FREED = 16 * MIB
# A CUDA-graph estimate this large (or this share of the GPU) is an over-estimate eating the KV budget.
CUDAGRAPH_HUGE = 20 * GIB
CUDAGRAPH_HUGE_SHARE = 0.30
# One long chunk padding many short rows: padded rows x max length over real tokens.
PADDING_RATIO = 4.0
# A failure this long after the last startup step was at runtime: after KV sizing only graph capture and
# warm-up remain, which take seconds to a few minutes (torch.compile runs before KV sizing, in the profile).
SERVING_GAP_S = 15 * 60
# The milestones the gap applies after (weight loading and the profile run can take far longer).
AFTER_KV_SIZING = ("milestone-kv-sized", "milestone-cudagraph-start", "milestone-cudagraph-done")
# A step of this many tokens has more than 2^31 elements in the MLP's gate_up output (2 x intermediate per
# token) of any model with intermediate_size >= 8,192: 2^31 / 131,072 = 16,384.
INT32_RISK_TOKENS = 131072
# Kernel errors that are not allocation failures: the stack places them, but "the OOM happened in" does not.
NON_OOM_FAILURES = frozenset(
    {
        "int32-index-math",
        "illegal-memory-access",
        "nccl-error",
        "deepep-error",
        "device-error",
        "internal-assert",
        "misreported-oom",
    }
)
# Causes that can only stop an engine from starting.
STARTUP_ONLY = ("weights-dont-fit", "kv-cache-insufficient-at-startup", "max-model-len-exceeds-kv")
# Causes that need traffic.
RUNTIME_ONLY = ("kv-exhaustion-at-runtime", "memory-leak")
# Configuration risks.
HIGH_UTILIZATION = 0.97
HUGE_BATCHED_TOKENS = 32768
SAMPLER_ROWS_RISK = 1024
# Model ids that carry a vision/audio encoder (multimodal profiling runs the encoder at its maximum input).
MULTIMODAL_MODEL = re.compile(
    r"(?i)(-vl\b|vl-|\bvl\b|vision|llava|mllama|pixtral|internvl|minicpm-?v|qwen\d?(\.\d)?-?vl|"
    r"gemma-?3|gemma-?4|idefics|paligemma|phi-?\d?-?(mm|vision)|molmo|kimi-vl|glm-?4v|aria)"
)

# Frame categories: (category, substrings of function name or path), most specific first.
FRAME_CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "all2all",
        (
            "all2all",
            "all_to_all",
            "deep_ep",
            "deepep",
            "pplx",
            "nvshmem",
            "moe_a2a",
            "prepare_finalize",
            "mori",
            "low_latency_dispatch",
            # TRT-LLM's and FlashInfer's MNNVL all-to-all (moe_alltoall / mnnvl_moe_alltoallv), UCCL's EP
            "alltoall",
            "mnnvl",
            "uccl",
        ),
    ),
    (
        "sampler",
        (
            "sampler.py",
            "_dummy_sampler_run",
            "compute_logits",
            "logits_processor",
            "apply_top_k_top_p",
            "topk_topp",
            "prompt_logprobs",
            "gather_logprobs",
            "compute_logprobs",
            "top_k_top_p",  # SGLang / FlashInfer: top_k_top_p_sampling_from_probs
            "sampling_from_probs",
            # the logits processors and warpers over [rows, vocab]: transformers' and LMDeploy's
            # logits_process.py, TGI's NextTokenChooser
            "logits_process",
            "logits_warper",
            "next_token_chooser",
        ),
    ),
    (
        "encoder",
        (
            "visual",
            "vision",
            "_execute_mm_encoder",
            "get_multimodal_embeddings",
            "embed_multimodal",
            "pixel",
            "siglip",
            "mm_encoder",
            "patch_embed",
            "image_encoder",
            "encoder_runner",
            "profile_encoder",
            "vit_",
            "/clip.py",
            "vision_tower",
            "mm_projector",
            "image_features",
            "embedding_func",
            "mllama",
            "qwen2_vl",
            "qwen2_5_vl",
            # vLLM model files' image/audio paths; SGLang's general_mm_embed_routine / embed_mm_inputs
            "_process_image_input",
            "_process_audio_input",
            "audio_tower",
            "get_image_feature",
            "mm_embed",
            # vision towers in their own files (vLLM intern_vit.py, moonvit.py, siglip2navit.py;
            # DeepSeek-OCR's deepencoder; Whisper's audio encoder), the merge of their output into the
            # prompt's embeddings (vLLM models/utils.py _merge_multimodal_embeddings), LLaVA/Idefics towers
            # (TGI, SGLang), LMDeploy's vision models (lmdeploy/vl/)
            "vit.py",
            "deepencoder",
            "whisper",
            "multimodal_embeddings",
            "_process_video_input",
            "vision_model",
            "llava",
            "idefics",
            "/vl/",
            # torch's sliding-block extraction over (N, C, H, W) images (nn.Unfold / F.unfold -> im2col): the
            # patch embedding of a vision tower (Mllama's), an operation no text layer makes
            "modules/fold.py",
            "im2col",
        ),
    ),
    # The KV pool's own slot allocator (SGLang): when it fails the pool was full, whoever called it; its
    # callers alloc_for_extend / alloc_for_decode and the request-slot pool's alloc_req_slots
    # (python/sglang/srt/mem_cache/common.py) raise nothing else.
    (
        "kv-slots",
        (
            "alloc_token_slots",
            "alloc_paged_token_slots",
            "alloc_for_extend",
            "alloc_for_decode",
            "alloc_req_slots",
        ),
    ),
    # Sleep mode re-mapping the memory it released (vLLM's CuMemAllocator and LLM/worker wake_up, SGLang's
    # resume_memory_occupation through torch_memory_saver's resume): what an RL trainer took meanwhile.
    (
        "wake-up",
        (
            "device_allocator/cumem",
            "create_and_map",
            "resume_memory_occupation",
            "torch_memory_saver",
            "wake_up",
        ),
    ),
    (
        "spec-decode",
        (
            "spec_decode",
            "eagle",
            "medusa",
            "/mtp",
            # the MTP heads' own model files (vLLM deepseek_mtp.py, qwen3_next_mtp.py, glm4_moe_mtp.py;
            # SGLang deepseek_nextn.py), any draft runner or worker
            "_mtp",
            "nextn",
            "draft",
            "speculat",
            "propose",
        ),
    ),
    # LoRA's adapters and kernels; TensorRT-LLM's PEFT cache
    ("lora", ("lora", "punica", "peft")),
    (
        "cudagraph",
        (
            "capture_model",
            "graph_capture",
            "capture_graph",
            "_capture",
            "capture_begin",
            "capture_end",
            "cudagraph_capture",
            "profile_cudagraph_memory",
            "_init_minimal_kv_cache_for_profiling",
            "init_cuda_graph",  # SGLang: init_cuda_graphs / the attention backend's init_cuda_graph_state
            # TGI's warm-up capturing each decode batch size (flash_causal_lm.py cuda_graph_warmup),
            # TensorRT-LLM's PyTorch executor (model_engine.py _run_cuda_graph_warmup)
            "cuda_graph_warmup",
        ),
    ),
    (
        "kv-alloc",
        (
            "initialize_kv_cache",
            "initialize_cache",  # V0 worker: raise_if_cache_size_invalid, then the cache engines
            "raise_if_cache_size_invalid",
            "allocate_kv_cache",
            "_allocate_kv_cache",
            "init_kv_cache",
            "_check_enough_kv_cache_memory",
            "get_kv_cache_config",
            "_reshape_kv_cache",
            "bind_kv_cache",
            "init_memory_pool",  # SGLang's ModelRunner: the token-to-KV pool's tensors
            "create_kv_cache",  # TensorRT-LLM's PyTorch executor: KvCacheCreator._create_kv_cache_manager
            "build_cache_engine",  # LMDeploy's PyTorch executor
        ),
    ),
    (
        "profile",
        (
            "profile_run",
            "determine_num_available_blocks",
            "determine_available_memory",
            "memory_profiling",
            "_dummy_run",
            "profile_",
        ),
    ),
    (
        "weights",
        (
            "load_model",
            "load_weights",
            "create_weight",  # vLLM's create_weights, TurboMind's _create_weight
            # a `with torch.device(...)` context: vLLM and SGLang build the model's modules under one, so
            # every parameter they create passes through it
            "torch/utils/_device.py",
            "weight_loader",
            "model_loader",
            "process_weights_after_loading",
            "initialize_model",
            "_initialize_model",
            "weight_utils",
            "safetensors",
            "utils/weights.py",  # TGI's sharded weight reads (get_tensor, get_sharded, get_multi_weights_col)
            "= get_model(",  # the engine's call that builds the model (vLLM's worker, TGI's server)
        ),
    ),
    (
        "serving",
        (
            "serving_chat",
            "serving_completion",
            "api_server",
            "async_llm",
            "execute_model",
            "step",
            "run_engine_core",
            "run_busy_loop",
        ),
    ),
)


# Engine functions that run several startup steps in turn (V0 LLMEngine and V1 EngineCore
# `_initialize_kv_caches`: profile, KV allocation, graph capture): they place nothing by their name.
UMBRELLA_STEPS = ("_initialize_kv_caches",)
# A frame in a CUDA-graph module that is not capturing is replaying a captured graph: a runtime step.
# (LMDeploy's backends/cuda/graph_runner.py and SGLang's npu_graph_runner.py capture too.)
CUDAGRAPH_MODULES = ("cuda_graph", "cudagraph", "torch/cuda/graphs.py", "graph_runner")


# The engines' per-step entry points for requests (vLLM's execute_model, SGLang's scheduler and model runner):
# after the KV pool was sized, a stack through one of them is serving traffic, whatever startup line came last
# (startup's own steps, the profile run and graph capture, have frames of their own that are checked first).
REQUEST_STEP_FRAMES = (
    "execute_model",
    "forward_batch_generation",
    "forward_extend",
    "forward_decode",
    "run_batch",
    "event_loop_normal",
    "event_loop_overlap",
    "forward_thread_func",
)


# Functions that hold the vocabulary-wide tensors (tokens x vocab: the logits, their log-softmax, logprobs,
# entropy, the LM head's output), in the engines and in the RL trainers that wrap them: vLLM's
# compute_logits / _get_logits / compute_logprobs / _compute_prompt_logprobs, SGLang's
# LogitsProcessor._get_logits, verl's logprobs_from_logits / entropy_from_logits, OpenRLHF's
# log_probs_from_logits, TRL's selective_log_softmax / _get_per_token_logps, slime's compute_log_probs /
# vocab_parallel_softmax, NeMo-RL's from_parallel_logits_to_logprobs, Megatron's
# vocab_parallel_cross_entropy. Matched on whole parts of the name ('_' and the name's ends bound them),
# never on the attention's, the router's or an indexer's logits.
LOGITS_FUNCTION = re.compile(
    r"(?<![a-z0-9])(?<!attn_)(?<!attention_)(?<!router_)(?<!gate_)(?<!gating_)(?<!indexer_)(?<!score_)(?<!mqa_)"
    r"(logits?|logprobs?|logps|log_probs?|log_softmax|entropy|entropys|entropies|lm_head|"
    r"vocab_parallel(_\w+)?)(?![a-z0-9])"
)
# The call the innermost frame was making (the allocation site): the logits tensor itself, the LM head, a
# log-softmax over them. "logits" as a whole name (`logits.float()`, `outputs.logits[:, -1, :]`,
# `self.lm_head(hidden)`, `F.log_softmax(logits, dim=-1)`), not attn_logits / router_logits / indexer logits.
LOGITS_CODE = re.compile(r"(?<!\w)(?:logits|lm_head)(?!\w)|\blog_softmax\s*\(")
# A call computing another mechanism's logits on that line: sparse attention's indexer (vLLM's
# fp8_mqa_logits / fp8_paged_mqa_logits for DeepSeek V3.2), attention scores, an MoE router.
OTHER_LOGITS_CODE = re.compile(r"mqa_logits|indexer|attn|attention|router|gating|gate\b")
# Function names of weight loading and module construction, which may name the LM head they build.
BUILDING_FUNCTION = re.compile(r"load|weight|init|creat|build")
# A function named for the logits counts within this many frames of the allocation (module-call wrappers
# aside): verl's compute_log_prob runs the whole actor forward, so far above an attention layer's OOM its
# name says nothing of what failed.
LOGITS_DEPTH = 4
# Frames of a module call's plumbing (torch.nn.Module.__call__ and its hooks), not steps of the program.
WRAPPER_PATHS = ("torch/nn/modules/module.py", "accelerate/hooks.py", "torch/utils/_contextlib.py")
# Consecutive frames of one traceback are this few lines apart (the code line, a ^^^^ marker line of
# Python 3.11+); a frame with none after it within them is the innermost, where the allocation was made.
FRAME_STRIDE = 4


# vLLM 0.2-0.5's worker step that captured the CUDA graphs (later versions named it
# compile_or_warm_up_model and added the sampler warm-up to it, so only the exact name counts).
_V0_WARM_UP = re.compile(r"(?<!\w)warm_up_model\b")


def frame_category(frame: Frame) -> str | None:
    """The step a frame belongs to; the code line under it (the call it was making) decides first. A frame in
    a CUDA-graph module counts as capture only when it is capturing (`capture_model`, `__exit__` of
    torch.cuda.graph ending a capture); replaying a graph (`__call__`, `replay`) is serving."""
    path, func = frame.path.lower(), frame.function
    if _V0_WARM_UP.match(func) or _V0_WARM_UP.search(frame.code):
        return "cudagraph"
    capture_keys = dict(FRAME_CATEGORIES)["cudagraph"]
    if any(k in func.lower() for k in capture_keys):
        return "cudagraph"  # a capture function (any platform's: _capture_aclgraphs) whatever it calls
    if any(m in path for m in CUDAGRAPH_MODULES) or "cudagraph" in func.lower():
        code = frame.code.lower()
        if "capture" in func.lower() or "capture" in code or func == "__exit__":
            return "cudagraph"
        if "replay" in code or "replay" in func or func in ("__call__", "forward", "run"):
            return "serving"
    for text in (frame.code.lower(), f"{path} {func.lower()}"):
        for umbrella in UMBRELLA_STEPS:
            text = text.replace(umbrella, "")
        for category, keys in FRAME_CATEGORIES:
            if any(k in text for k in keys):
                return category
    if func == "__init__" and ("/models/" in path or "/layers/" in path):
        return "weights"  # building a module allocates its parameters
    if func == "forward" or "/models/" in path or "/layers/" in path or "torch/nn/" in path:
        return "forward"
    return None


@dataclass
class Contribution:
    cls: CauseClass
    weight: float
    why: str
    facts: list[Fact] = field(default_factory=list)


@dataclass
class Tally:
    """Weights per (class, reason); the same reason counts once (its strongest weight)."""

    parts: dict[tuple[CauseClass, str], Contribution] = field(default_factory=dict)

    def add(self, cls: str, weight: float, why: str, *facts: Fact | None) -> None:
        cause = CauseClass(cls)  # a class outside the taxonomy is a defect of the rule: ValueError
        key = (cause, why)
        have = self.parts.get(key)
        real = [f for f in facts if f is not None]
        if have is None:
            self.parts[key] = Contribution(cause, weight, why, real)
        else:
            if abs(weight) > abs(have.weight):
                have.weight = weight
            have.facts.extend(f for f in real if f not in have.facts)

    def score(self, cls: str) -> float:
        return sum(c.weight for c in self.parts.values() if c.cls == cls)

    def of(self, cls: str) -> list[Contribution]:
        return [c for c in self.parts.values() if c.cls == cls]


@dataclass(frozen=True)
class Situation:
    """What the facts say about when and where it failed, computed once for all rules."""

    failures: list[Fact]
    first_failure: Fact | None
    # 'startup-weights' | 'startup-profile' | 'startup-kv-alloc' | 'startup-cudagraph' | 'startup-warmup'
    # | 'runtime' | 'host' | 'unknown'
    phase: str
    phase_why: str
    phase_fact: Fact | None
    categories: dict[str, list[Frame]]
    kv_at_crash: LoadSample | None
    gpu_failure: (
        bool  # a GPU-side failure: an OOM message, an engine memory error, or a traceback (not a host kill)
    )


FAILURE_SIGNALS = {
    "encoder-step-failed",
    "encoder-cache-too-small",
    "prompt-exceeds-kv-capacity",
    "free-memory-below-utilization",
    "engine-leak-check",
    "no-kv-cache-memory",
    "negative-kv-memory",
    "state-blocks-below-max-seqs",
    "max-model-len-exceeds-kv",
    "cannot-auto-fit",
    "load-model-failed",
    "sampler-warmup-oom",
    "pooler-warmup-oom",
    "profiling-memory-released",
    "int32-index-math",
    "illegal-memory-access",
    "device-error",
    "internal-assert",
    "misreported-oom",
    "hsa-out-of-resources",
    "deepep-error",
    "nvshmem-alloc",
    "sglang-negative-token-budget",
    "sglang-not-enough-memory",
    "sglang-kv-alloc-failed",
    "engine-dead",
    "ray-actor-died",
    "prefill-tokens-dont-fit",
    "sglang-cudagraph-failed",
    "cudagraph-capture-failed",
    "kv-pool-dry",
    "lora-cache-full",
    "logits-buffer-failed",
    "workspace-too-small",
} | HOST_SIGNALS
MILESTONE_PHASE = {
    "milestone-weights-loading": "startup-weights",
    "milestone-drafter-loading": "startup-weights",
    "milestone-weights-loaded": "startup-profile",
    "milestone-profile": "startup-profile",
    "milestone-mm-profile": "startup-profile",
    "milestone-kv-allocating": "startup-kv-alloc",
    "milestone-kv-sized": "startup-cudagraph",
    "milestone-cudagraph-start": "startup-cudagraph",
    "milestone-cudagraph-done": "startup-warmup",
    "milestone-serving": "runtime",
}
# Engine errors raised at one known step.
SIGNAL_PHASE = {
    "free-memory-below-utilization": "startup-weights",
    "load-model-failed": "startup-weights",
    "no-kv-cache-memory": "startup-kv-alloc",
    "negative-kv-memory": "startup-kv-alloc",
    "state-blocks-below-max-seqs": "startup-kv-alloc",
    "max-model-len-exceeds-kv": "startup-kv-alloc",
    "cannot-auto-fit": "startup-kv-alloc",
    "sampler-warmup-oom": "startup-warmup",
    "sglang-negative-token-budget": "startup-kv-alloc",
    "sglang-not-enough-memory": "startup-kv-alloc",
    "sglang-kv-alloc-failed": "runtime",
    "prefill-tokens-dont-fit": "startup-profile",
    "kv-pool-dry": "runtime",
    "lora-cache-full": "runtime",
    "engine-leak-check": "runtime",
    "encoder-step-failed": "runtime",
    "encoder-cache-too-small": "runtime",
    "prompt-exceeds-kv-capacity": "runtime",
    "sglang-cudagraph-failed": "startup-cudagraph",
    "cudagraph-capture-failed": "startup-cudagraph",
    **{name: "host" for name in HOST_SIGNALS},
}
MILESTONE_ORDER = (
    "milestone-weights-loading",
    # (llama.cpp creates the target's context before it loads a draft model or warms up its projector)
    "milestone-kv-allocating",
    "milestone-drafter-loading",  # inside load_model, after the target's weights
    "milestone-weights-loaded",
    "milestone-profile",
    "milestone-mm-profile",
    "milestone-kv-sized",
    "milestone-cudagraph-start",
    "milestone-cudagraph-done",
    "milestone-serving",
)


def _milestone_rank(name: str) -> int:
    """A milestone's place in startup; a capture's start and end share one, so that the later line decides
    between them (SGLang captures the draft model's graphs after the target's have ended)."""
    if name == "milestone-cudagraph-done":
        name = "milestone-cudagraph-start"
    return MILESTONE_ORDER.index(name)


def situation(ev: Evidence) -> Situation:
    failures: list[Fact] = [*ev.of(OomMessage), *[s for s in ev.of(Signal) if s.name in FAILURE_SIGNALS]]
    failures.sort(key=lambda f: (f.where.source, f.where.line))
    first = failures[0] if failures else None
    categories: dict[str, list[Frame]] = {}
    frames = ev.of(Frame)
    depths = _depths(frames)
    for frame, depth in zip(frames, depths, strict=True):
        cat = frame_category(frame)
        if cat in (None, "forward", "serving") and logits_frame(frame, depth):
            cat = "sampler"  # the allocation that failed was the logits (or their log-softmax)
        if cat:
            categories.setdefault(cat, []).append(frame)
    samples = ev.of(LoadSample)
    kv_at_crash = None
    with_kv = [s for s in samples if s.kv_usage is not None]
    if with_kv:
        kv_at_crash = with_kv[-1]
        if first is not None:
            before = [
                s
                for s in with_kv
                if s.where.source == first.where.source and s.where.line <= first.where.line
            ]
            kv_at_crash = before[-1] if before else kv_at_crash
    phase, why, fact = _phase(ev, first, categories, samples)
    host_failure = any(isinstance(f, Signal) and f.name in HOST_SIGNALS for f in failures)
    gpu_failure = any(not (isinstance(f, Signal) and f.name in HOST_SIGNALS) for f in failures) or (
        bool(ev.of(Frame)) and not host_failure
    )
    return Situation(failures, first, phase, why, fact, categories, kv_at_crash, gpu_failure)


def logits_frame(frame: Frame, depth: int) -> bool:
    """Whether a frame `depth` steps above the allocation computes the vocabulary-wide tensors: a function
    named for them near the allocation, or the innermost call made on the logits themselves."""
    func = frame.function.lower()
    if depth <= LOGITS_DEPTH and LOGITS_FUNCTION.search(func) and not BUILDING_FUNCTION.search(func):
        return True
    return depth == 0 and bool(LOGITS_CODE.search(frame.code)) and not OTHER_LOGITS_CODE.search(frame.code)


def _depths(frames: list[Frame]) -> list[int]:
    """Each frame's distance from the innermost frame of its traceback (0: where the allocation was made),
    counting program steps only (module-call plumbing aside). Frames of one traceback are consecutive, at
    most FRAME_STRIDE lines apart."""
    depths = [0] * len(frames)
    below = 0
    for i in range(len(frames) - 1, -1, -1):
        here = frames[i].where
        after = frames[i + 1].where if i + 1 < len(frames) else None
        joined = (
            after is not None and after.source == here.source and 0 < after.line - here.line <= FRAME_STRIDE
        )
        if not joined:
            below = 0
        elif not any(w in frames[i + 1].path for w in WRAPPER_PATHS):
            below += 1
        depths[i] = below
    return depths


def _phase(
    ev: Evidence, first: Fact | None, cats: dict[str, list[Frame]], samples: list[LoadSample]
) -> tuple[str, str, Fact | None]:
    for cat, phase in (
        ("cudagraph", "startup-cudagraph"),
        ("kv-alloc", "startup-kv-alloc"),
        ("profile", "startup-profile"),
        ("weights", "startup-weights"),
    ):
        if cat in cats:
            return phase, f"a {cat} frame is on the stack", cats[cat][0]
    if isinstance(first, Signal) and SIGNAL_PHASE.get(first.name, "host") != "host":
        return SIGNAL_PHASE[first.name], f"the engine's own error names the step: {first.name}", first
    named = ev.of(FailedStep)
    if named:
        return named[0].step, f"the engine's worker names the method that raised: {named[0].method}", named[0]
    milestones = [s for s in ev.of(Signal) if s.name in MILESTONE_PHASE]
    if first is not None:
        milestones = [
            m for m in milestones if m.where.source == first.where.source and m.where.line <= first.where.line
        ]
    if milestones:
        last = max(milestones, key=lambda m: (_milestone_rank(m.name), m.where.line))
        step = _request_step(ev)
        if step is not None and last.name in AFTER_KV_SIZING:
            return (
                "runtime",
                (
                    f"a request's step is on the stack ({step.function}) after the KV pool was sized "
                    f"({last.name[10:]}): the server was serving"
                ),
                step,
            )
        gap = _gap(last, first)
        if gap is not None and gap >= SERVING_GAP_S and last.name in AFTER_KV_SIZING:
            return (
                "runtime",
                (
                    f"the failure came {gap / 60:.0f} min after the last startup step "
                    f"({last.name[10:]}): the server had been serving"
                ),
                first,
            )
        return (
            MILESTONE_PHASE[last.name],
            f"the last startup step logged before the failure: {last.name[10:]}",
            last,
        )
    if isinstance(first, Signal) and first.name in SIGNAL_PHASE:
        return SIGNAL_PHASE[first.name], f"the engine's own error names the step: {first.name}", first
    if ev.has("engine-init-failed") and not ev.has("milestone-serving"):
        return (
            "startup",
            "the engine reported that its initialization failed (step not in the evidence)",
            (ev.signals("engine-init-failed")[0]),
        )
    if samples or "serving" in cats or "forward" in cats:
        in_request = cats.get("serving") or cats.get("forward") or []
        fact: Fact | None = samples[0] if samples else (in_request[0] if in_request else None)
        return "runtime", "the server was serving (stats lines / request frames)", fact
    if isinstance(first, OomMessage) and nothing_freed(first):
        return (
            "startup",
            "PyTorch's cache held almost no freed memory: no forward step had run and freed its temporaries",
            first,
        )
    return "unknown", "no startup step or serving line in the evidence", None


def nothing_freed(o: OomMessage) -> bool:
    """Whether PyTorch's allocator had freed (almost) nothing when the allocation failed: what it reserves
    beyond the live tensors is block rounding only, so the program had built, never run a step."""
    unallocated = o.reserved_unallocated
    return o.flavor in TORCH_FLAVORS and unallocated is not None and unallocated <= NOTHING_FREED


def _request_step(ev: Evidence) -> Frame | None:
    """The first frame of an engine's per-request step, if the stack has one."""
    for frame in ev.of(Frame):
        if frame.function.startswith(REQUEST_STEP_FRAMES):
            return frame
    return None


def _gap(before: Fact, after: Fact | None) -> float | None:
    """Seconds between two timestamped lines of one document (None when either has no timestamp)."""
    if after is None or before.where.time is None or after.where.time is None:
        return None
    return after.where.time - before.where.time


def score(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None = None) -> tuple[Tally, Situation]:
    tally = Tally()
    sit = situation(ev)
    _engine_errors(ev, setup, tally, sit)
    _oom_messages(ev, setup, tally, sit)
    _logits_sized(ev, setup, tally)
    _logits_table_on_host(ev, tally)
    _frames(ev, setup, tally, sit)
    _phase_rules(ev, setup, tally, sit)
    _runtime(ev, setup, tally, sit)
    _step(ev, step, tally)
    _host(ev, tally)
    _processes(ev, tally)
    _held_before_start(ev, setup, tally)
    _device_creep(ev, tally)
    _snapshot(ev, tally)
    _dp_ranks(ev, tally)
    _tp_ranks(ev, tally)
    _config(ev, setup, tally, sit)
    _weights_vs_device(ev, setup, tally, sit)
    _logged_weights_vs_device(ev, setup, tally, sit)
    _context_vs_room(ev, setup, tally, sit)
    _memory_plan(ev, tally)
    _prose(ev, tally)
    _levers_tried(ev, tally)
    _growth_into_oom(ev, tally, sit)
    _growth_before_kill(ev, tally, sit)
    _priors(ev, tally, sit)
    return tally, sit


def _engine_errors(ev: Evidence, setup: EngineSetup, t: Tally, sit: Situation) -> None:
    for s in ev.signals("free-memory-below-utilization"):
        t.add(
            "other-process-or-shared-gpu",
            STRONG,
            "less memory was free at start than the utilization asks for: "
            "something else holds part of the GPU",
            s,
        )
    estimates = [n for n in ev.of(StartupNumber) if n.quantity == "cuda_graph_estimate_bytes"]
    total = setup.gpu_total_bytes
    for s in ev.signals("no-kv-cache-memory", "negative-kv-memory", "cannot-auto-fit"):
        t.add("kv-cache-insufficient-at-startup", STRONG, "the engine found no memory left for KV blocks", s)
        huge = [
            e
            for e in estimates
            if e.value >= CUDAGRAPH_HUGE or (total and e.value >= CUDAGRAPH_HUGE_SHARE * total)
        ]
        decisive = _estimate_left_no_kv(ev, setup)
        if decisive is not None:
            estimate, kv = decisive
            t.add(
                "cuda-graph-capture",
                STRONG + 1.0,
                f"the {estimate.value / GIB:.2f} GiB CUDA-graph estimate is what "
                f"left no KV: without it {(kv.value + estimate.value) / GIB:.2f} GiB would remain",
                estimate,
                kv,
                s,
            )
        elif huge:
            t.add(
                "cuda-graph-capture",
                STRONG + 1.0,
                "the CUDA-graph memory estimate alone is a large share of the budget and left nothing for KV",
                huge[0],
                s,
            )
        weights = [n for n in ev.of(StartupNumber) if n.quantity == "weights_bytes"]
        budgets = [n for n in ev.of(StartupNumber) if n.quantity == "budget_bytes"]
        _empty_pool_not_from_weights(setup, t, s, weights, budgets)
        if weights and budgets and weights[-1].value >= 0.9 * budgets[-1].value:
            t.add(
                "weights-dont-fit",
                MEDIUM,
                "the weights alone take >= 90% of the budget",
                weights[-1],
                budgets[-1],
            )
    for s in ev.signals("state-blocks-below-max-seqs"):
        seqs, blocks = s.number("max_num_seqs"), s.number("blocks") or 0
        asked = f"max_num_seqs {seqs:.0f}" if seqs is not None else "max_num_seqs"
        t.add(
            "kv-cache-insufficient-at-startup",
            STRONG,
            f"the KV budget holds {blocks:.0f} recurrent-state blocks, one per running sequence, fewer than "
            f"{asked}: the pool is too small for the concurrency asked",
            s,
        )
    _pool_below_one_request(ev, setup, t)
    _weights_measured_nothing(ev, t, sit)
    if ev.of(OomMessage):
        for s in ev.signals("trt-runtime-buffers")[:1]:
            t.add(
                "sampler-or-logits",
                MEDIUM + 0.5,
                "TensorRT-LLM's per-step runtime buffers failed to grow: their largest part is the logits, "
                "a row of the vocabulary per sequence (and per token when generation logits are gathered), "
                "outside the KV cache's fraction",
                s,
            )
    for s in ev.signals("max-model-len-exceeds-kv"):
        t.add(
            "max-model-len-exceeds-kv",
            STRONG + 0.5,
            "one request at max_model_len needs more KV than the pool has",
            s,
        )
        t.add("kv-cache-insufficient-at-startup", WEAK, "the KV pool is small for this context", s)
    for s in ev.signals("load-model-failed"):
        t.add("weights-dont-fit", STRONG, "the engine's loader failed placing the weights in GPU memory", s)
    for s in ev.signals("logits-buffer-failed"):
        t.add(
            "sampler-or-logits",
            STRONG + 0.5,
            "the engine could not allocate its logits output buffer (rows of the vocabulary per output "
            "token, fp32)",
            s,
        )
    for s in ev.signals("prompt-logprobs-requested")[:1]:
        # Only requests carry the option: a failure while serving them, or one not placed, is theirs to
        # explain; a startup failure is not.
        serving = sit.phase in ("runtime", "unknown") and (bool(sit.failures) or sit.gpu_failure)
        t.add(
            "sampler-or-logits",
            MEDIUM + 0.5 if serving else WEAK,
            "a request asks for its prompt's logprobs: every prompt token holds a row of the vocabulary, "
            "which the profile run (a prefill without logprobs) never measured",
            s,
        )
    for s in ev.signals("sampler-warmup-oom", "pooler-warmup-oom"):
        t.add(
            "sampler-or-logits",
            STRONG + 0.5,
            "the OOM happened in the sampler warm-up over max_num_seqs dummy requests x the vocabulary",
            s,
        )
        if setup.v1 is not False and (setup.version is None or not setup.behaviour.cuda_graphs_in_budget):
            t.add(
                "cuda-graph-capture",
                WEAK,
                "before v0.21 the graph pool was outside the budget and the sampler "
                "warm-up ran after capture",
                s,
            )
    for s in ev.signals("profiling-memory-released"):
        t.add(
            "other-process-or-shared-gpu",
            STRONG,
            "free memory changed during profiling: another process shares the GPU",
            s,
        )
    for s in ev.signals("cudagraph-estimate-hint"):
        t.add("cuda-graph-capture", STRONG, "the OOM text points at the CUDA-graph memory estimate", s)
    for s in ev.signals("int32-index-math"):
        t.add(
            "int32-index-overflow",
            STRONG + 1.0,
            "a kernel's 32-bit index math overflowed (more than 2^31 elements)",
            s,
        )
    for s in ev.signals("int64-widening")[:1]:
        t.add(
            "int32-index-overflow",
            MEDIUM + 0.5,
            "the quoted fix widens an index or offset to 64 bits: its 32-bit arithmetic overflowed",
            s,
        )
    mnbt = setup.flag_int("max_num_batched_tokens") or 0
    for s in ev.signals("illegal-memory-access"):
        t.add(
            "int32-index-overflow",
            MEDIUM,
            "an illegal memory access in a kernel is how 32-bit offsets overflow silently",
            s,
        )
        if sit.phase == "startup-profile":
            t.add("int32-index-overflow", MEDIUM, "it happened in the profile run, the largest step shape", s)
        if mnbt >= INT32_RISK_TOKENS:
            t.add(
                "int32-index-overflow",
                MEDIUM,
                f"max_num_batched_tokens {mnbt:,}: an MLP input of that many "
                "tokens passes 2^31 elements for intermediate sizes >= 8,192",
                s,
            )
    for s in ev.signals("deepep-error"):
        t.add(
            "ep-all2all-buffer",
            STRONG,
            "DeepEP (expert-parallel all-to-all) failed: its buffers are allocated "
            "outside PyTorch and surface as 'invalid argument' when the memory is not there",
            s,
        )
    for s in ev.signals("nvshmem-alloc"):
        t.add(
            "ep-all2all-buffer",
            STRONG,
            "an NVSHMEM allocation (the EP all-to-all buffer) failed or was probed",
            s,
        )
    for s in ev.signals("nccl-error"):
        t.add("other", MEDIUM, "an NCCL error: communicator memory is outside vLLM's budget", s)
    for s in ev.signals("offload-pool-full")[:1]:
        t.add(
            "other",
            STRONG,
            "the KV offload connector's own pool (sized by its configuration) had no room; the GPU did not "
            "run out",
            s,
        )
        t.add(
            "memory-leak",
            WEAK,
            "a connector pool that fills under steady load is one whose blocks are not given back",
            s,
        )
    for s in ev.signals("misreported-oom")[:1]:
        t.add(
            "other",
            STRONG,
            "the wrapper only guesses memory; the error under it is one no allocation raises, and nothing "
            "says memory ran out",
            s,
        )
    out_of_memory = any(isinstance(f, OomMessage) for f in sit.failures)
    for s in ev.signals("device-error")[:1]:
        # An allocator's out-of-memory message beside it is the likelier first failure; alone, the device
        # error is the failure, and no memory mechanism explains it.
        t.add(
            "other",
            MEDIUM if out_of_memory else STRONG,
            "the device could not run the work (no code for this GPU, a driver too old, a device the process "
            "cannot see): an error that is not a lack of memory",
            s,
        )
    for s in ev.signals("internal-assert")[:1]:
        # Beside an allocator's out-of-memory message the assert may follow from the OOM; alone, it is the
        # failure, and a framework bug explains it.
        t.add(
            "other",
            MEDIUM if out_of_memory else STRONG,
            "PyTorch's own invariant check failed (an internal assert, 'please report a bug'): a bug in the "
            "framework, not a lack of memory",
            s,
        )
    for s in ev.signals("sglang-negative-token-budget", "sglang-not-enough-memory"):
        t.add(
            "kv-cache-insufficient-at-startup",
            STRONG,
            "SGLang's profiled KV token budget is zero or negative",
            s,
        )
        share = s.number("weights_share")
        if share is not None and share >= WEIGHTS_FILL:
            t.add(
                "weights-dont-fit",
                STRONG + 0.5,
                f"the weights took {share:.0%} of the memory free before they loaded: no mem_fraction_static "
                "leaves room for the KV pool and the activations besides",
                s,
            )
        t.add(
            "weights-dont-fit",
            WEAK,
            "weights leave no room for the static pool at this mem_fraction_static",
            s,
        )
    for s in ev.signals("sglang-unbalanced-memory"):
        t.add(
            "other-process-or-shared-gpu",
            STRONG,
            "SGLang saw unequal free memory across GPUs: another process",
            s,
        )
    for s in ev.signals("sglang-cudagraph-failed"):
        t.add("cuda-graph-capture", STRONG + 0.5, "SGLang says its CUDA-graph capture failed", s)
    for s in ev.signals("cudagraph-capture-failed")[:1]:
        t.add("cuda-graph-capture", STRONG + 0.5, "the engine says a CUDA-graph capture ran out of memory", s)
    for s in ev.signals("sglang-retract"):
        t.add("kv-exhaustion-at-runtime", STRONG, "SGLang retracted requests: the KV pool was full", s)
    for s in ev.signals("sglang-kv-alloc-failed"):
        t.add(
            "kv-exhaustion-at-runtime",
            STRONG,
            "SGLang could not allocate KV slots for the batch: the pool was full",
            s,
        )
    for s in ev.signals("ray-actor-died"):
        t.add(
            "host-ram-oom",
            MEDIUM,
            "a Ray actor's worker process died without a Python error: Ray's first named cause is the "
            "OOM killer (SIGKILL)",
            s,
        )
    for s in ev.signals("prefill-tokens-dont-fit"):
        t.add(
            "activation-peak",
            STRONG,
            "the engine's warm-up could not fit one prefill batch of that many tokens",
            s,
        )
    residual = ev.signals("sleep-residual")
    budgets = [n for n in ev.of(StartupNumber) if n.quantity == "budget_bytes"]
    rising = (
        len(residual) >= 2
        and (residual[-1].number("residual_bytes") or 0)
        >= (residual[0].number("residual_bytes") or 0) + RESIDUAL_GROWTH
    )
    for r in residual[:1] if not rising else []:
        kept = r.number("residual_bytes") or 0
        own = budgets[-1].value if budgets else r.number("freed_bytes")
        if own and kept > own:
            t.add(
                "other-process-or-shared-gpu",
                STRONG,
                f"after vLLM slept, {kept / GIB:.2f} GiB stayed in use, more than vLLM's own "
                f"{own / GIB:.2f} GiB: another process or framework on the GPU holds it",
                r,
            )
    if len(residual) >= 2:
        first, last = residual[0].number("residual_bytes") or 0, residual[-1].number("residual_bytes") or 0
        if last >= first + RESIDUAL_GROWTH:
            t.add(
                "memory-leak",
                STRONG,
                f"memory still in use after sleep grew from {first / GIB:.2f} to {last / GIB:.2f} GiB "
                f"over {len(residual)} cycles",
                residual[0],
                residual[-1],
            )
    if "wake-up" not in sit.categories:
        for s in ev.signals("sleep-mode-oom")[:1]:
            t.add(
                "other-process-or-shared-gpu",
                MEDIUM + 0.5,
                "the OOM came from the sleep-mode allocator, which maps memory back on wake-up: sleep mode "
                "is how a GPU is shared with a trainer, and what the trainer holds is what is missing",
                s,
            )
    for s in ev.signals("engine-leak-check"):
        t.add(
            "memory-leak",
            STRONG + 1.0,
            "the engine's own check found KV slots that finished requests never returned",
            s,
        )
    for s in ev.signals("kv-pool-dry"):
        t.add(
            "kv-exhaustion-at-runtime",
            STRONG + 0.5,
            "the KV pool had no room left for the running requests",
            s,
        )
    _platform_limit(ev, t)
    _workspace_too_small(ev, t)
    for s in ev.signals("encoder-step-failed")[:1]:
        t.add(
            "multimodal-encoder",
            STRONG + 0.5,
            "the engine's own lines say a request's image was in the encoder when it failed",
            s,
        )
    for s in ev.signals("encoder-cache-too-small")[:1]:
        item, cache = s.number("item_tokens") or 0, s.number("cache_tokens") or 0
        t.add(
            "multimodal-encoder",
            STRONG + 0.5,
            f"a multimodal item of {item:.0f} embedding tokens is larger than the {cache:.0f}-token encoder "
            "cache the startup profile sized",
            s,
        )
    for s in ev.signals("mm-profile-too-short")[:1]:
        # A warning at startup: the profile measured less than a multimodal request takes. With a GPU failure
        # after it, that request is the likeliest to have found the memory missing.
        profiled, needed = s.number("profile_tokens") or 0, s.number("mm_tokens") or 0
        t.add(
            "multimodal-encoder",
            MEDIUM + 0.5 if sit.gpu_failure else WEAK,
            f"the memory profile ran a {profiled:.0f}-token sequence, too short for the worst-case "
            f"{needed:.0f} multimodal embedding tokens: a multimodal request takes more than was reserved",
            s,
        )
    for s in ev.signals("prompt-exceeds-kv-capacity")[:1]:
        tokens = s.number("prompt_tokens") or 0
        t.add(
            "max-model-len-exceeds-kv",
            STRONG + 0.5,
            f"a {tokens:.0f}-token prompt needs more KV blocks than the whole pool holds: the pool is "
            "smaller than one request at max_model_len",
            s,
        )
    for s in ev.signals("lora-cache-full"):
        t.add(
            "spec-decode-or-lora-extra",
            STRONG + 0.5,
            "the LoRA adapter cache is too small for the adapters the requests need",
            s,
        )
    for s in ev.signals("kv-preempted"):
        t.add(
            "kv-exhaustion-at-runtime",
            MEDIUM + 0.5,
            "the scheduler preempted requests for lack of KV space",
            s,
        )


def _platform_limit(ev: Evidence, t: Tally) -> None:
    """A limit of the platform other than free memory refused it: a buffer count or a core's scratch memory
    outright; a cap on one allocation (Intel's 4 GB, Vulkan's maxMemoryAllocationSize, WebGPU's
    maxBufferSize) unless the request was larger than the whole device anyway. The cap, not free memory, is
    then why it failed (splitting the buffer, or the runtime's relaxed-limits setting, is the fix), so the
    out-of-memory causes the allocation failure itself points at lose their weight."""
    for s in ev.signals("platform-limit")[:1]:
        cap = s.number("limit_bytes")
        if cap is None and not s.number("per_allocation"):
            t.add("other", STRONG, "a limit of the platform refused it, not the device's free memory", s)
            continue
        requested, total = s.number("requested_bytes"), s.number("total_bytes")
        room = total - (s.number("reserved_bytes") or 0) if total else None
        if requested and room is not None and requested > room:
            # larger than the device: too large with or without the cap, the step's own size
            t.add("other", -MEDIUM, f"the {requested / GIB:.2f} GiB request is larger than the device", s)
            continue
        if requested and room is not None and cap:
            why = (
                f"the {requested / GIB:.2f} GiB request fit the {room / GIB:.2f} GiB the device had "
                f"unreserved; the platform refuses any single allocation above {cap / GIB:.0f} GiB"
            )
        elif cap:
            why = f"the platform refuses any single allocation above {cap / GIB:.2f} GiB, and this one was"
        else:
            why = (
                "the runtime refused the size of one allocation (its per-allocation cap), not for free memory"
            )
        t.add("other", STRONG, why, s)
        for cls in OOM_CAUSES_OF_ONE_ALLOCATION:
            t.add(
                cls, -MEDIUM, "a cap on one allocation refused the request, not the device's free memory", s
            )


def _workspace_too_small(ev: Evidence, t: Tally) -> None:
    """A kernel's temporary buffer did not fit the fixed workspace the engine handed the attention library
    (FlashInfer's, allocated once at its configured size): the workspace's size refused it, whatever the GPU
    had free, so the causes of a failed allocation lose their weight."""
    said = ev.signals("workspace-too-small")
    for s in sorted(said, key=lambda s: s.number("available_bytes") is None)[:1]:
        t.add(
            "other",
            STRONG,
            "the attention library's fixed workspace could not hold a kernel's temporary buffer: its "
            "configured size refused it, not the device's free memory",
            s,
        )
        for cls in OOM_CAUSES_OF_ONE_ALLOCATION:
            t.add(cls, -MEDIUM, "a fixed workspace refused the request, not the device's free memory", s)


# The causes an allocation failure points at by itself (its size against free memory), which a per-allocation
# cap refusing it rules down.
OOM_CAUSES_OF_ONE_ALLOCATION = (
    "activation-peak",
    "other-process-or-shared-gpu",
    "weights-dont-fit",
    "max-model-len-exceeds-kv",
)


# Weights this small against the budget cannot be what left the KV pool empty.
SMALL_WEIGHTS_SHARE = 0.25
SMALL_WEIGHTS = 1 * GIB
# A utilization this low is what people set to share a GPU.
SHARED_UTILIZATION = 0.5


def _empty_pool_not_from_weights(
    setup: EngineSetup, t: Tally, s: Signal, weights: list[StartupNumber], budgets: list[StartupNumber]
) -> None:
    """An empty KV pool with small weights, or at a utilization people use to share a GPU: the budget went
    to something else on the device (vLLM sizes from the memory free at start)."""
    total = setup.gpu_total_bytes
    u = setup.flag_float("gpu_memory_utilization")
    if weights:
        w = weights[-1].value
        budget = budgets[-1].value if budgets else (total * u if total and u else None)
        if w <= SMALL_WEIGHTS or (budget and w <= SMALL_WEIGHTS_SHARE * budget):
            t.add(
                "other-process-or-shared-gpu",
                STRONG + 0.5,
                f"the weights took only {w / GIB:.2f} GiB, yet nothing was left for KV: something else holds "
                "the GPU's memory",
                weights[-1],
                s,
            )
    if u is not None and u <= SHARED_UTILIZATION:
        # The other tenant is the cause and the empty pool its symptom: it ranks above the pool.
        t.add(
            "other-process-or-shared-gpu",
            STRONG + 0.5,
            f"gpu_memory_utilization {u} is how a GPU is shared between servers; the other one holds the "
            "rest",
            s,
        )


def _pool_below_one_request(ev: Evidence, setup: EngineSetup, t: Tally) -> None:
    """Logged blocks x block size below max_model_len (old vLLM started anyway), or SGLang left with little
    after loading its weights: the KV pool is too small at startup."""
    length = setup.flag_int("max_model_len")
    block = setup.flag_int("block_size") or 16
    for n in ev.of(StartupNumber):
        if n.quantity == "num_gpu_blocks" and length and 0 < n.value * block < length:
            t.add(
                "kv-cache-insufficient-at-startup",
                STRONG,
                f"{int(n.value)} blocks x {block} tokens hold {int(n.value) * block} tokens, below "
                "max_model_len "
                f"{length}",
                n,
            )
            break
    avail = [n for n in ev.of(StartupNumber) if n.quantity == "sglang_avail_after_load_bytes"]
    used = [n for n in ev.of(StartupNumber) if n.quantity == "sglang_weights_bytes"]
    if avail and used and avail[-1].value < SGLANG_LITTLE_LEFT * (avail[-1].value + used[-1].value):
        t.add(
            "kv-cache-insufficient-at-startup",
            MEDIUM + 0.5,
            f"only {avail[-1].value / GIB:.2f} GiB was left after the weights ({used[-1].value / GIB:.2f} "
            "GiB): "
            "no room for SGLang's KV pool",
            avail[-1],
        )


# vLLM logging weights below this measured no weights at all (a real model is far larger).
WEIGHTS_NOT_SEEN = 16 * MIB


def _weights_measured_nothing(ev: Evidence, t: Tally, sit: Situation) -> None:
    """vLLM logs ~0 GiB of weights when its profile measured a device, or a process's memory, other than the
    one the model is on (a trainer that builds the engine inside its own device context): the KV budget it
    then takes ignores what the other holds on the GPU."""
    zero = [n for n in ev.of(StartupNumber) if n.quantity == "weights_bytes" and n.value < WEIGHTS_NOT_SEEN]
    if zero and (sit.failures or sit.gpu_failure):
        t.add(
            "other-process-or-shared-gpu",
            MEDIUM + 0.5,
            f"vLLM measured {zero[0].value / GIB:.2f} GiB of weights: its profile did not see the memory on "
            "the GPU, so its KV budget ignores what another process (the trainer) holds there",
            zero[0],
        )


# SGLang with less than this share of the device left after loading has no room for its static KV pool.
SGLANG_LITTLE_LEFT = 0.2


def _estimate_left_no_kv(ev: Evidence, setup: EngineSetup) -> tuple[StartupNumber, StartupNumber] | None:
    """(estimate, KV) when the logged KV memory is <= 0 but would be positive without the CUDA-graph estimate,
    and the estimate was charged to the budget (v0.21+ by default; earlier only with the env var set to 1)."""
    charged = setup.flag("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS")
    # The version table says from which version the estimate is charged to the budget by default.
    if charged == "0" or (not setup.behaviour.cuda_graphs_in_budget and charged != "1"):
        return None
    estimates = [n for n in ev.of(StartupNumber) if n.quantity == "cuda_graph_estimate_bytes"]
    kvs = [n for n in ev.of(StartupNumber) if n.quantity == "kv_available_bytes"]
    if not estimates or not kvs:
        return None
    estimate, kv = max(estimates, key=lambda n: n.value), min(kvs, key=lambda n: n.value)
    return (estimate, kv) if kv.value <= 0 < kv.value + estimate.value else None


def _oom_messages(ev: Evidence, setup: EngineSetup, t: Tally, sit: Situation) -> None:
    for o in ev.of(OomMessage):
        if o.reserved_unallocated is not None and o.requested:
            if o.reserved_unallocated >= max(FRAGMENTED_MIN, o.requested):
                t.add(
                    "fragmentation",
                    STRONG,
                    "reserved-but-unallocated memory exceeds the failed request: the "
                    "bytes were there, not in one piece",
                    o,
                )
            elif o.reserved_unallocated >= max(FRAGMENTED_MIN, o.requested / 2):
                t.add(
                    "fragmentation",
                    MEDIUM,
                    "reserved-but-unallocated memory is a large share of the request",
                    o,
                )
            elif o.reserved_unallocated < max(FRAGMENTED_NEGLIGIBLE, o.requested / 10):
                t.add(
                    "fragmentation",
                    -MEDIUM,
                    "reserved-but-unallocated memory is small against the request: not fragmentation",
                    o,
                )
        _free_in_pieces(o, t)
        if o.flavor == "expandable-segments":
            t.add(
                "fragmentation",
                -WEAK,
                "expandable segments were on: segments grow in place, fragmentation is unlikely",
                o,
            )
        short = o.requested - o.free if o.requested and o.free is not None else None
        pools = o.private_pools or 0
        if o.total and pools >= GRAPH_POOLS_SHARE * o.total and (short is None or pools >= short):
            # (Graph pools smaller than what the request lacked could all be freed and it would still fail.)
            t.add(
                "cuda-graph-capture",
                MEDIUM,
                "private pools (CUDA graphs) hold more of the device than an engine's budgeted graphs take",
                o,
            )
        if o.flavor in ("hsa",):
            t.add("activation-peak", WEAK, "ROCm ran out of device memory during a kernel's launch", o)
        _allocator_quantities(o, t, setup)
        others = other_process_bytes(o)
        if others is not None and others >= OTHER_PROCESS_MIN:
            t.add(
                "other-process-or-shared-gpu",
                STRONG,
                f"other processes hold {others / GIB:.2f} GiB on the failing device",
                o,
            )
        elif others == 0 and (o.this_process or len(o.processes) == 1):
            t.add(
                "other-process-or-shared-gpu", -MEDIUM, "the OOM message lists no other process on the GPU", o
            )
        elif others is not None and o.processes:
            t.add(
                "other-process-or-shared-gpu",
                -MEDIUM,
                f"the other processes the OOM message lists hold under {OTHER_PROCESS_MIN / GIB:.0f} GiB",
                o,
            )


# Vocabulary rows are padded to this multiple before tensor parallelism splits them (vLLM's
# VocabParallelEmbedding / ParallelLMHead, SGLang's alike), so the logits' last dimension is the padded
# vocabulary, or its share per tensor-parallel rank.
VOCAB_PADDING = 64
# A request matching tokens x vocab x 2 bytes is evidence only where a size drawn at random would match with
# at most this chance (summed over the vocabulary widths tried): the printed rounding must be finer than a
# row of logits.
LOGITS_MATCH_CHANCE = 0.1
# More rows than this in one logits tensor is no step any engine or trainer runs.
LOGITS_MAX_ROWS = 1 << 22


# PyTorch's caching allocator reports the block it asked the driver for, not the tensor: a request of 10 MiB
# or more rounded up to a multiple of 2 MiB (kRoundLarge), smaller ones a 2 MiB or 20 MiB buffer
# (c10/cuda/CUDACachingAllocator.cpp get_allocation_size); "Tried to allocate 594.00 MiB" is a 593.50 MiB
# tensor. Its sizes are known to within this much below the printed one.
TORCH_BLOCK_ROUNDING = 2 * MIB
TORCH_FLAVORS = ("torch", "torch-old", "expandable-segments", "hsa")


def size_uncertainty(size: int, flavor: str) -> float:
    """How far the tensor's true size may be from the size an OOM message prints: PyTorch's allocator's block
    rounding, else half the last digit of two decimals of bytes, KiB, MiB or GiB (ggml, XLA)."""
    if flavor in TORCH_FLAVORS:
        return TORCH_BLOCK_ROUNDING
    for unit in (GIB, MIB, 1024):
        if size >= unit:
            return 0.005 * unit
    return 0.5


def logits_rows(requested: int, flavor: str, vocab: int, tp: int) -> tuple[int, int] | None:
    """(rows, width) when `requested` is rows x width x 2 bytes (bf16/fp16 logits; fp32 ones are twice the
    rows) for a width the logits take (the vocabulary, padded, or its tensor-parallel share), within the
    message's rounding; None when no width matches or the rounding is too coarse to tell."""
    padded = -(-vocab // VOCAB_PADDING) * VOCAB_PADDING
    widths = sorted({vocab, padded} | ({padded // tp} if tp > 1 and padded % tp == 0 else set()))
    tolerance = size_uncertainty(requested, flavor)
    if sum(min(1.0, 2 * tolerance / (w * 2)) for w in widths) > LOGITS_MATCH_CHANCE:
        return None
    for width in widths:
        rows = round(requested / (width * 2))
        if 1 <= rows <= LOGITS_MAX_ROWS and abs(requested - rows * width * 2) <= tolerance:
            return rows, width
    return None


def _logits_sized(ev: Evidence, setup: EngineSetup, t: Tally) -> None:
    """A failed request whose size is a whole number of rows of the model's vocabulary (x 2 or 4 bytes) is a
    logits tensor (or its log-softmax, its fp32 copy), whatever the stack shows."""
    model = setup.weights.model if setup.weights else None
    vocab = catalog_vocab(model.catalog_id) if model and model.catalog_id else None
    if vocab is None:
        return
    tp = setup.parallel("tensor_parallel_size")
    for o in ev.of(OomMessage):
        found = logits_rows(o.requested, o.flavor, vocab, tp) if o.requested else None
        if found is None or not o.requested:
            continue
        rows, width = found
        t.add(
            "sampler-or-logits",
            STRONG,
            f"the failed {o.requested / MIB:,.2f} MiB request is {rows:,} rows x {width:,} (the vocabulary "
            f"of {model.catalog_id if model else 'the model'}) x 2 bytes: a logits tensor",
            o,
        )
        break


def _logits_table_on_host(ev: Evidence, t: Tally) -> None:
    """A host array as wide as a vocabulary that could not be allocated is a table of logits: the context
    times the vocabulary asked for it, so a smaller context is the fix, not more RAM."""
    s = host_logits_table(ev)
    if s is not None:
        t.add(
            "sampler-or-logits",
            STRONG + 1.0,
            f"the host array that failed is {s.number('array_rows') or 0:,.0f} rows x "
            f"{s.number('array_width') or 0:,.0f} (a vocabulary): a logits table, one row per position",
            s,
        )


def _free_in_pieces(o: OomMessage, t: Tally) -> None:
    """Free memory against the request where the allocator says both and manages the memory itself (not
    PyTorch's, whose "free" is the driver's, outside its cache): free enough in total yet the request refused
    is the free memory in pieces; with the largest free block printed, the block decides (Tenstorrent's bank
    allocator), else the sum does (XLA's TPU allocator: "Attempting to allocate X. That was not possible.
    There are Y free")."""
    if o.flavor != "engine" or not o.requested or o.free is None:
        return
    if o.free < o.requested:
        t.add(
            "fragmentation",
            -MEDIUM,
            f"{o.free / MIB:,.1f} MiB was free in all, less than the {o.requested / MIB:,.1f} MiB asked: "
            "full, not in pieces",
            o,
        )
        return
    if o.largest_free is not None and o.largest_free >= o.requested:
        return  # a block that fits was there: something other than the free memory refused it
    largest = (
        f", its largest free block {o.largest_free / MIB:,.1f} MiB" if o.largest_free is not None else ""
    )
    t.add(
        "fragmentation",
        STRONG + 0.5,
        f"{o.free / MIB:,.1f} MiB was free, more than the {o.requested / MIB:,.1f} MiB asked{largest}: the "
        "free memory was there, not in one piece",
        o,
    )
    for cls in ("activation-peak", "weights-dont-fit", "other-process-or-shared-gpu"):
        t.add(cls, -MEDIUM, "the allocator had the bytes free, in pieces", o)


def _allocator_quantities(o: OomMessage, t: Tally, setup: EngineSetup) -> None:
    """What the allocator's own numbers decide, whatever words surround them."""
    if o.requested and o.total and o.requested >= o.total:
        why = (
            f"one allocation of {o.requested / GIB:.2f} GiB is larger than the whole "
            f"{o.total / GIB:.2f} GiB device: the shape of one step, not memory held by anything else"
        )
        t.add("activation-peak", MEDIUM, why, o)  # the frames say whose step (encoder, sampler) when present
        mm = multimodal_setup(setup)
        if mm:
            # The text layers run fused (flash / paged) attention that never holds a tokens x tokens matrix;
            # a vision tower's fallback attention holds heads x patches x patches for its largest input.
            t.add(
                "multimodal-encoder",
                STRONG,
                f"{why}; {mm}: a vision encoder's attention without a fused kernel holds heads x patches^2 "
                "scores for the largest image input",
                o,
            )
        for cls in (
            "fragmentation",
            "other-process-or-shared-gpu",
            "kv-exhaustion-at-runtime",
            "memory-leak",
        ):
            t.add(cls, -STRONG, why, o)
        t.add("other", -MEDIUM, why, o)  # the size itself is the mechanism
    if o.requested and o.total and o.requested <= TINY_REQUEST_SHARE * o.total:
        t.add(
            "activation-peak",
            -WEAK,
            "the allocation that failed is a tiny share of the device: the device was full before the step "
            "(what held it is the cause), not the step's own need",
            o,
        )
    if o.this_process is not None and o.allocated is not None and o.total:
        own_outside = o.this_process - o.allocated - (o.reserved_unallocated or 0)
        if own_outside >= OWN_OUTSIDE_SHARE * o.total:
            t.add(
                "weights-dont-fit",
                MEDIUM + 0.5,
                f"the failing process holds {own_outside / GIB:.2f} GiB outside PyTorch's allocator "
                f"(PyTorch itself {o.allocated / GIB:.2f} GiB): an engine that loads its weights outside "
                "PyTorch (TurboMind, TensorRT) filled the device",
                o,
            )
    outside = outside_pytorch(o)
    if (
        outside is not None
        and o.this_process is None
        and not o.processes
        and o.total
        and outside >= max(OUTSIDE_PYTORCH_MIN, OUTSIDE_PYTORCH_SHARE * o.total)
    ):
        t.add(
            "other-process-or-shared-gpu",
            STRONG,
            f"{outside / GIB:.2f} GiB of the device is in use outside this process's PyTorch allocator "
            "(total - free - allocated - reserved): another process or non-PyTorch memory",
            o,
        )


def outside_pytorch(o: OomMessage) -> int | None:
    return _outside(
        AllocatorReport(
            o.flavor,
            total=o.total,
            free=o.free,
            allocated=o.allocated,
            reserved_unallocated=o.reserved_unallocated,
        )
    )


def other_process_bytes(o: OomMessage) -> int | None:
    """Bytes held by processes other than the failing one, from the OOM message's process list, or, when the
    message says what this process has in use, what the device's used memory leaves for the others
    (total - free - this process): a container sees no other process's pid, so none is listed, yet their
    memory is gone from the device all the same."""
    if o.this_process is not None:
        listed = sum(used for _, used in o.processes)
        if o.total is None or o.free is None:
            return listed
        unseen = o.total - o.free - o.this_process  # with the others' CUDA contexts, a desktop's display
        return max(
            listed, unseen if unseen >= max(OUTSIDE_PYTORCH_MIN, OUTSIDE_PYTORCH_SHARE * o.total) else 0
        )
    if len(o.processes) >= 2:
        ordered = sorted(used for _, used in o.processes)
        # The failing process holds at least what PyTorch reserved in it; inside a container its own pid is
        # not the host's, so PyTorch lists it as "Process N" too: it is the smallest listed process that
        # holds that much (the largest when PyTorch's numbers are missing).
        reserved = (o.allocated or 0) + (o.reserved_unallocated or 0) if o.allocated is not None else None
        mine = next((u for u in ordered if reserved is not None and u >= reserved), ordered[-1])
        return sum(ordered) - mine
    if len(o.processes) == 1:
        return 0
    return None


# Engine flags that only a multimodal deployment sets (vLLM, SGLang), as the evidence spelled them.
MULTIMODAL_FLAGS = (
    "limit_mm_per_prompt",
    "mm_processor_kwargs",
    "mm_encoder_tp_mode",
    "mm_attention_backend",
    "mmproj",  # llama.cpp's vision projector (-mm / --mmproj)
)


def multimodal_setup(setup: EngineSetup) -> str:
    """Why the recovered setup is a multimodal deployment ('' when nothing says so): the model id or the name
    it is served under names a vision/audio model, or a flag only multimodal serving sets."""
    for key in ("model", "served_model_name"):
        name = setup.flag(key) or (setup.model if key == "model" else None) or ""
        if MULTIMODAL_MODEL.search(name):
            return f"{name} is a multimodal model"
    for key in MULTIMODAL_FLAGS:
        if setup.flag(key) not in (None, "None", "none", "null", "{}", ""):
            return f"{key} is set"
    return ""


def _multimodal_profile(ev: Evidence, setup: EngineSetup) -> tuple[Fact | None, str] | None:
    """What says the profile run was a multimodal model's (whose profile runs the encoder on its largest
    inputs x the profile batch): the engine's own multimodal-profile line, else the model's name."""
    mm = ev.signals("milestone-mm-profile")
    if mm:
        return mm[-1], "it failed in the multimodal profile run"
    why = multimodal_setup(setup)
    return (None, f"{why} and it failed in its profile run") if why else None


def _frames(ev: Evidence, setup: EngineSetup, t: Tally, sit: Situation) -> None:
    cats = sit.categories
    has_oom = sit.gpu_failure and not (
        sit.failures and all(isinstance(f, Signal) and f.name in NON_OOM_FAILURES for f in sit.failures)
    )

    def first(cat: str) -> Frame:
        return cats[cat][0]

    if "all2all" in cats:
        t.add(
            "ep-all2all-buffer",
            STRONG,
            "the stack is in the expert-parallel all-to-all (dispatch/combine)",
            first("all2all"),
        )
    if "kv-slots" in cats and has_oom:
        t.add(
            "kv-exhaustion-at-runtime",
            STRONG + 0.5,
            "the allocation that failed is the KV pool's own slot allocator: the pool was full, whoever "
            "asked for the slots",
            first("kv-slots"),
        )
    if "wake-up" in cats and has_oom:
        t.add(
            "other-process-or-shared-gpu",
            STRONG,
            "it failed re-mapping the memory the engine released when it went to sleep: something else on "
            "the GPU (a colocated trainer) took that memory meanwhile",
            first("wake-up"),
        )
    if "sampler" in cats and has_oom:
        t.add(
            "sampler-or-logits", STRONG, "the stack is in the sampler / logits computation", first("sampler")
        )
    if "encoder" in cats and has_oom:
        t.add("multimodal-encoder", STRONG, "the stack is in the vision/multimodal encoder", first("encoder"))
    if "spec-decode" in cats and has_oom:
        t.add(
            "spec-decode-or-lora-extra",
            STRONG,
            "the stack is in speculative decoding (draft model)",
            first("spec-decode"),
        )
    if "lora" in cats and has_oom:
        t.add("spec-decode-or-lora-extra", MEDIUM, "the stack is in LoRA", first("lora"))
    if "cudagraph" in cats and has_oom:
        t.add(
            "cuda-graph-capture", STRONG, "the OOM happened while capturing CUDA graphs", first("cudagraph")
        )
    if "weights" in cats and has_oom and "cudagraph" not in cats and "profile" not in cats:
        t.add(
            "weights-dont-fit",
            STRONG,
            "the OOM happened while building or loading the model's weights",
            first("weights"),
        )
    if (
        "kv-alloc" in cats
        and has_oom
        and not any(isinstance(f, Signal) and f.name == "max-model-len-exceeds-kv" for f in sit.failures)
    ):
        t.add(
            "kv-cache-insufficient-at-startup",
            MEDIUM,
            "the failure is in KV-cache sizing or allocation",
            first("kv-alloc"),
        )
    if "profile" in cats and has_oom and not ({"sampler", "encoder", "cudagraph"} & cats.keys()):
        mm = _multimodal_profile(ev, setup)
        if mm:
            t.add(
                "multimodal-encoder",
                STRONG,
                mm[1] + ": the encoder runs on the largest inputs x the profile batch",
                mm[0],
                first("profile"),
            )
        t.add(
            "activation-peak",
            MEDIUM if mm else STRONG,
            "the OOM happened in the profile run (max_num_batched_tokens through the model)",
            first("profile"),
        )
    if (
        "forward" in cats
        and has_oom
        and not ({"weights", "profile", "cudagraph", "encoder", "sampler"} & cats.keys())
    ):
        t.add(
            "activation-peak",
            MEDIUM,
            "the OOM happened inside a layer's forward at runtime",
            first("forward"),
        )


# A llama.cpp context at most this long has small buffers (its KV cache a few GiB at most with grouped-query
# attention): creating it fails because the layers on the GPU left no room, not because of the context.
SMALL_CONTEXT = 8192


def _phase_rules(ev: Evidence, setup: EngineSetup, t: Tally, sit: Situation) -> None:
    fact = sit.phase_fact
    if (
        isinstance(fact, Signal)
        and fact.name == "milestone-drafter-loading"
        and (sit.failures or ev.of(Frame))
    ):
        # The target's weights were in; what failed next was the speculative draft's load.
        # (On unified memory the same load surfaces as the driver's host-memory error: the step names the
        # consumer, the error only where its memory lived.)
        t.add(
            "spec-decode-or-lora-extra",
            STRONG + 0.5,
            "it failed while the engine loaded the speculative draft model, after the target's weights",
            fact,
        )
    if sit.gpu_failure and sit.categories.keys() & {
        "weights",
        "profile",
        "cudagraph",
        "kv-alloc",
        "sampler",
        "encoder",
    }:
        return  # the stack already placed it
    fact = sit.phase_fact
    generic_oom = any(isinstance(f, OomMessage) for f in sit.failures) and not any(
        isinstance(f, Signal)
        and f.name
        in (
            "sampler-warmup-oom",
            "no-kv-cache-memory",
            "max-model-len-exceeds-kv",
            "free-memory-below-utilization",
            "load-model-failed",
        )
        for f in sit.failures
    )
    ended_here = (
        not sit.failures
    )  # the log stops at this step (a crash without its error text, or a bare stack)
    if not (generic_oom or ended_here):
        return
    mm = _multimodal_profile(ev, setup)
    drafting = isinstance(fact, Signal) and fact.name == "milestone-drafter-loading"
    if sit.phase == "startup-weights" and not drafting:  # (the draft's load is the draft's extra, above)
        t.add("weights-dont-fit", STRONG if generic_oom else MEDIUM, "it failed while loading weights", fact)
    elif sit.phase == "startup-profile":
        if mm:
            t.add(
                "multimodal-encoder",
                STRONG if generic_oom else MEDIUM,
                mm[1] + " (the encoder at its largest input x the profile batch)",
                mm[0] or fact,
            )
        t.add("activation-peak", MEDIUM if generic_oom else WEAK, "it failed in the profile run", fact)
    elif sit.phase == "startup-kv-alloc":
        by_context = isinstance(fact, Signal) and bool(fact.number("sized_by_context"))
        n_ctx = fact.number("n_ctx") if isinstance(fact, Signal) else None
        # (llama.cpp's context of a length the log does not give adds nothing here: its buffers say more)
        if n_ctx and n_ctx > SMALL_CONTEXT:
            t.add(
                "max-model-len-exceeds-kv",
                MEDIUM,
                f"it failed creating the context: llama.cpp sizes its KV cache and compute buffers for the "
                f"whole context (n_ctx {n_ctx:,.0f}), not for the memory left",
                fact,
            )
        elif n_ctx:
            t.add(
                "weights-dont-fit",
                MEDIUM,
                f"it failed creating a small context (n_ctx {n_ctx:,.0f}), whose buffers are small: the "
                "layers placed on the GPU before it left no room",
                fact,
            )
        elif not by_context:
            t.add(
                "kv-cache-insufficient-at-startup",
                MEDIUM,
                "it failed allocating the KV cache the profile had sized",
                fact,
            )
    elif sit.phase == "startup-cudagraph":
        t.add(
            "cuda-graph-capture",
            STRONG if generic_oom else MEDIUM,
            "the KV pool was sized and the next step, CUDA-graph capture, did not finish",
            fact,
        )
        t.add("sampler-or-logits", WEAK, "the sampler warm-up also runs after the KV pool is allocated", fact)
    elif sit.phase == "startup-warmup":
        t.add("sampler-or-logits", MEDIUM, "graphs were captured; the sampler warm-up follows", fact)


def _runtime(ev: Evidence, setup: EngineSetup, t: Tally, sit: Situation) -> None:
    samples = [s for s in ev.of(LoadSample) if s.kv_usage is not None]
    crash = sit.kv_at_crash
    has_oom = any(isinstance(f, OomMessage) for f in sit.failures)
    if crash is not None and crash.kv_usage is not None:
        if crash.kv_usage >= KV_FULL:
            t.add(
                "kv-exhaustion-at-runtime",
                STRONG,
                f"KV usage was {crash.kv_usage:.0%} at the end: the pool was full",
                crash,
            )
            if (crash.waiting or 0) > 0:
                t.add("kv-exhaustion-at-runtime", MEDIUM, "requests were waiting while KV was full", crash)
            if has_oom:
                t.add("activation-peak", WEAK, "an allocation failed while the KV pool was full", crash)
        elif crash.kv_usage <= KV_ROOMY:
            t.add(
                "kv-exhaustion-at-runtime",
                -STRONG,
                f"KV usage was only {crash.kv_usage:.0%}: the pool had room",
                crash,
            )
            if has_oom or any(o.flavor == "expandable-segments" for o in ev.of(OomMessage)):
                t.add(
                    "activation-peak",
                    STRONG,
                    f"the OOM came at {crash.kv_usage:.0%} KV usage: a transient activation peak, not KV",
                    crash,
                )
    if crash is not None and crash.kv_usage is not None and KV_ADMISSION <= crash.kv_usage < KV_FULL:
        waiting, running = crash.waiting or 0, crash.running
        cap = setup.flag_int("max_num_seqs") or FEW_RUNNING
        if waiting > 0 and running is not None and running < min(cap, FEW_RUNNING):
            t.add(
                "kv-exhaustion-at-runtime",
                MEDIUM,
                f"{waiting} requests waited while only {running} ran with the KV pool {crash.kv_usage:.0%} "
                "full: the pool, not the cap on running sequences, kept them out",
                crash,
            )
    preempt = [s for s in ev.of(LoadSample) if s.preemptions]
    if preempt:
        t.add("kv-exhaustion-at-runtime", MEDIUM, "requests were preempted (KV over-subscribed)", preempt[-1])
    # KV held with nothing running: blocks that are never freed.
    for s in samples:
        if s.running == 0 and (s.waiting or 0) == 0 and (s.kv_usage or 0) >= 0.5:
            t.add(
                "memory-leak", STRONG, "KV usage stays high with no request running: blocks are not freed", s
            )
            break
    if (
        len(samples) >= 3
        and all((b.kv_usage or 0) >= (a.kv_usage or 0) for a, b in itertools.pairwise(samples))
        and (samples[-1].kv_usage or 0) >= KV_FULL
    ):
        t.add(
            "memory-leak",
            WEAK,
            "KV usage only ever rose until full (a leak if it does not fall when traffic stops)",
            samples[-1],
        )
    for step in ev.of(ScheduledStep):
        rows = len(step.tokens_per_request)
        longest, real = max(step.tokens_per_request), sum(step.tokens_per_request)
        if rows >= 2 and real and rows * longest / real >= PADDING_RATIO:
            t.add(
                "activation-peak",
                STRONG,
                f"the step packs {rows} requests with one {longest:,}-token chunk: "
                f"padded to {rows * longest:,} token slots for {real:,} real tokens",
                step,
            )


def _step(ev: Evidence, step: StepAnalysis | None, t: Tally) -> None:
    """What the failing step's arithmetic says: a failed allocation the size of the padded tensor is
    padding."""
    if step is None:
        return
    w, s = step.widths.hidden_size, step.widths.dtype_bytes
    rows, longest = step.padded.num_prefills, step.padded.max_prefill_len
    if step.explains_oom and step.oom is not None and step.oom.requested:
        t.add(
            "activation-peak",
            STRONG + 1.0,
            f"the failed {step.oom.requested / GIB:.2f} GiB allocation is {rows} "
            f"rows x {longest:,} tokens x {w:,} x {s:g} B: the step's rows were padded to its longest chunk "
            f"({step.padded.padding_ratio:.1f}x its real tokens)",
            step.oom,
            step.step,
        )
    if step.padded.exceeds_int32_index and step.layout == "padded":
        for sig in ev.signals("int32-index-math", "illegal-memory-access"):
            t.add(
                "int32-index-overflow",
                MEDIUM,
                f"the padded step tensor has {step.padded.max_tensor_elements:,} elements, above 2^31",
                sig,
                step.step,
            )


# Code that allocates host memory, pinned for transfers to the GPU: vLLM V0's CPU swap blocks
# (worker/cache_engine.py: `self.cpu_cache = self._allocate_kv_cache(self.num_cpu_blocks, "cpu")`), its
# --cpu-offload-gb weights (model_executor/models/utils.py, maybe_offload_to_cpu), SGLang's HiCache host pool
# (mem_cache/memory_pool_host.py), LMCache's pinned buffer (v1/memory_management.py, PinMemoryAllocator), and
# any explicit `pin_memory=True` / `.pin_memory()`. (A bare `pin_memory=pin_memory` is
# not one: vLLM V0 allocates its GPU blocks through the same line.)
_HOST_ALLOCATION = re.compile(
    r"num_cpu_blocks|maybe_offload_to_cpu|memory_pool_host|PinMemoryAllocator|"
    r"pin_memory=True|\.pin_memory\(\)"
)
# A line that also moves the tensor to the GPU ("torch.tensor(.., pin_memory=True).to(device)") may have
# failed on the GPU side.
_TO_DEVICE = re.compile(r"\.(?:to|cuda)\(")


def host_allocation_frame(frame: Frame) -> bool:
    """A frame whose code, function or file allocates host memory (see _HOST_ALLOCATION), and no more."""
    return bool(
        _HOST_ALLOCATION.search(f"{frame.code} {frame.function} {frame.path}")
    ) and not _TO_DEVICE.search(frame.code)


# One process's resident memory that never rises above this multiple of its first sample is flat: no leak.
RSS_FLAT = 1.05
# A container whose memory stayed under this share of its limit in every sample shown was not killed at it.
CONTAINER_ROOMY = 0.5


def _host(ev: Evidence, t: Tally) -> None:
    names = {
        "host-killed": "the process was killed (SIGKILL) with no Python traceback",
        "exit-137": "the process exited by SIGKILL (exit code 137 = 128 + 9, or -9)",
        "oom-killed": "Kubernetes reports OOMKilled: the container's memory limit",
        "kernel-oom-kill": "the kernel's OOM killer killed the process",
        "cgroup-oom-kill": "the cgroup's oom_kill counter is non-zero",
        "oomd-kill": "systemd-oomd killed the cgroup under host memory pressure",
        "host-enomem": "host memory allocation failed (ENOMEM / bad_alloc): not GPU memory",
        "unified-memory-exhausted": "the NVIDIA driver ran out of memory on a unified-memory system: GPU "
        "allocations are host RAM there",
        "ray-memory-kill": "Ray's memory monitor killed the worker: the node ran low on RAM",
    }
    # Exit 137, OOMKilled, the kernel's report and the cgroup counter are views of one kill: the clearest
    # counts in full, the others corroborate.
    seen = [(name, why, ev.signals(name)) for name, why in names.items() if ev.signals(name)]
    for i, (name, why, sigs) in enumerate(seen):
        weight = (STRONG if name != "host-killed" else MEDIUM + 0.5) if i == 0 else WEAK
        for s in sigs:
            t.add("host-ram-oom", weight, why, s)
    if not seen:
        for s in ev.signals("exit-not-killed")[:1]:
            code = s.number("exit_code")
            how = f"exited with status {code:g}" if code is not None else "crashed on another signal"
            t.add("host-ram-oom", -MEDIUM, f"the process {how}, not by a kill", s)
        for s in ev.signals("static-tls")[:1]:
            t.add("host-ram-oom", -MEDIUM, "the loader's static TLS block is full, not the host's memory", s)
        for s in ev.signals("disk-full")[:1]:
            t.add("host-ram-oom", -MEDIUM, "a disk is full (ENOSPC), not the host's memory", s)
    for s in ev.signals("disk-full")[:1]:
        t.add("other", MEDIUM, "a disk is full (ENOSPC): free or move the cache directory, not memory", s)
    for s in ev.signals("static-tls")[:1]:
        t.add(
            "other",
            STRONG,
            "a shared library needs a slot in the dynamic loader's static TLS block and none is left (load "
            "it first: LD_PRELOAD), not memory",
            s,
        )
    failed = ev.of(OomMessage) or ev.signals("exception", *FAILURE_SIGNALS)
    for f in [f for f in ev.of(Frame) if host_allocation_frame(f)][:1] if failed else []:
        t.add(
            "host-ram-oom",
            STRONG + 1.0,
            "the allocation that failed is host memory (pinned for transfers, or a CPU pool): the host ran "
            "short, whatever the error calls it",
            f,
        )
    for s in ev.signals("cpu-platform")[:1] if failed else []:
        t.add(
            "host-ram-oom",
            STRONG,
            "vLLM runs on its CPU backend: the weights and the KV cache (VLLM_CPU_KVCACHE_SPACE) are host "
            "RAM",
            s,
        )
    for s in ev.signals("swap-space-large")[:1]:
        swap, total = s.number("swap_bytes") or 0, s.number("host_total_bytes") or 0
        t.add(
            "host-ram-oom",
            MEDIUM,
            f"vLLM pins {swap / GIB:.1f} GiB of host RAM per GPU for its CPU swap space, "
            f"{swap / total if total else 0:.0%} of the host's {total / GIB:.1f} GiB (it warns above 40%)",
            s,
        )
    if not ev.of(OomMessage):  # a GPU OOM after the fallback is the failure; the warning is not its cause
        for s in ev.signals("pinned-alloc-failed")[:1]:
            t.add(
                "host-ram-oom",
                MEDIUM,
                "pinning host memory failed (the engine fell back to pageable RAM): the host is short of it",
                s,
            )
    limits = [h for h in ev.of(HostMemory) if h.quantity == "limit"]
    currents = [h for h in ev.of(HostMemory) if h.quantity in ("current", "peak")]
    if limits and currents and max(c.value for c in currents) >= 0.97 * min(lim.value for lim in limits):
        t.add("host-ram-oom", MEDIUM, "container memory is at its limit", currents[-1], limits[0])
    elif (
        limits
        and currents
        and max(c.value for c in currents) <= CONTAINER_ROOMY * min(lim.value for lim in limits)
    ):
        peak, limit = max(c.value for c in currents), min(lim.value for lim in limits)
        t.add(
            "host-ram-oom",
            -MEDIUM,
            f"the container used {peak / GIB:.1f} GiB of its {limit / GIB:.1f} GiB limit",
            currents[-1],
            limits[0],
        )
    avail = [h for h in ev.of(HostMemory) if h.quantity == "available"]
    totals = [h for h in ev.of(HostMemory) if h.quantity == "total"]
    if avail and totals and avail[-1].value <= 0.03 * totals[-1].value:
        t.add("host-ram-oom", MEDIUM, "the host has under 3% memory available", avail[-1])
    by_process: dict[str, list[HostMemory]] = {}
    for h in ev.of(HostMemory):
        if h.quantity == "rss":
            by_process.setdefault(h.scope, []).append(h)
    for rss in by_process.values():  # one process's resident memory, sample after sample
        if (
            len(rss) >= 3
            and all(b.value >= a.value for a, b in itertools.pairwise(rss))
            and rss[-1].value >= 1.2 * rss[0].value
        ):
            t.add("memory-leak", STRONG, "process RSS rose in every scrape", rss[0], rss[-1])
            if t.score("host-ram-oom") > 0:
                t.add("memory-leak", MEDIUM, "steady growth ends in the host OOM kill", rss[-1])
        elif len(rss) >= 3 and max(h.value for h in rss) <= RSS_FLAT * rss[0].value:
            t.add("memory-leak", -MEDIUM, f"process RSS stayed flat over {len(rss)} samples", rss[0], rss[-1])
    if t.score("host-ram-oom") > 0:
        for o in ev.of(OomMessage)[:1]:
            t.add("host-ram-oom", -WEAK, "there is also a GPU OOM message", o)


def _processes(ev: Evidence, t: Tally) -> None:
    procs = ev.of(GpuProcess)
    by_gpu: dict[int | None, list[GpuProcess]] = {}
    for p in procs:
        by_gpu.setdefault(p.gpu, []).append(p)
    for plist in by_gpu.values():
        pids = {p.pid for p in plist}
        if len(pids) >= 2:
            ordered = sorted(plist, key=lambda p: -p.used)
            others = sum(p.used for p in ordered[1:])
            if others >= OTHER_PROCESS_MIN:
                t.add(
                    "other-process-or-shared-gpu",
                    STRONG,
                    "the device's process table (nvidia-smi, npu-smi, rocm-smi, nvtop) shows more than one "
                    "process holding memory on the same device",
                    *ordered[:3],
                )
                for s in ev.signals("no-kv-cache-memory", "negative-kv-memory", "cannot-auto-fit")[:1]:
                    # The tenant is the cause, the empty pool its symptom: it ranks above the pool.
                    t.add(
                        "other-process-or-shared-gpu",
                        MEDIUM,
                        "the KV pool found no room on a GPU another process holds memory on",
                        s,
                    )


# Memory a device holds before any engine touched it: a CUDA context, a desktop's display, NCCL's buffers.
NOTHING_HELD = 1 * GIB
# Held by others at this share of the device, it is what the engine then lacked, whatever failed next.
HELD_LARGE_SHARE = 0.25
# The engines' errors of a KV pool left with no room at startup.
EMPTY_POOL = (
    "no-kv-cache-memory",
    "negative-kv-memory",
    "cannot-auto-fit",
    "sglang-not-enough-memory",
    "sglang-negative-token-budget",
)


def _tenant_above_pool(ev: Evidence, t: Tally) -> None:
    """The tenant is the cause and the empty KV pool its symptom: it ranks above the pool."""
    for s in ev.signals(*EMPTY_POOL)[:1]:
        t.add(
            "other-process-or-shared-gpu",
            MEDIUM + 0.5,
            "the engine found no room for its KV pool on a device someone else held memory on",
            s,
        )


def _held_before_start(ev: Evidence, setup: EngineSetup, t: Tally) -> None:
    """What a device had free before the engine placed anything on it (vLLM's startup snapshot, SGLang's
    "Load weight begin", llama.cpp's "using device", ollama's discovery), against its total: beyond a CUDA
    context and NCCL's buffers (OUTSIDE_PYTORCH_MIN, or 10% of the device), someone else holds the rest.
    The first reading of each process and device counts (a draft model loads later, beside the target's
    weights)."""
    if ev.has("free-memory-below-utilization"):
        return  # vLLM's own check said it, from the same snapshot (_engine_errors)
    device_total = setup.gpu_total_bytes
    for n in ev.of(StartupNumber):
        if (
            n.quantity == "device_outside_torch_bytes"
            and device_total
            and n.value >= max(OUTSIDE_PYTORCH_MIN, OUTSIDE_PYTORCH_SHARE * device_total)
        ):
            t.add(
                "other-process-or-shared-gpu",
                STRONG,
                f"vLLM's profile found {n.value / GIB:.2f} GiB of the device in use outside its own PyTorch "
                "allocations (what it logs as non_torch_memory in these versions): more than a CUDA context "
                "and NCCL take, another process holds it",
                n,
            )
            _tenant_above_pool(ev, t)
            break
    totals = {
        (n.where.source, n.where.line): n.value
        for n in ev.of(StartupNumber)
        if n.quantity == "gpu_total_bytes"
    }
    named = {(d.where.source, d.where.line): d.total for d in ev.of(DeviceNamed) if d.total}
    seen: set[tuple[str, str]] = set()
    empty: StartupNumber | None = None
    for n in ev.of(StartupNumber):
        if n.quantity != "free_at_start_bytes" or (n.where.source, n.process_tag) in seen:
            continue
        seen.add((n.where.source, n.process_tag))
        at = (n.where.source, n.where.line)
        total = totals.get(at) or named.get(at) or setup.gpu_total_bytes
        if not total or n.value > total:
            continue  # no total, or unified memory (free counts the host's RAM)
        held = total - n.value
        if held >= max(OUTSIDE_PYTORCH_MIN, OUTSIDE_PYTORCH_SHARE * total):
            t.add(
                "other-process-or-shared-gpu",
                STRONG + 1.0 if held >= HELD_LARGE_SHARE * total else STRONG,
                f"{held / GIB:.2f} GiB of the {total / GIB:.2f} GiB device was in use before the engine "
                "placed anything on it: another process holds it",
                n,
            )
            _tenant_above_pool(ev, t)
            return
        if held < NOTHING_HELD and empty is None:
            empty = n
    if empty is not None:
        t.add(
            "other-process-or-shared-gpu",
            -WEAK,
            "the device was all but empty when the engine started: nobody else held memory then",
            empty,
        )


# A device's memory read this many times, each reading at or above the one before, is a trend.
CREEP_READINGS = 3
# What it must have grown by, at least (a GiB, or this share of the first reading).
CREEP_MIN = 1 * GIB
CREEP_SHARE = 0.05
# A step larger than this share of the device is an engine allocating its pools (weights, KV), not a creep.
CREEP_STEP_SHARE = 0.2


def _device_creep(ev: Evidence, t: Tally) -> None:
    """The same process, or the same device, read several times (nvidia-smi under `watch`, tables pasted hour
    after hour): memory that only rose, in steps small against the device (an engine's startup takes its
    weights and KV pool in steps of tens of percent), is memory that is never given back. One process's own
    memory is the leak itself; a device's could be a neighbour's growing, so it weighs less."""
    per_process: dict[tuple[str, int | None, int | None], list[GpuProcess]] = {}
    for p in ev.of(GpuProcess):
        per_process.setdefault((p.where.source, p.gpu, p.pid), []).append(p)
    per_device: dict[tuple[str, int | None, str], list[GpuMemory]] = {}
    totals: dict[tuple[str, int | None, str], int] = {}
    for g in ev.of(GpuMemory):
        key = (g.where.source, g.gpu, g.name)
        per_device.setdefault(key, []).append(g)
        totals[key] = g.total
    series: list[tuple[list[Fact], list[int], int | None, float, str]] = [
        (list(rs), [r.used for r in rs], None, STRONG, "a process's GPU memory")
        for rs in per_process.values()
    ]
    series += [
        (list(rs), [r.used for r in rs], totals[k], MEDIUM + 0.5, "a GPU's memory in use")
        for k, rs in per_device.items()
    ]
    for readings, used, total, weight, what in series:
        if len(used) < CREEP_READINGS or used[0] <= 0:
            continue
        steps = [b - a for a, b in itertools.pairwise(used)]
        largest = CREEP_STEP_SHARE * (total or max(used))
        if (
            all(0 <= s <= largest for s in steps)
            and sum(1 for s in steps if s > 0) >= 2
            and used[-1] - used[0] >= max(CREEP_MIN, CREEP_SHARE * used[0])
        ):
            t.add(
                "memory-leak",
                weight,
                f"{what} rose in every reading, from {used[0] / GIB:.2f} to {used[-1] / GIB:.2f} GiB over "
                f"{len(used)} readings, in steps no engine's startup takes",
                readings[0],
                readings[-1],
            )


def _snapshot(ev: Evidence, t: Tally) -> None:
    for s in ev.of(Snapshot):
        free_in_pool = s.reserved - s.allocated
        if s.failed_request and free_in_pool >= s.failed_request and s.largest_free_block < s.failed_request:
            t.add(
                "fragmentation",
                STRONG + 1.0,
                "the snapshot's cached free memory exceeds the failed request but "
                "its largest free block is smaller",
                s,
            )
        elif s.failed_request and s.largest_free_block >= s.failed_request:
            t.add("fragmentation", -MEDIUM, "a free block large enough existed in the snapshot", s)


# A rank that sizes its own KV pool: a data-parallel rank (vLLM's EngineCore_DP0, SGLang's DP0), or a rank
# whose count a line states with its number and no tensor-parallel tag (rank_kv.py); tensor-parallel ranks of
# vLLM and SGLang agree on the minimum before they allocate, so their tags are left out.
_DP_RANK = re.compile(r"DP\d+|^rank\d+$")


# Data-parallel engines' pools this far apart (share of the smaller) are not rounding; ranks that share one
# block table (a count stated per rank) must agree exactly, so any difference past this counts.
DP_SPREAD = 0.05
SHARED_TABLE_SPREAD = 0.005


def _dp_ranks(ev: Evidence, t: Tally) -> None:
    for quantity in ("num_gpu_blocks", "kv_cache_tokens", "kv_available_bytes"):
        per_rank: dict[str, StartupNumber] = {}
        for n in ev.of(StartupNumber):
            rank = _DP_RANK.search(n.process_tag)
            if n.quantity == quantity and rank:
                per_rank[rank.group(0)] = n
        values = [n.value for n in per_rank.values()]
        spread = SHARED_TABLE_SPREAD if all(r.startswith("rank") for r in per_rank) else DP_SPREAD
        if len(values) >= 2 and max(values) > (1 + spread) * min(values):
            t.add(
                "dp-replica-kv-accounting",
                STRONG,
                "data-parallel ranks sized different KV pools (each profiles its own)",
                *per_rank.values(),
            )


_TP_RANK = re.compile(r"TP(\d+)")
_GROUP_RANKS = re.compile(r"(DP|PP)(\d+)")


def _tp_ranks(ev: Evidence, t: Tally) -> None:
    """Tensor-parallel ranks of one engine hold equal shards and run the same profile, so their KV budgets
    are equal but for what else holds memory on their GPUs: ranks whose logged KV memory differs by more than
    a GiB had another process on the poorer one's GPU (pipeline and data-parallel ranks differ by design and
    are compared only within their own group)."""
    groups: dict[tuple[tuple[str, str], ...], dict[str, StartupNumber]] = {}
    for n in ev.of(StartupNumber):
        tp = _TP_RANK.search(n.process_tag)
        if n.quantity == "kv_available_bytes" and tp:
            key = tuple(sorted(_GROUP_RANKS.findall(n.process_tag)))
            groups.setdefault(key, {}).setdefault(tp.group(1), n)
    for ranks in groups.values():
        if len(ranks) < 2:
            continue
        low = min(ranks.values(), key=lambda n: n.value)
        high = max(ranks.values(), key=lambda n: n.value)
        if high.value - low.value >= max(OTHER_PROCESS_MIN, TP_SPREAD_SHARE * abs(high.value)):
            t.add(
                "other-process-or-shared-gpu",
                STRONG + 0.5,
                f"tensor-parallel ranks sized their KV from {low.value / GIB:.2f} to {high.value / GIB:.2f} "
                "GiB: equal shards, so the poorer rank's GPU holds someone else's memory",
                low,
                high,
            )


# Tensor-parallel ranks' KV budgets this far apart (share of the larger) are not rounding.
TP_SPREAD_SHARE = 0.1


# The flags that configure speculative decoding, every engine's spelling: vLLM (speculative_config; before
# v0.8 speculative_model / num_speculative_tokens), SGLang (speculative_algorithm,
# speculative_draft_model_path), TGI (--speculate), TensorRT-LLM (speculative_decoding_mode).
SPECULATIVE_FLAGS = (
    "speculative_config",
    "speculative_model",
    "num_speculative_tokens",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculate",
    "speculative_decoding_mode",
)
# LoRA adapters served beside the base model: vLLM --lora-modules / --max-loras, SGLang lora_paths, TGI
# --lora-adapters.
LORA_FLAGS = ("lora_modules", "lora_paths", "lora_adapters")


def _config(ev: Evidence, setup: EngineSetup, t: Tally, sit: Situation) -> None:
    where = setup.provenance
    u = setup.flag_float("gpu_memory_utilization")
    mnbt = setup.flag_int("max_num_batched_tokens")
    seqs = setup.flag_int("max_num_seqs")
    startup_only = sit.phase.startswith("startup")
    fact = None
    if u is not None and u >= HIGH_UTILIZATION:
        t.add(
            "activation-peak",
            WEAK + 0.3,
            f"gpu_memory_utilization {u} leaves almost no slack for peaks the profile did not see",
            fact,
        )
        if not setup.flag_true("enforce_eager"):
            t.add(
                "cuda-graph-capture",
                WEAK,
                f"gpu_memory_utilization {u} leaves little room for graph capture",
                fact,
            )
    if mnbt is not None and mnbt >= HUGE_BATCHED_TOKENS:
        t.add(
            "activation-peak",
            MEDIUM,
            f"max_num_batched_tokens {mnbt:,}: a step that large has a large activation peak",
            fact,
        )
    if (
        setup.flag("enable_chunked_prefill") in ("false", "False")
        and (setup.flag_int("max_model_len") or 0) >= 16384
    ):
        t.add("activation-peak", MEDIUM, "chunked prefill is off: a whole long prompt runs in one step", fact)
    if seqs is not None and seqs >= SAMPLER_ROWS_RISK and not startup_only:
        t.add(
            "sampler-or-logits", WEAK, f"max_num_seqs {seqs}: the sampler's logits rows scale with it", fact
        )
    elif seqs is not None and seqs >= SAMPLER_ROWS_RISK:
        t.add(
            "sampler-or-logits", WEAK, f"max_num_seqs {seqs}: the sampler warm-up runs that many rows", fact
        )
    if setup.flag_true("enforce_eager"):
        t.add("cuda-graph-capture", -MEDIUM, "enforce_eager is set: no CUDA graphs are captured", fact)
    if any(setup.flag(k) not in (None, "None", "none", "null") for k in SPECULATIVE_FLAGS):
        t.add(
            "spec-decode-or-lora-extra",
            MEDIUM if sit.failures else WEAK,
            "speculative decoding is configured (a draft model and its KV, outside the profile in many "
            "versions)",
            fact,
        )
    if setup.flag_true("enable_lora") or any(
        setup.flag(k) not in (None, "None", "none", "null", "[]", "{}", "") for k in LORA_FLAGS
    ):
        t.add(
            "spec-decode-or-lora-extra",
            MEDIUM if sit.failures else WEAK,
            "LoRA is enabled (adapter buffers and LoRA activations outside the profile)",
            fact,
        )
    _draft_context(ev, setup, t)
    mm = multimodal_setup(setup)
    if mm:
        # The encoder's profile on its largest input is the step a multimodal deployment adds: with a GPU
        # failure no step placed, it is the likeliest one.
        placed = sit.categories.keys() & {
            "weights",
            "cudagraph",
            "kv-alloc",
            "sampler",
            "all2all",
            "kv-slots",
        }
        # The encoder runs once the language model is loaded: weights that fill the device never let it.
        unplaced = (
            sit.phase in ("startup-profile", "unknown") and not placed and not weights_fill_device(setup)
        )
        weight = (MEDIUM + 0.5 if sit.gpu_failure else MEDIUM) if unplaced else WEAK
        # vLLM V1 profiles the encoder at its largest input; other engines load and run it beside the
        # language model without budgeting its peak.
        how = (
            "vLLM V1 profiles its encoder at the largest input"
            if setup.engine == "vllm"
            else "its encoder's peak on the largest input comes on top of the language model"
        )
        t.add("multimodal-encoder", weight, f"{mm}: {how}", fact)
    if setup.parallel("data_parallel_size") > 1:
        t.add("dp-replica-kv-accounting", WEAK, "data parallel: each DP rank sizes its own KV pool", fact)
    if (
        setup.flag_true("enable_expert_parallel")
        or "deepep" in (setup.flag("all2all_backend") or "")
        or "deepep" in (setup.flag("VLLM_ALL2ALL_BACKEND") or "")
        or "deepep" in (setup.flag("moe_a2a_backend") or "")
    ):
        t.add(
            "ep-all2all-buffer", WEAK + 0.3, "expert parallel: all-to-all buffers outside the KV budget", fact
        )
    if setup.engine == "sglang" and sit.phase in ("runtime", "unknown") and sit.failures:
        t.add(
            "cuda-graph-capture",
            WEAK,
            "SGLang keeps CUDA-graph buffers for large decode batches in the dynamic slack",
            fact,
        )
        t.add("activation-peak", WEAK, "SGLang's prefill activations use the same dynamic slack", fact)
    del where


def _draft_context(ev: Evidence, setup: EngineSetup, t: Tally) -> None:
    """llama.cpp gives a draft model a KV cache of the target's context (-c, per slot) unless --ctx-size-draft
    sets one of its own (tools/server: the draft's n_ctx is the target's): where the context is what did not
    fit (a shorter one helped, or creating the context failed), the draft's copy of it is the extra."""
    llama_cpp = ev.engine_marks[Engine.LLAMA_CPP] or ev.engine_marks[Engine.OLLAMA]
    if not llama_cpp or not setup.flag("speculative_model") or setup.flag("ctx_size_draft"):
        return
    shorter = [f for f in ev.of(LeverTried) if f.lever is TriedLever.SHORTER_CONTEXT and f.helped]
    said: list[Fact] = [*shorter, *ev.signals("max-model-len-exceeds-kv")]
    if said:
        t.add(
            "spec-decode-or-lora-extra",
            MEDIUM,
            "a draft model is set with no context of its own (--ctx-size-draft): llama.cpp sizes its KV "
            "cache by the target's context, so a context too large for both is the draft's extra",
            said[0],
        )


# The most common large device (H100/A100 80GB as CUDA reports it).
LARGEST_COMMON_DEVICE = 79 * GIB
# Weights per GPU at or above this share of the device cannot leave room for anything else.
WEIGHTS_FILL = 0.92
# At or below this share the weights clearly fit: the failure is elsewhere.
WEIGHTS_SMALL = 0.5
# The share of the device an engine may use when neither the command nor a logged vLLM version says (vLLM's
# --gpu-memory-utilization default before 0.21; SGLang's --mem-fraction-static defaults near it), and the
# least room it needs beyond the weights for its activations and a KV pool: what is left of the budget below
# this share of the device cannot start.
DEFAULT_BUDGET_SHARE = 0.9
MIN_ROOM_SHARE = 0.1
# A context whose one request takes at most this share of the room beside the weights is not the problem.
CONTEXT_SMALL = 0.25
# The flags that set the engine's budget as a share of the device (vLLM, SGLang).
BUDGET_FLAGS = ("gpu_memory_utilization", "mem_fraction_static")


def _budget_share(setup: EngineSetup) -> tuple[float, str]:
    """The share of the device the engine may use, and the flag that set it ('' for a default): the flag, else
    the logged vLLM version's own default (the planner's version rules), else DEFAULT_BUDGET_SHARE."""
    for flag in BUDGET_FLAGS:
        value = setup.flag_float(flag)
        if value is not None and 0 < value <= 1:
            return value, f"{flag}={value:g}"
    if setup.engine == "vllm" and setup.version:
        return setup.behaviour.default_gpu_memory_utilization, ""
    return DEFAULT_BUDGET_SHARE, ""


def weights_fill_device(setup: EngineSetup) -> bool:
    """Whether the model's weights per GPU (sizing.py), with the split stated, fill the device it names (or an
    80 GB one when it names none): nothing the engine runs after loading them gets its turn."""
    w = setup.weights
    if w is None or not (w.split.stated or w.split.ranks > 1):
        return False
    total = w.device.total if w.device else LARGEST_COMMON_DEVICE
    return w.bytes >= WEIGHTS_FILL * total


def _weights_vs_device(ev: Evidence, setup: EngineSetup, t: Tally, sit: Situation) -> None:
    """The model's weights per GPU against the device (sizing.py reads each quantity and where it came from):
    weights that exceed the device cannot load; weights that leave less of the engine's budget than its
    activations and a KV pool need explain a startup OOM; weights that take under half of the device rule
    weights out. The split is used as stated; GPUs the report names without a split are assumed to share the
    weights only where that can only make them look smaller (for the weights, never against them)."""
    w = setup.weights
    if w is None or not (w.split.stated or w.split.ranks > 1):
        return  # a model named with no command and no GPUs: nothing says how many GPUs share it
    why = w.describe()
    facts = (w.model.fact, w.device.fact if w.device else None, sit.first_failure)
    per_gpu = w.bytes
    # A failure the evidence shows, or the reporter's "it ran out of memory".
    failed = (
        bool(sit.failures)
        or ev.has("prose-oom")
        or any(s.number("out_of_memory") for s in ev.signals("failure-words"))
    )
    if w.device is None:
        # (Failure or not: the weights alone say it cannot load on one such device.)
        if per_gpu >= LARGEST_COMMON_DEVICE:
            t.add("weights-dont-fit", MEDIUM, why + ": more than an 80 GB device holds", *facts)
        elif failed and per_gpu >= WEIGHTS_FILL * LARGEST_COMMON_DEVICE and sit.phase != "runtime":
            t.add("weights-dont-fit", MEDIUM, why + ": they fill even an 80 GB device", *facts)
        return
    total = w.device.total
    if per_gpu >= total:
        # Whatever the evidence says failed (or if it only shows the setup), this cannot load.
        t.add("weights-dont-fit", STRONG, why + ": more than the device holds", *facts)
        return
    budget, flag = _budget_share(setup)
    room = budget * total - per_gpu
    if (w.split.stated or w.split.ranks == 1) and room >= MIN_ROOM_SHARE * total:
        unsplit = w.model.bytes / (w.split.ranks if w.split.stated else 1)
        if unsplit <= WEIGHTS_SMALL * total:
            # Under half of the device and inside the engine's budget with room beside them: a quantity
            # against the class with or without a failure, so the prior never names it either.
            t.add("weights-dont-fit", -MEDIUM, why + ": they fit with room to spare", *facts)
            return
    if not failed or sit.phase == "runtime":
        if room >= MIN_ROOM_SHARE * total:
            t.add(
                "weights-dont-fit",
                -WEAK,
                why + f": they leave {room / GIB:.1f} GiB of the budget beside them",
                *facts,
            )
        return
    share = per_gpu / total
    if share >= WEIGHTS_FILL:
        t.add("weights-dont-fit", STRONG, why + ": nothing else fits beside them", *facts)
    elif room < 0 and flag:
        t.add("weights-dont-fit", MEDIUM + 0.5, why + f": more than the engine may use ({flag})", *facts)
    elif room < MIN_ROOM_SHARE * total and sit.phase in ("startup-weights", "unknown", "startup"):
        left = f"{flag} leaves" if flag else "the engine's budget leaves"
        t.add("weights-dont-fit", MEDIUM, why + f": {left} {max(room, 0) / GIB:.1f} GiB beside them", *facts)


# The weights' own quantities as engines log them per GPU once loaded: vLLM's "Model loading took X GiB",
# TensorRT-LLM's "Loaded engine size: N MiB", SGLang's "Load weight end. ... mem usage=X GB".
LOGGED_WEIGHTS = ("weights_bytes", "sglang_weights_bytes")


def _logged_weights_vs_device(ev: Evidence, setup: EngineSetup, t: Tally, sit: Situation) -> None:
    """The weights the engine itself measured on one GPU against that GPU: filling it, nothing else fits
    beside them; under half of it, the weights are not what failed (the sizing from a model's name is an
    estimate; this is the engine's measurement)."""
    total = setup.gpu_total_bytes
    logged = [n for n in ev.of(StartupNumber) if n.quantity in LOGGED_WEIGHTS and n.value > 0]
    if not total or not logged or not (sit.failures or sit.gpu_failure):
        return
    weights = max(logged, key=lambda n: n.value)
    share = weights.value / total
    said = f"the engine measured {weights.value / GIB:.1f} GiB of weights on a {total / GIB:.0f} GiB device"
    if share >= WEIGHTS_FILL:
        t.add("weights-dont-fit", STRONG, said + ": nothing else fits beside them", weights)
    elif share <= WEIGHTS_SMALL:
        t.add("weights-dont-fit", -MEDIUM, said + ": they fit with room to spare", weights)


def _context_vs_room(ev: Evidence, setup: EngineSetup, t: Tally, sit: Situation) -> None:
    """The KV one request at the setup's context length needs (the planner's layout for a catalog model)
    against what the engine's budget leaves beside the weights: a context the pool cannot hold once is the
    context length, not the traffic; one that takes a small part of the room rules it out. (Activations also
    take from the room, so the room is an upper bound and the rule errs towards not firing.)"""
    ctx, w = setup.context, setup.weights
    if ctx is None or w is None or w.device is None or sit.phase == "runtime":
        return
    failed = (
        bool(sit.failures)
        or ev.has("prose-oom")
        or any(s.number("out_of_memory") for s in ev.signals("failure-words"))
    )
    if not failed:
        return
    total = w.device.total
    budget, flag = _budget_share(setup)
    room = budget * total - w.bytes
    if room < MIN_ROOM_SHARE * total:
        return  # the weights leave (next to) nothing: that is theirs (_weights_vs_device)
    left = f"{flag} leaves" if flag else "the engine's budget leaves"
    why = (
        f"{ctx.describe(w.model.catalog_id or w.model.name)}; {left} about {room / GIB:.1f} GiB of the "
        f"{total / GIB:.0f} GiB device beside {w.bytes / GIB:.1f} GiB of weights"
    )
    facts = (w.model.fact, w.device.fact, sit.first_failure)
    if ctx.bytes >= room:
        t.add("max-model-len-exceeds-kv", STRONG if ctx.bytes >= total else MEDIUM, why, *facts)
    elif ctx.bytes <= CONTEXT_SMALL * room:
        t.add("max-model-len-exceeds-kv", -WEAK, why + ": the context fits many times", *facts)


# A multimodal projector (its weights and its graph on the largest image) taking this share of the first GPU's
# free memory leaves the language model's layers little of it: ollama places it there before any layer.
PROJECTOR_SHARE = 0.25
# The KV cache at this share of what a model needs is what the context asks, not the weights.
PLAN_KV_SHARE = 0.5


def _memory_plan(ev: Evidence, t: Tally) -> None:
    """The engine's own estimate of the model's parts (ollama's offload line), when they do not all fit the
    GPUs: a projector that takes a large share of the first GPU is the multimodal encoder's reserve; a KV
    cache that is most of what the model needs is the context length's (ollama sizes it for num_ctx x the
    parallel slots, whatever traffic comes). The last estimate is the load that failed."""
    plans = ev.of(MemoryPlan)
    if not plans or not plans[-1].available:
        return
    plan = plans[-1]
    free = sum(plan.available)
    short = (plan.required is not None and plan.required > free) or (
        plan.layers is not None and plan.offloaded is not None and plan.offloaded < plan.layers
    )
    if not short:
        fits = f"the engine's own estimate places every layer with {free / GIB:.1f} GiB free on the GPUs"
        for cls in ("weights-dont-fit", "multimodal-encoder"):
            t.add(cls, -MEDIUM, fits, plan)
        return
    if plan.projector and plan.projector >= PROJECTOR_SHARE * plan.available[0]:
        t.add(
            "multimodal-encoder",
            MEDIUM + 0.5,
            f"the engine reserves {plan.projector / GIB:.1f} GiB on the first GPU for the multimodal "
            f"projector (its weights and its graph on the largest image) of "
            f"{plan.available[0] / GIB:.1f} GiB free, before any layer",
            plan,
        )
    if plan.kv and plan.required and plan.kv >= PLAN_KV_SHARE * plan.required:
        t.add(
            "max-model-len-exceeds-kv",
            MEDIUM + 0.5,
            f"the engine sizes the KV cache for the whole context: {plan.kv / GIB:.1f} GiB of the "
            f"{plan.required / GIB:.1f} GiB the model needs, with {free / GIB:.1f} GiB free",
            plan,
        )


PROSE = {
    "prose-leak": ("memory-leak", STRONG - 0.5),
    "prose-growth": ("memory-leak", MEDIUM + 0.5),
    "prose-measured-growth": ("memory-leak", STRONG),
    "prose-not-freed": ("memory-leak", MEDIUM + 0.5),
    "prose-fragmentation": ("fragmentation", STRONG - 0.5),
    "prose-host-memory": ("host-ram-oom", MEDIUM + 0.5),
    "prose-killed": ("host-ram-oom", MEDIUM),
    "prose-activation": ("activation-peak", MEDIUM + 0.5),
    "prose-weights": ("weights-dont-fit", MEDIUM + 0.5),
    "prose-spec-decode": ("spec-decode-or-lora-extra", STRONG - 0.5),
    "prose-lora": ("spec-decode-or-lora-extra", MEDIUM),
    "prose-ep-buffer": ("ep-all2all-buffer", MEDIUM + 0.5),
    "prose-dp-blocks-differ": ("dp-replica-kv-accounting", STRONG),
    "prose-cudagraph": ("cuda-graph-capture", MEDIUM),
    "prose-not-cudagraph": ("cuda-graph-capture", -STRONG),
    "prose-library-regression": ("other", MEDIUM + 0.5),
    "prose-logprobs": ("sampler-or-logits", STRONG - 0.5),
    "prose-kv-full": ("kv-exhaustion-at-runtime", MEDIUM),
    "prose-context-kv": ("max-model-len-exceeds-kv", MEDIUM + 0.5),
    "prose-other-process": ("other-process-or-shared-gpu", MEDIUM + 0.5),
    "prose-multimodal": ("multimodal-encoder", MEDIUM),
    "prose-int32": ("int32-index-overflow", STRONG - 0.5),
    # as the fault read from a machine line weighs (an illegal memory access: MEDIUM)
    "prose-kernel-fault": ("int32-index-overflow", MEDIUM),
    # a stated launch limit names the mechanism the fault only shows
    "prose-launch-limit": ("other", STRONG - 0.5),
    "prose-dp-attention": ("dp-replica-kv-accounting", MEDIUM + 0.5),
}


def _prose(ev: Evidence, t: Tally) -> None:
    for s in ev.signals(*PROSE):
        cls, weight = PROSE[s.name]
        t.add(cls, weight, "the report describes it: " + s.name[6:].replace("-", " "), s)


# The mechanism each cure treats, with the weight a change that helped gives it (one that did not help
# counts against the mechanism at -WEAK): each kind of OOM has its own cure, so the cure that worked names it.
# (A larger context or KV share cannot help activations; quantized weights and more GPUs shrink the weights
# per GPU; a smaller prefill step and flash attention shrink the forward pass's transient tensors.)
LEVER_CAUSES: dict[TriedLever, tuple[tuple[CauseClass, float], ...]] = {
    TriedLever.SHORTER_CONTEXT: (
        (CauseClass.MAX_MODEL_LEN_EXCEEDS_KV, MEDIUM + 0.5),
        (CauseClass.KV_CACHE_INSUFFICIENT_AT_STARTUP, WEAK),
    ),
    TriedLever.QUANTIZED_KV: (
        (CauseClass.MAX_MODEL_LEN_EXCEEDS_KV, MEDIUM),
        (CauseClass.KV_CACHE_INSUFFICIENT_AT_STARTUP, WEAK),
    ),
    TriedLever.LARGER_KV_SHARE: ((CauseClass.KV_CACHE_INSUFFICIENT_AT_STARTUP, MEDIUM + 0.5),),
    TriedLever.SMALLER_STEP: ((CauseClass.ACTIVATION_PEAK, MEDIUM + 0.5),),
    TriedLever.FLASH_ATTENTION: ((CauseClass.ACTIVATION_PEAK, MEDIUM + 0.5),),
    TriedLever.FEWER_GPU_LAYERS: ((CauseClass.WEIGHTS_DONT_FIT, MEDIUM + 0.5),),
    TriedLever.MORE_GPUS: ((CauseClass.WEIGHTS_DONT_FIT, MEDIUM + 0.5),),
    TriedLever.QUANTIZED_WEIGHTS: ((CauseClass.WEIGHTS_DONT_FIT, MEDIUM + 0.5),),
    TriedLever.NO_CUDA_GRAPHS: ((CauseClass.CUDA_GRAPH_CAPTURE, MEDIUM + 0.5),),
    TriedLever.EXPANDABLE_SEGMENTS: ((CauseClass.FRAGMENTATION, MEDIUM + 0.5),),
    TriedLever.SMALLER_MM_INPUT: ((CauseClass.MULTIMODAL_ENCODER, MEDIUM + 0.5),),
    TriedLever.NO_SPECULATION: ((CauseClass.SPEC_DECODE_OR_LORA_EXTRA, MEDIUM + 0.5),),
    TriedLever.LESS_LORA: ((CauseClass.SPEC_DECODE_OR_LORA_EXTRA, MEDIUM + 0.5),),
    TriedLever.NO_PROMPT_LOGPROBS: ((CauseClass.SAMPLER_OR_LOGITS, MEDIUM + 0.5),),
    TriedLever.MORE_HOST_MEMORY: ((CauseClass.HOST_RAM_OOM, MEDIUM + 0.5),),
    TriedLever.GPU_TO_ITSELF: ((CauseClass.OTHER_PROCESS_OR_SHARED_GPU, MEDIUM + 0.5),),
    TriedLever.RESTART: ((CauseClass.MEMORY_LEAK, MEDIUM + 0.5),),
}


def _levers_tried(ev: Evidence, t: Tally) -> None:
    """What the reporter changed and whether it helped (sources/levers_tried.py): the cure that worked
    names its mechanism; one that did not argues a little against it."""
    for fact in ev.of(LeverTried):
        for cls, weight in LEVER_CAUSES[fact.lever]:
            if fact.helped:
                t.add(cls, weight, f"the report says {fact.lever.value} helped", fact)
            else:
                t.add(cls, -WEAK, f"the report says {fact.lever.value} did not help", fact)


def _growth_before_kill(ev: Evidence, t: Tally, sit: Situation) -> None:
    """Host memory that grew over time until the kill: the kill is how the growth ended, the limit only
    where it surfaced, so the growth ranks above the kill (a limit too small for a steady footprint does not
    grow). Memory that grows while the weights load is the load itself (shard after shard), not a leak."""
    growth = ev.signals("prose-growth", "prose-leak", "prose-measured-growth")
    if not growth or t.score("host-ram-oom") <= 0 or sit.phase == "startup-weights":
        return
    why = "the memory grew over time before the kill (the report says so): the kill is where it ended"
    t.add("memory-leak", STRONG, why, growth[0])
    t.add("host-ram-oom", -WEAK, why, growth[0])


# Frame categories that place a failure in a step of its own.
PLACED_STEPS = frozenset(
    {"encoder", "sampler", "cudagraph", "profile", "weights", "kv-alloc", "all2all", "spec-decode", "lora"}
)
# A sentence that ends the memory's growth in the GPU running out ("keeps increasing until it gets cuda out
# of memory").
_GROWTH_INTO_OOM = re.compile(r"(?i)\b(out of memory|oom|oomed|ran out|runs out|cuda error)\b")


def _growth_into_oom(ev: Evidence, t: Tally, sit: Situation) -> None:
    """The reporter's own sentence has the memory growing until the OOM: the OOM is where the growth ended,
    the step that raised it only where it surfaced (a step too large for the device fails the first time,
    it does not grow into the failure). Not when the stack places the failure in a step of its own: memory
    "increasing as it passes forward" through an encoder is that step's shape."""
    if sit.categories.keys() & PLACED_STEPS:
        return
    for s in ev.signals("prose-growth", "prose-measured-growth"):
        if _GROWTH_INTO_OOM.search(s.text):
            t.add("memory-leak", MEDIUM, "the report has the memory growing until it ran out", s)
            return


def _priors(ev: Evidence, t: Tally, sit: Situation) -> None:
    """When little places the failure, the usual suspects in the order they usually are."""
    t.add("other", PRIOR / 2, "none of the known mechanisms explains the evidence fully")
    if not sit.failures:
        for s in ev.signals("exception")[:2]:
            t.add("other", PRIOR, "an exception with no memory mechanism recognised in it", s)
        for s in ev.signals("failure-words")[:1]:
            t.add("other", PRIOR, "a failure is named, in no form any reader recognised", s)
    # The reporter's words are all there is.
    said_oom = not sit.failures and (
        ev.has("prose-oom") or any(s.number("out_of_memory") for s in ev.signals("failure-words"))
    )
    if any(isinstance(f, OomMessage) for f in sit.failures) or said_oom:
        for cls, w in (
            ("activation-peak", PRIOR * 2),
            ("other-process-or-shared-gpu", PRIOR * 1.5),
            ("weights-dont-fit", PRIOR),
            ("fragmentation", PRIOR * 0.5),
            ("kv-exhaustion-at-runtime", PRIOR * 0.5),
        ):
            t.add(cls, w, "a GPU OOM with little context: a usual cause")
    if sit.phase == "runtime":
        for cls in STARTUP_ONLY:
            if cls == "max-model-len-exceeds-kv" and ev.has("prompt-exceeds-kv-capacity"):
                continue  # V0's scheduler finds the pool too small for a prompt only when one arrives
            t.add(
                cls,
                -MEDIUM,
                "the server had been serving: this happens before the first request",
                sit.phase_fact,
            )
    elif sit.phase.startswith("startup"):
        for cls in RUNTIME_ONLY:
            t.add(cls, -MEDIUM, "the engine never started serving: this needs traffic", sit.phase_fact)
