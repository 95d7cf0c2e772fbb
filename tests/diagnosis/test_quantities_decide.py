"""Quantities and typed setup facts decide the cause where words would not (issue 8, points 3 and 4): the
memory the device's own numbers leave to other processes, the step a stack was executing after the KV pool
was sized, and an allocation no text layer makes in a multimodal deployment. Texts are real, pasted as in
the cited public threads."""

from __future__ import annotations

import io
import json

import pytest
from tests.diagnosis.pasted import ranked, read

from oomguard.diagnosis.causes import CauseClass
from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.evidence import Evidence
from oomguard.diagnosis.read import read_one
from oomguard.diagnosis.rules import CLASSES, Tally

ALLOC_TAIL = (
    " If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
    "See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


# https://github.com/ai-dynamo/dynamo/issues/1492: a worker lands on a GPU another job fills. Inside its
# container no other pid is listed, but 79.20 - 0.05 free - 2.46 of its own = 76.7 GiB is someone else's.
WORKER_ON_A_FULL_GPU = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of "
    "79.20 GiB of which 48.62 MiB is free. Including non-PyTorch memory, this process has 2.46 GiB memory in "
    "use. Of the allocated memory 1.15 GiB is allocated by PyTorch, and 13.45 MiB is reserved by PyTorch but "
    "unallocated." + ALLOC_TAIL + "\n"
    "Loading safetensors checkpoint shards:  13% Completed | 2/15 [00:01<00:11,  1.12it/s]"
)
# https://github.com/vllm-project/vllm/issues/12529: a 7.75 GiB laptop GPU; the 1.56 GiB its own process
# does not hold is a desktop's display and contexts, not a tenant: the sampler warm-up stays first.
SAMPLER_ON_A_LAPTOP = (
    "ERROR 03-13 09:07:24 [core.py:330]   File "
    '"/home/gaocegege/code/vllm/vllm/v1/worker/gpu_worker.py", line 157, in determine_available_memory\n'
    "ERROR 03-13 09:07:24 [core.py:330]     self.model_runner.profile_run()\n"
    "ERROR 03-13 09:07:24 [core.py:330]   File "
    '"/home/gaocegege/code/vllm/vllm/v1/worker/gpu_model_runner.py", line 1392, in profile_run\n'
    "ERROR 03-13 09:07:24 [core.py:330]     sampler_output = self._dummy_sampler_run(hidden_states)\n"
    "ERROR 03-13 09:07:24 [core.py:330]   File "
    '"/home/gaocegege/code/vllm/vllm/v1/worker/gpu_model_runner.py", line 1291, in _dummy_sampler_run\n'
    "ERROR 03-13 09:07:24 [core.py:330]     sampler_output = self.model.sample(logits=logits,\n"
    "ERROR 03-13 09:00:43 [core.py:330] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 "
    "GiB. GPU 0 has a total capacity of 7.75 GiB of which 1.17 GiB is free. Including non-PyTorch memory, "
    "this process has 5.02 GiB memory in use. Of the allocated memory 4.81 GiB is allocated by PyTorch, and "
    "18.97 MiB is reserved by PyTorch but unallocated." + ALLOC_TAIL + "\n"
)
# https://github.com/sgl-project/sglang/issues/6027: the KV pool was sized at startup; weeks later a request's
# forward pass fails. The last startup line is not where it failed: the request's step on the stack is.
REQUEST_AFTER_KV_SIZED = (
    "[2025-05-05 03:55:08 TP0] KV Cache is allocated. #tokens: 274934, KV size: 17.99 GB\n"
    "However, a single 64k-length input can consistently cause the server to crash due to OOM on my "
    "H100*8*2 environment.\n"
    "[2025-07-07 19:00:30 DP4 TP4] TpModelWorkerClient hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker_overlap_thread.py", line 127, in '
    "forward_thread_func\n"
    "    self.forward_thread_func_()\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1199, in '
    "forward_extend\n"
    "    return self.model.forward("
)
# https://github.com/MoonshotAI/Kimi-VL/issues/54: 1,029 GiB asked on a 79 GiB device by a model served as
# kimi-vl with 64 images per prompt: the vision tower's attention without flash-attn.
VISION_ATTENTION_LARGER_THAN_DEVICE = (
    "vllm serve /root/model/kimi --served-model-name kimi-vl-thinking-2506 --trust-remote-code "
    "--tensor-parallel-size 8 --max-num-batched-tokens 32768 --max-model-len 32768 --limit-mm-per-prompt "
    "image=64\n\n"
    "RuntimeError: Worker failed with error 'CUDA out of memory. Tried to allocate 1029.51 GiB. GPU 0 has a "
    "total capacity of 79.35 GiB of which 19.23 GiB is free. Process 145882 has 60.12 GiB memory in use. Of "
    "the allocated memory 58.52 GiB is allocated by PyTorch, and 310.01 MiB is reserved by PyTorch but "
    "unallocated." + ALLOC_TAIL + "', please check the stack trace above for the root cause"
)
# https://github.com/OpenBMB/MiniCPM-V/issues/640: a vision model's startup OOM that no frame places.
VISION_MODEL_UNPLACED_OOM = (
    "vllm serve /docker_storage/models/MiniCPM-V-2_6 --dtype auto --max-model-len 2048 "
    "--gpu_memory_utilization 1 --trust-remote-code\n\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
    "22.18 GiB of which 3.47 GiB is free. Process 8007 has 18.71 GiB memory in use. Of the allocated memory "
    "18.29 GiB is allocated by PyTorch, and 142.04 MiB is reserved by PyTorch but unallocated." + ALLOC_TAIL
)
# The same allocation in a text-only deployment: no encoder to blame.
TEXT_ONLY_LARGER_THAN_DEVICE = VISION_ATTENTION_LARGER_THAN_DEVICE.replace(
    "--served-model-name kimi-vl-thinking-2506 ", ""
).replace(" --limit-mm-per-prompt image=64", "")


