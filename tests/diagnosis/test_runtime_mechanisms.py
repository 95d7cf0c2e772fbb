"""The runtime classes that are not the default, by their mechanism (issue 8): the vocabulary-wide tensors
(logits, log-softmax, logprobs, entropy) in engines and in the RL trainers that wrap them. Texts are real,
pasted as in the cited public threads or engine sources; each mechanism is checked against a near miss of
another class."""

from __future__ import annotations

import io

from tests.diagnosis.pasted import ranked, read

from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.evidence import Evidence, Frame, OomMessage, Signal, StartupNumber, Where
from oomguard.diagnosis.read import read_one
from oomguard.diagnosis.rules import Tally, frame_category, logits_frame, logits_rows, score
from oomguard.diagnosis.setup import recover_setup
from oomguard.units import MiB

# https://github.com/THUDM/slime/issues/1450: slime's SFT loss computing log-probs over the whole vocabulary
# (Megatron's vocab-parallel cross entropy) for an untruncated sequence; the stack as the issue pastes it.
SLIME_LOG_PROBS = """\
  File "/root/Megatron-LM/megatron/core/pipeline_parallel/schedules.py", line 248, in forward_step_calc_loss
    outputs = loss_func(output_tensor)
              ^^^^^^^^^^^^^^^^^^^^^^^^
  File "/mnt/workspace/qingyu/slime/slime/backends/megatron_utils/loss.py", line 823, in loss_function
    loss, log = func(args, batch, logits, sum_of_sample_mean)
                ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/mnt/workspace/qingyu/slime/slime/backends/megatron_utils/loss.py", line 741, in sft_loss_function
    log_probs_and_entropy = get_log_probs_and_entropy(
                            ^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/mnt/workspace/qingyu/slime/slime/backends/megatron_utils/loss.py", line 156, in get_log_probs_and_entropy
    log_prob, entropy = calculate_log_probs_and_entropy(
                        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/mnt/workspace/qingyu/slime/slime/utils/ppo_utils.py", line 672, in calculate_log_probs_and_entropy
    log_prob = compute_log_probs(logits.clone(), tokens, tp_group)
               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/mnt/workspace/qingyu/slime/slime/utils/ppo_utils.py", line 158, in compute_log_probs
    return -fused_vocab_parallel_cross_entropy(logits, tokens, process_group)
"""  # noqa: E501

# https://github.com/verl-project/verl/issues/2828: verl's actor computing the entropy of the logits (the
# innermost frame's code is the logsumexp over them).
VERL_ENTROPY = """\
  File "/verl/verl/workers/actor/dp_actor.py", line 266, in _forward_micro_batch
    entropy = verl_F.entropy_from_logits(logits)  # (bsz, response_length)
  File "/verl/verl/utils/torch_functional.py", line 148, in entropy_from_logits
    entropy = torch.logsumexp(logits, dim=-1) - torch.sum(pd * logits, dim=-1)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 13.91 GiB. GPU 0 has a total capacity of 79.11 GiB \
of which 8.85 GiB is free. Process 23444 has 70.25 GiB memory in use. Of the allocated memory 60.49 GiB is \
allocated by PyTorch, and 6.77 GiB is reserved by PyTorch but unallocated.
"""  # noqa: E501

# https://github.com/sgl-project/sglang/pull/1498 (near miss): the attention backend's own "attn_logits"
# buffer for CUDA graphs is the attention's scores, not the vocabulary's logits.
SGLANG_ATTN_LOGITS = """\
  File "/opt/tiger/sglang/python/sglang/srt/model_executor/model_runner.py", line 504, in init_cuda_graphs
    self.cuda_graph_runner = CudaGraphRunner(self)
                             ^^^^^^^^^^^^^^^^^^^^^
  File "/opt/tiger/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 143, in __init__
    self.model_runner.attn_backend.init_cuda_graph_state(self.max_num_token)
  File "/opt/tiger/sglang/python/sglang/srt/layers/attention/triton_backend.py", line 72, in init_cuda_graph_state
    self.cuda_graph_attn_logits = torch.empty(
                                  ^^^^^^^^^^^^
torch.OutOfMemoryError: CUDA out of memory.
"""  # noqa: E501

