"""Each cause class from realistic evidence written in the real formats (vLLM V0/V1, SGLang, PyTorch, kernel,
kubectl, nvidia-smi), and the report's structure."""

from __future__ import annotations

from tests.diagnosis.conftest import classes, top

V1 = "(EngineCore_DP0 pid=312) "
OOM_RUNTIME = (
    V1 + "INFO 10-14 17:00:05 [gpu_worker.py:563] Available KV cache memory: 56.61 GiB\n"
    "(APIServer pid=1) INFO 10-14 17:02:38 [loggers.py:123] Engine 000: Avg prompt throughput: 9000.0 "
    "tokens/s, Avg "
    "generation throughput: 80.1 tokens/s, Running: 9 reqs, Waiting: 0 reqs, GPU KV cache usage: 13.2%, "
    "Prefix cache "
    "hit rate: 0.0%\n"
    + V1
    + "ERROR 10-14 17:02:40 [dump_input.py:69] Dumping scheduler output for model execution: SchedulerOutput("
    "num_scheduled_tokens={'a': 31344, 'b': 4, 'c': 8, 'd': 9, 'e': 10, 'f': 1352, 'g': 12, 'h': 29}, "
    "total_num_scheduled_tokens=32768)\n"
    + V1
    + "ERROR 10-14 17:02:40 [core.py:851] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.78 GiB. "  # noqa: E501
    "GPU 1 has a total capacity of 139.80 GiB of which 3.91 GiB is free. Including non-PyTorch memory, this "
    "process "
    "has 135.88 GiB memory in use. Of the allocated memory 130.1 GiB is allocated by PyTorch, and 1.2 GiB is "
    "reserved "
    "by PyTorch but unallocated.\n"
)


def test_padded_mixed_length_step_at_low_kv_usage_is_an_activation_peak(run_diagnose):
    code, result, _ = run_diagnose(OOM_RUNTIME)
    assert code == 0
    assert top(result) == "activation-peak"
    fixes = " ".join(f["summary"] for f in result["causes"][0]["fixes"])
    assert "--max-num-batched-tokens 8192" in fixes and "31,344" in fixes
    assert "kv-exhaustion-at-runtime" not in classes(result, 2)


def test_each_evidence_line_names_its_source_and_line(run_diagnose):
    _, result, _ = run_diagnose(OOM_RUNTIME)
    wheres = [e["where"] for e in result["causes"][0]["evidence"]]
    assert wheres and all(w.rsplit(":", 1)[1].isdigit() for w in wheres)


def test_kv_full_with_waiting_requests_is_kv_exhaustion(run_diagnose):
    lines = "".join(
        f"(APIServer pid=1) INFO 07-28 06:4{i}:59 [loggers.py:118] Engine 000: Avg prompt throughput: 10.0 "
        "tokens/s, "
        f"Avg generation throughput: 239.2 tokens/s, Running: 64 reqs, Waiting: {i * 7} reqs, Preemptions: "
        f"{i}, GPU KV "
        f"cache usage: {93 + i}.0%, Prefix cache hit rate: 0.0%\n"
        for i in range(4)
    )
    _, result, _ = run_diagnose(lines)
    assert top(result) == "kv-exhaustion-at-runtime"


