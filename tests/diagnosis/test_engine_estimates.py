"""An engine's own sizing of the setup decides the cause where no error line does: ollama's estimate of a
model's parts against the GPUs' free memory; llama.cpp's command line, read as llama.cpp reads it. Texts are
real, pasted as in the cited public threads."""

from __future__ import annotations

from tests.diagnosis.pasted import ranked, read

from oomguard.diagnosis.evidence import MemoryPlan
from oomguard.diagnosis.sources.setting import command_flags
from oomguard.units import GiB, MiB

# https://github.com/ollama/ollama/issues/10417: mistral-small3.1 (vision) on one 24 GB GPU; the projector's
# graph on the largest image (8.8 GiB) is 20x the text graph; the estimate leaves 4 of 41 layers on the CPU.
PROJECTOR_GRAPH = """avril 30 00:04:08 jarvis-server ollama[1175]: time=2025-04-30T00:04:08.690Z level=INFO source=server.go:138 msg=offload
 library=cuda layers.requested=41 layers.model=41 layers.offload=37 layers.split="" memory.available="[23.3 GiB]"
 memory.gpu_overhead="0 B" memory.required.full="24.4 GiB" memory.required.partial="23.0 GiB" memory.required.kv="640.0 MiB"
 memory.required.allocations="[23.0 GiB]" memory.weights.total="13.1 GiB" memory.weights.repeating="12.7 GiB"
 memory.weights.nonrepeating="360.0 MiB" memory.graph.full="426.7 MiB" memory.graph.partial="426.7 MiB"
 projector.weights="769.3 MiB" projector.graph="8.8 GiB"
"""  # noqa: E501

# https://github.com/ollama/ollama/issues/6283: a community model inheriting a 128k context, with
# OLLAMA_NUM_PARALLEL=2: 31.2 GiB of the 35.3 GiB it needs is the KV cache.
KV_FOR_THE_CONTEXT = """time=2024-08-09T14:28:55.142+03:00 level=INFO source=memory.go:309 msg="offload to cuda" layers.requested=-1 layers.model=33 layers.offload=0 layers.split="" memory.available="[4.6 GiB]" memory.required.full="35.3 GiB" memory.required.partial="0 B" memory.required.kv="31.2 GiB" memory.required.allocations="[0 B]" memory.weights.total="34.9 GiB"
"""  # noqa: E501

# https://github.com/ollama/ollama/issues/9322: a 70B fp16 text model; the weights overflow the two GPUs and
# the host, neither KV nor a projector is large.
TEXT_MODEL_SPLIT = """Feb 24 15:36:32 adl ollama[2521]: time=2025-02-24T15:36:32.318-08:00 level=INFO source=memory.go:356 msg="offload to cuda" layers.requested=-1 layers.model=81 layers.offload=14 layers.split=7,7 memory.available="[14.5 GiB 15.2 GiB]" memory.gpu_overhead="0 B" memory.required.full="136.3 GiB" memory.required.partial="28.7 GiB" memory.required.kv="640.0 MiB" memory.required.allocations="[14.3 GiB 14.3 GiB]" memory.weights.total="128.1 GiB" memory.weights.repeating="126.2 GiB" memory.weights.nonrepeating="2.0 GiB" memory.graph.full="1.1 GiB" memory.graph.partial="1.1 GiB"
Feb 24 11:16:31 adl systemd[1]: ollama.service: A process of this unit has been killed by the OOM killer.
"""  # noqa: E501


def test_ollamas_estimate_is_read_across_the_lines_a_paste_wraps_it_over() -> None:
    [plan] = read(PROJECTOR_GRAPH).of(MemoryPlan)
    assert plan.available == (round(23.3 * GiB),)
    assert (plan.layers, plan.offloaded) == (41, 37)
    assert plan.projector == round(769.3 * MiB) + round(8.8 * GiB)
    assert plan.kv == 640 * MiB


def test_a_projector_taking_much_of_the_first_gpu_is_the_multimodal_encoders_reserve() -> None:
    assert ranked(PROJECTOR_GRAPH)[0] == "multimodal-encoder"


