"""vLLM server logs, every version: V0 and V1 formats, process prefixes, the engine config line and
non-default args, memory profiling lines, KV cache lines, CUDA-graph lines, periodic stats, scheduler
output, the startup error strings, and the command line that started it all.

Formats are those vLLM's `gpu_worker.py`, `kv_cache_utils.py` and `loggers.py` print. GiB values
printed as "GB" by old versions are GiB (vLLM always divided by 2**30).
"""

from __future__ import annotations

import ast
import re
import shlex

from oomguard.diagnosis.evidence import FailedStep, Flags, LoadSample, ScheduledStep, Version
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import (
    Context,
    LineParser,
    Message,
    command_part,
    continuation,
    to_float,
    to_int,
)
from oomguard.diagnosis.sources.triggers import Series, Triggers
from oomguard.engines.vllm import log_format
from oomguard.units import GiB as _GIB

_NUM = log_format.NUMBER

# The startup lines vLLM writes, read with the patterns they are written beside (engines/vllm/log_format).
_WEIGHTS = log_format.WEIGHTS
_KV_AVAIL = log_format.KV_AVAILABLE
_KV_TOKENS = log_format.KV_TOKENS
_CONCURRENCY = log_format.CONCURRENCY
_BLOCKS = log_format.BLOCKS

