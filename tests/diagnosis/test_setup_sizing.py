"""The setup a pasted report states, read by its meaning for any engine or wrapper, and weighed as
quantities (issue 8): the model (catalog, else the size in its name; the precision from the name and the
flags), the device (allocator message, the GPU the reporter names), the split (TP/PP in any spelling, a
model-parallel torchrun). Texts are real, pasted as in the cited public threads."""

from __future__ import annotations

from tests.diagnosis.pasted import read

from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.evidence import DeviceNamed, Flags, ModelNamed
from oomguard.diagnosis.rules import score
from oomguard.diagnosis.setup import EngineSetup, recover_setup
from oomguard.diagnosis.sizing import model_size, params_in_name
from oomguard.diagnosis.sources.setting import command_flags, gpus_named, models_named
from oomguard.models.resolve import catalog_match
from oomguard.units import GiB


def setup_of(text: str) -> EngineSetup:
    return recover_setup(read(text))


def weights_lines(text: str) -> list[str]:
    """The reasons (for and against) the rules weigh the weights per GPU with, signed by their weight."""
    evidence = read(text)
    tally, _ = score(evidence, recover_setup(evidence))
    return [
        f"{'+' if c.weight > 0 else '-'} {c.why}"
        for c in tally.of("weights-dont-fit")
        if "of weights per GPU" in c.why
    ]