def test_memory_the_device_numbers_leave_to_unlisted_processes_is_another_process() -> None:
    assert ranked(WORKER_ON_A_FULL_GPU)[0] == "other-process-or-shared-gpu"


def test_a_desktops_display_memory_is_no_tenant() -> None:
    causes = ranked(SAMPLER_ON_A_LAPTOP)
    assert causes[0] == "sampler-or-logits"
    assert "other-process-or-shared-gpu" not in causes[:2]


def test_a_requests_step_after_the_kv_pool_was_sized_is_runtime() -> None:
    causes = ranked(REQUEST_AFTER_KV_SIZED)
    assert causes[0] == "activation-peak"
    assert "cuda-graph-capture" not in causes[:3]


def test_an_allocation_larger_than_the_device_in_a_multimodal_deployment_is_the_encoder() -> None:
    assert ranked(VISION_ATTENTION_LARGER_THAN_DEVICE)[0] == "multimodal-encoder"
    assert ranked(TEXT_ONLY_LARGER_THAN_DEVICE)[0] == "activation-peak"


def test_an_unplaced_oom_of_a_vision_model_is_its_encoder_first() -> None:
    assert ranked(VISION_MODEL_UNPLACED_OOM)[0] == "multimodal-encoder"


# https://github.com/OpenRLHF/OpenRLHF/issues/1013: "报ray oom的错" (Ray's OOM error) in a Chinese
# sentence; the Latin words touch the CJK characters, so no \b saw them.
RAY_OOM_IN_CHINESE = (
    "然后尝试了去掉 --vllm_enable_sleep 之后就不会出现这个问题了"
    "\n"
    "脚本设置如下。2节点，每节点上8卡+96核cpu+512G内存，训的是7b模型。"
    "如果保留--vllm_enable_sleep 就会在load data或mod"
    "el的时候报ray oom的错，如果去掉就可以正常跑。\n"
    "\n"
    "vllm版本0.8.3\n"
    "      --vllm_num_engines 16 \\\n"
    "      --vllm_tensor_parallel_size 1 \\\n"
    "      --colocate_all_models \\\n"
    "      --vllm_enable_sleep \\\n"
    "      --vllm_gpu_memory_utilization 0.5 "
    "\\\n"
)
# https://github.com/guqiong96/Lvllmds4-x/issues/22: "会被系统OOM杀进程" (the system's OOM kills the process)
# with 128G of host memory.
HOST_OOM_IN_CHINESE = (
    "我机器是4个RTX4090 24G，cpu内存只有128G，使用示例的2x309"
    "0启动命令起不来，会被系统OOM杀进程 ... [maintainer] 是的，"
    "内存不够 ... 模型权重大约 167GB，在双卡 3090 配置下，算上系统开"
    "销，实际内存占用可达 186GB（含系统）"
)
# https://github.com/dphnAI/sonar/issues/483: the engine refuses 4 GiB of pinned CPU swap per GPU x 8 GPUs.
SWAP_LARGER_THAN_HOST = (
    "aphrodite-engine  | ValueError: Too large swap space. 32.00 GiB out of the 31.27 GiB total"
    " CPU memory is allocated for the swap space."
)
# https://github.com/vllm-project/vllm/issues/14092: a 70B model on 16 GB cards fails under the torch.device
# context vLLM builds the model's modules in (torch/utils/_device.py), in load_model.
BUILDING_THE_MODEL_UNDER_ITS_DEVICE = (
    "(VllmWorkerProcess pid=195295) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242]   File"
    ' "/home/uefi/.local/lib/python3.12/site-packages/torch/utils/_device.py", line 106, in __t'
    "orch_function__\n"
    "(VllmWorkerProcess pid=195295) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242]     re"
    "turn func(*args, **kwargs)\n"
    "(VllmWorkerProcess pid=195295) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] torch."
    "OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 2 has a total capac"
    "ity of 14.62 GiB of which 3.31 MiB is free. Including non-PyTorch memory, this process has"
    " 14.61 GiB memory in use. Of the allocated memory 14.42 GiB is allocated by PyTorch, and 2"
    "3.14 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is lar"
    "ge try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  S"
    "ee documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#e"
    "nvironment-variables)\n"
    "(VllmWorkerProcess pid=195297) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] Except"
    "ion in worker VllmWorkerProcess while processing method load_model."
)
# https://github.com/InternLM/lmdeploy/issues/3154: TurboMind creating a 70B model's weights on two GPUs.
TURBOMIND_CREATING_WEIGHTS = (
    '  File "/opt/lmdeploy/lmdeploy/turbomind/turbomind.py", line 112, in __init__\n'
    "    self.model_comm = self._from_hf(model_source=model_source,\n"
    '  File "/opt/lmdeploy/lmdeploy/turbomind/turbomind.py", line 226, in _from_hf\n'
    "    self._create_weight(model_comm)\n"
    '  File "/opt/lmdeploy/lmdeploy/turbomind/turbomind.py", line 152, in _create_weight\n'
    "    future.result()"
)
# https://github.com/vllm-project/vllm/issues/2554: Mixtral-8x7B in fp16 over two 40 GB A100s: ~43 GiB of
# weights per GPU; the paste has the command and nvidia-smi, no error line.
WEIGHTS_LARGER_THAN_THE_DEVICE = (
    "$ python -m vllm.entrypoints.openai.api_server \\\n"
    "\t--model mistralai/Mixtral-8x7B-Instruct-v0.1 \\\n"
    "\t--tensor-parallel-size 2\n"
    "\n"
    "+---------------------------------------------------------------------------------------+\n"
    "| NVIDIA-SMI 545.23.08              Driver Version: 545.23.08    CUDA Version: 12.3     |\n"
    "|-----------------------------------------+----------------------+----------------------+\n"
    "| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |\n"
    "| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |\n"
    "|                                         |                      |               MIG M. |\n"
    "|=========================================+======================+======================|\n"
    "|   0  NVIDIA A100-PCIE-40GB          On  | 00000000:65:00.0 Off |                    0 |\n"
    "| N/A   25C    P0              54W / 250W |  40327MiB / 40960MiB |      0%      Default |"
)
# https://github.com/vllm-project/vllm/issues/2345: one Ray worker's RSS over three `ps aux` pastes.
WORKER_RSS_OVER_HOURS = (
    "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n"
    "root        1071  0.4  0.0 28963612 417336 ?     SNl  17:36   0:02 ray::RayWorkerVllm\n"
    "root        1166  6.2  0.5 68235476 5179612 ?    RNl  17:36   0:36 ray::RayWorkerVllm.exec"
    "ute_method\n"
    "\n"
    "two hours later\n"
    "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n"
    "root        1071  0.1  0.0 28963612 417336 ?     SNl  17:36   0:14 ray::RayWorkerVllm\n"
    "root        1166  3.4  0.6 69346516 6284616 ?    SNl  17:36   4:57 ray::RayWorkerVllm\n"
    "\n"
    "three hours later\n"
    "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n"
    "root        1071  0.1  0.0 28963612 417336 ?     SNl  17:36   0:20 ray::RayWorkerVllm\n"
    "root        1166  3.4  0.6 69987220 6919976 ?    SNl  17:36   7:27 ray::RayWorkerVllm"
)