# https://github.com/sgl-project/sglang/issues/9540: the reporter names the logits' fp32 cast as the site.
SGLANG_LOGITS_PROSE = (
    "Occasionally an OOM can occur inside `LogitsProcessor` where the logits are casted to fp32. This tends "
    "to occur after a few steps of RL, depending on the initial `mem_fraction_static`, due to an increase in "
    "the overall GPU memory usage during RL training."
)
# llama.cpp src/llama-context.cpp (llama_output_reserve, b4500+): the logits output buffer's failure, as
# its LLAMA_LOG_ERROR format prints it.
LLAMA_OUTPUT_BUFFER = "llama_output_reserve: failed to allocate output buffer of size 1187.50 MiB\n"
# A vLLM v0.11.0 engine log of a verl run (Qwen2.5-Math-1.5B): the sampler warm-up's logits are
# 1024 x 151,936 x fp32 = 593.50 MiB, which PyTorch's allocator rounds up to a 2 MiB block in its message.
VLLM_594_MIB = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 594.00 MiB. GPU 0 has a total capacity of "
    "79.33 GiB of which 508.44 MiB is free."
)


def test_trainer_log_probs_over_the_vocabulary_are_the_logits():
    assert ranked(SLIME_LOG_PROBS)[0] == "sampler-or-logits"


def test_the_innermost_call_on_the_logits_is_the_logits():
    assert ranked(VERL_ENTROPY)[0] == "sampler-or-logits"


def test_the_attentions_logits_are_not_the_vocabulary():
    causes = ranked(SGLANG_ATTN_LOGITS)
    assert causes[0] == "cuda-graph-capture"
    assert causes[0] != "sampler-or-logits"


def test_a_router_logits_argument_is_no_logits_frame():
    # vLLM v0.8 vllm/model_executor/layers/fused_moe/layer.py, FusedMoE.forward_impl: the router's logits.
    moe = Frame(
        where=Where("x", 1),
        text="",
        path="/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/fused_moe/layer.py",
        lineno=1203,
        function="forward_impl",
        code=(
            "final_hidden_states = self.quant_method.apply(layer=self, x=hidden_states, "
            "router_logits=router_logits,"
        ),
    )
    verl = Frame(
        where=Where("x", 1),
        text="",
        path="/verl/verl/utils/torch_functional.py",
        lineno=148,
        function="entropy_from_logits",
    )
    assert frame_category(moe) != "sampler" and not logits_frame(moe, 0)
    assert logits_frame(verl, 0)
    # verl's worker method (https://github.com/verl-project/verl/issues/2828's stack) runs the whole actor
    # forward: next to the allocation it is the log-probs, far above it its name says nothing.
    worker = Frame(
        where=Where("x", 1),
        text="",
        path="/verl/verl/workers/fsdp_workers.py",
        lineno=782,
        function="compute_log_prob",
    )
    assert logits_frame(worker, 3)
    assert not logits_frame(worker, 12)


def test_the_reporter_naming_the_logits_cast_is_the_logits():
    assert ranked(SGLANG_LOGITS_PROSE)[0] == "sampler-or-logits"


def test_llama_cpp_output_buffer_is_the_logits():
    assert ranked(LLAMA_OUTPUT_BUFFER)[0] == "sampler-or-logits"


def test_a_logits_size_is_only_claimed_where_the_rounding_can_tell():
    # PyTorch's 2 MiB block rounding is coarser than a row of a 151,936-word vocabulary: no claim either way.
    assert logits_rows(594 * MiB, "torch", 151936, 1) is None
    # Exact bytes (an engine's own message) for 96 rows x 151,936 x 2 bytes are recognised, 40 kB off are not.
    assert logits_rows(96 * 151936 * 2, "engine", 151936, 1) == (96, 151936)
    assert logits_rows(96 * 151936 * 2 + 40000, "engine", 151936, 1) is None
    assert ranked(VLLM_594_MIB)[0] != "sampler-or-logits"