_V0_BUDGET = re.compile(
    rf"total_gpu_memory\s*\((?P<t>{_NUM})\s*GiB\)\s*x\s*gpu_memory_utilization\s*\((?P<u>{_NUM})\)\s*=\s*(?P<r>{_NUM})\s*GiB"
)
_V0_TERMS = re.compile(
    rf"model weights take (?P<w>{_NUM})\s*GiB; non_torch_memory takes (?P<n>{_NUM})\s*GiB; PyTorch "
    r"activation peak "
    rf"memory takes (?P<a>{_NUM})\s*GiB; the rest of the memory reserved for KV Cache is (?P<kv>{_NUM})\s*GiB"
)
_KEYVAL_GIB = re.compile(rf"(?P<k>\w+)=(?P<v>{_NUM})\s*GiB")
_V1_DEBUG = re.compile(
    rf"torch peak memory increase:\s*(?P<a>{_NUM})\s*GiB;.*?(?:non-torch forward increase "
    rf"memory:\s*(?P<n>{_NUM})\s*GiB;)?"
    rf".*?weights memory:\s*(?P<w>{_NUM})\s*GiB"
)
_SUGGEST = re.compile(
    rf"Free memory on device(?: \S+)? \((?P<free>{_NUM})/(?P<t>{_NUM}) GiB\) on startup\. Desired GPU memory "
    r"utilization "
    rf"is \((?P<u>{_NUM}), (?P<r>{_NUM}) GiB\)\. Actual usage is (?P<c>{_NUM}) GiB for "
    r"(?:weight|consumed)[^,]*, "
    rf"(?P<a>{_NUM}) GiB for peak activation(?:, (?P<n>{_NUM}) GiB for non-torch memory)?,? and "
    rf"(?P<g>{_NUM}) GiB for CUDAGraph"
)
_FREE_LOW = re.compile(
    rf"Free memory on device(?: \S+)? \((?P<free>{_NUM})/(?P<t>{_NUM}) GiB\) on startup is less than "
    r"(?:desired GPU memory "
    rf"utilization|the engine's budget)[^(]*\((?P<u>{_NUM}), (?P<r>{_NUM}) GiB\)"
)
_CG_EST = log_format.CUDA_GRAPH_ESTIMATE
_CG_POOL = re.compile(
    rf"CUDA graph pool memory:\s*(?P<a>{_NUM})\s*GiB \(actual\)(?:,\s*(?P<e>{_NUM})\s*GiB \(estimated\))?"
)
_CG_TOOK = re.compile(rf"Graph capturing finished in\s*\d+\s*secs?, took\s*(?P<v>{_NUM})\s*GiB")
_CG_EQUIV = log_format.UTILIZATION_EQUIVALENT
_MAXLEN_V0 = re.compile(
    r"max seq len\s*\((?P<L>\d+)\)\s*is\s*larger\s*than\s*the\s*maxi[mn]um\s*number\s*of\s*tokens"
    r"\s*that\s*can\s*be\s*stored"
    r"\s*in\s*KV\s*cache(?:\s*\((?P<kv>\d+)\))?"  # the count is missing from pastes that retyped it
)
_MAXLEN_V1 = re.compile(
    rf"max seq len\s*\((?P<L>\d+)\),?\s*\(?(?P<need>{_NUM})\s*GiB\s*KV\s*cache\s*is\s*needed,"
    r"\s*which\s*is\s*larger\s*than"
    rf"\s*the\s*available\s*KV\s*cache\s*memory\s*\((?P<avail>{_NUM})\s*GiB\)"
)
_ASCEND_KV = re.compile(r"Available memory: (?P<a>-?\d+), total memory: (?P<t>\d+)\b")
# vLLM >= 0.12 (vllm/config/compilation.py, resolve_cudagraph_mode_and_sizes): a hybrid model keeps one
# recurrent-state ("Mamba") block per running sequence, allocated from the KV budget; fewer blocks than
# max_num_seqs and it refuses to start: "max_num_seqs (1024) exceeds available Mamba cache blocks (856)."
# (quoted from its middle in reports: "exceeds available Mamba cache blocks (95)... ").
_STATE_BLOCKS = re.compile(
    r"(?:\bmax_num_seqs \((?P<seqs>\d+)\) )?\bexceeds available Mamba cache blocks \((?P<blocks>\d+)\)"
)
# V0's scheduler (core/scheduler.py _schedule_prefills, AllocStatus.NEVER): a prompt needs more KV blocks
# than the whole GPU pool holds (less the watermark), so it is dropped: "Input prompt (40000 tokens) +
# lookahead slots (0) is too long and exceeds the capacity of block_manager" (before 0.5: "Input prompt (N
# tokens) is too long and exceeds the capacity of block_manager").
_BLOCK_CAPACITY = re.compile(
    r"Input prompt \((?P<n>\d+) tokens\)(?: \+ lookahead slots \(\d+\))? is too long and exceeds the "
    r"capacity of block_manager"
)
# V1's input check (v1/engine/processor.py, input_processor.py): one multimodal item's embeddings are more
# than the encoder cache the profile sized: "The decoder prompt contains a(n) video item with 21504 embedding
# tokens, which exceeds the pre-allocated encoder cache size 16384." (earlier: "... image item with length
# 4230, ...").
_ENCODER_CACHE = re.compile(
    r"contains a\(n\) (?P<kind>\w+) item with (?:length (?P<a>\d+)|(?P<b>\d+) embedding tokens), "
    r"which exceeds the pre-allocated encoder cache size (?P<size>\d+)"
)
# The multimodal profile (multimodal/profiling.py, V0 and V1 0.7-0.9; "The context length (N) of the model"
# in 0.7): the profile's sequence could not hold the worst-case multimodal embeddings, so what it measured is
# less than a multimodal request takes.
_MM_PROFILE_SHORT = re.compile(
    r"(?:\(max_num_batched_tokens / max_num_seqs = (?P<p>\d+)\)|context length \((?P<c>\d+)\) of the "
    r"model) is too short to hold the multi-modal embeddings in the worst case \((?P<mm>\d+) tokens in total"
)
# LoRA adapters on the GPU (lora/worker_manager.py _apply_adapters): a step asks for more distinct adapters
# than the max_loras slots hold: "Number of requested LoRAs (9) is greater than the number of GPU LoRA slots
# (8)."
_LORA_SLOTS = re.compile(
    r"Number of requested LoRAs \((?P<n>\d+)\) is greater than the number of GPU LoRA slots "
    r"\((?P<slots>\d+)\)"
)
_EST_LEN = re.compile(r"estimated\s*maximum\s*model\s*length\s*is\s*(?P<v>\d+)")
_SAMPLER = re.compile(r"warming up sampler with (?P<n>\d+) dummy requests")
_MM_PROFILE = re.compile(
    r"Encoder cache will be initialized with a budget of (?P<b>\d+) tokens, and profiled with "
    r"(?P<n>\d+) (?P<kind>\w+) items"
)
_STATS = re.compile(
    r"Running: (?P<run>\d+) reqs,(?: Swapped: \d+ reqs,)? (?:Pending|Waiting): (?P<wait>\d+) reqs(?P<rest>.*)"
)
_PREEMPT = re.compile(r"Preemptions: (?P<p>\d+)")
# V0's stats line counts the requests its scheduler swapped out to CPU blocks for lack of GPU blocks.
_SWAPPED = re.compile(r"Swapped: (?P<n>\d+) reqs")
_V1_PREEMPTED = re.compile(r"\bPreempted request \S+ has been resumed\b|\bPreempting request \S+:")
# A number as vLLM prints it ("97.5"): "9.5.3" (two lines run together) is no usage at all.
_KV_USAGE = re.compile(r"(?:GPU |XPU |NPU )?KV cache usage: (?P<u>\d+(?:\.\d+)?)%")
_ENGINE = re.compile(r"(Engine \d+):")
_KEYVAL_STATS = re.compile(
    r"\b(?P<k>num_running_reqs|num_waiting_reqs|kv_cache_usage|num_preempted_reqs)=(?P<v>[\d.]+)"
)
# vLLM >= 0.7 gpu_worker.sleep: "Sleep mode freed 70.10 GiB memory, 3.20 GiB memory is still in use."
_SLEEP = re.compile(
    rf"(?:Sleep mode freed (?P<freed>{_NUM}) GiB(?: memory)?, )?(?P<used>{_NUM}) GiB memory is still in use"
)
_SCHED = re.compile(r"num_scheduled_tokens=\{(?P<d>[^}]*)\}")
_SCHED_VALUES = re.compile(r":\s*(\d+)")
_VERSION = (
    re.compile(r"vLLM API server version (?P<v>[\w.+-]+)"),
    re.compile(r"Initializing an? (?:V1 )?LLM engine \(v(?P<v>[\w.+-]+)\)"),
    re.compile(r"\bvllm(?:==| version:? )v?(?P<v>\d+\.\d+[\w.+-]*)", re.IGNORECASE),
)
_DICT_ITEM = re.compile(r"""'(?P<k>\w+)':\s*(?P<v>'(?:[^'\\]|\\.)*'|"[^"]*"|\[[^\]]*\]|\{[^}]*\}|[^,}]+)""")
_CONFIG_ITEM = re.compile(r"(?P<k>\w+)=(?P<v>'[^']*'|\"[^\"]*\"|\{[^}]*\}|[^,]+)")
_COMMAND = re.compile(r"(?:\bvllm\s+serve\b|vllm\.entrypoints\.openai\.api_server|\bLLM\()(?P<rest>.*)")
# A pasted shell command split over lines: "  --gpu-memory-utilization 0.4 \\" or "--max-model-len=16384 \\".
_SHELL_FLAG = re.compile(r"^\s*--(?P<k>[a-z][\w-]*)(?:[ =](?P<v>[^\s\\]+))?\s*\\?\s*$")
# vLLM's worker wrappers name the worker method that raised: the multiprocessing one (V0
# executor/multiproc_worker_utils.py) "Exception in worker VllmWorkerProcess while processing method
# load_model", the Ray one (worker/worker_base.py, V0 and V1 on Ray) "Error executing method load_model. This
# might cause deadlock in distributed execution." (quoted since v0.6: "Error executing method 'load_model'.").
_METHOD = re.compile(r"\b(?:while processing method|Error executing method) '?(?P<m>\w+)")
# The startup step each worker method is (the phase it places a failure in). V0 Worker.initialize_cache
# allocates the blocks the profile sized and then captures the CUDA graphs (_warm_up_model), so an OOM in it
# with no engine error about the pool is the capture's; V1 initialize_from_config only allocates the KV cache,
# and compile_or_warm_up_model warms up kernels and captures the graphs (vllm/v1/worker/gpu_worker.py).
WORKER_METHOD_STEPS = {
    "load_model": "startup-weights",
    "determine_num_available_blocks": "startup-profile",
    "determine_available_memory": "startup-profile",
    "profile_run": "startup-profile",
    "initialize_cache": "startup-cudagraph",
    "initialize_from_config": "startup-kv-alloc",
    "compile_or_warm_up_model": "startup-cudagraph",
}
_YAML_FLAG = re.compile(r"""^\s*-\s*['"]?--(?P<k>[a-z][\w-]*)(?:=(?P<v>[^'"]*))?['"]?\s*$""")
_YAML_VALUE = re.compile(r"""^\s*-\s*['"]?(?P<v>[^-'"][^'"]*|\{.*\})['"]?\s*$""")
_ENV = re.compile(r"\b(?P<k>VLLM_[A-Z0-9_]+|PYTORCH_CUDA_ALLOC_CONF|NCCL_[A-Z0-9_]+)=(?P<v>[^\s'\"]+)")
# Field names of the engine-config line that differ from the flag's name.
CONFIG_ALIASES = {"max_seq_len": "max_model_len", "model_tag": "model"}
# The engine's startup is over (profile, KV allocation, graph capture, sampler warm-up: V0 llm_engine.py and
# V1 engine/core.py both log it): a failure after it is in serving.
ENGINE_READY = "init engine (profile, create kv cache, warmup model) took"
# Lines showing the server is up and serving traffic. The offline LLM's progress bars (entrypoints/llm.py:
# "Adding requests" as generate() queues the prompts, "Processed prompts" as it runs them) come only after
# its constructor finished every startup step.
SERVING_MARKERS = (
    "Avg prompt throughput",
    "Application startup complete",
    "Starting vLLM API server",
    "Uvicorn running",
    "Avg generation throughput",
    "Processed prompts:",
    "Adding requests:",
)