def test_latin_words_touching_chinese_characters_are_words() -> None:
    assert ranked(RAY_OOM_IN_CHINESE)[0] == "host-ram-oom"
    assert ranked(HOST_OOM_IN_CHINESE)[0] == "host-ram-oom"


def test_a_swap_space_larger_than_the_hosts_memory_is_host_memory() -> None:
    assert ranked(SWAP_LARGER_THAN_HOST)[0] == "host-ram-oom"


def test_an_oom_while_the_model_is_built_under_its_device_context_is_the_weights() -> None:
    assert ranked(BUILDING_THE_MODEL_UNDER_ITS_DEVICE)[0] == "weights-dont-fit"


def test_turbomind_creating_its_weights_is_the_weights() -> None:
    assert ranked(TURBOMIND_CREATING_WEIGHTS)[0] == "weights-dont-fit"


# A rollout engine given a small share of the GPU (RL trainers set gpu_memory_utilization 0.3-0.5 beside the
# trainer): Qwen3-8B's ~15 GiB of bf16 weights are a third of a 44 GiB L40S but twice the 13 GiB budget.
LOW_BUDGET_LOAD = (
    "$ vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.3 --max-model-len 8192\n"
    "INFO 05-01 10:00:01 [gpu_model_runner.py:1595] Starting to load model Qwen/Qwen3-8B...\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 384.00 MiB. GPU 0 has a total capacity of "
    "44.39 GiB of which 30.12 GiB is free.\n"
)