def test_free_memory_below_utilization_is_another_process_with_the_utilization_that_fits(run_diagnose):
    text = (
        "(EngineCore pid=79) ValueError: Free memory on device cuda:0 (22.76/24.0 GiB) on startup is less "
        "than "
        "desired GPU memory utilization (0.97, 23.28 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory "
        "used by other processes.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "other-process-or-shared-gpu"
    flags = [f["flags"] for f in result["causes"][0]["fixes"]]
    assert {"gpu_memory_utilization": "0.94"} in flags  # floor(22.76 / 24.0, 2 digits) minus rounding margin


def test_max_seq_len_error_gives_vllm_estimated_length(run_diagnose):
    text = (
        "(EngineCore_DP0 pid=1094) ValueError: To serve at least one request with the model's max seq len "
        "(262144), "
        "(24.0 GiB KV cache is needed, which is larger than the available KV cache memory (3.18 GiB). Based "
        "on the "
        "available memory, the estimated maximum model length is 34736. Try increasing "
        "`gpu_memory_utilization`\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "max-model-len-exceeds-kv"
    assert {"max_model_len": "34736"} in [f["flags"] for f in result["causes"][0]["fixes"]]


def test_oom_while_creating_weights_is_weights_dont_fit(run_diagnose):
    text = (
        '[rank0]:   File "/x/vllm/model_executor/models/llama.py", line 400, in __init__\n'
        "[rank0]:     self.lm_head = ParallelLMHead(\n"
        '[rank0]:   File "/x/vllm/model_executor/layers/vocab_parallel_embedding.py", line 28, in '
        "create_weights\n"
        "[rank0]:     weight = Parameter(torch.empty(sum(output_partition_sizes),\n"
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1002.00 MiB. GPU 0 has a "
        "total capacity "
        "of 15.59 GiB of which 940.12 MiB is free. Including non-PyTorch memory, this process has 14.30 GiB "
        "memory in "
        "use. Of the allocated memory 14.01 GiB is allocated by PyTorch, and 15.49 MiB is reserved by "
        "PyTorch but "
        "unallocated.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "weights-dont-fit"
    against = result["causes"][0]
    assert result["phase"] == "startup-weights"
    assert against["fixes"][0]["flags"].get("tensor_parallel_size") == "2"


def test_large_reserved_but_unallocated_is_fragmentation(run_diagnose):
    text = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
        "of "
        "79.19 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.6 GiB memory "
        "in "
        "use. Of the allocated memory 69.1 GiB is allocated by PyTorch, and 7.90 GiB is reserved by PyTorch "
        "but "
        "unallocated.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "fragmentation"


def test_sampler_warmup_message_is_sampler_with_fewer_rows(run_diagnose):
    text = (
        "ERROR 03-20 02:29:07 [core.py:340] RuntimeError: CUDA out of memory occurred when warming up "
        "sampler with "
        "1024 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when "
        "initializing the "
        "engine.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "sampler-or-logits"
    assert {"max_num_seqs": "256"} in [f["flags"] for f in result["causes"][0]["fixes"]]


def test_log_stopping_during_capture_after_kv_sizing_is_cuda_graph(run_diagnose):
    text = (
        "INFO 08-19 07:51:03 model_runner.py:732] Loading model weights took 2.3463 GB\n"
        "INFO 08-19 07:51:08 distributed_gpu_executor.py:56] # GPU blocks: 22982, # CPU blocks: 6241\n"
        "INFO 08-19 07:51:12 model_runner.py:1024] Capturing the model for CUDA graphs. This may lead to "
        "unexpected "
        "consequences if the model is not static.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "cuda-graph-capture"


def test_deepep_failure_is_ep_all2all(run_diagnose):
    text = (
        '(Worker_TP1_EP1 pid=9) ERROR 01-02 03:04:05 [multiproc_executor.py:1] File "/x/vllm/distributed/'
        'device_communicators/all2all.py", line 210, in get_handle\n'
        "(Worker_TP1_EP1 pid=9) ERROR 01-02 03:04:05 [multiproc_executor.py:1] RuntimeError: DeepEP error: "
        "deep_ep.cpp:230 'invalid argument'\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "ep-all2all-buffer"


def test_dp_ranks_with_different_pools_is_dp_accounting(run_diagnose):
    text = "".join(
        f"(EngineCore_DP{i} pid={100 + i}) INFO 01-01 00:00:0{i} [kv_cache_utils.py:2464] GPU KV cache size: "
        f"{400000 - i * 30000:,} tokens, Maximum concurrency for 8,192 tokens per request: 48.0x\n"
        for i in range(4)
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "dp-replica-kv-accounting"
    assert len(result["causes"][0]["evidence"]) >= 2  # the differing ranks are quoted


def test_kubectl_oomkilled_and_dmesg_is_host_ram(run_diagnose):
    describe = (
        "    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137\n"
        "    Restart Count:  4\n    Limits:\n      memory:          64Gi\n      nvidia.com/gpu:  1\n"
    )
    dmesg = (
        "[Sun Nov 29 08:00:01 2026] Memory cgroup out of memory: Killed process 4242 (python3) "
        "total-vm:90000000kB, "
        "anon-rss:66000000kB, file-rss:0kB, shmem-rss:0kB\n"
    )
    _, result, _ = run_diagnose(describe, dmesg)
    assert top(result) == "host-ram-oom"
    assert any(m["item"] == "container memory limit" for m in result["memory"])


def test_nvidia_smi_with_a_second_process_is_shared_gpu(run_diagnose):
    smi = "pid, process_name, used_gpu_memory [MiB]\n1234, python3, 60000 MiB\n5678, /usr/bin/trainer, 18000 MiB\n"  # noqa: E501
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total "
        "capacity of "
        "79.19 GiB of which 100.00 MiB is free.\n"
    )
    _, result, _ = run_diagnose(smi, oom, names=("smi.csv", "server.log"))
    assert top(result) == "other-process-or-shared-gpu"


def test_canuse32bit_is_int32_overflow(run_diagnose):
    text = "RuntimeError: Expected canUse32BitIndexMath(input) && canUse32BitIndexMath(output) to be true, but got false.\n"  # noqa: E501
    _, result, _ = run_diagnose(text)
    assert top(result) == "int32-index-overflow"


def test_multimodal_profile_failure_is_encoder(run_diagnose):
    text = (
        "INFO 11-22 07:19:26 model_runner.py:1067] Loading model weights took 19.9073 GB\n"
        "INFO 11-22 07:19:26 enc_dec_model_runner.py:301] Starting profile run for multi-modal models.\n"
        '[rank0]:   File "/x/vllm/worker/enc_dec_model_runner.py", line 310, in profile_run\n'
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.00 GiB. GPU 0 has a total "
        "capacity of 44.53 GiB of which 3.10 GiB is free.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "multimodal-encoder"


def test_rss_rising_in_every_scrape_is_a_leak(run_diagnose):
    scrapes = "".join(
        f"# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {v}e9\n"
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} 0.2\n'
        for v in (20, 26, 33, 41, 52)
    )
    _, result, _ = run_diagnose(scrapes, names=("metrics.prom",))
    assert top(result) == "memory-leak"


def test_json_has_causes_with_class_confidence_evidence_fixes_and_setup(run_diagnose):
    text = (
        "(APIServer pid=1) INFO 06-01 09:20:16 [utils.py:278] non-default args: {'model': "
        "'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 131072, 'tensor_parallel_size': 1}\n"
        "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can "
        "be "
        "stored in KV cache (90000). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`\n"
    )
    _, result, _ = run_diagnose(text)
    cause = result["causes"][0]
    assert set(cause) >= {"class", "confidence", "evidence", "fixes", "does_not_help", "verify"}
    assert result["setup"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert result["setup"]["flags"]["max_model_len"] == "131072"
    confidences = [c["confidence"] for c in result["causes"]]
    assert confidences == sorted(confidences, reverse=True)


def test_markdown_and_terminal_renderings(run_diagnose):
    code, md, _ = run_diagnose(OOM_RUNTIME, args=("--markdown",))
    assert code == 0 and md.startswith("## oomguard diagnose") and "### 1. `activation-peak`" in md
    code, text, _ = run_diagnose(OOM_RUNTIME, args=())
    assert code == 0 and text.startswith("Most likely: activation-peak")