# Tenstorrent's bank allocator (tenstorrent/tt-metal tt_metal/impl/allocator/bank_manager.cpp), as public
# tt-xla model bring-up reports paste it: each of 8 DRAM banks needs 40 MiB, 72.9 MiB is free per bank, its
# largest free block is 35.3 MiB: the bank in pieces.
TT_BANK_IN_PIECES = """\
RuntimeError: TT_FATAL @ bank_manager.cpp:439: false
Out of Memory: Not enough space to allocate 335544320 B DRAM buffer across 8 banks,
where each bank needs to store 41943040 B, but bank size is 4273390016 B
(allocated: 4196976832 B, free: 76413184 B, largest free block: 37030336 B)
"""
# The same allocator with less free than the share (near miss): a bank that is full, not in pieces.
TT_BANK_FULL = (
    "TT_FATAL: Out of Memory: Not enough space to allocate 1061683200 B DRAM buffer across 8 banks, "
    "where each bank needs to store 132710400 B, but bank size is 4273390016 B (allocated: 4221954688 B, "
    "free: 51435328 B, largest free block: 45589184 B)\n"
)
# XLA's TPU allocator in a JAX run, the message wrapped where it was pasted: 5.94M asked, 4.20M free.
XLA_WRAPPED_FULL = """\
RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 5.94M.
That was not possible. There are 4.20M free.
"""


def test_a_bank_with_the_bytes_free_in_pieces_is_fragmentation():
    assert ranked(TT_BANK_IN_PIECES)[0] == "fragmentation"


def test_a_full_bank_is_not_fragmentation():
    causes = diagnose(read(TT_BANK_FULL)).causes
    assert causes[0].cls != "fragmentation"
    # No rule evidence for fragmentation (the learned prior may still list it: "from similar reports").
    assert all(c.from_prior for c in causes if c.cls == "fragmentation")


def test_an_xla_message_wrapped_over_lines_gives_its_free_memory():
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(XLA_WRAPPED_FULL.encode()), evidence)
    (oom,) = evidence.of(OomMessage)
    assert oom.requested == round(5.94 * MiB)
    assert oom.free == round(4.20 * MiB)
    assert ranked(XLA_WRAPPED_FULL)[0] != "fragmentation"


# https://github.com/Haoming02/sd-webui-forge-classic/issues/1049: expandable segments ended the OOMs ("never
# got OOM again" is the outcome, levers_tried.py).
EXPANDABLE_FIXED = (
    "had the same issue. so I edited webui.sh to export PYTORCH_ALLOC_CONF=expandable_segments:True before "
    "executing launch.py, and never got OOM again"
)
# https://github.com/vllm-project/vllm-omni/issues/3236 (near miss): the allocator's own advice names
# expandable segments in every message, wrapped onto a line of its own here; the advice is no statement (the
# message's numbers are what the allocator rule reads).
EXPANDABLE_ADVICE = (
    "vllm.v1.engine.exceptions.EngineGenerateError: CUDA out of memory. Tried to allocate 5.84 GiB. "
    "GPU 0 has a total capacity of 79.18 GiB of which 5.09 GiB is free. Including non-PyTorch memory, "
    "this process has 74.08 GiB memory in use. Of the allocated memory 64.70 GiB is allocated by "
    "PyTorch, and 7.60 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory "
    "is large try setting \n"
    "PYTORCH_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
    "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
)


def test_expandable_segments_ending_the_ooms_is_fragmentation():
    assert ranked(EXPANDABLE_FIXED)[0] == "fragmentation"


def test_the_allocators_advice_is_no_statement():
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(EXPANDABLE_ADVICE.encode()), evidence)
    assert not [s for s in evidence.of(Signal) if s.name == "prose-fragmentation"]


# https://github.com/GeeeekExplorer/nano-vllm/pull/275: each rank sized its KV pool from its own free memory;
# the counts as the PR lists them.
RANK_BLOCKS = """\
In our multi-GPU reproduction, the calculated capacities were:

- Rank 0: 2111 blocks
- Rank 1: 2055 blocks
"""
# vLLM v0.11.0's parallel_state line (near miss): ranks named, no KV count.
RANKS_NO_COUNT = (
    "(EngineCore_DP0 pid=39535) INFO 03-03 19:33:23 [parallel_state.py:1208] rank 0 in world size 1 is "
    "assigned as DP rank 0, PP rank 0, TP rank 0, EP rank 0\n"
)
# https://github.com/GeeeekExplorer/nano-vllm/pull/259: the mechanism in the PR's words, block counts named
# through the variable that holds them.
RANKS_DIFFER_PROSE = (
    "Under tensor parallelism, `allocate_kv_cache()` on each rank computes `config.num_kvcache_blocks` from "
    "that rank's own local GPU memory state (`torch.cuda.mem_get_info()` plus peak/current allocator stats). "
    "Because free memory can differ between ranks, the value can be different on each rank."
)
# https://github.com/vllm-project/vllm/pull/55579: the expert workspace sized per dispatching rank, twice.
EP_DISPATCHERS = (
    "Batched CUTLASS receives one token buffer per local expert. Its `M` dimension is already the total "
    "token capacity from all dispatch ranks:\n\n"
    "`M = max_tokens_per_rank * num_dispatchers`\n\n"
    "The kernels reserve M token slots per expert, but workspace sizing multiplied `M` by `num_dispatchers` "
    "again. This counted the dispatch ranks twice and allocated memory that the kernels never use.\n"
)