def _gib(text: str | None) -> float | None:
    value = to_float(text) if text else None
    return None if value is None else value * _GIB


def clean_value(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return value.removeprefix("torch.")


class Parser(LineParser):
    # Each word is one `... in body` test of feed() below, or the literal its regexes require; "Running:" is
    # the
    # stats line (also the STATS series marker).
    TRIGGERS = Triggers(
        words=(
            "Running:",
            *SERVING_MARKERS,
            ENGINE_READY,
            "Model loading took",
            "Loading model weights took",
            "Starting to load model",
            "Loading drafter model",
            "Loading model from scratch",
            "Loading safetensors checkpoint shards",
            "Loading weights took",
            "Using model weights format",
            "Available KV cache memory",
            "Available memory:",  # vLLM Ascend's KV budget in bytes
            "KV cache size",
            "Maximum concurrency",
            "blocks:",
            "total_gpu_memory",
            "model weights take",
            "torch peak memory increase",
            "Free memory on device",
            # _graphs: the literals of its regexes and of its capture markers
            "Estimated CUDA graph memory",
            "CUDA graph pool memory",
            "Graph capturing finished",
            "Capturing",
            "CUDA graphs can take additional",
            "capture ACL graphs",
            "max seq len",
            "No available memory for the cache blocks",
            "exceeds available Mamba cache blocks",
            "Cannot auto-fit max_model_len",
            "exceeds the capacity of block_manager",
            "pre-allocated encoder cache size",
            "GPU LoRA slots",
            "too short to hold the multi-modal embeddings",
            "Failed to load model - not enough GPU memory",
            "warming up sampler",
            "warming up pooler",
            "Error in memory profiling",
            "EngineDeadError",
            "EngineCore encountered a fatal error",
            "EngineCore encountered an issue",
            "Engine core initialization failed",
            "EngineCore failed to start",
            "is preempted by PreemptionMode",
            "is preempted in PreemptionMode",
            "Preempted request",
            "Preempting request",
            "profile run",
            "Memory profiling takes",
            "Starting profile",
            "Encoder cache will be initialized",
            "num_scheduled_tokens",
            "kv_cache_usage=",
            "num_running_reqs=",
            "version",
            "LLM engine",
            "non-default args",
            "llm_kwargs",
            "engine_args",
            "with config:",
            # _command: the command line, its YAML list form ("- --flag"), and _CG_EQUIV's "--gpu-memory-..."
            "--",
            "serve",
            "LLM(",
            "VLLM_",
            "PYTORCH_CUDA_ALLOC_CONF",
            "memory is still in use",
            "while processing method",
            "Error executing method",
        )
    )
    # The periodic stats line: "Running: N reqs, [Swapped: N reqs, ]Waiting|Pending: N reqs, GPU KV cache
    # usage:
    # X%..." (V0 and V1), one LoadSample each.
    SERIES = (
        Series(
            marker="Running:",
            shape=rb"Running: \d+ reqs,(?: Swapped: \d+ reqs,)? (?:Pending|Waiting): \d+ reqs, "
            rb"(?:GPU |XPU |NPU )?KV cache usage: \d+(?:\.\d+)?%[^\n]*",
            fact=LoadSample,
            quiet=SERVING_MARKERS,
        ),
    )

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.serving_seen = False
        self.versions: set[str] = set()

    def feed(self, line: Line, msg: Message) -> None:
        if "KV cache usage" in msg.body and "Running:" in msg.body:
            self._stats(line, msg)  # the periodic stats line: nothing else on it
            return
        self._weights(line, msg)
        self._kv_sizing(line, msg)
        self._profile(line, msg)
        if "graph" in msg.body or "Graph" in msg.body or "Capturing" in msg.body:
            self._graphs(line, msg)
        self._startup_errors(line, msg)
        self._milestones(line, msg)
        self._load(line, msg)
        self._sleep(line, msg)
        self._setup(line, msg)

    def _weights(self, line: Line, msg: Message) -> None:
        """Weight loading: its start and the bytes it took."""
        body = msg.body
        if "Model loading took" in body or "Loading model weights took" in body:
            m = _WEIGHTS.search(body)
            self.ctx.startup_number(line, msg, "weights_bytes", _gib(m.group("v")) if m else None)
            self.ctx.signal(line, body, "milestone-weights-loaded")
        elif "Loading drafter model" in body:
            self.ctx.signal(line, body, "milestone-drafter-loading")
        elif (
            "Starting to load model" in body
            or "Loading model from scratch" in body
            or "Loading safetensors checkpoint shards" in body
            or "Loading weights took" in body
            # weight_utils.py as it starts reading the checkpoint (V0 since 0.4, V1)
            or "Using model weights format" in body
        ):
            self.ctx.signal(line, body, "milestone-weights-loading")

    def _ascend_kv(self, line: Line, msg: Message) -> None:
        """vLLM Ascend's worker (worker_v1.py) logs the KV budget in bytes: "Available memory: N, total
        memory: M"; zero or less is no room for KV blocks."""
        m = _ASCEND_KV.search(msg.body)
        if not m:
            return
        available = int(m.group("a"))
        self.ctx.startup_number(line, msg, "kv_available_bytes", available)
        self.ctx.startup_number(line, msg, "gpu_total_bytes", int(m.group("t")))
        self.ctx.signal(line, msg.body, "milestone-kv-sized")
        if available <= 0:
            self.ctx.signal(line, msg.body, "no-kv-cache-memory", kv_available_bytes=available)

    def _kv_sizing(self, line: Line, msg: Message) -> None:
        """The KV pool as sized: bytes, tokens, concurrency, blocks."""
        body = msg.body
        if "Available KV cache memory" in body:
            m = _KV_AVAIL.search(body)
            value = _gib(m.group("v")) if m else None
            self.ctx.startup_number(line, msg, "kv_available_bytes", value)
            if value is not None and value < 0:
                self.ctx.signal(line, body, "negative-kv-memory", kv_available_bytes=value)
            self.ctx.signal(line, body, "milestone-kv-sized")
        if "Available memory:" in body:
            self._ascend_kv(line, msg)
        if "KV cache size" in body:
            m = _KV_TOKENS.search(body)
            self.ctx.startup_number(line, msg, "kv_cache_tokens", to_int(m.group("v")) if m else None)
        if "Maximum concurrency" in body:
            m = _CONCURRENCY.search(body)
            if m:
                self.ctx.startup_number(line, msg, "concurrency_tokens", to_int(m.group("len")))
                self.ctx.startup_number(line, msg, "max_concurrency", to_float(m.group("x")))
                self.ctx.signal(line, body, "milestone-kv-sized")
        if "blocks:" in body:
            m = _BLOCKS.search(body)
            if m:
                blocks = to_int(m.group("v"))
                self.ctx.startup_number(line, msg, "num_gpu_blocks", blocks)
                self.ctx.signal(line, body, "milestone-kv-sized")
                if blocks == 0:  # V0 logged the count before refusing: no memory was left for KV blocks
                    self.ctx.signal(line, body, "no-kv-cache-memory")

    def _profile(self, line: Line, msg: Message) -> None:
        """The memory profile's terms, every version's wording (V0 budget line, V1 debug line, free
        memory)."""
        body = msg.body
        if "total_gpu_memory" in body:
            self._profile_v0(line, msg)
        if "model weights take" in body:
            m = _V0_TERMS.search(body)
            if m:
                self.ctx.startup_number(line, msg, "weights_bytes", _gib(m.group("w")))
                self.ctx.startup_number(line, msg, "non_torch_bytes", _gib(m.group("n")))
                self.ctx.startup_number(line, msg, "activation_bytes", _gib(m.group("a")))
                kv = _gib(m.group("kv"))
                self.ctx.startup_number(line, msg, "kv_available_bytes", kv)
                if kv is not None and kv < 0:
                    self.ctx.signal(line, body, "negative-kv-memory", kv_available_bytes=kv)
        if "torch peak memory increase" in body:
            m = _V1_DEBUG.search(body)
            if m:
                self.ctx.startup_number(line, msg, "activation_bytes", _gib(m.group("a")))
                self.ctx.startup_number(line, msg, "non_torch_bytes", _gib(m.group("n")))
                self.ctx.startup_number(line, msg, "weights_bytes", _gib(m.group("w")))
        if "Free memory on device" in body:
            self._free_memory(line, msg)

    def _startup_errors(self, line: Line, msg: Message) -> None:
        """The engine's own memory errors and its death."""
        body = msg.body
        if "max seq len" in body:
            self._max_len(line, msg)
        if "No available memory for the cache blocks" in body:
            self.ctx.signal(line, body, "no-kv-cache-memory")
        if "exceeds available Mamba cache blocks" in body:
            m = _STATE_BLOCKS.search(body)
            if m:
                self.ctx.signal(
                    line,
                    body,
                    "state-blocks-below-max-seqs",
                    max_num_seqs=float(m.group("seqs")) if m.group("seqs") else None,
                    blocks=float(m.group("blocks")),
                )
        if "Cannot auto-fit max_model_len" in body:
            self.ctx.signal(line, body, "cannot-auto-fit")
        if "exceeds the capacity of block_manager" in body:
            m = _BLOCK_CAPACITY.search(body)
            if m:
                self.ctx.signal(line, body, "prompt-exceeds-kv-capacity", prompt_tokens=float(m.group("n")))
        if "GPU LoRA slots" in body:
            m = _LORA_SLOTS.search(body)
            if m:
                self.ctx.signal(
                    line,
                    body,
                    "lora-cache-full",
                    adapters=float(m.group("n")),
                    slots=float(m.group("slots")),
                )
        if "pre-allocated encoder cache size" in body:
            m = _ENCODER_CACHE.search(body)
            if m:
                self.ctx.signal(
                    line,
                    body,
                    "encoder-cache-too-small",
                    item_tokens=float(m.group("a") or m.group("b")),
                    cache_tokens=float(m.group("size")),
                )
        if "too short to hold the multi-modal embeddings" in body:
            m = _MM_PROFILE_SHORT.search(body)
            if m:
                self.ctx.signal(
                    line,
                    body,
                    "mm-profile-too-short",
                    profile_tokens=float(m.group("p") or m.group("c")),
                    mm_tokens=float(m.group("mm")),
                )
        if "Failed to load model - not enough GPU memory" in body:
            self.ctx.signal(line, body, "load-model-failed")
        if "warming up sampler" in body:
            m = _SAMPLER.search(body)
            self.ctx.signal(
                line, body, "sampler-warmup-oom", num_requests=to_float(m.group("n")) if m else None
            )
        if "warming up pooler" in body:
            self.ctx.signal(line, body, "pooler-warmup-oom")
        if "Error in memory profiling" in body:
            self.ctx.signal(line, body, "profiling-memory-released")
        if (
            "EngineDeadError" in body
            or "EngineCore encountered a fatal error" in body
            or "EngineCore encountered an issue" in body
        ):
            self.ctx.signal(line, body, "engine-dead")
        if "Engine core initialization failed" in body or "EngineCore failed to start" in body:
            self.ctx.signal(line, body, "engine-init-failed")
        # V0's scheduler warns on every 50th preemption ("Sequence group 7 is preempted by
        # PreemptionMode.RECOMPUTE mode because there is not enough KV cache space", core/scheduler.py); V1
        # logs a preempted request coming back ("Preempted request cmpl-e595..-0 has been resumed!",
        # v1/core/sched/scheduler.py) and, from the observability change, the preemption itself
        # ("Preempting request cmpl-abc123: 480 computed tokens lost",
        # https://github.com/vllm-project/vllm/pull/42827).
        if (
            "is preempted by PreemptionMode" in body
            or "is preempted in PreemptionMode" in body
            or (("Preempted request" in body or "Preempting request" in body) and _V1_PREEMPTED.search(body))
        ):
            self.ctx.signal(line, body, "kv-preempted")

    def _milestones(self, line: Line, msg: Message) -> None:
        """Startup steps that place a failure: the profile run, the multimodal profile."""
        body = msg.body
        method = _METHOD.search(body) if "method" in body else None
        if method and method.group("m") in WORKER_METHOD_STEPS:
            self.ctx.emit(
                FailedStep(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(body),
                    method=method.group("m"),
                    step=WORKER_METHOD_STEPS[method.group("m")],
                )
            )
        if "profile run" in body or "Memory profiling takes" in body or "Starting profile" in body:
            name = "milestone-mm-profile" if "multi-modal" in body else "milestone-profile"
            self.ctx.signal(line, body, name)
        if "Encoder cache will be initialized" in body:
            m = _MM_PROFILE.search(body)
            self.ctx.signal(
                line,
                body,
                "milestone-mm-profile",
                items=to_float(m.group("n")) if m else None,
                budget_tokens=to_float(m.group("b")) if m else None,
            )

    def _load(self, line: Line, msg: Message) -> None:
        """Runtime load: the scheduler dump and key=value stats; the first sign of serving."""
        body = msg.body
        if "num_scheduled_tokens" in body:
            self._scheduled(line, msg)
        if "kv_cache_usage=" in body or "num_running_reqs=" in body:
            self._keyval_stats(line, msg)
        if not self.serving_seen and (any(k in body for k in SERVING_MARKERS) or ENGINE_READY in body):
            self.serving_seen = True
            self.ctx.signal(line, body, "milestone-serving")

    def _sleep(self, line: Line, msg: Message) -> None:
        """Sleep mode (RL rollouts): what stays in use after each sleep; growth across cycles is a leak."""
        # the pattern's words first: the search itself tries every position of every line (H6)
        m = _SLEEP.search(msg.body) if "still in use" in msg.body else None
        if m:
            self.ctx.signal(
                line,
                msg.body,
                "sleep-residual",
                freed_bytes=_gib(m.group("freed")),
                residual_bytes=_gib(m.group("used")),
            )

    def _setup(self, line: Line, msg: Message) -> None:
        """What the engine was started with: version, flags, command line, environment."""
        body = msg.body
        if "version" in body or "LLM engine" in body:
            self._version(line, msg)
        if "non-default args" in body or "llm_kwargs" in body or "engine_args" in body:
            self._dict_flags(line, msg)
        if "with config:" in body:
            self._config_flags(line, msg)
        if "--" in body or "serve" in body or "LLM(" in body:
            self._command(line, msg)
        if "VLLM_" in body or "PYTORCH_CUDA_ALLOC_CONF" in body:
            env = [(m.group("k"), m.group("v")) for m in _ENV.finditer(body)]
            if env and "is enabled" not in body and "try setting" not in body and "To disable" not in body:
                self.ctx.emit(
                    Flags(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(body),
                        origin="environment",
                        flags=tuple(env),
                    )
                )

    def _stats(self, line: Line, msg: Message) -> None:
        m = _STATS.search(msg.body)
        if not m:
            return
        rest = m.group("rest")
        usage = _KV_USAGE.search(rest)
        pre = _PREEMPT.search(msg.body)
        swapped = _SWAPPED.search(msg.body) if "Swapped" in msg.body else None
        engine = _ENGINE.search(msg.body)
        # requests swapped out at this sample were preempted (V0's swap mode), whatever the preemption count
        preempted = max(float(pre.group("p")) if pre else 0.0, float(swapped.group("n")) if swapped else 0.0)
        self.ctx.emit(
            LoadSample(
                where=self.ctx.where(line),
                text=self.ctx.clip(msg.body),
                running=int(m.group("run")),
                waiting=int(m.group("wait")),
                kv_usage=float(usage.group("u")) / 100 if usage else None,
                preemptions=preempted if pre or swapped else None,
                engine=" ".join(x for x in (msg.tag, engine.group(1) if engine else "") if x),
            )
        )
        if not self.serving_seen:
            self.serving_seen = True
            self.ctx.signal(line, msg.body, "milestone-serving")

    def _keyval_stats(self, line: Line, msg: Message) -> None:
        values = {m.group("k"): float(m.group("v")) for m in _KEYVAL_STATS.finditer(msg.body)}
        if not values:
            return
        self.ctx.emit(
            LoadSample(
                where=self.ctx.where(line),
                text=self.ctx.clip(msg.body),
                running=int(values["num_running_reqs"]) if "num_running_reqs" in values else None,
                waiting=int(values["num_waiting_reqs"]) if "num_waiting_reqs" in values else None,
                kv_usage=values.get("kv_cache_usage"),
                engine=msg.tag,
            )
        )

    def _scheduled(self, line: Line, msg: Message) -> None:
        m = _SCHED.search(msg.body)
        if not m:
            return
        tokens = tuple(int(v) for v in _SCHED_VALUES.findall(m.group("d")))
        if tokens:
            usage = re.search(r"kv_cache_usage[=:]\s*([\d.]+)", msg.body)
            self.ctx.emit(
                ScheduledStep(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(msg.body),
                    tokens_per_request=tokens,
                    kv_usage=float(usage.group(1)) if usage else None,
                )
            )

    def _profile_v0(self, line: Line, msg: Message) -> None:
        body = msg.body
        m = _V0_BUDGET.search(body)
        if m:
            self.ctx.startup_number(line, msg, "gpu_total_bytes", _gib(m.group("t")))
            self.ctx.startup_number(line, msg, "gpu_memory_utilization", to_float(m.group("u")))
            self.ctx.startup_number(line, msg, "budget_bytes", _gib(m.group("r")))
        elif "Memory profiling results" in body:  # V0 <= 0.6.4: key=value pairs
            values = {k.group("k"): _gib(k.group("v")) for k in _KEYVAL_GIB.finditer(body)}
            self.ctx.startup_number(line, msg, "gpu_total_bytes", values.get("total_gpu_memory"))
            self.ctx.startup_number(line, msg, "non_torch_bytes", values.get("non_torch_memory"))
            # (these versions measured it as the device's used memory less this process's PyTorch
            # allocations, after the profile: other processes' memory is in it; worker.py
            # determine_num_available_blocks, v0.6.2-v0.6.3)
            self.ctx.startup_number(line, msg, "device_outside_torch_bytes", values.get("non_torch_memory"))
            kv = values.get("kv_cache_size")
            self.ctx.startup_number(line, msg, "kv_available_bytes", kv)
            if kv is not None and kv < 0:
                self.ctx.signal(line, body, "negative-kv-memory", kv_available_bytes=kv)
            u = re.search(r"gpu_memory_utilization=([\d.]+)", body)
            self.ctx.startup_number(line, msg, "gpu_memory_utilization", to_float(u.group(1)) if u else None)

    def _free_memory(self, line: Line, msg: Message) -> None:
        text = msg.body + "".join(continuation(line.following(), 2))
        low = _FREE_LOW.search(text)
        if low:
            self.ctx.signal(
                line,
                text,
                "free-memory-below-utilization",
                free_bytes=_gib(low.group("free")),
                total_bytes=_gib(low.group("t")),
                utilization=to_float(low.group("u")),
                requested_bytes=_gib(low.group("r")),
            )
            self.ctx.startup_number(line, msg, "free_at_start_bytes", _gib(low.group("free")))
            self.ctx.startup_number(line, msg, "gpu_total_bytes", _gib(low.group("t")))
            self.ctx.startup_number(line, msg, "gpu_memory_utilization", to_float(low.group("u")))
            return
        m = _SUGGEST.search(text)
        if m:
            self.ctx.startup_number(line, msg, "free_at_start_bytes", _gib(m.group("free")))
            self.ctx.startup_number(line, msg, "gpu_total_bytes", _gib(m.group("t")))
            self.ctx.startup_number(line, msg, "gpu_memory_utilization", to_float(m.group("u")))
            self.ctx.startup_number(line, msg, "budget_bytes", _gib(m.group("r")))
            self.ctx.startup_number(line, msg, "activation_bytes", _gib(m.group("a")))
            self.ctx.startup_number(line, msg, "cuda_graph_actual_bytes", _gib(m.group("g")))

    def _graphs(self, line: Line, msg: Message) -> None:
        body = msg.body
        m = _CG_EST.search(body)
        if m:
            self.ctx.startup_number(line, msg, "cuda_graph_estimate_bytes", _gib(m.group("v")))
        m = _CG_POOL.search(body)
        if m:
            self.ctx.startup_number(line, msg, "cuda_graph_actual_bytes", _gib(m.group("a")))
        m = _CG_TOOK.search(body)
        if m:
            self.ctx.startup_number(line, msg, "cuda_graph_actual_bytes", _gib(m.group("v")))
            self.ctx.signal(line, body, "milestone-cudagraph-done")
        m = _CG_EQUIV.search(body)
        if m:
            self.ctx.startup_number(line, msg, "gpu_memory_utilization", to_float(m.group("u")))
        if (
            "Capturing CUDA graph" in body
            or "Capturing cudagraph" in body
            or "Capturing the model for CUDA graphs" in body
            or "CUDA graphs can take additional" in body
            or "Capturing CUDA graphs" in body
            # vLLM Ascend's NPU graphs: "Starting to capture ACL graphs for cases: [8, 16, ...]" and the bar
            # "Capturing ACL graphs (mixed prefill-decode, PIECEWISE)"
            or "Capturing ACL graph" in body
            or "capture ACL graphs" in body
        ):
            self.ctx.signal(line, body, "milestone-cudagraph-start")

    def _max_len(self, line: Line, msg: Message) -> None:
        text = msg.body + "".join(continuation(line.following(), 3))
        v0 = _MAXLEN_V0.search(text)
        if v0:
            self.ctx.signal(
                line,
                text,
                "max-model-len-exceeds-kv",
                max_model_len=to_float(v0.group("L")),
                kv_cache_tokens=to_float(v0.group("kv")) if v0.group("kv") else None,
            )
            return
        v1 = _MAXLEN_V1.search(text)
        if v1:
            est = _EST_LEN.search(text)
            self.ctx.signal(
                line,
                text,
                "max-model-len-exceeds-kv",
                max_model_len=to_float(v1.group("L")),
                kv_needed_bytes=_gib(v1.group("need")),
                kv_available_bytes=_gib(v1.group("avail")),
                estimated_max_model_len=to_float(est.group("v")) if est else None,
            )
        elif "To serve at least one request" in text:
            self.ctx.signal(line, text, "max-model-len-exceeds-kv")

    def _version(self, line: Line, msg: Message) -> None:
        for pattern in _VERSION:
            m = pattern.search(msg.body)
            if m and m.group("v") not in self.versions:
                self.versions.add(m.group("v"))
                self.ctx.emit(
                    Version(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(msg.body),
                        engine="vllm",
                        version=m.group("v"),
                    )
                )
                return

    def _dict_flags(self, line: Line, msg: Message) -> None:
        brace = msg.body.find("{")
        if brace < 0:
            return
        items = tuple(
            (m.group("k"), clean_value(m.group("v"))) for m in _DICT_ITEM.finditer(msg.body[brace:])
        )
        origin = "llm-kwargs" if "llm_kwargs" in msg.body else "non-default-args"
        if items:
            self.ctx.emit(
                Flags(where=self.ctx.where(line), text=self.ctx.clip(msg.body), origin=origin, flags=items)
            )

    def _config_flags(self, line: Line, msg: Message) -> None:
        config = msg.body.split("with config:", 1)[1]
        items = tuple(
            (CONFIG_ALIASES.get(m.group("k"), m.group("k")), clean_value(m.group("v")))
            for m in _CONFIG_ITEM.finditer(config)
        )
        if items:
            self.ctx.emit(
                Flags(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(msg.body),
                    origin="engine-config",
                    flags=items,
                )
            )

    def _command(self, line: Line, msg: Message) -> None:
        body = msg.body
        m = _COMMAND.search(body)
        if m:
            rest = m.group("rest")
            flags = parse_argv(rest, positional_model="serve" in body[: m.start("rest")])
            if body[: m.start("rest")].endswith("LLM(") and "--" not in rest:
                flags = parse_llm_call(rest)
            if flags:
                self.ctx.emit(
                    Flags(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(body),
                        origin="command-line",
                        flags=tuple(flags.items()),
                    )
                )
            return
        sh = _SHELL_FLAG.match(msg.body) if not msg.prefixed else None
        if sh:
            self.ctx.emit(
                Flags(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(body),
                    origin="command-line",
                    flags=((sh.group("k").replace("-", "_"), clean_value(sh.group("v") or "true")),),
                )
            )
            return
        y = _YAML_FLAG.match(line.text)
        if y:
            value = y.group("v")
            if value is None:
                after = line.following()
                nxt = _YAML_VALUE.match(after[0]) if after else None
                value = nxt.group("v") if nxt else "true"
            self.ctx.emit(
                Flags(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(body),
                    origin="command-line",
                    flags=((y.group("k").replace("-", "_"), clean_value(value)),),
                )
            )


# A keyword argument with a literal value, for a call cut short or spread over lines.
_KWARG = re.compile(r"""\b(?P<k>[a-z_]\w*)\s*=\s*(?P<v>"[^"]*"|'[^']*'|[\w.+-]+)""")


def parse_llm_call(rest: str) -> dict[str, str]:
    """What follows `LLM(` in Python code -> flags: the first positional string is the model, keyword
    arguments with literal values (`gpu_memory_utilization=0.8`, `speculative_model="..."`) are kept as
    vLLM's engine arguments are named; variables and expressions are skipped. A call cut short or spread
    over lines gives the literal keyword arguments on this line."""
    flags: dict[str, str] = {}
    try:
        call = ast.parse("LLM(" + rest.strip(), mode="eval").body
    except SyntaxError:
        call = None
    if isinstance(call, ast.Call):
        if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
            flags["model"] = call.args[0].value
        for kw in call.keywords:
            if kw.arg is None:
                continue
            try:
                value = ast.literal_eval(kw.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
            flags[kw.arg] = value if isinstance(value, str) else repr(value)
        return flags
    first = re.match(r"""\s*(?P<q>["'])(?P<m>[^"']+)(?P=q)""", rest)
    if first:
        flags["model"] = first.group("m")
    for m in _KWARG.finditer(rest):
        flags[m.group("k")] = m.group("v").strip("'\"")
    return flags


# vLLM's short spellings of the parallel sizes (vLLM v0.33, vllm/engine/arg_utils.py: -tp, -pp, -dp).
SHORT_FLAGS = {"-tp": "tensor_parallel_size", "-pp": "pipeline_parallel_size", "-dp": "data_parallel_size"}


def parse_argv(rest: str, positional_model: bool) -> dict[str, str]:
    """`MODEL --tensor-parallel-size 2 --enforce-eager ...` -> {'model': MODEL, 'tensor_parallel_size': '2',
    ...}."""
    rest = command_part(rest)
    try:
        tokens = shlex.split(rest, comments=False)
    except ValueError:
        tokens = rest.split()
    flags: dict[str, str] = {}
    i = 0
    if positional_model and tokens and not tokens[0].startswith("-"):
        flags["model"] = tokens[0]
        i = 1
    while i < len(tokens):
        tok = tokens[i]
        if tok in SHORT_FLAGS and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
            flags[SHORT_FLAGS[tok]] = tokens[i + 1]
            i += 2
            continue
        if tok.startswith("--") and len(tok) > 2:
            key, eq, value = tok[2:].partition("=")
            key = key.replace("-", "_")
            if not eq:
                if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                    value = tokens[i + 1]
                    i += 1
                else:
                    value = "true"
            if key.startswith("no_") and value == "true":
                key, value = key[3:], "false"
            flags[key] = value
        i += 1
    return flags
