"""The marks a serving engine leaves in text, each a mechanism of that engine: where its code lives (module
paths in frames), how its logger writes a line and names its processes, how it is launched or called, the
names of its own options, and its own error texts.

They are read from the head of every text document (the first 64 KiB: a pasted report whole, the startup of
a large log), where the engine announces itself. A bare engine name is not a mark here (a reporter's sentence
may compare engines); `identify` counts the names in machine facts (frames, log lines) separately.

Why each holds:
- module paths: a frame under `sglang/srt/` or `vllm/v1/` runs that engine's code, whatever wraps it;
- logger formats and process names: vLLM's `init_logger` writes "LEVEL mm-dd hh:mm:ss [file.py:N]" (V0
  without brackets) and names its processes "(EngineCore_DP0 pid=N)", "(Worker_TP1 pid=N)"; SGLang's
  scheduler "[YYYY-mm-dd hh:mm:ss TP0]" and "Decode batch. #running-req"; ollama's Go slog "level=INFO
  source=file.go:N"; llama.cpp starts each line with its C function's name ("llama_kv_cache_init: ");
  TGI's tracing targets `text_generation_launcher` / `_router`; TensorRT-LLM "[TensorRT-LLM][ERROR]" and
  "[TRT-LLM] [RANK 2] [E]";
- launch commands and API calls: `vllm serve`, `from vllm import`, `python -m sglang.launch_server`,
  `sglang.Engine(`, `trtllm-serve`, `lmdeploy serve` / `from lmdeploy import`, `llama-server`, `ollama run`,
  `mii.pipeline(`, `AutoModelFor*.from_pretrained(` and `model.generate(`;
- option names: each engine's own spelling of its memory options (`gpu_memory_utilization` is vLLM's,
  `mem_fraction_static` SGLang's, `cache_max_entry_count` LMDeploy's, `n_gpu_layers` llama.cpp's);
- own error texts: vLLM's "max seq len (N) is larger than the maximum number of tokens that can be stored in
  KV cache", SGLang's "Scheduler hit an exception", TGI's "Not enough memory to handle N prefill tokens",
  ollama's "model requires more system memory".
A mark is a literal plus, where the literal alone is not specific, its shape on the line: the literal is
found by substring search and only the lines holding it are matched, so a 64 KiB head costs a few ms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Engine(Enum):
    VLLM = "vllm"
    SGLANG = "sglang"
    LLAMA_CPP = "llama.cpp"
    OLLAMA = "ollama"
    TENSORRT_LLM = "tensorrt-llm"
    TGI = "tgi"
    LMDEPLOY = "lmdeploy"
    EXLLAMA = "exllama"
    DEEPSPEED_MII = "deepspeed-mii"
    TRANSFORMERS = "transformers"
    OTHER = "other"  # recognised by its marks, no levers here (MLX servers, mistral.rs, LightLLM, ...)
    UNKNOWN = "unknown"


# How much of each text document is searched for marks.
HEAD_BYTES = 64 << 10
# At most this many lines are looked at per mark: a mark counts once a line, and a log's head repeats its
# engine's logger format on every line; a few hundred decide as well as thousands.
MAX_LINES_PER_MARK = 200


@dataclass(frozen=True)
class Mark:
    """One mark: a literal every line holding it contains (found by plain substring search, which is fast),
    and the mark's shape on that line (None: the literal is the mark)."""

    engine: Engine
    literal: str
    shape: re.Pattern[str] | None = None


def _marks(engine: Engine, *entries: str | tuple[str, str]) -> list[Mark]:
    return [Mark(engine, e) if isinstance(e, str) else Mark(engine, e[0], re.compile(e[1])) for e in entries]


# vLLM's logger: "INFO 07-14 09:52:34 [model_runner.py:1171]", V0 "metrics.py:349]", "INFO [x.py:N]"
_VLLM_LOGGER = (
    r"\b(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (?:\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? )?\[?[\w./-]+\.py:\d+\]"
)