def test_a_kv_cache_that_is_most_of_the_estimate_is_the_context() -> None:
    assert ranked(KV_FOR_THE_CONTEXT)[0] == "max-model-len-exceeds-kv"


def test_a_text_models_estimate_names_neither_the_encoder_nor_the_context() -> None:
    causes = ranked(TEXT_MODEL_SPLIT)
    assert causes[0] == "host-ram-oom"
    assert "multimodal-encoder" not in causes[:3] and "max-model-len-exceeds-kv" not in causes[:3]


def test_a_projector_in_an_estimate_that_fits_is_no_cause() -> None:
    # The same vision model's estimate with every layer placed and the whole of it within the free memory.
    fits = PROJECTOR_GRAPH.replace("layers.offload=37", "layers.offload=41").replace(
        'memory.available="[23.3 GiB]"', 'memory.available="[47.5 GiB]"'
    )
    causes = ranked(fits + "Error: model runner has unexpectedly stopped\n")
    assert "multimodal-encoder" not in causes[:1]


# --- llama.cpp's command line, read as llama.cpp reads its argv (common/arg.cpp) --------------------------

# https://github.com/ikawrakow/ik_llama.cpp/issues/731: a draft model beside a 30B target on a 32 GB card.
DRAFT_AT_THE_TARGETS_CONTEXT = """./llama-server --api-key 1 -a qwen3 -m ~/Qwen3-Coder-30B-A3B-Instruct-IQ4_NL.gguf -ngl 99 -c 50000 -md Qwen3-0.6B-Q8_0.gguf -ngld 99  -fa -fmoe

this will lead to hang when sending a request, but -c 30000 fits and has no issues.
"""  # noqa: E501


def test_llama_cpp_options_are_read_under_the_quantities_they_set() -> None:
    # https://github.com/ggml-org/llama.cpp/issues/25714's command (env words and chat-template options aside)
    flags = command_flags(
        'OMP_PLACES="cores" ./llama-server -m ./bonsai27b/Ternary-Bonsai-27B-Q2_0.gguf -c 32768 -ngl 99 '
        "--spec-draft-model ./bonsai27b/Ternary-Bonsai-27B-dspark-Q4_1.gguf --spec-type draft-dspark "
        "--spec-draft-n-max 4 -ngld 99 --jinja -np 1 --no-mmap -b 1024 -ub 512"
    )
    assert flags["max_model_len"] == "32768" and flags["n_gpu_layers"] == "99"
    assert flags["speculative_model"] == "./bonsai27b/Ternary-Bonsai-27B-dspark-Q4_1.gguf"
    assert flags["num_speculative_tokens"] == "4" and flags["max_num_seqs"] == "1"
    assert (flags["batch_size"], flags["max_num_batched_tokens"]) == ("1024", "512")


def test_the_runner_ollama_starts_is_a_llama_cpp_command() -> None:
    # https://github.com/ollama/ollama/issues/3711
    flags = command_flags(
        "/tmp/ollama346288213/runners/cuda_v12/ollama_llama_server --model /media/data/ollama/blobs/sha256 "
        "--ctx-size 2048 --batch-size 512 --embedding --log-disable --n-gpu-layers 51 --port 43359"
    )
    assert (flags["max_model_len"], flags["n_gpu_layers"], flags["batch_size"]) == ("2048", "51", "512")


def test_a_context_that_fits_only_smaller_with_a_draft_model_is_the_drafts_extra() -> None:
    assert ranked(DRAFT_AT_THE_TARGETS_CONTEXT)[0] == "spec-decode-or-lora-extra"


def test_without_a_draft_model_the_same_context_is_the_context() -> None:
    plain = DRAFT_AT_THE_TARGETS_CONTEXT.replace(" -md Qwen3-0.6B-Q8_0.gguf -ngld 99", "")
    assert ranked(plain)[0] == "max-model-len-exceeds-kv"