def test_per_rank_block_counts_that_differ_are_the_replicas_accounting():
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(RANK_BLOCKS.encode()), evidence)
    counts = {n.process_tag: n.value for n in evidence.of(StartupNumber) if n.quantity == "num_gpu_blocks"}
    assert counts == {"rank0": 2111, "rank1": 2055}
    assert ranked(RANK_BLOCKS)[0] == "dp-replica-kv-accounting"


def test_ranks_named_without_a_count_are_no_kv_numbers():
    evidence = Evidence()
    read_one("engine.log", io.BytesIO(RANKS_NO_COUNT.encode()), evidence)
    assert not [n for n in evidence.of(StartupNumber) if n.quantity == "num_gpu_blocks"]


def test_a_kv_count_that_differs_between_ranks_in_words_is_the_replicas_accounting():
    assert ranked(RANKS_DIFFER_PROSE)[0] == "dp-replica-kv-accounting"


def test_buffers_sized_per_dispatching_rank_are_the_all_to_all():
    causes = ranked(EP_DISPATCHERS)
    assert causes[0] == "ep-all2all-buffer"
    assert causes[0] != "dp-replica-kv-accounting"


# https://github.com/vllm-project/vllm/issues/5550: the sampling parameters that turned a working batch into
# an OOM (prompt logprobs over every prompt token).
PROMPT_LOGPROBS_CODE = """\
sampling_params = SamplingParams(
            temperature=0,
            max_tokens=1,
            n=1,
            prompt_logprobs=1,
            spaces_between_special_tokens=False,
        )
"""
# The same call without the option (near miss): nothing asks for the prompt's logprobs.
NO_PROMPT_LOGPROBS_CODE = """\
sampling_params = SamplingParams(
            temperature=0,
            max_tokens=1,
            n=1,
            spaces_between_special_tokens=False,
        )
"""


def _signals(text: str) -> set[str]:
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), evidence)
    return {s.name for s in evidence.of(Signal)}


def test_a_request_for_the_prompts_logprobs_is_read():
    assert "prompt-logprobs-requested" in _signals(PROMPT_LOGPROBS_CODE)
    assert "prompt-logprobs-requested" not in _signals(NO_PROMPT_LOGPROBS_CODE)
    assert ranked(PROMPT_LOGPROBS_CODE + VLLM_594_MIB)[0] == "sampler-or-logits"
    assert ranked(NO_PROMPT_LOGPROBS_CODE + VLLM_594_MIB)[0] != "sampler-or-logits"


# transformers v4.45+ generation/utils.py, GenerationMixin._sample (the line quoted in
# https://github.com/huggingface/transformers/issues/34796, which copies the whole logits before slicing):
# the allocation site is the logits, reached as an attribute of the model's output.
HF_SAMPLE_LOGITS = """\
  File "/usr/local/lib/python3.10/dist-packages/transformers/generation/utils.py", line 3015, in _sample
    next_token_logits = outputs.logits.clone()[:, -1, :].float()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.82 GiB.
"""
# transformers' and LMDeploy's logits processors module (logits_process.py) on the stack.
LOGITS_PROCESS_FRAME = Frame(
    where=Where("x", 1),
    text="",
    path="/usr/local/lib/python3.10/dist-packages/transformers/generation/logits_process.py",
    lineno=470,
    function="__call__",
)