def _options(*names: str) -> list[tuple[str, str]]:
    """An engine's option names as marks, in field (max_model_len) and flag (--max-model-len) spelling."""
    return [
        (spelled, r"(?<![\w-])(?:--)?" + name.replace("_", "[_-]") + r"\b")
        for name in names
        for spelled in (name, name.replace("_", "-"))
    ]


_V, _S, _O, _L = Engine.VLLM, Engine.SGLANG, Engine.OLLAMA, Engine.LLAMA_CPP
MARKS: tuple[Mark, ...] = tuple(
    # vLLM: its code (site-packages/vllm/... or vllm-0.2.7+cu123.egg/vllm/...) and sleep-mode allocator
    _marks(
        _V,
        (
            "vllm/",
            r"\bvllm/(?:v1|worker|engine|executor|entrypoints|core|model_executor|distributed|attention)/",
        ),
        ("vllm/", r"\bvllm/_\w+_ops\.py"),
        "cumem_allocator.cpp",
        ("py:", _VLLM_LOGGER),
        # its process names: "(EngineCore_DP0 pid=1)", "(Worker_TP0_EP0 pid=5)", "VllmWorker rank=1 pid=2"
        ("EngineCore", r"\bEngineCore(?:_DP\d+)?\b"),
        ("(Worker_", r"\(Worker(?:_[TPDE]P\d+)+(?: pid=\d+)?\)"),
        ("pid=", r"\((?:APIServer|RayWorkerWrapper) pid=\d+\)"),
        "VllmWorker",
        "RayWorkerVllm",
        # how it is launched, called and reported (its collect_env script)
        ("vllm serve", r"\bvllm serve\b"),
        "-m vllm.entrypoints",
        ("vllm", r"\b(?:from|import) vllm\b|\bvllm\.LLM\("),
        # a wrapper's module for its vLLM backend (verl's rollout, OpenRLHF's engine, FastChat's worker)
        ("vllm_", r"\bvllm_(?:rollout|engine|worker|backend)\b"),
        ("vLLM Version", r"\bvLLM Version\s*:"),
        "SamplingParams(",
        ("Processed prompts:", r"Processed prompts:.*est\. speed input"),
        # its own memory options, in field or flag spelling
        *_options(
            "gpu_memory_utilization",
            "max_model_len",
            "max_num_batched_tokens",
            "max_num_seqs",
            "enforce_eager",
            "kv_cache_memory_bytes",
            "cpu_offload_gb",
            "swap_space",
            "enable_sleep_mode",
            "kv_transfer_config",
            "kv_offloading_size",
            "mm_encoder_tp_mode",
            "num_gpu_blocks_override",
            "long_prefill_token_threshold",
        ),
        "LoadFormat.AUTO",
        "skip_tokenizer_init=",
        # the scheduler state it dumps when the engine dies (SchedulerStats, SchedulerOutput fields)
        *(
            (f"{field}=", rf"\b{field}=")
            for field in (
                "num_running_reqs",
                "kv_cache_usage",
                "step_counter",
                "scheduled_new_reqs",
                "scheduled_cached_reqs",
                "num_scheduled_tokens",
            )
        ),
        # its own error texts
        ("is larger than the maximum number of tokens", r"max seq len \(\d+\)\)? is larger than the maximum"),
        (
            "To serve at least one request with the model",
            r"To serve at least one request with the models?'?s?'?",
        ),
        "No available memory for the cache blocks",
        "preempted by PreemptionMode",
        "Too large swap space.",
        "Error in memory profiling. Initial free memory",
        "on startup is less than",
    )
    # SGLang: its code, its variables, its scheduler's lines "[2025-01-01 12:00:00 TP0] ...", "[TP0] ..."
    + _marks(
        _S,
        "sglang/srt/",
        ("sglang", r"\bsglang[_.][a-z]\w*"),
        ("SGLANG_", r"\bSGLANG_[A-Z_]+"),
        ("P0]", r"(?m)^\s*\[(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)?(?: ?(?:TP|DP|EP|PP|CP)\d+)+\]"),
        ("P1]", r"(?m)^\s*\[(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)?(?: ?(?:TP|DP|EP|PP|CP)\d+)+\]"),
        (" batch", r"\b(?:Prefill|Decode) batch\.? #"),
        ("hit an exception", r"\b(?:Scheduler|TpModelWorkerClient|TpModelWorker) hit an exception"),
        "server_args=ServerArgs(",
        "-m sglang.launch_server",
        (".Engine(", r"\bsgl(?:ang)?\.Engine\("),
        *_options(
            "mem_fraction_static",
            "chunked_prefill_size",
            "cuda_graph_max_bs",
            "disable_cuda_graph",
            "max_running_requests",
            "enable_hierarchical_cache",
        ),
        ("hicache", r"(?<![\w-])(?:--)?hicache[_-]\w+"),
        ("max_total_num_token", r"\bmax_total_num_tokens?\b"),
        "token_to_kv_pool",
        "req_to_token_pool",
        "token_pool_allocator",
        "tree_cache.evictable_size",
        ("out of memory. Try to lower your batch size", r"(?:Prefill|Decode) out of memory\. Try to lower"),
        "KV cache pool leak detected",
        "The memory capacity is unbalanced",
        "Please reduce the size of the hierarchical cache",
    )
    # ollama: its Go slog lines ("level=INFO source=server.go:N"), commands, variables, own errors
    + _marks(
        _O,
        (" source=", r"\blevel=(?:INFO|WARN|ERROR|DEBUG) source=[\w./-]+\.go:\d+"),
        ("ollama ", r"\bollama (?:run|serve|pull)\b"),
        ("OLLAMA_", r"\bOLLAMA_[A-Z_]+\b"),
        ".ollama/models",
        "llama runner process has terminated",
        "model requires more system memory (",
        "Memory layout cannot be allocated",
    )
    # llama.cpp: its log lines start with the C function's name ("llama_kv_cache_init: ", "ggml_...: ")
    + _marks(
        _L,
        ("llama-", r"\bllama-(?:server|cli)\b"),
        ("llama_cpp", r"\bllama_cpp\b"),
        ("n_gpu_layers", r"\bn_gpu_layers\b"),
        "--n-gpu-layers",
        ("llama_", r"\bllama_\w+:"),
        ("ggml_", r"\bggml_\w+:"),
        ("llm_load_", r"\bllm_load_\w+:"),
        ("print_info:", r"\bprint_info:"),
        "ggml-cuda",
        "evaluate_and_capture_cuda_graph",
        ("failed to allocate compute", r"failed to allocate compute (?:pp )?buffers"),
        "failed to find a memory slot for batch",
        "failed to find free space in the KV",
        "could not find a KV slot for the batch",
    )
    # TensorRT-LLM: its logger ("[TensorRT-LLM][ERROR]", "[TRT-LLM] [RANK 2] [E]"), package, commands, options
    + _marks(
        Engine.TENSORRT_LLM,
        "[TensorRT-LLM]",
        "[TRT-LLM]",
        ("tensorrt_llm", r"\btensorrt_llm[/.]|\bfrom tensorrt_llm\b"),
        ("trtllm-", r"\btrtllm-(?:serve|build|bench)\b"),
        "kv_cache_free_gpu_mem_fraction",
        "free_gpu_memory_fraction",
        "KvCacheConfig",
        "Executor creation failed due to insufficient GPU memory",
    )
    # TGI: its tracing targets and spans, launcher options and texts (LoRAX is a TGI fork)
    + _marks(
        Engine.TGI,
        ("text_generation_", r"\btext_generation_(?:launcher|router|server)\b"),
        ("text-generation-", r"\btext-generation-(?:launcher|inference)\b"),
        "shard-manager",
        ("lorax", r"\blorax[-_]\w+"),
        ("prefill{id=", r"\bprefill\{id=\d+ size=\d+\}"),
        "--max-batch-prefill-tokens",
        "--max-batch-total-tokens",
        "max_batch_prefill_tokens",
        ("prefill tokens", r"Not enough memory to handle \d+ prefill tokens"),
        ("failed to start", r"\bShard \d+ failed to start\b"),
        ("process was signaled to shutdown", r"\b(?:Download|Shard) process was signaled to shutdown\b"),
    )
    + _marks(
        Engine.LMDEPLOY,
        ("lmdeploy", r"\blmdeploy (?:serve|chat|convert)\b|\blmdeploy/|\b(?:from|import) lmdeploy\b"),
        ("turbomind", r"\bturbomind\b"),
        ("cache_max_entry_count", r"\bcache_max_entry_count\b"),
        "--cache-max-entry-count",
        "TurbomindEngineConfig",
        "PytorchEngineConfig",
    )
    + _marks(
        Engine.EXLLAMA,
        ("ExLlamaV", r"\bExLlamaV[23]"),
        ("exllamav", r"\bexllamav[23]/|\bfrom exllamav[23]\b"),
        "tabbyAPI",
        "gpu_split_auto",
        "autosplit_reserve",
        "Insufficient VRAM in split for model and cache",
        # the dynamic generator refusing a job longer than its paged cache (exllamav2 generator/dynamic.py)
        ("Job requires ", r"\bJob requires \d+ pages \(only \d+ available\)"),
    )
    + _marks(
        Engine.DEEPSPEED_MII,
        ("mii", r"\bmii\.(?:pipeline|serve|client)\(|\bimport mii\b|/mii/"),
        "deepspeed/inference/v2/",
        "DeepSpeed-MII",
        "deepspeed-mii",
        "RaggedInferenceEngineConfig",
        "load_with_sys_mem",
    )
    # transformers / accelerate: the generation and model code, the loading and generation calls
    + _marks(
        Engine.TRANSFORMERS,
        "transformers/generation/utils.py",
        ("transformers/models/", r"\btransformers/models/\w+/modeling_\w+\.py"),
        "transformers_modules",
        (
            "accelerate",
            r"\baccelerate/(?:big_modeling|hooks|utils/modeling)\.py|-m accelerate\.commands\.launch\b",
        ),
        "accelerate launch",
        "model.generate(",
        (".from_pretrained(", r"\bAutoModelFor\w+\.from_pretrained\("),
        "device_map=",
        ("load_in_", r"\bload_in_[48]bit\b"),
        "BitsAndBytesConfig",
    )
    # engines with no levers here: MLX servers, mistral.rs, LightLLM, KTransformers, FastDeploy, ...
    + _marks(
        Engine.OTHER,
        ("mlx", r"\bmlx[_-](?:lm|vlm)\b|\bmlx\.core\b|\bvllm[-_]mlx\b"),
        "[METAL]",
        "[metal::malloc]",
        ("mistral", r"\bmistralrs\b|\bmistral\.rs\b"),
        ("lightllm", r"\blightllm\b"),
        ("ktransformers", r"\bktransformers\b"),
        ("fastdeploy", r"\bfastdeploy\b"),
        ("ctranslate2", r"\bctranslate2\b"),
        ("mlc", r"\bmlc[_-]llm\b"),
        "Cannot estimate KV cache capacity",
        "kv_aux_workspace_bytes",
    )
)


def count_marks(head: bytes) -> dict[Engine, int]:
    """How many lines of the text hold each engine's marks, each mark counted once a line (engines without
    any are left out)."""
    text = head.decode("utf-8", "replace")
    counts: dict[Engine, int] = {}
    for mark in MARKS:
        seen = 0
        at = text.find(mark.literal)
        while at >= 0 and seen < MAX_LINES_PER_MARK:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            seen += 1
            if mark.shape is None or mark.shape.search(text, start, end):
                counts[mark.engine] = counts.get(mark.engine, 0) + 1
            at = text.find(mark.literal, end)
    return counts