# https://github.com/sgl-project/sglang/issues/9506: a 4-bit 30B MoE on one 24 GB card with SGLang's static
# share at 0.6 (it loads under vLLM's 0.9).
SGLANG_GPTQ_ON_A_4090 = (
    "I'm currently using sglang to load the Qwen3-30B-A3B-GPTQ-Int4 model.\n"
    " I'm experiencing an OOM error when using tp=1, but it loads fine using vllm. \n"
    "My current test graphics card is a 4090 24GB. \n"
    "python3 -m sglang.launch_server \\\n"
    "--model-path /work/models/Qwen/Qwen3-30B-A3B-GPTQ-Int4 \\\n"
    "--mem-fraction-static 0.6 \\\n"
    "--chunked-prefill-size 2048 \\\n"
    "--max-running-requests 8"
)
# https://github.com/deepseek-ai/DeepSeek-V3/issues/855: the reference demo's model-parallel checkpoint over
# 2 nodes x 8 processes, on A6000s.
DEEPSEEK_DEMO_ON_A6000S = (
    "torchrun --nnodes 2 --nproc-per-node 8 --node-rank $RANK --master-addr $ADDR generate.py --ckpt-path "
    "/path/to/DeepSeek-V3-Demo --config configs/config_671B.json --interactive --temperature 0.7 "
    "--max-new-tokens 200\n"
    "\n"
    "直接报cuda out of memory，我的服务器是8*A6000(48G),请问目前这台服务器显存能支持吗"
)
# https://github.com/QwenLM/Qwen/issues/589: FastChat's vLLM worker, TP 2, the old allocator format.
FASTCHAT_WORKER_TP2 = (
    "python -m fastchat.serve.vllm_worker --model-path /usr/src/app/model/qwen/Qwen-14B-Chat-Int8 "
    "--trust-remote-code --tensor-parallel-size 2\n"
    "```\n"
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 134.00 MiB (GPU 1; 11.77 GiB total "
    "capacity; 10.95 GiB already allocated; 132.25 MiB free; 11.00 GiB reserved in total by PyTorch) If "
    "reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
    "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n"
    "```"
)
# https://github.com/deepspeedai/DeepSpeed-MII/issues/99: MII's config dict and the GPUs in words.
MII_EIGHT_GPUS = (
    "I'm trying out deepspeed-mii on a local machine (8 GPU with 23GB VRAM each). Smaller models like "
    "`bloom-560m` and `EleutherAI/gpt-neo-2.7B` worked well. However, I got CUDA OOM errors when loading "
    "larger models, like `bloom-7b1`. For some even larger models like `EleutherAI/gpt-neox-20b`, the server "
    "just crashed without any specific error messages or logs.\n"
    "\n"
    'mii_configs = {"tensor_parallel": 8, "dtype": "fp16"}'
)
# https://github.com/InternLM/lmdeploy/issues/2381: the model is a variable the pipeline is called with.
LMDEPLOY_PIPELINE_OF_A_VARIABLE = (
    "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory "
    "/lmdeploy/src/turbomind/utils/memory_utils.cu:32\n"
    "from lmdeploy import pipeline, TurbomindEngineConfig\n"
    "from lmdeploy.vl import load_image\n"
    "\n"
    "model = '/media/star/disk2/pretrained_model/InternVL2-40B'\n"
    "image = load_image('/media/star/8T/tmp/2.jpg')\n"
    "pipe = pipeline(model, backend_config=TurbomindEngineConfig(session_len=8192))"
)
# https://github.com/vllm-project/vllm/issues/8903: an 11B model over four 80 GB GPUs (the docker command's
# continuation lines), the OOM in the encoder's profile.
VISION_11B_TP4 = (
    "docker run  --gpus all \\\n"
    "    -v /data/hf_cache/ \\\n"
    '    --env "HUGGING_FACE_HUB_TOKEN=<token>" \\\n'
    "    -p 8000:8000 \\\n"
    "    --ipc=host \\\n"
    "    vllm/vllm-openai:latest \\\n"
    "    --model meta-llama/Llama-3.2-11B-Vision-Instruct \\\n"
    "    --tensor-parallel-size 4 \\\n"
    "    --max-model-len 4096 \\\n"
    "    --download_dir /data/vllm_cache \\\n"
    "    --enforce-eager\n"
    "VllmWorkerProcess pid=214) ERROR 09-27 05:20:38 multiproc_worker_utils.py:233] Exception in worker "
    "VllmWorkerProcess while processing method determine_num_available_blocks: CUDA out of memory. Tried to "
    "allocate 19.63 GiB. GPU 3 has a total capacity of 79.15 GiB of which 17.73 GiB is free. Process 78729 "
    "has 61.41 GiB memory in use. Of the allocated memory 56.64 GiB is allocated by PyTorch, and 4.07 GiB is "
    "reserved by PyTorch but unallocated."
)
# https://github.com/turboderp-org/exllamav3/issues/50: two models named in words, no command, no GPUs.
TWO_MODELS_NO_SETUP = (
    "RuntimeError: Insufficient VRAM in split for model and cache\n"
    "Model 1: Nemotron-Super-49B (3.0bpw, cache-mode FP16)\n"
    "- 20k context: 23094MiB used\n"
    "- 22k context: OOM\n"
    "Model 2: gemma3-27b (5.0bpw, cache-mode Q6)\n"
    "- 31k context: OOM"
)
# https://github.com/vllm-project/vllm/issues/31805: vLLM's own error names flags; it is no command.
LOAD_FAILED_NAMING_FLAGS = (
    "(EngineCore_DP0 pid=5765) ERROR 01-05 22:46:36 [gpu_model_runner.py:3797] Failed to load model - not "
    "enough GPU memory. Try lowering --gpu-memory-utilization to free memory for weights, increasing "
    "--tensor-parallel-size, or using --quantization."
)


def test_a_quantized_copy_is_sized_from_the_catalog_and_its_name_on_the_gpu_the_reporter_names() -> None:
    s = setup_of(SGLANG_GPTQ_ON_A_4090)
    assert s.weights is not None and s.device is not None
    assert s.weights.model.source == "the catalog's Qwen/Qwen3-30B-A3B"
    assert s.weights.model.precision.startswith("4-bit (gptq)")
    assert s.device.source == "the GPU the report names" and s.device.name == "4090"
    assert 23.5 * GiB < s.device.total < 24.5 * GiB
    assert s.weights.describe().startswith(
        "Qwen3-30B-A3B-GPTQ-Int4: about 16 GiB of weights per GPU on a 24 GiB device (4090)"
    )
    # 16 GiB of weights is more than SGLang's 0.6 of 24 GiB: the weights, first.
    assert diagnose(read(SGLANG_GPTQ_ON_A_4090)).causes[0].cls == "weights-dont-fit"
    (line,) = weights_lines(SGLANG_GPTQ_ON_A_4090)
    assert line.startswith("+ ") and line.endswith("more than the engine may use (mem_fraction_static=0.6)")
    # At 0.9 the same weights leave 5.6 GiB: nothing says the weights.
    roomy = SGLANG_GPTQ_ON_A_4090.replace("--mem-fraction-static 0.6", "--mem-fraction-static 0.9")
    assert not [w for w in weights_lines(roomy) if w.startswith("+")]


def test_a_model_parallel_torchrun_splits_the_catalogs_checkpoint_over_its_ranks() -> None:
    s = setup_of(DEEPSEEK_DEMO_ON_A6000S)
    assert s.weights is not None and s.device is not None
    assert s.weights.split.ranks == 16 and s.weights.split.stated
    assert s.weights.model.source == "the catalog's deepseek-ai/DeepSeek-V3"
    assert s.gpus_named == 8 and s.device.name == "A6000"
    assert 39 * GiB < s.weights.bytes < 42 * GiB  # 684B parameters in FP8 over 16
    assert diagnose(read(DEEPSEEK_DEMO_ON_A6000S)).causes[0].cls == "weights-dont-fit"


def test_a_wrappers_one_line_command_gives_the_model_and_the_split() -> None:
    s = setup_of(FASTCHAT_WORKER_TP2)
    assert s.model == "/usr/src/app/model/qwen/Qwen-14B-Chat-Int8"
    assert s.flag("tensor_parallel_size") == "2"
    assert s.weights is not None and s.weights.split.ranks == 2
    assert s.weights.model.precision == "8-bit (int8) in its name"
    assert s.device is not None and s.device.source == "the allocator message"
    assert round(s.device.total / GiB, 2) == 11.77


def test_a_config_dict_and_gpus_in_words() -> None:
    ev = read(MII_EIGHT_GPUS)
    s = recover_setup(ev)
    assert s.flag("tensor_parallel_size") == "8" and s.flag("dtype") == "fp16"
    assert [d.count for d in ev.of(DeviceNamed)] == [8]
    assert s.device is not None and round(s.device.total / GiB) == 23
    # Several models named: the largest is the one sized (the smaller ones are what worked).
    assert {m.name for m in ev.of(ModelNamed)} >= {"bloom-560m", "bloom-7b1", "EleutherAI/gpt-neox-20b"}
    assert s.weights is not None and s.weights.model.name == "gpt-neox-20b"


def test_a_pipeline_called_with_a_variable_takes_the_string_assigned_to_it() -> None:
    ev = read(LMDEPLOY_PIPELINE_OF_A_VARIABLE)
    models = {dict(f.flags).get("model") for f in ev.of(Flags) if f.origin == "code"}
    assert models == {"/media/star/disk2/pretrained_model/InternVL2-40B"}
    s = recover_setup(ev)
    assert s.weights is not None and s.weights.model.source == "the size in its name"
    assert 74 * GiB < s.weights.bytes < 75 * GiB  # 40B in 16 bits on one GPU: it fills even an 80 GB one
    (line,) = weights_lines(LMDEPLOY_PIPELINE_OF_A_VARIABLE)
    assert line.startswith("+ InternVL2-40B: about 75 GiB") and line.endswith(
        "they fill even an 80 GB device"
    )


def test_a_small_model_for_its_devices_argues_against_the_weights() -> None:
    s = setup_of(VISION_11B_TP4)
    assert s.weights is not None and s.weights.split.ranks == 4
    (line,) = weights_lines(VISION_11B_TP4)
    assert line.startswith("- Llama-3.2-11B-Vision-Instruct: about 5.1 GiB of weights per GPU on a 79 GiB")
    assert line.endswith("they fit with room to spare")
    assert "weights-dont-fit" not in [c.cls for c in diagnose(read(VISION_11B_TP4)).causes][:3]


def test_a_model_named_with_no_command_and_no_gpus_says_nothing_of_the_weights() -> None:
    s = setup_of(TWO_MODELS_NO_SETUP)
    assert s.weights is not None and not s.weights.split.stated  # 49B, sized, but on how many GPUs?
    assert weights_lines(TWO_MODELS_NO_SETUP) == []


def test_an_error_that_names_flags_is_no_command() -> None:
    assert command_flags(LOAD_FAILED_NAMING_FLAGS.split("] ", 1)[1]) == {}
    s = setup_of(LOAD_FAILED_NAMING_FLAGS)
    assert "gpu_memory_utilization" not in s.flags and "tensor_parallel_size" not in s.flags


def test_launch_commands_of_other_engines() -> None:
    # TGI's launcher (docs: text-generation-launcher --help), LMDeploy's and ollama's positional model,
    # llama.cpp's model file, vLLM's -tp.
    assert command_flags("text-generation-launcher --model-id tiiuae/falcon-40b --num-shard 2") == {
        "model_id": "tiiuae/falcon-40b",
        "num_shard": "2",
    }
    assert command_flags("lmdeploy serve api_server internlm/internlm2_5-7b-chat --tp 2")["model"] == (
        "internlm/internlm2_5-7b-chat"
    )
    assert command_flags("ollama run llama3.1:70b")["model"] == "llama3.1:70b"
    assert command_flags("./llama-server -m models/Qwen3-32B-Q4_K_M.gguf -c 8192")["model"] == (
        "models/Qwen3-32B-Q4_K_M.gguf"
    )
    assert command_flags("python -m sglang_router.launch_server -tp 4")["tensor_parallel_size"] == "4"
    assert "model" not in command_flags("python -m vllm_worker_module --port 8000")


def test_gpus_and_models_in_words() -> None:
    assert [(w, c) for w, _, _, c in gpus_named("我的服务器是8*A6000(48G),请问")] == [("A6000", 8)]
    ((written, gpu, total, count),) = gpus_named("2x H100 NVL 94GB with TP=2")
    assert (written, count) == ("H100 NVL", 2) and gpu is not None and gpu.key == "h100-nvl-94gb"
    ((written, gpu, total, count),) = gpus_named("on a GTX 1650 4GB laptop")
    assert gpu is None and total == 4 * GiB  # not in the GPU table: the size written beside it
    assert gpus_named("A100 alone could be either size") == [("A100", None, None, None)]
    assert models_named("I serve the Qwen3-30B-A3B-GPTQ-Int4 model") == ["Qwen3-30B-A3B-GPTQ-Int4"]
    assert models_named("we run llama3.3 70B on it") == ["llama3.3-70B"]
    assert models_named("a release-2024 build with cuda-12 drivers") == []


def test_model_sizes_from_the_catalog_first_then_the_name() -> None:
    scout = model_size("meta-llama/Llama-4-Scout-17B-16E-Instruct", {})
    assert scout is not None and 105e9 < scout.params < 112e9  # 109B in total, not the 17B active
    assert params_in_name("Qwen3-30B-A3B") == 30e9
    assert params_in_name("Mixtral-8x7B") == 8 * 7e9 * 0.83
    assert params_in_name("bloom-7b1") == 7.1e9
    entry = catalog_match("DeepSeek-V3-0324")
    assert entry is not None and entry.id == "deepseek-ai/DeepSeek-V3"
    entry = catalog_match("/data/models/Qwen/Qwen3-8B/")
    assert entry is not None and entry.id == "Qwen/Qwen3-8B"
    assert catalog_match("phi-4-multimodal-instruct") is None  # another model than phi-4
    gguf = model_size("Qwen3-32B-Q4_K_M.gguf", {})
    assert gguf is not None and gguf.precision.startswith("GGUF q4_k_m")
    bnb = model_size("meta-llama/Llama-3.1-70B-Instruct", {"load_in_4bit": "True"})
    assert bnb is not None and bnb.precision == "4-bit (load_in_4bit)" and bnb.bytes < 45 * GiB


# https://github.com/vllm-project/vllm/issues/8731: a 32B model over four 40 GB GPUs (vLLM's `-tp`), a
# 1,000-token context, a draft model beside it.
SPEC_DECODE_TP4 = (
    "CUDA_VISIBLE_DEVICES=0,1,2,3 python -m vllm.entrypoints.openai.api_server --host 0.0.0.0 --port 9000 "
    "--model Qwen2.5-32B-Instruct -tp 4 --max-model-len 1000 --speculative_model Qwen2.5-7B-Instruct "
    "--use-v2-block-manager --num_speculative_tokens 5  --speculative-max-model-len 1000 "
    "--gpu_memory_utilization 0.9\n"
    "\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 72.00 MiB. GPU 0 has a total capacity of "
    "39.56 GiB of which 60.81 MiB is free. Process 3179876 has 1.62 GiB memory in use. Process 3179877 has "
    "1.62 GiB memory in use. Including non-PyTorch memory, this process has 34.61 GiB memory in use. Process "
    "3179875 has 1.62 GiB memory in use. Of the allocated memory 28.75 GiB is allocated by PyTorch, with "
    "28.60 MiB allocated in private pools (e.g., CUDA Graphs), and 384.74 MiB is reserved by PyTorch but "
    "unallocated."
)


def context_lines(text: str) -> list[str]:
    evidence = read(text)
    tally, _ = score(evidence, recover_setup(evidence))
    return [f"{'+' if c.weight > 0 else '-'} {c.why}" for c in tally.of("max-model-len-exceeds-kv")]


def test_vllms_short_tp_flag_splits_the_weights() -> None:
    s = setup_of(SPEC_DECODE_TP4)
    assert s.flag("tensor_parallel_size") == "4"
    assert s.weights is not None and s.weights.split.ranks == 4
    assert 15 * GiB < s.weights.bytes < 16 * GiB  # 61 GiB of bf16 over four, not all of it on one 40 GB GPU
    assert not [w for w in weights_lines(SPEC_DECODE_TP4) if w.startswith("+")]


def test_the_context_against_the_room_the_weights_leave_uses_the_planners_kv_layout() -> None:
    s = setup_of(SPEC_DECODE_TP4)
    assert s.context is not None and s.context.tokens == 1000
    # Qwen2.5-32B: 64 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 256 KiB a token, a quarter per GPU.
    assert 60 * 1000 * 1024 < s.context.bytes < 70 * 1000 * 1024
    (line,) = context_lines(SPEC_DECODE_TP4)
    assert line.startswith("- max_model_len=1000: one 1,000-token request needs about 0.1 GiB of KV per GPU")
    assert line.endswith("the context fits many times")
    # The same command on two GPUs at 131,072 tokens: 16 GiB of KV per GPU where 5 GiB are left.
    long = SPEC_DECODE_TP4.replace("-tp 4 --max-model-len 1000", "-tp 2 --max-model-len 131072")
    s = setup_of(long)
    assert s.context is not None and 15.5 * GiB < s.context.bytes < 16.5 * GiB
    (line,) = context_lines(long)
    assert (
        line.startswith("+ max_model_len=131072")
        and "gpu_memory_utilization=0.9 leaves about 5.1 GiB" in line
    )


def test_a_hugging_face_cache_directory_names_its_model() -> None:
    # huggingface_hub's cache layout: <cache>/models--{org}--{name}/snapshots/{revision}
    entry = catalog_match(
        "/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B/snapshots/9c925d64d72725edaf899c6"
    )
    assert entry is not None and entry.id == "Qwen/Qwen3-8B"
    # https://github.com/vllm-project/vllm/issues/10517 serves one under a renamed cache directory
    size = model_size("/mnt/models/models--meta-llama--llama-3-1-70b-instruct", {})
    assert size is not None and size.name == "llama-3-1-70b-instruct" and size.params == 70e9


def test_a_tensors_dtype_in_a_tracebacks_code_line_is_not_the_models() -> None:
    # A frame's code line from a PyTorch traceback (torch/nn/modules/module.py), beside a real launch command.
    text = (
        FASTCHAT_WORKER_TP2 + '\n  File "x.py", line 3, in f\n    buf = torch.empty(n, dtype=torch.float)\n'
    )
    s = setup_of(text)
    assert "dtype" not in s.flags
    assert s.weights is not None and s.weights.model.precision == "8-bit (int8) in its name"


def test_budget_share_is_the_logged_vllm_versions_default() -> None:
    """Without a utilization flag the weights are weighed against the budget the logged vLLM version defaults
    to (0.92 from v0.21.0, PR #38284; 0.9 before); a flag wins; another engine gets the common 0.9."""
    from oomguard.diagnosis.rules import _budget_share

    def share(engine: str, version: str | None, **flags: str) -> float:
        return _budget_share(EngineSetup(engine, version, None, None, None, dict(flags)))[0]

    assert share("vllm", "0.23.0") == 0.92
    assert share("vllm", "0.8.5") == 0.9
    assert share("vllm", "0.23.0", gpu_memory_utilization="0.8") == 0.8
    assert share("sglang", "0.4.6") == 0.9
    assert share("vllm", None) == 0.9


# https://github.com/vllm-project/vllm/issues/928: the command quoted in a sentence, closed by a typographic
# quote and Chinese punctuation; the model a hand-named directory with its size joined to the family's word.
QUOTED_IN_A_SENTENCE = (
    "你好，在24G显存 A10上使用“python -m vllm.entrypoints.openai.api_server --model ./baichuan13b_new "
    "--host 0.0.0.0 --port 6000 --trust-remote-code --dtype half”部署，报错：\n"
    "```\n"
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 134.00 MiB (GPU 0; 22.06 GiB total "
    "capacity; 21.64 GiB already allocated; 14.38 MiB free; 21.65 GiB reserved in total by PyTorch) If "
    "reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
    "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n"
    "```\n"
    "这个使用多卡部署的话怎么配置呢\n"
)


def test_a_command_quoted_in_a_sentence_ends_at_its_closing_quote() -> None:
    setup = recover_setup(read(QUOTED_IN_A_SENTENCE))
    assert setup.flag("dtype") == "half"
    assert diagnose(read(QUOTED_IN_A_SENTENCE)).causes[0].cls == "weights-dont-fit"


def test_a_size_joined_to_its_familys_word_is_the_size() -> None:
    assert params_in_name("./baichuan13b_new") == 13e9
    assert params_in_name("chatglm6b") == 6e9
    assert params_in_name("/data/llama2_7b") == 7e9
    # a family's version alone, or a hash that happens to end in digits and a b, is no size
    assert params_in_name("phi3") is None
    assert params_in_name("sha256-7ec0c94a95cafef2780d00679e83f172ac343bc828ae2b") is None


def test_a_size_joined_to_the_part_by_a_hyphen_is_its_size() -> None:
    # https://github.com/vllm-project/vllm/issues/882: "my current node is 8 A100-40Gs"
    ((written, gpu, _, count),) = gpus_named("my current node is 8 A100-40Gs. so it's causing OOM.")
    assert (written, count) == ("A100", 8) and gpu is not None and gpu.key == "a100-sxm-40gb"
    ((_, gpu, _, _),) = gpus_named("Tested on A100-80GB")
    assert gpu is not None and gpu.key == "a100-sxm-80gb"
    assert gpus_named("an a100-foo build") == []  # a hyphen before a word is no size


def test_a_cloud_instance_names_its_gpu() -> None:
    # https://github.com/MeetKai/functionary/issues/61: "run this on a AWS instance g4dn.xlarge instance"
    ((written, gpu, _, _),) = gpus_named("I'm trying to run this on a AWS instance g4dn.xlarge instance")
    assert written == "g4dn.xlarge" and gpu is not None and gpu.key == "t4-16gb"
    ((_, gpu, _, _),) = gpus_named("a GCP a2-ultragpu-8g node")
    assert gpu is not None and gpu.key == "a100-sxm-80gb"
    assert gpus_named("fixed in version g5.1 of the chart") == []  # no instance size, no instance


# https://github.com/MeetKai/functionary/issues/61: a 7B model in fp32 (--dtype float) on that T4.
FP32_ON_A_T4 = (
    "I'm trying to run this on a AWS instance g4dn.xlarge instance (trying with different parameters)\n"
    'python3 server_vllm.py --model "meetkai/functionary-7b-v1.4" --host 0.0.0.0 --dtype float '
    "--gpu-memory-utilization .5 --block-size 8\n"
    "INFO 11-26 12:46:09 llm_engine.py:72] Initializing an LLM engine with config: "
    "model='meetkai/functionary-7b-v1.4', tokenizer='meetkai/functionary-7b-v1.4', tokenizer_mode=auto, "
    "revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.float32, "
    "max_seq_len=32768, download_dir=None, load_format=auto, tensor_parallel_size=1, quantization=None, "
    "seed=0)\n"
    "Traceback (most recent call last):\n"
    '  File "/home/ubuntu/functionary/server_vllm.py", line 362, in <module>\n'
    "    engine = AsyncLLMEngine.from_engine_args(engine_args)\n"
)


def test_weights_larger_than_the_instances_gpu_do_not_fit() -> None:
    assert diagnose(read(FP32_ON_A_T4)).causes[0].cls == "weights-dont-fit"
