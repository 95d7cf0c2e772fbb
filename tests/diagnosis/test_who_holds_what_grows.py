"""Who holds the memory and what grows it (issue 8): another process on the device, memory that grows with
time, a multimodal encoder's or a draft model's extra. Each mechanism is read from typed quantities in the
engines' own lines (format strings cited); each test also shows a near-miss of another class staying there."""

from __future__ import annotations

import io

from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.evidence import Evidence, GpuMemory, GpuProcess, StartupNumber
from oomguard.diagnosis.read import read_one, require_evidence


def read(text: str) -> Evidence:
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), evidence)
    return evidence


def ranked(text: str) -> list[str]:
    evidence = read(text)
    require_evidence(evidence)
    return [c.cls for c in diagnose(evidence).causes]


# SGLang's model_runner.load_model logs what the device has free before its first weight ("Load weight
# begin. avail mem=%.2f GB", sglang v0.3-v0.5 python/sglang/srt/model_executor/model_runner.py), then what
# the weights took; the rest of the lines are those of https://github.com/sgl-project/sglang/issues/4895
# (Gemma 3 on a 4090, "Not enough memory"). There the device was free at the start (22.46 GB = the 3.64 GB
# left + the 18.82 GB of weights); with 9.10 GB free at the start someone else held the other 15 GB.
SGLANG_START = """\
GPU: 4090
[2025-03-29 18:12:51 TP0] Load weight begin. avail mem={begin} GB
[2025-03-29 18:18:34 TP0] Load weight end. type=Gemma3ForConditionalGeneration, dtype=torch.bfloat16, \
avail mem={end} GB, mem usage=18.82 GB.
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.
"""

# llama.cpp's loader names each device and what it has free before the first tensor (src/llama.cpp,
# llama_model_load_from_file_impl: "%s: using device %s (%s) - %zu MiB free"); the failure lines are ggml's
# (ggml-cuda.cu, ggml-backend.cpp) as https://github.com/ggml-org/llama.cpp/issues/7366 quotes them.
LLAMA_CPP_START = """\
llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 3090) - {free} MiB free
load_tensors: loading model tensors, this can take a while... (mmap = true)
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 15821.53 MiB on device 0: cudaMalloc failed: \
out of memory
alloc_tensor_range: failed to allocate CUDA0 buffer of size 16590056448
llama_model_load: error loading model: unable to allocate CUDA0 buffer
"""

# https://github.com/ggml-org/llama.cpp/issues/19437: a 2026 build adds the PCI address; 8720 of the 1080 Ti's
# 11 GiB free is a desktop's display, not a tenant.
LLAMA_CPP_PCI = (
    "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce GTX 1080 Ti) (0000:03:00.0) - "
    "8720 MiB free\n"
)

# ollama's discovery at server start (discover/types.go "inference compute"); library=cpu is the host.
OLLAMA_CPU = (
    'time=2025-03-28T15:48:41.043+09:00 level=INFO source=types.go:130 msg="inference compute" id=0 '
    'library=cpu variant="" compute="" driver=0.0 name="" total="11.7 GiB" available="10.6 GiB"\n'
)


def test_memory_held_before_sglang_loaded_a_weight_is_another_process():
    held = ranked(SGLANG_START.format(begin="9.10", end="0.00"))
    assert held[0] == "other-process-or-shared-gpu"
    free = ranked(SGLANG_START.format(begin="22.46", end="3.64"))
    assert free[0] == "kv-cache-insufficient-at-startup"
    assert "other-process-or-shared-gpu" not in free[:2]


def test_memory_held_before_llama_cpp_loaded_a_tensor_is_another_process():
    assert ranked(LLAMA_CPP_START.format(free="6240"))[0] == "other-process-or-shared-gpu"
    assert ranked(LLAMA_CPP_START.format(free="23800"))[0] == "weights-dont-fit"


def test_free_at_start_is_read_from_every_spelling_and_not_from_the_host():
    pci = [n for n in read(LLAMA_CPP_PCI).of(StartupNumber) if n.quantity == "free_at_start_bytes"]
    assert [n.value for n in pci] == [8720 << 20]
    assert not [n for n in read(OLLAMA_CPU).of(StartupNumber) if n.quantity == "free_at_start_bytes"]