def test_the_logits_as_the_outputs_attribute_are_the_logits():
    assert ranked(HF_SAMPLE_LOGITS)[0] == "sampler-or-logits"
    assert frame_category(LOGITS_PROCESS_FRAME) == "sampler"


# https://github.com/vllm-project/vllm/issues/49475 (near miss): DeepSeek sparse attention's indexer computes
# "logits" of queries against keys (fp8_fp4_paged_mqa_logits) in the kernels' warm-up: attention scores, not
# the vocabulary's logits.
INDEXER_LOGITS = """\
(Worker_TP7_EP7 pid=65033) ERROR 07-31 12:11:49 [multiproc_executor.py:1018] torch.OutOfMemoryError: CUDA \
out of memory. Tried to allocate 28.44 GiB. GPU 7 has a total capacity of 178.34 GiB of which 7.38 GiB is free. \
Including non-PyTorch memory, this process has 170.94 GiB memory in use. Of the allocated memory 165.16 GiB is \
allocated by PyTorch, with 4.27 GiB allocated in private pools (e.g., CUDA Graphs), and 1.70 GiB is reserved by \
PyTorch but unallocated.
(Worker_TP0_EP0 pid=65026) ERROR 07-31 12:11:49 [multiproc_executor.py:1018]     logits = fp8_fp4_paged_mqa_logits(
"""  # noqa: E501
INDEXER_FRAME = Frame(
    where=Where("x", 1),
    text="",
    path="/usr/local/lib/python3.12/dist-packages/deep_gemm/__init__.py",
    lineno=1,
    function="fp8_paged_mqa_logits",
)


def test_the_attention_indexers_logits_are_not_the_vocabulary():
    assert ranked(INDEXER_LOGITS)[0] != "sampler-or-logits"
    assert not logits_frame(INDEXER_FRAME, 0)


# https://github.com/sgl-project/sglang/pull/5634 (near miss): the flag that turns DP attention on, quoted in
# the command, is configuration; the sentence after it names the mechanism (the graph capture size).
DP_ATTENTION_FLAG = (
    "latest main on H200 will hang with cmd `SGL_ENABLE_JIT_DEEPGEMM=1 python3 -m sglang.launch_server "
    "--model /DeepSeek-V3 --tp 8 --trust-remote-code --enable-dp-attention --dp-size 8` and the root cause "
    "is OOM\n\n"
    "And the OOM is cause by large cuda graph capture size\n"
)
# https://github.com/NVIDIA/TensorRT-LLM/pull/10330: attention DP's own KV accounting in words.
DP_ATTENTION_SAID = (
    "For Attention DP, attn_tp_size should effectively be 1. However, the current logic calculates it using "
    "the global TP size (e.g., 8), resulting in smaller number of local attention heads and causing the "
    "system to attempt allocating an excessive number of blocks. So it leads to OOM if config contains "
    "`max_attention_window` explicitly, e.g.,\n"
)


def test_the_dp_attention_flag_in_a_command_is_no_statement():
    assert ranked(DP_ATTENTION_FLAG)[0] == "cuda-graph-capture"
    assert ranked(DP_ATTENTION_SAID)[0] == "dp-replica-kv-accounting"


# https://github.com/vllm-project/vllm/issues/3094: requests go back from Running to Pending under load; the
# stats line has 3 waiting while 2 run, the pool 82% full (no OOM anywhere).
PENDING_ON_A_FULL_POOL = (
    "INFO 02-28 21:48:18 metrics.py:161] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
    "44.9 tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: 82.1%, CPU KV "
    "cache usage: 0.0%\n"
)


def test_requests_waiting_beside_a_few_running_on_a_mostly_full_pool_is_kv_pressure() -> None:
    assert ranked(PENDING_ON_A_FULL_POOL)[0] == "kv-exhaustion-at-runtime"


def test_requests_waiting_beside_a_full_batch_are_not_the_pools() -> None:
    # the same line with 200 running: the cap on running sequences holds the waiting back, whatever the pool
    busy = PENDING_ON_A_FULL_POOL.replace("Running: 2 reqs", "Running: 200 reqs")
    tally_reasons = [c.why for c in _tally(busy).parts.values()]
    assert not any("kept them out" in why for why in tally_reasons)


def _tally(text: str) -> Tally:
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), evidence)
    return score(evidence, recover_setup(evidence))[0]