def test_weights_under_half_the_device_but_over_the_budget_are_not_ruled_out() -> None:
    # Under half of the device rules the weights out only when the engine's budget leaves room beside them.
    weights = diagnose(read(LOW_BUDGET_LOAD)).causes[0]
    assert weights.cls == "weights-dont-fit"
    assert any("more than the engine may use" in e.why for e in weights.support)
    assert not any("room to spare" in e.why for e in weights.contradict)
    roomy = LOW_BUDGET_LOAD.replace("--gpu-memory-utilization 0.3", "--gpu-memory-utilization 0.9")
    fits = next(c for c in diagnose(read(roomy)).causes if c.cls == "weights-dont-fit")
    assert any("room to spare" in e.why for e in fits.contradict)


def test_weights_per_gpu_above_the_device_need_no_error_line() -> None:
    assert ranked(WEIGHTS_LARGER_THAN_THE_DEVICE)[0] == "weights-dont-fit"
    # The same command over four GPUs (~22 GiB each) fits: nothing says weights.
    four = WEIGHTS_LARGER_THAN_THE_DEVICE.replace("--tensor-parallel-size 2", "--tensor-parallel-size 4")
    assert ranked(four)[0] != "weights-dont-fit"


def test_one_processs_rss_rising_across_ps_pastes_is_a_leak() -> None:
    assert ranked(WORKER_RSS_OVER_HOURS)[0] == "memory-leak"
    # Flat RSS (the same first paste three times) is a footprint, not a leak.
    first = WORKER_RSS_OVER_HOURS.split("two hours later")[0]
    assert "memory-leak" not in ranked(first * 3)[:1]