def test_a_draft_with_its_own_context_does_not_take_the_targets() -> None:
    own = DRAFT_AT_THE_TARGETS_CONTEXT.replace("-ngld 99", "-ngld 99 -cd 4096")
    assert ranked(own)[0] == "max-model-len-exceeds-kv"


# --- the step that allocates a KV cache sized from the settings -------------------------------------------

# https://github.com/ggml-org/llama.cpp/issues/9112: Phi-3.5-mini (no GQA) with the context its GGUF states,
# 131072, on a 48 GB Metal working set; the log stops while the context is created.
LLAMA_CPP_LONG_CONTEXT = """llama_model_loader: - kv  10:                        phi3.context_length u32              = 131072
llama_model_loader: - kv  16:               phi3.attention.head_count_kv u32              = 32
ggml_backend_metal_log_allocated_size: allocated buffer, size =  3772.59 MiB, ( 3772.66 / 49152.00)
llm_load_tensors: offloaded 33/33 layers to GPU
llama_new_context_with_model: n_ctx      = 131072
llama_new_context_with_model: n_batch    = 2048
llama_new_context_with_model: n_ubatch   = 512
llama_new_context_with_model: flash_attn = 0
"""  # noqa: E501

# https://github.com/ollama/ollama/issues/4799: ollama's 10 layers put 11157.68 MiB of weights on a 12 GB
# 4070; creating a 2048-token context (its KV in host memory) is where it stops.
LLAMA_CPP_SMALL_CONTEXT = """llm_load_tensors: offloading 10 repeating layers to GPU
llm_load_tensors: offloaded 10/28 layers to GPU
llm_load_tensors:        CPU buffer size = 18806.81 MiB
llm_load_tensors:      CUDA0 buffer size = 11157.68 MiB
.......................................................................................
llama_new_context_with_model: n_ctx      = 2048
llama_new_context_with_model: n_batch    = 512
llama_new_context_with_model: n_ubatch   = 512
llama_new_context_with_model: flash_attn = 0
llama_kv_cache_init:  CUDA_Host KV buffer size =   340.00 MiB
"""

# https://github.com/tenstorrent/tt-metal/issues/21904: the TT worker's KV caches, allocated layer by layer,
# run out of DRAM at layer 22 of 32.
TT_KV_ALLOCATION = """Allocating TT kv caches for each layer (submesh 1):  69%|██████████████▍      | 22/32 [00:01<00:00, 11.60it/s]2025-05-09 15:30:16.224 | WARNING  | core:as_tensor:733 - Failed to load cache for /home/container_app_user/cache_root/model_weights/Llama3.1-8B-Instruct/N150/tt-mesh/empty_cache_paged_attention(1034, 8, 64, 128)_multi_device_dtype_BFLOAT8_B_layout_TILE.bin: TT_THROW @ /tt-metal/tt_metal/impl/allocator/bank_manager.cpp:141: tt::exception
info:
Out of Memory: Not enough space to allocate 71999488 B DRAM buffer across 12 banks, where each bank needs to store 6000320 B
backtrace:
 --- /tt-metal/build/lib/libtt_metal.so(+0x2139e5) [0x7f0b901359e5]
"""  # noqa: E501


def test_a_llama_cpp_log_that_stops_creating_a_long_context_is_the_context() -> None:
    [step] = read(LLAMA_CPP_LONG_CONTEXT).signals("milestone-kv-allocating")
    assert step.number("n_ctx") == 131072
    assert ranked(LLAMA_CPP_LONG_CONTEXT)[0] == "max-model-len-exceeds-kv"


def test_a_small_context_that_does_not_fit_is_the_layers_placed_before_it() -> None:
    causes = ranked(LLAMA_CPP_SMALL_CONTEXT)
    assert causes[0] == "weights-dont-fit"
    assert "max-model-len-exceeds-kv" not in causes[:2]


def test_an_engine_allocating_the_kv_cache_it_sized_is_the_kv_pool_when_it_runs_out() -> None:
    assert ranked(TT_KV_ALLOCATION)[0] == "kv-cache-insufficient-at-startup"
