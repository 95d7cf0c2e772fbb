"""Which engine a report comes from, read by meaning (module paths, logger formats, process names, launch
commands and API calls, option names, the engine's own error texts), and advice that fits it: the user's
engine's options, or engine-neutral advice (the mechanism, with vLLM's and SGLang's spellings labelled) when
the engine is not known. Real text from the tuning corpus, diagnosed as pasted; each thread is named above."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from oomguard.diagnosis.diagnosis import Diagnosis, diagnose
from oomguard.diagnosis.engine_levers import Engine, identify
from oomguard.diagnosis.engine_marks import count_marks
from oomguard.diagnosis.evidence import Evidence
from oomguard.diagnosis.read import read_one
from oomguard.diagnosis.remedies import NEUTRAL_SPELLED, Fix
from oomguard.diagnosis.render import render_json, render_text
from oomguard.diagnosis.setup import recover_setup

# https://github.com/vllm-project/vllm/issues/15617 (vLLM's V1 logger line and its own KV error text)
VLLM_KV = (
    "ERROR 03-27 16:43:19 [core.py:343] ValueError: To serve at least one request with the models's max seq "
    "len (116160), (4.43 GB KV cache is needed, which is larger than the available KV cache memory "
    "(3.48 GB). Try increasing gpu_memory_utilization or decreasing max_model_len when initializing the "
    "engine."
)
# https://github.com/eugr/spark-vllm-docker/issues/336 (vLLM's process names, no "vllm" anywhere)
VLLM_TAGS = (
    "18:03:00  (Worker_TP0) INFO [gpu_model_runner.py:5332] Loading drafter model...\n"
    "18:03:03  kernel: NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY]\n"
    "18:03:38  (EngineCore) ERROR [core.py:1349] EngineCore"
)
# https://github.com/sgl-project/sglang/issues/6778 (SGLang's scheduler lines, rank tag without a date)
SGLANG_BATCH = (
    "[TP0] Decode batch. #running-req: 36, #token: 958017, token usage: 0.96\n"
    '[INFO] "POST /v1/chat/completions" 200 OK\n'
    "[TP0] Decode batch. #running-req: 35, #token: 959430, token usage: 0.96"
)
# https://github.com/sgl-project/sglang/issues/4602 (SGLang's own error and its pool's attribute names)
SGLANG_DECODE = (
    "RuntimeError: Decode out of memory. Try to lower your batch size.\nTry to allocate 148 tokens.\n"
    "Avaliable tokens: 2048\nself.token_to_kv_pool_allocator.available_size()=2048\n"
    "self.tree_cache.evictable_size()=0"
)
# https://github.com/continuedev/continue/issues/9252 (ollama's scheduler text, quoted by a client)
OLLAMA_SYSTEM = '"model requires more system memory (18.4 GiB) than is available (14.0 GiB)"'
# https://github.com/NVIDIA/TensorRT-LLM/issues/7818 (TensorRT-LLM's logger: "[TRT-LLM] [RANK 2] [E]")
TRTLLM_LOAD = (
    "> [09/17/2025-21:24:19] [TRT-LLM] [RANK 2] [E] Error executing load_single_module with args "
    "('model.layers.9.mlp.gate_up_proj', Linear()): CUDA out of memory. Tried to allocate 40.00 MiB. GPU 0 "
    "has a total capacity of 22.07 GiB of which 20.62 MiB is free. Process 157 has 270.00 MiB memory in use. "
    "Including non-PyTorch memory, this process has 1.12 GiB memory in use. Process 450 has 7.69 GiB memory "
    "in use. Of the allocated memory 880.00 MiB is allocated by PyTorch, and 20.00 MiB is reserved by "
    "PyTorch but unallocated."
)
# https://github.com/InternLM/lmdeploy/issues/978 (the Python API call)
LMDEPLOY_PIPELINE = (
    'from lmdeploy import pipeline\npipe = pipeline("internlm/internlm2-chat-7b")\n'
    'response = pipe(["Hi, pls intro yourself", "Shanghai is"])\n'
    "使用 3090 显卡，但还是报错 out of memory\n"
    "torch.cuda.OutOfMemoryError: CUDA out of memory."
)
# https://github.com/josStorer/selfhostedAI/issues/5 (a transformers remote-code model, old OOM format)
TRANSFORMERS_CHATGLM = (
    '  File "C:\\Users\\sicma/.cache\\huggingface\\modules\\transformers_modules\\local\\'
    'modeling_chatglm.py", line 277, in attention_fn\n'
    "    attention_scores = attention_scores * query_key_layer_scaling_coeff\n"
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 116.00 MiB (GPU 0; 6.00 GiB total "
    "capacity; 5.07 GiB already allocated; 0 bytes free; 5.31 GiB reserved in total by PyTorch)"
)
# https://github.com/jjang-ai/vmlx/issues/50 (MLX's Metal allocator: an engine oomguard has no levers for)
MLX_METAL = (
    "[metal::malloc] Attempting to allocate 447143641344 bytes which is greater\n"
    "  than the maximum allowed buffer size of 373662154752 bytes."
)
# https://github.com/vllm-project/compressed-tensors/pull/587 (a bare allocator message: no engine at all)
BARE_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of "
    "79.18 GiB of which 1.08 GiB is free. Including non-PyTorch memory, this process has 78.09 GiB memory in "
    "use. Of the allocated memory 75.31 GiB is allocated by PyTorch, and 1.83 GiB is reserved by PyTorch but "
    "unallocated."
)
# https://github.com/vllm-project/vllm/issues/25597 (an EP buffer failure in a vLLM deployment)
VLLM_EP = (
    "While running a 1k concurrency test against a 2p2d DP=16 on B200 with `--num-redundant-experts=16`, the "
    "decode instance crashes during `rearrange` with:\n\n"
    "2025-09-24T03:57:03.905654827Z [2025-09-23 23:57:03] vllm-deepseek-ep-decode-0:1673:9080 [0] "
    "include/alloc.h:228 NCCL WARN Cuda failure 2 'out of memory'\n"
    "2025-09-24T03:57:04.477872270Z (EngineCore_DP4 pid=1675) ncclInternalError: Internal check failed.\n"
    "2025-09-24T03:57:04.477874283Z (EngineCore_DP4 pid=1675) Last error:"
)

# https://github.com/rllm-org/rllm/issues/62 (verl's vLLM rollout: the wrapper's module names its backend)
VERL_ROLLOUT = (
    "RuntimeError: Aborted due to the lack of CPU swap space. Please increase the swap space to avoid this "
    "error.\n(WorkerDict pid=1157807) Traceback (most recent call last):\n"
    '(WorkerDict pid=1157807)   File "/home/deepscaler-main/verl/verl/workers/rollout/vllm_rollout/'
    'vllm_rollout.py", line 205, in generate_sequences\n'
    "(WorkerDict pid=1157807)     output = self.inference_engine.generate("
)

CASES = {
    "verl-vllm-rollout": (VERL_ROLLOUT, Engine.VLLM),
    "vllm-kv-error": (VLLM_KV, Engine.VLLM),
    "vllm-process-names": (VLLM_TAGS, Engine.VLLM),
    "sglang-batch-lines": (SGLANG_BATCH, Engine.SGLANG),
    "sglang-decode-error": (SGLANG_DECODE, Engine.SGLANG),
    "ollama-system-memory": (OLLAMA_SYSTEM, Engine.OLLAMA),
    "trtllm-logger": (TRTLLM_LOAD, Engine.TENSORRT_LLM),
    "lmdeploy-api": (LMDEPLOY_PIPELINE, Engine.LMDEPLOY),
    "transformers-remote-code": (TRANSFORMERS_CHATGLM, Engine.TRANSFORMERS),
    "mlx-metal": (MLX_METAL, Engine.OTHER),
    "bare-oom": (BARE_OOM, Engine.UNKNOWN),
}
# A vLLM flag as a user would paste it.
VLLM_FLAG = re.compile(
    r"--(max-model-len|gpu-memory-utilization|max-num-batched-tokens|max-num-seqs|enforce-eager|"
    r"tensor-parallel-size|kv-cache-dtype)\b"
)
# Each engine's spelling labelled with its name: "vLLM: --max-model-len 8192".
LABELLED = re.compile(r"\b(?:vLLM|SGLang): --[a-z][\w-]*(?: [^\s;)]+)?")
# PyTorch's allocator variable: any PyTorch engine's, when the OOM was PyTorch's allocator's.
TORCH = {"PYTORCH_CUDA_ALLOC_CONF"}


def _unlabelled(summary: str) -> str:
    """The fix's text outside spellings labelled with their engine (a fix that starts "vLLM: " is vLLM's
    as a whole)."""
    return "" if summary.startswith("vLLM: ") else LABELLED.sub("", summary)


def _read(text: str) -> Evidence:
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), evidence)
    return evidence


def _engine(text: str) -> Engine:
    evidence = _read(text)
    return identify(evidence, recover_setup(evidence))


def _fixes(d: Diagnosis) -> list[Fix]:
    return [f for c in d.causes for f in c.fixes]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_engine_is_read_from_its_marks(name: str) -> None:
    text, engine = CASES[name]
    assert _engine(text) is engine


def test_a_bare_engine_name_in_a_sentence_is_not_a_mark() -> None:
    # A reporter comparing engines names both; the machine lines (SGLang's) decide.
    text = "This works with vLLM but not with SGLang.\n" + SGLANG_DECODE
    assert not count_marks(b"This works with vLLM but not with SGLang.")
    assert _engine(text) is Engine.SGLANG


def test_transformers_marks_name_the_engine_only_when_no_serving_engines_do() -> None:
    # vLLM loads remote-code models through transformers_modules too: its own marks win.
    assert _engine(TRANSFORMERS_CHATGLM + "\n" + VLLM_KV) is Engine.VLLM


@pytest.mark.parametrize("text", [MLX_METAL, BARE_OOM], ids=["other-engine", "no-engine"])
def test_without_a_known_engine_every_flag_is_labelled_with_its_engine(text: str) -> None:
    fixes = _fixes(diagnose(_read(text)))
    assert fixes
    # MLX's Metal allocator is not PyTorch's: its settings are not offered
    assert (text == BARE_OOM) == any(TORCH <= set(f.flags) for f in fixes)
    for fix in fixes:
        # pasteable flags only with the engine they belong to
        assert not fix.flags or fix.engine or set(fix.flags) == TORCH, fix
        assert not VLLM_FLAG.search(_unlabelled(fix.summary)), fix.summary
    # the mechanism, with both spellings, for the cause's levers
    d = diagnose(_read(BARE_OOM))
    assert any(
        f.summary.startswith("leave more GPU memory outside the engine's KV cache")
        and "vLLM: --gpu-memory-utilization 0.8" in f.summary
        and "SGLang: --mem-fraction-static" in f.summary
        for f in _fixes(d)
    ), [f.summary for f in _fixes(d)]
    assert {e.value for e in NEUTRAL_SPELLED} == {"vllm", "sglang"}


def test_transformers_gets_its_own_loading_and_generation_options() -> None:
    d = diagnose(_read(TRANSFORMERS_CHATGLM))
    every = [f.summary for f in _fixes(d)]
    assert not any(VLLM_FLAG.search(s) for s in every), every
    assert any(s.startswith('attn_implementation="flash_attention_2"') for s in every), every
    assert all(f.engine in ("", "transformers") for f in _fixes(d))


def test_a_vllm_report_gets_no_sglang_variable() -> None:
    d = diagnose(_read(VLLM_EP))
    assert d.causes[0].cls == "ep-all2all-buffer"
    flags = [k for f in _fixes(d) for k in f.flags]
    assert any(k.startswith("VLLM_") for k in flags), flags
    assert not any(k.startswith("SGLANG_") for k in flags), flags
    assert all(f.engine == "vllm" for f in _fixes(d) if f.flags)


def test_no_unlabelled_vllm_flag_for_unknown_engines_across_the_tuning_corpus() -> None:
    corpus = Path(__file__).resolve().parents[2] / "bench" / "data" / "oom_corpus" / "tune.jsonl"
    neutral = 0
    for line in corpus.read_text().splitlines():
        evidence = _read(json.loads(line)["evidence"])
        if len(evidence) == 0 or identify(evidence, recover_setup(evidence)) not in (
            Engine.UNKNOWN,
            Engine.OTHER,
        ):
            continue
        neutral += 1
        for fix in _fixes(diagnose(evidence)):
            assert not fix.flags or fix.engine or set(fix.flags) == TORCH, (line[:60], fix)
            assert not VLLM_FLAG.search(_unlabelled(fix.summary)), (line[:60], fix.summary)
    assert neutral >= 50  # bare allocator messages, kernel kills, prose


def test_the_report_says_which_engine_its_fixes_are_for() -> None:
    neutral = json.loads(render_json(diagnose(_read(BARE_OOM))))
    assert neutral["engine"] == "unknown"
    assert "engine-neutral fixes" in render_text(diagnose(_read(BARE_OOM)))
    vllm = json.loads(render_json(diagnose(_read(VLLM_KV))))
    assert vllm["engine"] == "vllm"
    flagged = [f for c in vllm["causes"] for f in c["fixes"] if f["flags"]]
    assert flagged and all(f["engine"] == "vllm" for f in flagged)


def test_the_open_questions_name_what_to_collect_in_the_engines_own_words() -> None:
    def answers(text: str) -> list[str]:
        return [answer for _, answer in diagnose(_read(text)).questions]

    sglang, vllm, unknown = answers(SGLANG_DECODE), answers(VLLM_KV), answers(BARE_OOM)
    assert "sglang:token_usage" in sglang[1] and "vllm:" not in " ".join(sglang)
    assert sglang[2].endswith("context_length")
    assert vllm[2].endswith("max_model_len") and "sglang" not in " ".join(vllm)
    # Not known: the generic words, with both engines' names labelled.
    assert "vLLM: vllm:kv_cache_usage_perc" in unknown[1] and "SGLang: sglang:token_usage" in unknown[1]
    assert unknown[2].endswith("the context limit (vLLM: max_model_len; SGLang: context_length)")