# https://github.com/vllm-project/vllm/issues/1354: vLLM 0.2 logs zero GPU blocks at 0.98 utilization on WSL
# and stops there.
ZERO_GPU_BLOCKS = (
    "$ python -m vllm.entrypoints.openai.api_server --model lmsys/vicuna-7b-v1.3 --gpu-memory-utiliz"
    "ation 0.98 --dtype half\n"
    "INFO 10-14 21:32:44 llm_engine.py:72] Initializing an LLM engine with config: model='lmsys/vicu"
    "na-7b-v1.3', tokenizer='lmsys/vicuna-7b-v1.3', tokenizer_mode=auto, revision=None, trust_remote"
    "_code=False, dtype=torch.float16, max_seq_len=2048, download_dir=None, load_format=auto, tensor"
    "_parallel_size=1, quantization=None, seed=0)\n"
    "INFO 10-14 21:40:24 llm_engine.py:205] # GPU blocks: 0,"
)
# https://github.com/vllm-project/vllm/issues/4429: V0's worker failing in initialize_cache, where
# raise_if_cache_size_invalid refuses an empty or too small pool.
V0_INITIALIZE_CACHE = (
    "python -m vllm.entrypoints.openai.api_server --dtype float16 --trust-remote-code --model /model"
    "s/deepseek-coder-33b-instruct  --served-model-name deepseek-coder-33b-instruct --port 8000 --ho"
    "st 0.0.0.0 --tensor-parallel-size 2\n"
    "\n"
    "ERROR 04-28 15:55:45 worker_base.py:157] Error executing method initialize_cache. This might ca"
    "use deadlock in distributed execution.\n"
    "ERROR 04-28 15:55:45 worker_base.py:157] Traceback (most recent call last):\n"
    'ERROR 04-28 15:55:45 worker_base.py:157]   File "/root/miniconda3/envs/deepseek/lib/python3.10/'
    'site-packages/vllm/worker/worker_base.py", line 149, in execute_method\n'
    "ERROR 04-28 15:55:45 worker_base.py:157]     return executor(*args, **kwargs)\n"
    'ERROR 04-28 15:55:45 worker_base.py:157]   File "/root/miniconda3/envs/deepseek/lib/python3.10/'
    'site-packages/vllm/worker/worker.py", line 171, in initialize_cache\n'
    "ERROR 04-28 15:55:45 worker_base.py:157]     raise_if_cache_size_invalid(num_gpu_blocks,"
)
# https://github.com/vllm-project/vllm-ascend/issues/3843: vLLM Ascend's KV budget in bytes, zero on every
# rank.
ASCEND_NO_KV_MEMORY = (
    "(Worker_TP2 pid=554) INFO 10-28 21:14:48 [worker_v1.py:259] Available memory: 0, total memory: "
    "65452113920\n"
    "(Worker_TP4 pid=556) INFO 10-28 21:14:48 [worker_v1.py:259] Available memory: 0, total memory: "
    "65452113920\n"
    "(Worker_TP7 pid=559) INFO 10-28 21:14:49 [worker_v1.py:259] Available memory: 0, total memory: "
    "65452113920\n"
    "(Worker_TP0 pid=552) INFO 10-28 21:14:49 [worker_v1.py:259] Available memory: 0, total memory: "
    "65452113920\n"
    "(EngineCore_DP0 pid=415) ERROR 10-28 21:14:49 [core.py:708] EngineCore failed to start.\n"
    "(EngineCore_DP0 pid=415) ERROR 10-28 21:14:49 [core.py:708] Traceback (most recent call last):"
)
# https://github.com/ggml-org/llama.cpp/issues/29090 and https://github.com/withcatai/node-llama-cpp/issues/190:
# llama.cpp's decode finds no room in its KV cache for the batch.
LLAMA_CPP_NO_KV_SLOT = (
    "[37723] 52.17.402.129 W decode: failed to find a memory slot for batch of size 128\n"
    "[37723] 52.17.402.148 W srv        decode: failed to find free space in the KV cache, retrying "
    "with smaller batch size, off = 766, n_batch = 64, ret = 1\n"
    "[37723] 52.17.408.129 E init_batch: failed to prepare attention ubatches\n"
    "[37723] 52.17.408.135 W decode: failed to find a memory slot for batch of size 64\n"
    "[37723] 52.17.408.159 W srv        decode: failed to find free space in the KV cache, retrying "
    "with smaller batch size, off = 766, n_batch = 32, ret = 1\n"
    "[37723] 52.17.413.745 E init_batch: failed to prepare attention ubatches"
)
NODE_LLAMA_CPP_NO_KV_SLOT = (
    "[Error: could not find a KV slot for the batch (try reducing the size of the batch or increase "
    "the context)]"
)
# https://github.com/QwenLM/Qwen3/issues/110: V0's max-seq-len error retyped, without the token count.
MAX_SEQ_LEN_RETYPED = (
    "ValueError : the model's max seq len (32768) is larger than the maxinum number of tokens that c"
    "an be stored in KV cache, Try increasing 'gpu_memory_utilization' or decreasing 'max_model_len'"
    " when initializing the engine"
)
# https://github.com/vllm-project/vllm-omni/issues/262: two TP ranks of one engine, equal shards, KV budgets
# 13.8 GiB apart: something else holds memory on TP1's GPU.
TP_RANKS_APART = (
    "(Worker_TP1 pid=104299) INFO 12-10 03:24:48 [gpu_worker.py:298] Available KV cache memory: -3.8"
    "6 GiB\n"
    "(Worker_TP0 pid=104298) INFO 12-10 03:24:48 [gpu_worker.py:298] Available KV cache memory: 9.90"
    " GiB\n"
    "(Worker pid=107646) WARNING 12-10 03:24:48 [cudagraph_dispatcher.py:106] cudagraph dispatching "
    "keys are not initialized. No cudagraph will be used.\n"
    "(EngineCore_DP0 pid=85433) ERROR 12-10 03:24:48 [core.py:708] EngineCore failed to start.\n"
    "(EngineCore_DP0 pid=85433) ERROR 12-10 03:24:48 [core.py:708] Traceback (most recent call last)"
    ":"
)


