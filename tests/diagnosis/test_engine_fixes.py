"""Fixes in the user's engine's own options, tried as a new user would: real text from public threads of
each engine (the thread is named above each case), diagnosed as pasted. vLLM's flags never reach another
engine's user; each engine gets its documented option with a value where the evidence gives one."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from oomguard.diagnosis.diagnosis import Diagnosis, diagnose
from oomguard.diagnosis.engine_levers import Engine, identify
from oomguard.diagnosis.evidence import Evidence
from oomguard.diagnosis.read import read_one
from oomguard.diagnosis.setup import recover_setup

# vLLM's own spellings: none may appear in a fix for another engine.
VLLM_ONLY = re.compile(
    r"--(max-num-batched-tokens|gpu-memory-utilization|max-model-len|max-num-seqs|enforce-eager|"
    r"tensor-parallel-size|num-gpu-blocks-override|limit-mm-per-prompt|kv-cache-memory-bytes|swap-space|"
    r"cpu-offload-gb|long-prefill-token-threshold)\b|\bVLLM_|\bvllm serve\b"
)
VLLM_KEYS = {
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_seqs",
    "enforce_eager",
    "tensor_parallel_size",
    "kv_cache_memory_bytes",
}

# https://github.com/huggingface/text-generation-inference/issues/1769
TGI_WARMUP = (
    "But when running launcher with `--max-batch-prefill-tokens 10000` and `--max-input-length 10000`, the "
    "server threw  `CUDA out of memory` error when warmup.\n"
    " ghcr.io/huggingface/text-generation-inference:2.0 \\\n  --model-id /model \\\n"
    "  --max-concurrent-requests 2 \\\n  --max-batch-prefill-tokens 10000 \\\n  --max-input-length 10000 \\\n"
    "  --max-total-tokens 11000 \\\n  --num-shard $NUM_SHARD \\\n  --cuda-memory-fraction 0.99 \\\n"
    "  --cuda-graphs 0 \\\n  --quantize eetq \\\n  -p 8089\n"
    "2024-04-19T11:06:25.868590Z ERROR text_generation_launcher: Method Warmup encountered an error."
)
# https://github.com/huggingface/text-generation-inference/issues/2301
TGI_PREFILL = (
    "I am unable to run LLama3.1-8b even at 64k on an A100.\n\nNot enough memory to handle 2 prefill tokens."
)
# https://github.com/NVIDIA/TensorRT-LLM/issues/494
TRTLLM_KV = (
    "[TensorRT-LLM][INFO] Using 693 tokens in paged KV cache.\n"
    "E1128 16:31:49.479096 227 backend_model.cc:634] ERROR: Failed to create instance: unexpected error when "
    "creating modelInstanceState: maxTokensInPagedKvCache must be large enough to process at least 1 "
    "sequence to completion (i.e. must be larger than beam_width * tokensPerBlock * maxBlocksPerSeq)"
)
# https://github.com/ollama/ollama/issues/6283
OLLAMA_KV = (
    "Error: llama runner process has terminated: error:failed to create context with model "
    "'C:\\Users\\razva\\.ollama\\blobs\\sha256-c4e04968e3ca697b947c4820d7d4e58873e9f93908a043e7280863b31019b7df'\n"
    'time=2024-08-09T14:28:55.092+03:00 level=DEBUG source=gpu.go:359 msg="updating system memory data" '
    'before.total="31.9 GiB" before.free="17.1 GiB" before.free_swap="19.4 GiB" now.total="31.9 GiB" '
    'now.free="17.1 GiB" now.free_swap="19.5 GiB"\n'
    'time=2024-08-09T14:28:55.142+03:00 level=INFO source=memory.go:309 msg="offload to cuda" '
    'layers.requested=-1 layers.model=33 layers.offload=0 layers.split="" memory.available="[4.6 GiB]" '
    'memory.required.full="35.3 GiB" memory.required.partial="0 B" memory.required.kv="31.2 GiB" '
    'memory.required.allocations="[0 B]" memory.weights.total="34.9 GiB"'
)
# https://github.com/ggml-org/llama.cpp/issues/16725
LLAMA_CPP_COMPUTE = (
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 14136.04 MiB on device 0: cudaMalloc failed: out "
    "of memory\nggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 14822711296\n"
    "graph_reserve: failed to allocate compute buffers\n"
    "llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers\n"
    "common_init_from_params: failed to create context with model "
    "'models/large/Apertus-70B-Instruct-2509-IQ4_XS.gguf', try reducing --n-gpu-layers if you're running out "
    "of VRAM\nsrv    load_model: failed to load model, 'models/large/Apertus-70B-Instruct-2509-IQ4_XS.gguf'"
)
# https://github.com/turboderp-org/exllamav2/issues/677
EXLLAMA_CACHE = (
    " -- Loaded model in 9.7356 seconds\n -- Loading tokenizer...\nTraceback (most recent call last):\n"
    '  File "/home/ubuntu/exllamav2/test_inference.py", line 192, in <module>\n'
    "    cache = ExLlamaV2Cache(model) if not model.tp_context else ExLlamaV2Cache_TP(model)\n"
    '  File "/home/ubuntu/exllamav2/exllamav2/cache.py", line 256, in __init__\n'
    "    self.create_state_tensors(copy_from, lazy)\n"
    '  File "/home/ubuntu/exllamav2/exllamav2/cache.py", line 91, in create_state_tensors\n'
    "    p_key_states = torch.zeros(self.shape_wk, dtype = self.dtype, device = device).contiguous()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to"
)
# https://github.com/InternLM/lmdeploy/issues/3557
LMDEPLOY_TM = (
    "Failed to find a feasible kernel in the cache, will dispatch by heuristic.\n"
    "[TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/core/allocator.cc:49"
)
# https://github.com/sgl-project/sglang/issues/6027
SGLANG_PREFILL = (
    "[2025-05-05 03:55:08 TP0] KV Cache is allocated. #tokens: 274934, KV size: 17.99 GB\n"
    "However, a single 64k-length input can consistently cause the server to crash due to OOM on my H100*8*2 "
    "environment.\n"
    "[2025-07-07 19:00:30 DP4 TP4] TpModelWorkerClient hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker_overlap_thread.py", line 127, in '
    "forward_thread_func\n    self.forward_thread_func_()\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1199, in '
    "forward_extend\n    return self.model.forward(\ntorch.OutOfMemoryError: CUDA out of memory."
)

CASES = {
    "tgi-warmup": (TGI_WARMUP, Engine.TGI),
    "tgi-prefill": (TGI_PREFILL, Engine.TGI),
    "trtllm-kv": (TRTLLM_KV, Engine.TENSORRT_LLM),
    "ollama-kv": (OLLAMA_KV, Engine.OLLAMA),
    "llama.cpp-compute": (LLAMA_CPP_COMPUTE, Engine.LLAMA_CPP),
    "exllama-cache": (EXLLAMA_CACHE, Engine.EXLLAMA),
    "lmdeploy-turbomind": (LMDEPLOY_TM, Engine.LMDEPLOY),
    "sglang-prefill": (SGLANG_PREFILL, Engine.SGLANG),
}


def _read(text: str) -> Evidence:
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), evidence)
    return evidence


def diagnosis(text: str) -> Diagnosis:
    return diagnose(_read(text))


def fixes_of(d: Diagnosis, cls: str) -> list[str]:
    for cause in d.causes:
        if cause.cls == cls:
            return [f.summary for f in cause.fixes]
    raise AssertionError(f"{cls} not among {[c.cls for c in d.causes]}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_engine_is_recognised_and_no_vllm_flag_reaches_its_user(name: str) -> None:
    text, engine = CASES[name]
    evidence = _read(text)
    assert identify(evidence, recover_setup(evidence)) is engine
    for cause in diagnose(evidence).causes:
        for fix in cause.fixes:
            assert not VLLM_ONLY.search(fix.summary), (cause.cls, fix.summary)
            assert not VLLM_KEYS & set(fix.flags), (cause.cls, fix.flags)
        for line in cause.not_helpful:
            assert not VLLM_ONLY.search(line), (cause.cls, line)


def test_tgi_gets_its_launcher_options_from_the_users_own_values() -> None:
    fixes = fixes_of(diagnosis(TGI_WARMUP), "activation-peak")
    assert any(f.startswith("--max-batch-prefill-tokens 5000:") for f in fixes), fixes  # half of 10000
    assert any(f.startswith("--cuda-memory-fraction 0.89:") for f in fixes), fixes  # 0.99 less 0.1
    # --cuda-graphs 0 is set already: not offered again
    assert not any("--cuda-graphs" in f for d in diagnosis(TGI_WARMUP).causes for f in map(str, d.fixes))


def test_tgi_prefill_tokens_error_alone_names_tgi() -> None:
    fixes = fixes_of(diagnosis(TGI_PREFILL), "activation-peak")
    assert any(f.startswith("--max-batch-prefill-tokens 2048:") for f in fixes), fixes  # half the default


def test_tensorrt_llm_gets_max_seq_len_from_its_own_token_count() -> None:
    fixes = fixes_of(diagnosis(TRTLLM_KV), "max-model-len-exceeds-kv")
    assert fixes[0].startswith("max_seq_len 688:"), fixes  # 693 tokens, whole blocks of 16
    assert any("kv_cache_free_gpu_mem_fraction 0.95" in f for f in fixes), fixes


def test_ollama_gets_its_variables_and_options() -> None:
    fixes = fixes_of(diagnosis(OLLAMA_KV), "max-model-len-exceeds-kv")
    assert any(f.startswith("lower num_ctx") for f in fixes), fixes
    assert any(f.startswith("OLLAMA_KV_CACHE_TYPE=q8_0 OLLAMA_FLASH_ATTENTION=1") for f in fixes), fixes
    assert not any("--ctx-size" in f or "--cache-type-k" in f for f in fixes), fixes


def test_llama_cpp_gets_its_server_options() -> None:
    d = diagnosis(LLAMA_CPP_COMPUTE)
    every = [f for c in d.causes for f in fixes_of(d, c.cls)]
    assert any("--n-gpu-layers" in f for f in every), every
    assert any(f.startswith("--flash-attn on") for f in every), every
    assert not any("PYTORCH_CUDA_ALLOC_CONF" in f for f in every), every  # ggml has its own allocator


def test_exllama_gets_tabbyapis_cache_options() -> None:
    fixes = fixes_of(diagnosis(EXLLAMA_CACHE), "max-model-len-exceeds-kv")
    assert any(f.startswith("lower max_seq_len") for f in fixes), fixes
    assert any(f.startswith("cache_mode: Q8") for f in fixes), fixes


def test_lmdeploy_gets_its_cache_share_and_prefill_options() -> None:
    fixes = fixes_of(diagnosis(LMDEPLOY_TM), "activation-peak")
    assert any(f.startswith("--max-prefill-token-num 4096:") for f in fixes), fixes
    assert any(f.startswith("--cache-max-entry-count 0.7:") for f in fixes), fixes  # default 0.8 less 0.1


def test_sglang_gets_its_server_arguments() -> None:
    fixes = fixes_of(diagnosis(SGLANG_PREFILL), "activation-peak")
    assert any(f.startswith("--chunked-prefill-size 4096:") for f in fixes), fixes
    assert any("--mem-fraction-static" in f for f in fixes), fixes


def test_no_vllm_flag_in_any_fix_for_another_engine_across_the_tuning_corpus() -> None:
    corpus = Path(__file__).resolve().parents[2] / "bench" / "data" / "oom_corpus" / "tune.jsonl"
    foreign = 0
    for line in corpus.read_text().splitlines():
        evidence = _read(json.loads(line)["evidence"])
        # (an unknown engine, or one without levers here, gets engine-neutral advice with each spelling
        # labelled: test_engine_identification.py)
        if identify(evidence, recover_setup(evidence)) in (Engine.VLLM, Engine.UNKNOWN, Engine.OTHER):
            continue
        foreign += 1
        for cause in diagnose(evidence).causes:
            for fix in cause.fixes:
                assert not VLLM_ONLY.search(fix.summary), (line[:60], cause.cls, fix.summary)
    assert foreign >= 40  # SGLang, TensorRT-LLM, llama.cpp, ollama, TGI, LMDeploy, ExLlama reports


# https://github.com/ollama/ollama/issues/9322
OLLAMA_HOST_KILL = (
    "Feb 24 15:36:32 adl ollama[2521]: time=2025-02-24T15:36:32.318-08:00 level=INFO source=memory.go:356 "
    'msg="offload to cuda" layers.requested=-1 layers.model=81 layers.offload=14 layers.split=7,7 '
    'memory.available="[14.5 GiB 15.2 GiB]" memory.gpu_overhead="0 B" memory.required.full="136.3 GiB" '
    'memory.required.partial="28.7 GiB" memory.required.kv="640.0 MiB" '
    'memory.required.allocations="[14.3 GiB 14.3 GiB]" memory.weights.total="128.1 GiB"\n'
    "Feb 24 11:16:31 adl systemd[1]: ollama.service: A process of this unit has been killed by the OOM "
    "killer.\n"
    "Feb 24 11:16:32 adl systemd[1]: ollama.service: Failed with result 'oom-kill'.\n"
    "Feb 24 11:16:32 adl systemd[1]: ollama.service: Consumed 32.964s CPU time, 123.9G memory peak."
)


def test_an_ollama_host_kill_gets_ollamas_host_levers_not_safetensors_advice() -> None:
    d = diagnosis(OLLAMA_HOST_KILL)
    assert d.causes[0].cls == "host-ram-oom"
    fixes = fixes_of(d, "host-ram-oom")
    assert any(f.startswith("lower num_ctx") for f in fixes), fixes
    assert any(f.startswith("OLLAMA_NUM_PARALLEL=1") for f in fixes), fixes
    assert not any("safetensors" in f for f in fixes), fixes  # ollama loads GGUF
