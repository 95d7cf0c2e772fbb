"""Which serving engine the evidence comes from, and each engine's own spelling of the memory levers.

A fix is only useful in the spelling the user's engine accepts: `--max-num-batched-tokens` means nothing to
llama.cpp or TensorRT-LLM. The causes are the same mechanisms everywhere (a context the KV cache cannot
hold, a prefill step too large, a pool sized from too large a share of memory); the levers differ. The
engine is recognised from its own lines and frames (log tags, function names, module paths); the levers
are the engines' documented options:

- llama.cpp: llama-server's options (tools/server/README.md; `llama-server --help`);
- ollama: docs/faq.md (OLLAMA_* variables) and docs/modelfile.md / the API's `options` (num_ctx, ...);
- TensorRT-LLM: trtllm-build / trtllm-serve options and the LLM API's KvCacheConfig
  (https://nvidia.github.io/TensorRT-LLM/examples/kvcacheconfig.html); the Triton tensorrtllm_backend's
  model parameters (kv_cache_free_gpu_mem_fraction);
- TGI: text-generation-launcher's arguments
  (https://huggingface.co/docs/text-generation-inference/reference/launcher);
- LMDeploy: `lmdeploy serve api_server` options (TurbomindEngineConfig / PytorchEngineConfig fields);
- ExLlama: TabbyAPI's config.yml (config_sample.yml) and exllamav2's cache classes;
- SGLang: its server arguments and troubleshooting page (https://docs.sglang.io/references/faq.html);
- vLLM: `vllm serve --help` (its spellings here are for engine-neutral advice, which names vLLM's and
  SGLang's side by side; a vLLM report gets the vLLM advisors' own fixes);
- transformers / accelerate: from_pretrained's device_map and max_memory
  (https://huggingface.co/docs/accelerate/usage_guides/big_modeling), bitsandbytes' load_in_4bit
  (https://huggingface.co/docs/transformers/quantization/bitsandbytes), generate()'s max_new_tokens and
  cache_implementation="quantized" (https://huggingface.co/docs/transformers/kv_cache), attn_implementation;
- DeepSpeed-MII: ModelConfig's tensor_parallel and max_length (DeepSpeed-MII mii/config.py) and the
  inference engine's state manager (DeepSpeed deepspeed/inference/v2/ragged/manager_configs.py:
  max_ragged_batch_size 768, max_ragged_sequence_count 512, memory_config mode "reserve" with size 1e9 bytes
  left free after the KV cache).

Engines recognised by their marks that have none of these (MLX servers, mistral.rs, LightLLM, ...) are
Engine.OTHER; with it and with Engine.UNKNOWN the advice is engine-neutral (remedies.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from functools import cache

from oomguard.diagnosis.engine_marks import Engine
from oomguard.diagnosis.evidence import Evidence, Frame, Signal, TriedLever
from oomguard.diagnosis.setup import EngineSetup

# Each engine's name and own words in machine facts (log tags, C function names, module paths); the
# document heads' structural marks (engine_marks.py) are counted with them.
_NAMES: dict[Engine, re.Pattern[str]] = {
    Engine.OLLAMA: re.compile(r"(?i)\bollama\b"),
    Engine.LLAMA_CPP: re.compile(
        r"\bllama_(?:new_context|kv_cache|model_load|init_from_model|context|decode)\w*|\bggml_\w+|"
        r"\bllama-server\b|\bllm_load_tensors\b|\bik_llama\b|\bload_tensors:"
    ),
    Engine.TENSORRT_LLM: re.compile(
        r"(?i)\[TensorRT-LLM\]|\btensorrt_llm\b|\btrtllm\b|\btensorrtllm_backend\b"
    ),
    Engine.TGI: re.compile(
        r"text_generation_server|text-generation-launcher|text_generation_launcher|\blorax\b"
    ),
    Engine.LMDEPLOY: re.compile(r"(?i)\blmdeploy\b|\bturbomind\b|\[TM\]\["),
    Engine.EXLLAMA: re.compile(r"(?i)\bexllamav[23]\b|\btabbyapi\b"),
    Engine.DEEPSPEED_MII: re.compile(r"(?i)\bdeepspeed[-_]mii\b|/mii/"),
    Engine.SGLANG: re.compile(r"(?i)\bsglang\b"),
    Engine.VLLM: re.compile(r"(?i)\bvllm\b|\bVLLM_\w+"),
}
# Signals only one engine's reader emits (its own error text, recognised by meaning).
_SIGNAL_ENGINE = {"trt-runtime-buffers": Engine.TENSORRT_LLM}
# A wrapper names the engine it runs: ollama's runner prints llama.cpp's lines, so ollama wins over
# llama.cpp when both appear.
_WRAPS = {Engine.OLLAMA: Engine.LLAMA_CPP}
# Which marks win when several engines' appear. First the engines that are not vLLM or SGLang: their own
# marks are specific to them, while their logs may carry a vLLM or SGLang path (a kernel borrowed from vLLM,
# a wrapper that can run either). Then vLLM and SGLang, by count. Transformers last: vLLM and SGLang load
# configs and tokenizers through it and training frameworks that roll out with vLLM run its models, so its
# marks name the engine only when no serving engine's do.
_SERVING = (Engine.VLLM, Engine.SGLANG)
_LIBRARY = (Engine.TRANSFORMERS,)


def identify(ev: Evidence, setup: EngineSetup) -> Engine:
    """The engine whose marks the evidence holds most of (ties to the recovered setup's engine): the marks of
    the documents' heads (engine_marks.py) and the engine names in the machine facts. The machine lines
    decide; a reporter's sentences (which may compare engines) only when they are all there is. OTHER when
    the marks are an engine's that has no levers here, UNKNOWN when there are none."""
    machine: dict[Engine, int] = dict.fromkeys(Engine, 0)
    prose: dict[Engine, int] = dict.fromkeys(Engine, 0)
    for engine, n in ev.engine_marks.items():
        machine[engine] += n
    seen: set[str] = set()
    for fact in ev:
        text = fact.path if isinstance(fact, Frame) else fact.text
        counts = machine
        if isinstance(fact, Signal):
            if fact.name.startswith("prose-"):
                counts = prose
            elif fact.name in _SIGNAL_ENGINE:
                machine[_SIGNAL_ENGINE[fact.name]] += 1
        if text in seen:
            continue
        seen.add(text)
        for engine, pattern in _NAMES.items():
            if pattern.search(text):
                counts[engine] += 1
    found = _decide(machine, setup)
    return found if found is not Engine.UNKNOWN else _decide(prose, setup)


def _decide(counts: dict[Engine, int], setup: EngineSetup) -> Engine:
    counts = dict(counts)
    for wrapper, inner in _WRAPS.items():
        if counts[wrapper]:
            counts[wrapper] += counts.pop(inner)
    foreign = {
        e: n
        for e, n in counts.items()
        if n and e not in _SERVING and e not in _LIBRARY and e is not Engine.UNKNOWN
    }
    if foreign:
        return max(foreign, key=lambda e: foreign[e])
    if counts[Engine.SGLANG] > counts[Engine.VLLM] or setup.engine == "sglang":
        return Engine.SGLANG
    if counts[Engine.VLLM] or setup.engine == "vllm":
        return Engine.VLLM
    if counts[Engine.TRANSFORMERS]:
        return Engine.TRANSFORMERS
    return Engine.UNKNOWN


class Lever(Enum):
    CONTEXT = "the context the KV cache is sized for"
    KV_SHARE = "the share of memory given to the KV cache"
    STEP_TOKENS = "the tokens of one prefill step"
    CONCURRENCY = "the requests running at once"
    KV_DTYPE = "a quantized KV cache"
    GPU_LAYERS = "the layers kept on the GPU"
    SHARDS = "more GPUs for the model"
    GRAPHS = "the CUDA graphs captured"
    FLASH_ATTN = "flash attention"
    WEIGHT_BITS = "fewer bytes per weight"


@dataclass(frozen=True)
class Spelling:
    """How one engine sets one lever: the option's name (the fix's flag key), how a value is written,
    the default when the documentation gives one, and a note for the summary."""

    key: str
    form: str  # with {v} for the value
    default: float | None = None
    note: str = ""

    def written(self, value: object) -> str:
        return self.form.format(v=value)


_C, _K, _S, _N = Lever.CONTEXT, Lever.KV_SHARE, Lever.STEP_TOKENS, Lever.CONCURRENCY
_D, _L, _T, _G, _F = Lever.KV_DTYPE, Lever.GPU_LAYERS, Lever.SHARDS, Lever.GRAPHS, Lever.FLASH_ATTN
_W = Lever.WEIGHT_BITS
# DeepSpeed-MII's state manager, inside the inference_engine_config argument of mii.pipeline / mii.serve.
_MII_STATE = "in inference_engine_config={'state_manager': {...}}"

SPELLINGS: dict[Engine, dict[Lever, Spelling]] = {
    Engine.VLLM: {
        _C: Spelling("max_model_len", "--max-model-len {v}"),
        _K: Spelling("gpu_memory_utilization", "--gpu-memory-utilization {v}", 0.9),
        _S: Spelling("max_num_batched_tokens", "--max-num-batched-tokens {v}"),
        _N: Spelling("max_num_seqs", "--max-num-seqs {v}"),
        _D: Spelling("kv_cache_dtype", "--kv-cache-dtype {v}"),
        _T: Spelling("tensor_parallel_size", "--tensor-parallel-size {v}"),
        _G: Spelling("enforce_eager", "--enforce-eager", note="or a smaller max_cudagraph_capture_size"),
    },
    Engine.SGLANG: {
        _C: Spelling("context-length", "--context-length {v}"),
        _K: Spelling("mem-fraction-static", "--mem-fraction-static {v}"),
        _S: Spelling("chunked-prefill-size", "--chunked-prefill-size {v}", 8192),
        _N: Spelling("max-running-requests", "--max-running-requests {v}"),
        _D: Spelling("kv-cache-dtype", "--kv-cache-dtype {v}"),
        _T: Spelling("tp-size", "--tp-size {v}"),
        _G: Spelling("cuda-graph-max-bs", "--cuda-graph-max-bs {v}", note="or --disable-cuda-graph"),
    },
    Engine.LLAMA_CPP: {
        _C: Spelling("ctx-size", "--ctx-size {v}", note="-c"),
        _S: Spelling("ubatch-size", "--ubatch-size {v}", 512, note="-ub; the compute buffer grows with it"),
        _D: Spelling(
            "cache-type-k", "--cache-type-k {v} --cache-type-v {v}", note="-ctk/-ctv; a quantized V needs -fa"
        ),
        _L: Spelling(
            "n-gpu-layers", "--n-gpu-layers {v}", note="-ngl; the other layers run from host memory"
        ),
        _T: Spelling("tensor-split", "--tensor-split {v}", note="spread the layers over more GPUs"),
        _G: Spelling("GGML_CUDA_DISABLE_GRAPHS", "GGML_CUDA_DISABLE_GRAPHS={v}"),
        _F: Spelling("flash-attn", "--flash-attn {v}", note="-fa"),
    },
    Engine.OLLAMA: {
        _C: Spelling("num_ctx", "num_ctx {v}", note="the request's options or a Modelfile PARAMETER"),
        _K: Spelling(
            "OLLAMA_GPU_OVERHEAD",
            "OLLAMA_GPU_OVERHEAD={v}",
            note="bytes per GPU ollama's estimate leaves free",
        ),
        _S: Spelling("num_batch", "num_batch {v}", 512, note="the request's options"),
        _N: Spelling("OLLAMA_NUM_PARALLEL", "OLLAMA_NUM_PARALLEL={v}", note="each slot gets its own num_ctx"),
        _D: Spelling(
            "OLLAMA_KV_CACHE_TYPE",
            "OLLAMA_KV_CACHE_TYPE={v} OLLAMA_FLASH_ATTENTION=1",
            note="the cache type takes effect only with flash attention",
        ),
        _L: Spelling("num_gpu", "num_gpu {v}", note="layers offloaded to the GPU, in the request's options"),
        _F: Spelling("OLLAMA_FLASH_ATTENTION", "OLLAMA_FLASH_ATTENTION={v}"),
    },
    Engine.TENSORRT_LLM: {
        _C: Spelling("max_seq_len", "max_seq_len {v}", note="trtllm-build / trtllm-serve --max_seq_len"),
        _K: Spelling(
            "kv_cache_free_gpu_mem_fraction",
            "kv_cache_free_gpu_mem_fraction {v}",
            0.9,
            note="Triton backend; LLM API and trtllm-serve: kv_cache_config.free_gpu_memory_fraction",
        ),
        _S: Spelling("max_num_tokens", "max_num_tokens {v}", 8192, note="trtllm-build / trtllm-serve"),
        _N: Spelling("max_batch_size", "max_batch_size {v}", note="trtllm-build / trtllm-serve"),
        _D: Spelling(
            "kv_cache_dtype", "kv_cache_dtype {v}", note="kv_cache_config.dtype, or quantize the KV"
        ),
        _T: Spelling("tp_size", "tp_size {v}", note="trtllm-build / trtllm-serve --tp_size"),
        _G: Spelling("cuda_graph_config", "cuda_graph_config.max_batch_size {v}", note="PyTorch backend"),
    },
    Engine.TGI: {
        _C: Spelling("max-total-tokens", "--max-total-tokens {v}", note="with --max-input-tokens below it"),
        _K: Spelling("cuda-memory-fraction", "--cuda-memory-fraction {v}", 1.0),
        _S: Spelling("max-batch-prefill-tokens", "--max-batch-prefill-tokens {v}", 4096),
        _N: Spelling("max-batch-total-tokens", "--max-batch-total-tokens {v}"),
        _D: Spelling("kv-cache-dtype", "--kv-cache-dtype {v}"),
        _T: Spelling("num-shard", "--num-shard {v}"),
        _G: Spelling("cuda-graphs", "--cuda-graphs {v}"),
    },
    Engine.LMDEPLOY: {
        _C: Spelling("session-len", "--session-len {v}"),
        _K: Spelling(
            "cache-max-entry-count", "--cache-max-entry-count {v}", 0.8, note="share of free memory"
        ),
        _S: Spelling("max-prefill-token-num", "--max-prefill-token-num {v}", 8192),
        _N: Spelling("max-batch-size", "--max-batch-size {v}"),
        _D: Spelling("quant-policy", "--quant-policy {v}", note="8: int8 KV, 4: int4 KV"),
        _T: Spelling("tp", "--tp {v}"),
        _G: Spelling("eager-mode", "--eager-mode", note="PyTorch engine: no CUDA graphs"),
    },
    Engine.EXLLAMA: {
        _C: Spelling("max_seq_len", "max_seq_len: {v}", note="TabbyAPI config.yml; exllamav2 ExLlamaV2Cache"),
        _K: Spelling(
            "autosplit_reserve", "autosplit_reserve: [{v}]", note="MB per GPU the auto split leaves"
        ),
        _S: Spelling("chunk_size", "chunk_size: {v}", 2048, note="TabbyAPI; the prompt chunk per forward"),
        _N: Spelling("cache_size", "cache_size: {v}", note="TabbyAPI: cache tokens shared by all requests"),
        _D: Spelling("cache_mode", "cache_mode: {v}", note="Q8 or Q4 (TabbyAPI); ExLlamaV2Cache_Q4"),
        _T: Spelling("gpu_split_auto", "gpu_split_auto: {v}", note="TabbyAPI, with more GPUs visible"),
    },
    Engine.TRANSFORMERS: {
        _C: Spelling(
            "max_new_tokens",
            "max_new_tokens={v}",
            note="generate(): the KV cache holds the prompt and the new tokens; truncate long prompts too",
        ),
        _N: Spelling("batch_size", "batch_size={v}", note="the pipeline's, or the rows passed to generate()"),
        _D: Spelling(
            "cache_implementation",
            'cache_implementation="{v}"',
            note="generate(), with cache_config={'backend': 'quanto', 'nbits': 4}",
        ),
        _L: Spelling(
            "max_memory",
            "max_memory={v}",
            note="from_pretrained(device_map='auto', max_memory={0: '<GiB>', 'cpu': '<GiB>'}): the layers "
            "past the cap run from host memory",
        ),
        _T: Spelling(
            "device_map", 'device_map="{v}"', note="from_pretrained(): layers spread over every visible GPU"
        ),
        _F: Spelling("attn_implementation", 'attn_implementation="{v}"', note='from_pretrained(); or "sdpa"'),
        _W: Spelling(
            "load_in_4bit",
            "quantization_config=BitsAndBytesConfig(load_in_4bit={v})",
            note="from_pretrained(); bitsandbytes, about a quarter of the bf16 weight bytes",
        ),
    },
    Engine.DEEPSPEED_MII: {
        _C: Spelling("max_length", "max_length={v}", note="mii.pipeline() / mii.serve(): prompt plus output"),
        _K: Spelling(
            "memory_config.size",
            "state_manager.memory_config.size={v}",
            1_000_000_000,
            note=f"bytes left free after the KV cache (mode 'reserve'), {_MII_STATE}",
        ),
        _S: Spelling(
            "max_ragged_batch_size", "state_manager.max_ragged_batch_size={v}", 768, note=_MII_STATE
        ),
        _N: Spelling(
            "max_ragged_sequence_count",
            "state_manager.max_ragged_sequence_count={v}",
            512,
            note=_MII_STATE,
        ),
        _T: Spelling("tensor_parallel", "tensor_parallel={v}", note="mii.pipeline() / mii.serve()"),
    },
}
# A lever a reporter says they tried (sources/levers_tried.py) as the row of SPELLINGS it is, and the options
# of it no spelling table lists. A larger KV share has no row: a fix may lower it, so it is not that lever.
TRIED_LEVERS: dict[TriedLever, Lever] = {
    TriedLever.SHORTER_CONTEXT: Lever.CONTEXT,
    TriedLever.SMALLER_STEP: Lever.STEP_TOKENS,
    TriedLever.QUANTIZED_KV: Lever.KV_DTYPE,
    TriedLever.FEWER_GPU_LAYERS: Lever.GPU_LAYERS,
    TriedLever.MORE_GPUS: Lever.SHARDS,
    TriedLever.QUANTIZED_WEIGHTS: Lever.WEIGHT_BITS,
    TriedLever.NO_CUDA_GRAPHS: Lever.GRAPHS,
    TriedLever.FLASH_ATTENTION: Lever.FLASH_ATTN,
}
TRIED_EXTRA_OPTIONS: dict[TriedLever, tuple[str, ...]] = {
    TriedLever.SHORTER_CONTEXT: ("max_input_tokens",),
    TriedLever.SMALLER_STEP: ("max_prefill_tokens",),
    TriedLever.QUANTIZED_KV: ("cache_type_v",),
    TriedLever.FEWER_GPU_LAYERS: ("cpu_offload_gb",),
    TriedLever.MORE_GPUS: ("pipeline_parallel_size",),
    TriedLever.QUANTIZED_WEIGHTS: ("load_in_8bit",),
    TriedLever.NO_CUDA_GRAPHS: (
        "enforce_eager",
        "disable_cuda_graph",
        "max_capture_size",
        "max_cudagraph_capture_size",
        "cudagraph_capture_sizes",
    ),
    TriedLever.FLASH_ATTENTION: ("flash_attention_2",),
    TriedLever.EXPANDABLE_SEGMENTS: ("PYTORCH_CUDA_ALLOC_CONF",),
    TriedLever.SMALLER_MM_INPUT: (
        "limit_mm_per_prompt",
        "max_pixels",
        "min_pixels",
        "max_frames",
        "mm_processor_kwargs",
    ),
    TriedLever.NO_SPECULATION: (
        "num_speculative_tokens",
        "speculative_config",
        "speculative_model",
        "draft_model",
    ),
    TriedLever.LESS_LORA: ("max_loras", "max_lora_rank", "max_cpu_loras", "enable_lora"),
    TriedLever.NO_PROMPT_LOGPROBS: ("prompt_logprobs",),
    TriedLever.MORE_HOST_MEMORY: ("swap_space", "shm_size", "memory_limit"),
}


@cache
def tried_options(lever: TriedLever) -> tuple[str, ...]:
    """Every engine's option names for a lever a reporter tried (dashes written as underscores, sorted)."""
    names = list(TRIED_EXTRA_OPTIONS.get(lever, ()))
    row = TRIED_LEVERS.get(lever)
    if row is not None:
        names += [spellings[row].key for spellings in SPELLINGS.values() if row in spellings]
    return tuple(sorted({n.replace("-", "_") for n in names}))


# The KV cache type each engine calls its 8-bit (or FP8) cache.
KV_TYPE = {
    Engine.VLLM: "fp8",
    Engine.TRANSFORMERS: "quantized",
    Engine.SGLANG: "fp8_e5m2",
    Engine.LLAMA_CPP: "q8_0",
    Engine.OLLAMA: "q8_0",
    Engine.TENSORRT_LLM: "fp8",
    Engine.TGI: "fp8_e5m2",
    Engine.LMDEPLOY: "8",
    Engine.EXLLAMA: "Q8",
}
# Engines whose GPU memory goes through PyTorch's caching allocator (PYTORCH_CUDA_ALLOC_CONF applies).
PYTORCH_ENGINES = frozenset(
    {
        Engine.VLLM,
        Engine.SGLANG,
        Engine.TGI,
        Engine.LMDEPLOY,
        Engine.EXLLAMA,
        Engine.TRANSFORMERS,
        Engine.DEEPSPEED_MII,
    }
)
# Env-variable prefixes that belong to each engine (its own variables in a fix are kept).
ENV_PREFIXES = {
    Engine.VLLM: ("VLLM_",),
    Engine.SGLANG: ("SGLANG_",),
    Engine.LLAMA_CPP: ("GGML_", "LLAMA_"),
    Engine.OLLAMA: ("OLLAMA_", "GGML_"),
    Engine.TENSORRT_LLM: ("TRTLLM_", "TLLM_"),
    Engine.TGI: (),
    Engine.LMDEPLOY: ("LMDEPLOY_",),
    Engine.EXLLAMA: ("EXL3_",),
    Engine.TRANSFORMERS: (),
    Engine.DEEPSPEED_MII: (),
}