def test_zero_gpu_blocks_is_no_kv_memory() -> None:
    assert ranked(ZERO_GPU_BLOCKS)[0] == "kv-cache-insufficient-at-startup"


def test_v0_initialize_cache_frames_are_kv_sizing() -> None:
    assert ranked(V0_INITIALIZE_CACHE)[0] == "kv-cache-insufficient-at-startup"


def test_ascends_zero_available_memory_is_no_kv_memory() -> None:
    assert ranked(ASCEND_NO_KV_MEMORY)[0] == "kv-cache-insufficient-at-startup"


def test_llama_cpp_finding_no_kv_slot_is_the_pool_full_at_runtime() -> None:
    assert ranked(LLAMA_CPP_NO_KV_SLOT)[0] == "kv-exhaustion-at-runtime"
    assert ranked(NODE_LLAMA_CPP_NO_KV_SLOT)[0] == "kv-exhaustion-at-runtime"


def test_a_retyped_max_seq_len_error_without_its_count_is_read() -> None:
    assert ranked(MAX_SEQ_LEN_RETYPED)[0] == "max-model-len-exceeds-kv"


def test_tensor_parallel_ranks_kv_budgets_apart_is_another_process() -> None:
    causes = ranked(TP_RANKS_APART)
    assert causes[0] == "other-process-or-shared-gpu"
    assert "kv-cache-insufficient-at-startup" in causes[:3]
    # Ranks within a few hundred MiB of each other are rounding: the empty pool stays first.
    close = TP_RANKS_APART.replace("9.90 GiB", "-3.60 GiB")
    assert ranked(close)[0] == "kv-cache-insufficient-at-startup"


def test_the_cause_classes_are_a_closed_set() -> None:
    assert len(CLASSES) == len(set(CLASSES)) == 17
    with pytest.raises(ValueError):
        Tally().add("activation-peaks", 1.0, "a misspelt class")
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(WORKER_ON_A_FULL_GPU.encode()), evidence)
    top = diagnose(evidence).causes[0].cls
    assert top is CauseClass.OTHER_PROCESS_OR_SHARED_GPU
    assert json.dumps(top) == '"other-process-or-shared-gpu"'