# PyTorch lists every process on the device (c10/cuda/CUDACachingAllocator.cpp reportProcessMemoryInfo);
# inside a container its own pid is not the host's, so it is a "Process N" too. Here PyTorch holds 600 MiB
# in the failing process: it is the 1022 MiB one, and the 30.51 GiB one is someone else
# (https://github.com/Alibaba-NLP/ZeroSearch/issues/11).
TWO_PROCESSES = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 148.00 MiB. GPU 0 has a total capacity of "
    "31.60 GiB of which 87.44 MiB is free. Process 441650 has 30.51 GiB memory in use. Process 449657 has "
    "1022.00 MiB memory in use. Of the allocated memory {allocated} is allocated by PyTorch, and 5.99 MiB is "
    "reserved by PyTorch but unallocated."
)
# https://github.com/vllm-project/vllm/issues/10637: the one listed process is the failing one.
ONE_PROCESS = (
    "CUDA out of memory. Tried to allocate 524.00 MiB. GPU 0 has a total capacity of 15.77 GiB of which "
    "137.12 MiB is free. Process 6513 has 15.63 GiB memory in use. Of the allocated memory 13.81 GiB is "
    "allocated by PyTorch, with 106.00 MiB allocated in private pools (e.g., CUDA Graphs), and 121.43 MiB is "
    "reserved by PyTorch but unallocated."
)


def test_the_failing_process_is_the_listed_one_that_holds_what_pytorch_reserved():
    assert ranked(TWO_PROCESSES.format(allocated="594.01 MiB"))[0] == "other-process-or-shared-gpu"
    # PyTorch holding 29.8 GiB makes the large process the failing one: the other holds under a GiB.
    assert ranked(TWO_PROCESSES.format(allocated="29.80 GiB"))[0] != "other-process-or-shared-gpu"
    assert ranked(ONE_PROCESS)[0] != "other-process-or-shared-gpu"


# SGLang's sleep mode (torch_memory_saver) mapping its memory back when verl resumes the rollout: the driver
# said CUDA_ERROR_OUT_OF_MEMORY (2) because the trainer still held the memory
# (https://github.com/sgl-project/sglang/issues/14092); result 1 at teardown is no memory error at all
# (torch_memory_saver csrc/core.cpp free, as a slime PPO teardown log quotes it).
MEMORY_SAVER_OOM = (
    "(SGLangHttpServer pid=250977) [torch_memory_saver.cpp] CUresult error: 2 (out of memory)  "
    "file=csrc/utils.h func=cu_mem_create line=194\n"
    "(WorkerDict pid=209740) WARNING:2025-11-28 16:00:45,396:Async request to resume_memory_occupation timed "
    "out (attempt 1)\n"
)
MEMORY_SAVER_OLD = "[torch_memory_saver.cpp] CUresult error  result=2 file=csrc/torch_memory_saver.cpp " + (
    "func=cu_mem_create line=104\n"
)
MEMORY_SAVER_INVALID = (
    "[torch_memory_saver.cpp] CUresult error: 1 (invalid argument) file=csrc/core.cpp func=free line=66\n"
)
# Python's faulthandler writes no comma before "in": the frame still names its function
# (https://github.com/fzyzcjy/torch_memory_saver/pull/87).
FAULTHANDLER_RESUME = (
    "Fatal Python error: Aborted\n\nCurrent thread ...:\n"
    '  File ".../torch_memory_saver/entrypoint.py", line 169 in resume\n  ...\n'
)


def test_sleep_mode_failing_to_map_memory_back_is_the_colocated_trainer():
    assert ranked(MEMORY_SAVER_OOM)[0] == "other-process-or-shared-gpu"
    assert ranked(MEMORY_SAVER_OLD)[0] == "other-process-or-shared-gpu"
    assert "sleep-mode-oom" not in {getattr(f, "name", "") for f in read(MEMORY_SAVER_INVALID)}
    assert ranked(FAULTHANDLER_RESUME)[0] == "other-process-or-shared-gpu"