# https://github.com/sgl-project/sglang/pull/8102: SGLang's hierarchical cache asks the host for its pool.
HICACHE_HOST_POOL = (
    "ValueError: Not enough host memory available. Requesting 40.00 GB but only have 44.87 GB free. "
    "Please reduce the size of the hierarchical cache."
)
# https://github.com/NVIDIA/TensorRT-LLM/issues/694: TensorRT-LLM's KV cache manager out of blocks.
TRT_LLM_NO_FREE_BLOCKS = (
    "[TensorRT-LLM][ERROR] [TensorRT-LLM][ERROR] Assertion failed: Can't allocate new blocks. No fre"
    "e blocks left. (/home/jenkins/agent/workspace/LLM/main/L0_PostMerge/llm/cpp/tensorrt_llm/batch_"
    "manager/kvCacheManager.cpp:362)\n"
    "1       0x557282845de2 tensorrt_llm::common::throwRuntimeError(char const*, int, std::__cxx11::"
    "basic_string<char, std::char_traits<char>, std::allocator<char> > const&) + 100"
)
# https://github.com/sgl-project/sglang/issues/36081: newer SGLang's invariant checker finding the pool's
# slots never returned.
SGLANG_POOL_LEAK_CHECK = (
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler_components/invariant_checker'
    '.py", line 423, in _report_leak\n'
    "    raise_error_or_warn(\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/utils/common.py", line 4691, in raise_error_or_'
    "warn\n"
    "    raise ValueError(message)\n"
    "ValueError: pool memory leak detected! [full] total=9116160, available=768, evictable=9115392, "
    "protected=0, session_held=0, uncached=0\n"
    "[swa] total=911616, available=235264, evictable=676096, protected=0, session_held=0, uncached=0"
    "\n"
    "[2026-08-23 09:11:04 TP6 EP6] Scheduler hit an exception: Traceback (most recent call last):"
)


def test_other_engines_words_for_host_pools_kv_blocks_and_leak_checks() -> None:
    assert ranked(HICACHE_HOST_POOL)[0] == "host-ram-oom"
    assert ranked(TRT_LLM_NO_FREE_BLOCKS)[0] == "kv-exhaustion-at-runtime"
    assert ranked(SGLANG_POOL_LEAK_CHECK)[0] == "memory-leak"


# https://github.com/eugr/spark-vllm-docker/issues/336: on a GB10 (unified memory) the driver's out-of-memory
# comes seconds after vLLM began loading the MTP drafter: the draft's load, not the host, is the consumer.
DRAFTER_LOAD_ON_UNIFIED_MEMORY = (
    "18:03:00  (Worker_TP0) INFO [gpu_model_runner.py:5332] Loading drafter model...\n"
    "18:03:03  kernel: NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY]\n"
    "18:03:38  (EngineCore) ERROR [core.py:1349] EngineCore"
)


def test_a_failure_while_the_drafter_loads_is_the_draft_model() -> None:
    causes = ranked(DRAFTER_LOAD_ON_UNIFIED_MEMORY)
    assert causes[0] == "spec-decode-or-lora-extra"
    assert "host-ram-oom" in causes[:2]


# https://github.com/oobabooga/textgen/issues/6338: llama-cpp-python's scores table, n_ctx x n_vocab in fp32,
# at the model's 32768 context and Qwen's 152064 vocabulary (18.6 GiB, more than the 11 GB of weights).
SCORES_TABLE = (
    "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 18.6 GiB for an array with shape "
    "(32768, 152064) and data type float32\n"
)


def test_a_host_array_as_wide_as_a_vocabulary_is_a_logits_table() -> None:
    assert ranked(SCORES_TABLE)[:2] == ["sampler-or-logits", "host-ram-oom"]
    # https://github.com/dottxt-ai/outlines/issues/1079: the same table at Llama 3.1's 131072 x 128256.
    outlines = "Unable to allocate 62.6 GiB for an array with shape (131072, 128256) and data type float32\n"
    assert ranked(outlines)[0] == "sampler-or-logits"
    fixes = diagnose(_evidence(SCORES_TABLE)).causes[0].fixes
    assert "n_ctx" in fixes[0].summary
    assert not any("max-num-seqs" in f.summary for f in fixes)  # one row per position, not per sequence


def test_a_host_array_of_another_width_is_the_hosts_memory() -> None:
    # NumPy's error for a pairwise-distance matrix (42161 points): 2-D, but no vocabulary wide.
    text = (
        "MemoryError: Unable to allocate 13.2 GiB for an array with shape (42161, 42161) and data type "
        "float64\n"
    )
    assert ranked(text)[0] == "host-ram-oom"