# npu-smi info as the Ascend driver prints it (the device rows of
# https://github.com/vllm-project/vllm-ascend/issues/8621, a fourth instance on a 910B), with its process
# section; the failure is torch_npu's allocator message.
NPU_SMI = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.6                   Version: 23.0.6                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B2               | OK            | 94.5        36                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          59872/ 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
{rows}+===========================+===============+====================================================+
RuntimeError: NPU out of memory. Tried to allocate 1.17 GiB (NPU 0; 60.96 GiB total capacity; {mine} GiB \
already allocated; {mine} GiB current active; 0.31 GiB free; {mine} GiB reserved in total by PyTorch)
"""
NPU_ROW = "| 0       0                 | {pid}       | python                   | {mb}                   |\n"
# rocm-smi --showmeminfo vram and --showpids (rocm_smi.py's own lines; the rows' tabs as it prints them).
ROCM_SMI = (
    "GPU[0]\t\t: VRAM Total Memory (B): 206141652992\n"
    "GPU[0]\t\t: VRAM Total Used Memory (B): 200864030720\n"
    "KFD process information:\n"
    "PID    \tPROCESS NAME\tGPU(s)\tVRAM USED\tSDMA USED\tCU OCCUPANCY\t\n"
    "2254756\tpython3     \t1     \t182536110080\t0        \t9           \t\n"
    "2254901\tpython3     \t1     \t17179869184\t0        \t0           \t\n"
)


def test_npu_smi_and_rocm_smi_processes_on_one_device_are_another_process():
    rows = NPU_ROW.format(pid=2215734, mb=41283) + NPU_ROW.format(pid=2215799, mb=18100)
    assert ranked(NPU_SMI.format(rows=rows, mine="17.12"))[0] == "other-process-or-shared-gpu"
    table_only = NPU_SMI.format(rows=rows, mine="").split("RuntimeError")[0]
    assert ranked(table_only + "the engine crashed\n")[0] == "other-process-or-shared-gpu"
    # One process, the engine itself, holding what PyTorch reserved: its own step ran out.
    one = NPU_SMI.format(rows=NPU_ROW.format(pid=2215734, mb=59300), mine="57.12")
    assert ranked(one)[0] != "other-process-or-shared-gpu"
    rocm = read(ROCM_SMI)
    assert [(p.gpu, p.used) for p in rocm.of(GpuProcess)] == [(0, 182536110080), (0, 17179869184)]
    assert [(g.total, g.used) for g in rocm.of(GpuMemory)] == [(206141652992, 200864030720)]


def prose(text: str) -> set[str]:
    return {getattr(f, "name", "") for f in read(text) if getattr(f, "name", "").startswith("prose-")}


# A growth the reporter measured, a quantity over a span
# (https://github.com/sgl-project/sglang/issues/5958).
MEASURED_GROWTH = (
    "I am observing that GPU memory increases by 20GB after SGLang server initialization when left running "
    "for 7 days and serving a lot of requests (between 500k and 1 million)."
)
# A one-off rise with no span is PyTorch's cache keeping a peak
# (https://github.com/sgl-project/sglang/issues/951).
ONE_PEAK = (
    "When testing the sglang LLM inference framework, I observed that the GPU memory utilization increased "
    "from 73.16 GiB to 77.06 GiB."
)
# Memory not given back: https://github.com/verl-project/verl/issues/429 and
# https://github.com/vllm-project/vllm/issues/21073; another process's memory is not the engine's
# (https://github.com/vllm-project/vllm/issues/13131).
NOT_RELEASED = "But after llm_engine.step(), the increased memory is not released."
NOT_FREED = "The deletion of the LLM object does not free all the memory."
OTHERS_RELEASE = (
    "It added logic in memory usage calculations that hopes other processes don't release GPU memory during "
    "the calculation process, aborting if they have."
)


def test_a_growth_measured_over_time_and_memory_not_given_back_are_the_leak():
    assert "prose-measured-growth" in prose(MEASURED_GROWTH)
    assert ranked(MEASURED_GROWTH)[0] == "memory-leak"
    assert "prose-measured-growth" not in prose(ONE_PEAK)
    assert "prose-not-freed" in prose(NOT_RELEASED)
    assert "prose-not-freed" in prose(NOT_FREED)
    assert "prose-not-freed" not in prose(OTHERS_RELEASE)


# nvidia-smi's query CSVs (--query-gpu / --query-compute-apps, `-l` repeating them) read hour after hour:
# memory that only rose in small steps is never given back; the same device read while an engine starts
# (weights, then the KV pool: steps of tens of percent) is no leak.
SMI_HOURLY = (
    "index, name, memory.used [MiB], memory.total [MiB]\n"
    + "".join(f"0, NVIDIA A100-SXM4-80GB, {mib} MiB, 81920 MiB\n" for mib in (71203, 72988, 75114, 77986))
    + "the server died with CUDA out of memory after two days\n"
)
SMI_STARTUP = (
    "index, name, memory.used [MiB], memory.total [MiB]\n"
    + "".join(f"0, NVIDIA A100-SXM4-80GB, {mib} MiB, 81920 MiB\n" for mib in (1203, 16988, 73114, 73986))
    + "the server died with CUDA out of memory\n"
)
APPS_HOURLY = "".join(
    f"pid, process_name, used_gpu_memory [MiB]\n41233, python3, {mib} MiB\n" for mib in (70110, 71950, 74008)
)


def test_device_memory_that_only_creeps_up_across_readings_is_the_leak():
    assert ranked(SMI_HOURLY)[0] == "memory-leak"
    assert "memory-leak" not in ranked(SMI_STARTUP)[:1]
    assert ranked(APPS_HOURLY + "then it ran out of memory\n")[0] == "memory-leak"


# A vision tower in its own model file (vLLM intern_vit.py:
# https://github.com/gpustack/gpustack/issues/364; DeepSeek-OCR's deepencoder:
# https://github.com/deepseek-ai/DeepSeek-OCR/issues/91) or the merge of its output into the prompt (vLLM
# models/utils.py: https://github.com/vllm-project/vllm/issues/38257) is the encoder's step; the text
# model's own layer (models/llama.py) is not.
VISION_OOM = (
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3.12/site-packages/vllm/model_executor/models/{file}", line {no}, in {func}\n'
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.59 GiB. GPU 0 has a total capacity "
    "of 31.73 GiB of which 3.11 GiB is free. Including non-PyTorch memory, this process has 28.62 GiB "
    "memory in use. Of the allocated memory 27.97 GiB is allocated by PyTorch, and 98.54 MiB is reserved "
    "by PyTorch but unallocated.\n"
)


def test_a_vision_towers_own_file_or_the_embedding_merge_is_the_encoder():
    for file, no, func in (
        ("intern_vit.py", 134, "forward"),
        ("utils.py", 476, "_merge_multimodal_embeddings"),
        ("deepencoder/sam_vary_sdpa.py", 309, "forward"),
    ):
        assert ranked(VISION_OOM.format(file=file, no=no, func=func))[0] == "multimodal-encoder", file
    assert ranked(VISION_OOM.format(file="llama.py", no=321, func="forward"))[0] != "multimodal-encoder"


# llama-server loads the speculative draft after the target's weights and context ("loading draft model
# '%s'", "failed to load draft model, '%s'": llama.cpp tools/server/server.cpp load_model); ggml's failure
# lines as https://github.com/ggml-org/llama.cpp/issues/7366 quotes them. The same failure without the draft
# is the target's own context.
LLAMA_CPP_TARGET = """\
load_tensors: loading model tensors, this can take a while... (mmap = true)
load_tensors:        CUDA0 model buffer size = 16488.94 MiB
llama_context: n_ctx         = 32768
llama_kv_cache:      CUDA0 KV buffer size =  2048.00 MiB
llama_context:      CUDA0 compute buffer size =   612.01 MiB
"""
LLAMA_CPP_KV_FAILS = """\
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 3584.00 MiB on device 0: cudaMalloc failed: \
out of memory
llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache
"""
LLAMA_CPP_DRAFT = """\
srv    load_model: loading draft model 'Qwen3-0.6B-Q8_0.gguf'
load_tensors: loading model tensors, this can take a while... (mmap = true)
llama_context: n_ctx         = 32768
"""


def test_a_failure_while_llama_server_loads_its_draft_is_the_drafts_extra():
    drafting = LLAMA_CPP_TARGET + LLAMA_CPP_DRAFT + LLAMA_CPP_KV_FAILS
    assert ranked(drafting)[0] == "spec-decode-or-lora-extra"
    assert ranked(LLAMA_CPP_TARGET + LLAMA_CPP_KV_FAILS)[0] == "max-model-len-exceeds-kv"
    failed = LLAMA_CPP_TARGET + "srv    load_model: failed to load draft model, 'Qwen3-0.6B-Q8_0.gguf'\n"
    assert ranked(failed)[0] == "spec-decode-or-lora-extra"


# SGLang prints every server argument (server_args=ServerArgs(...), python/sglang/srt/server_args.py), the
# speculative ones None when off; the OOM is SGLang's own KV allocator's.
SGLANG_SPEC = (
    "[2025-02-14 10:01:12] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', "
    "mem_fraction_static=0.88, speculative_algorithm={algo}, speculative_draft_model_path={draft}, "
    "lora_paths=None)\n"
    "[2025-02-14 10:09:40 TP0] Prefill out of memory. Try to lower your batch size.\n"
)


def test_speculative_decoding_and_lora_are_read_in_every_engines_spelling():
    on = ranked(SGLANG_SPEC.format(algo="'EAGLE'", draft="'lmsys/sglang-EAGLE-LLaMA3-Instruct-8B'"))
    assert "spec-decode-or-lora-extra" in on[:3]
    off = ranked(SGLANG_SPEC.format(algo="None", draft="None"))
    assert "spec-decode-or-lora-extra" not in off[:3]


# Another tenant of the device, in the words reporters use for it: containers
# (https://github.com/vllm-project/vllm/issues/17366), copies of a model
# (https://github.com/triton-inference-server/tensorrtllm_backend/issues/481); several cards of one server are
# no tenant (https://github.com/vllm-project/vllm/issues/7553).
TWO_CONTAINERS = (
    "I started two docker containers on a card on an A100(80G) machine to run the w8w8 quantized qwen2.5 "
    "14B model, limiting gpu-memory-utilization to 0.3 respectively. The first service can be loaded "
    "normally, but the second service fails to start."
)
TWO_COPIES = (
    "I'm trying to get the triton server to run two copies of the model, and it overpopulates the first GPU."
)
FOUR_CARDS = "I run the model on the server with 4 x NVIDIA GeForce RTX 4090 cards and get OOM errors."


def test_another_tenant_in_a_reporters_words_is_another_process():
    assert "prose-other-process" in prose(TWO_CONTAINERS)
    assert "prose-other-process" in prose(TWO_COPIES)
    assert "prose-other-process" not in prose(FOUR_CARDS)


# llama.cpp's multimodal tools log a request's image entering the encoder and leaving it ("encoding image
# slice...", "image slice encoded in %ld ms", "failed to encode image slice": tools/mtmd/mtmd-cli.cpp,
# mtmd-helper.cpp); a failure in between is the encoder's, one after it the text model's.
MTMD_ENCODING = """\
encoding image slice...
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 3012.50 MiB on device 0: cudaMalloc failed: \\
out of memory
ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 3158835200
failed to encode image slice
"""
MTMD_ENCODED = """\
encoding image slice...
image slice encoded in 512 ms
decode: failed to find a memory slot for batch of size 512
"""


def test_a_failure_while_llama_cpp_encodes_an_image_is_the_encoder():
    assert ranked(MTMD_ENCODING)[0] == "multimodal-encoder"
    assert ranked(MTMD_ENCODED)[0] == "kv-exhaustion-at-runtime"


# vLLM 0.6.2-0.6.3 logged its profile as key=value pairs, non_torch_memory being the device's used memory
# less its own PyTorch allocations (worker.py determine_num_available_blocks: total_allocated_bytes from
# mem_get_info minus torch's allocated_bytes): another process's memory is in it. The first fields as the
# 72B-then-14B report prints them (https://github.com/vllm-project/vllm/issues/10533, cut off there), the
# rest in the format's order with illustrative values.
V063_PROFILE = (
    "INFO 11-21 10:21:37 worker.py:232] Memory profiling results: total_gpu_memory=79.15GiB "
    "initial_memory_usage=68.01GiB peak_torch_memory=29.12GiB memory_usage_post_profile=68.32GiB "
    "non_torch_memory={outside}GiB kv_cache_size=-7.44GiB gpu_memory_utilization=0.90\n"
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine.\n"
)


def test_vllm_0_6_3s_non_torch_memory_counts_other_processes():
    assert ranked(V063_PROFILE.format(outside="39.20"))[0] == "other-process-or-shared-gpu"
    assert ranked(V063_PROFILE.format(outside="0.35"))[0] == "kv-cache-insufficient-at-startup"


# The reporter's sentence has the memory growing until the GPU ran out: the growth is the cause, the VL model
# only where it surfaced (https://github.com/sgl-project/sglang/issues/8902); memory "increasing as it passes
# forward" through a vision model the stack names is that step's shape
# (https://github.com/vllm-project/vllm/issues/8879).
GROWS_UNTIL_OOM = (
    "When serving a vlm (qwen2.5-vl-3b/7b/32b in my cases). The GPU memory keeps increasing until it gets "
    "cuda out of memory for the coming request.\n"
    "python -m sglang.launch_server --model-path Qwen2.5-VL-3B-Instruct --tp 1 --nnodes 1 --node-rank 0 "
    "--trust-remote-code --host 0.0.0.0 --port 30000\n"
)
GROWS_IN_A_PASS = (
    'File "/home/u/miniconda3/envs/eval/lib/python3.10/site-packages/vllm/model_executor/models/mllama.py", '
    "line 1084, in forward\ncross_attention_states = self.vision_model(pixel_values,\n\n"
    "In this part, OOM occurs as the memory continues to increase as it passes forward.\n"
)


def test_memory_growing_until_it_ran_out_is_the_leak_unless_a_step_holds_it():
    assert ranked(GROWS_UNTIL_OOM)[0] == "memory-leak"
    assert ranked(GROWS_IN_A_PASS)[0] == "multimodal-encoder"


# The MTP heads live in model files of their own (vLLM v0.33 model_executor/models/deepseek_mtp.py, SGLang
# python/sglang/srt/models/deepseek_nextn.py); the target's own file is the target's step.
MODEL_FILE_OOM = (
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3.12/site-packages/{pkg}/{file}", line 212, in forward\n'
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity "
    "of 79.19 GiB of which 301.50 MiB is free. Including non-PyTorch memory, this process has 78.88 GiB "
    "memory in use. Of the allocated memory 77.12 GiB is allocated by PyTorch, and 21.20 MiB is reserved "
    "by PyTorch but unallocated.\n"
)


def test_a_stack_in_an_mtp_heads_own_file_is_the_draft():
    for pkg, file in (
        ("vllm/model_executor/models", "deepseek_mtp.py"),
        ("sglang/srt/models", "deepseek_nextn.py"),
    ):
        assert ranked(MODEL_FILE_OOM.format(pkg=pkg, file=file))[0] == "spec-decode-or-lora-extra", file
    target = MODEL_FILE_OOM.format(pkg="vllm/model_executor/models", file="deepseek_v2.py")
    assert ranked(target)[0] != "spec-decode-or-lora-extra"


# A device someone had already taken (https://github.com/sgl-project/sglang/issues/465: a misspelled
# CUDA_VISIBLE_DEVICES left the server on a busy GPU); a device the engine itself fills is no tenant
# (https://github.com/vllm-project/vllm/issues/7553).
ALREADY_TAKEN = (
    'I had misspelled "CUDA_VISIBLE_DEVICES" and it was still running on a GPU that was consumed already.'
)
ITSELF_FULL = "Memory-Usage showed by nvidia-smi is 23859MiB / 24564MiB on each card when the OOM occurs."


def test_a_device_someone_already_took_is_another_process():
    assert "prose-other-process" in prose(ALREADY_TAKEN)
    assert "prose-other-process" not in prose(ITSELF_FULL)