def _evidence(text: str) -> Evidence:
    ev = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), ev)
    return ev


# https://github.com/vllm-project/vllm/issues/2312: Mixtral-AWQ on a 24 GB card; 24 MiB, a tenth of a percent
# of the device, cannot be had: no smaller step would have fitted, the weights had filled it.
TINY_ALLOCATION_ON_A_FULL_DEVICE = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 24.00 MiB. GPU 0 has a total capacty "
    "of 23.69 GiB of which 24.56 MiB is free. Process 106008 has 23.66 GiB memory in use. Of the allocated "
    "memory 23.19 GiB is allocated by PyTorch, and 32.44 MiB is reserved by PyTorch but unallocated."
)
# https://github.com/vllm-project/vllm/issues/13152: a serving step asks 1.33 GiB (1.7% of the device): a
# step's own peak, which the tiny-request reading must leave alone.
STEP_SIZED_ALLOCATION = (
    "ERROR 02-12 12:20:21 async_llm_engine.py:68] torch.OutOfMemoryError: CUDA out of memory. Tried to "
    "allocate 1.33 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.17 GiB is free. Including "
    "non-PyTorch memory, this process has 77.96 GiB memory in use. Of the allocated memory 76.33 GiB is "
    "allocated by PyTorch, with 42.00 MiB allocated in private pools (e.g., CUDA Graphs), and 488.05 MiB is "
    "reserved by PyTorch but unallocated."
)


def test_a_tiny_allocation_on_a_full_device_is_not_the_steps_peak() -> None:
    assert ranked(TINY_ALLOCATION_ON_A_FULL_DEVICE)[0] == "weights-dont-fit"
    assert ranked(STEP_SIZED_ALLOCATION)[0] == "activation-peak"


# https://github.com/InternLM/lmdeploy/issues/2381: InternVL2-40B in bf16 (~75 GiB) on one GPU: its vision
# encoder never ran, the language model's weights filled the device first.
VISION_MODEL_WHOSE_WEIGHTS_FILL_THE_DEVICE = (
    "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory "
    "/lmdeploy/src/turbomind/utils/memory_utils.cu:32\n"
    "from lmdeploy import pipeline, TurbomindEngineConfig\n"
    "from lmdeploy.vl import load_image\n\n"
    "model = '/media/star/disk2/pretrained_model/InternVL2-40B'\n"
    "image = load_image('/media/star/8T/tmp/2.jpg')\n"
    "pipe = pipeline(model, backend_config=TurbomindEngineConfig(session_len=8192))"
)


def test_a_vision_models_encoder_gets_no_turn_when_its_weights_fill_the_device() -> None:
    assert ranked(VISION_MODEL_WHOSE_WEIGHTS_FILL_THE_DEVICE)[0] == "weights-dont-fit"
    # A vision model whose weights fit (MiniCPM-V 2.6, 8B): the encoder stays first.
    assert ranked(VISION_MODEL_UNPLACED_OOM)[0] == "multimodal-encoder"


# https://github.com/ModelTC/LightLLM/issues/13: 77.83 GiB reserved, 77.83 GiB allocated: PyTorch's cache
# holds nothing freed, so no forward step had run; it failed building the KV buffers at startup.
NOTHING_FREED_YET = (
    'self.value_buffer = [torch.empty((size, head_num, head_dim), dtype=dtype, device="cuda") for _ in '
    "range(layer_num)]\n\n"
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.14 GiB (GPU 0; 79.35 GiB total "
    "capacity; 77.83 GiB already allocated; 711.19 MiB free; 77.83 GiB reserved in total by PyTorch) If "
    "reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
    "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
)


def test_an_allocator_that_freed_nothing_failed_at_startup() -> None:
    assert diagnose(read(NOTHING_FREED_YET)).phase == "startup"
    # 488 MiB cached after freeing (vllm#13152's serving step): steps had run, the phase stays unplaced.
    assert diagnose(read(STEP_SIZED_ALLOCATION)).phase == "unknown"
