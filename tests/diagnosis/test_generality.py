"""Reports not in the dev file: each cause class from evidence in the formats real tools print, across vLLM
versions (V0 `INFO 08-19 07:51:03 model_runner.py:732]`, V1 `(EngineCore_DP0 pid=..)`, V2-runner lines),
SGLang, kernel/systemd/kubectl/cgroup files and /metrics, and from partial evidence (only a traceback,
only kubectl, only metrics). Each names the mechanism that decides it."""

from __future__ import annotations

from tests.diagnosis.conftest import classes, top

V0 = "INFO 11-05 14:02:{s:02d} {file}] "
E1 = "(EngineCore_DP0 pid=2210) ERROR 02-14 09:31:12 [core.py:710] "
W1 = "(VllmWorker rank=1 pid=2291) ERROR 02-14 09:31:12 [multiproc_executor.py:546] "


def torch_oom(
    requested: str,
    total: str,
    free: str,
    this: str = "",
    allocated: str = "",
    reserved: str = "",
    gpu: int = 0,
) -> str:
    text = (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {requested}. GPU {gpu} has a total "
        f"capacity of {total} of which {free} is free."
    )
    if this:
        text += f" Including non-PyTorch memory, this process has {this} memory in use."
    if allocated:
        text += (
            f" Of the allocated memory {allocated} is allocated by PyTorch, and {reserved} is reserved by "
            "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
        )
    return text


def frames(prefix: str, *stack: tuple[str, int, str, str]) -> str:
    out = prefix + "Traceback (most recent call last):\n"
    for path, line, func, code in stack:
        out += (
            f'{prefix}  File "/usr/local/lib/python3.12/dist-packages/vllm/{path}", line {line}, in {func}\n'
        )
        out += f"{prefix}    {code}\n"
    return out


# --- weights ---------------------------------------------------------------------------------------------


def test_v0_traceback_only_oom_while_initializing_the_model_is_weights(run_diagnose):
    text = (
        frames(
            "[rank0]: ",
            (
                "worker/model_runner.py",
                1047,
                "load_model",
                "self.model = get_model(vllm_config=self.vllm_config)",
            ),
            (
                "model_executor/model_loader/loader.py",
                364,
                "load_model",
                "model = _initialize_model(vllm_config=vllm_config)",
            ),
            (
                "model_executor/models/qwen2.py",
                415,
                "__init__",
                "self.model = Qwen2Model(vllm_config=vllm_config,",
            ),
            (
                "model_executor/layers/linear.py",
                380,
                "create_weights",
                "weight = Parameter(torch.empty(sum(output_partition_sizes),",
            ),
        )
        + "[rank0]: "
        + torch_oom("270.00 MiB", "23.64 GiB", "212.81 MiB", "23.42 GiB", "23.11 GiB", "8.35 MiB")
        + "\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "weights-dont-fit"
    assert result["phase"] == "startup-weights"


def test_v2_runner_oom_after_loading_from_scratch_with_no_frames_is_weights(run_diagnose):
    text = (
        "(EngineCore_DP0 pid=88) INFO 11-20 10:00:01 [gpu_model_runner.py:3011] Using V2 Model Runner\n"
        "(EngineCore_DP0 pid=88) INFO 11-20 10:00:02 [gpu_model_runner.py:3051] Loading model from "
        "scratch...\n"
        "(EngineCore_DP0 pid=88) INFO 11-20 10:00:02 [default_loader.py:267] Loading safetensors checkpoint "
        "shards:  43% Completed | 13/30 [00:41<00:54,  3.18s/it]\n"
        + E1
        + torch_oom("896.00 MiB", "79.19 GiB", "512.44 MiB", "78.67 GiB")
        + "\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "weights-dont-fit"


def test_rocm_out_of_resources_while_loading_shards_is_weights(run_diagnose):
    text = (
        "INFO 03-10 08:12:44 [default_loader.py:262] Loading weights took 41.20 seconds\n"
        "Loading safetensors checkpoint shards:  87% Completed | 27/31 [01:12<00:10,  2.71s/it]\n"
        ":0:rocdevice.cpp            :2982: 3341882216 us: [pid:1744 tid:0x7f1e2bfff640] Callback: Queue "
        "0x7f1a3c600000 aborting with error : HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to "
        "allocate "
        "the necessary resources. This error may also occur when the core runtime library needs to spawn "
        "threads or create internal OS-specific events. Available Free mem : 0 MB\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "weights-dont-fit"


# --- KV at startup ---------------------------------------------------------------------------------------


def test_v0_negative_kv_in_the_profiling_summary_is_kv_insufficient(run_diagnose):
    text = (
        V0.format(s=1, file="model_runner.py:1072")
        + "Loading model weights took 37.44 GB\n"
        + V0.format(s=9, file="worker.py:232")
        + "Memory profiling takes 5.21 seconds\n"
        "the current vLLM instance can use total_gpu_memory (44.35GiB) x gpu_memory_utilization (0.90) = "
        "39.91GiB\nmodel weights take 37.44GiB; non_torch_memory takes 0.21GiB; PyTorch activation peak "
        "memory "
        "takes 4.38GiB; the rest of the memory reserved for KV Cache is -2.12GiB.\n"
        "ERROR 11-05 14:02:10 engine.py:366] No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "kv-cache-insufficient-at-startup"
    assert "weights-dont-fit" in classes(result)


def test_sglang_not_enough_memory_after_loading_is_kv_insufficient(run_diagnose):
    text = (
        "[2025-07-02 07:41:40 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail "
        "mem=4.21 "
        "GB, mem usage=61.87 GB.\n"
        "[2025-07-02 07:41:41 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "kv-cache-insufficient-at-startup"


def test_v021_cuda_graph_estimate_far_above_the_budget_left_is_cuda_graph(run_diagnose):
    text = (
        "(EngineCore_DP0 pid=71) INFO 05-02 12:00:10 [gpu_model_runner.py:4512] Model loading took 60.12 GiB "
        "memory and 41.3 seconds\n"
        "(EngineCore_DP0 pid=71) INFO 05-02 12:00:41 [gpu_model_runner.py:5230] Profiling CUDA graph memory: "
        "FULL=67 (largest=512), PIECEWISE=67 (largest=512)\n"
        "(EngineCore_DP0 pid=71) INFO 05-02 12:00:52 [gpu_model_runner.py:5301] Estimated CUDA graph memory: "
        "29.84 GiB total\n"
        "(EngineCore_DP0 pid=71) INFO 05-02 12:00:52 [gpu_worker.py:402] Available KV cache memory: -16.35 "
        "GiB\n"
        + E1
        + "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        "when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
        "for "
        "more details.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "cuda-graph-capture"
    fixes = " ".join(f["summary"] for f in result["causes"][0]["fixes"])
    assert "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0" in fixes and "29.84 GiB" in fixes


def test_max_seq_len_message_wrapped_by_kubectl_logs_is_max_model_len(run_diagnose):
    text = (
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can "
        "be\n"
        "stored in KV cache (21520). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
        "when\n"
        "initializing the engine.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "max-model-len-exceeds-kv"
    assert {"max_model_len": "21520"} in [f["flags"] for f in result["causes"][0]["fixes"]]


# --- runtime ---------------------------------------------------------------------------------------------


def test_traceback_plus_metrics_at_low_kv_usage_is_an_activation_peak(run_diagnose):
    trace = (
        frames(
            W1,
            ("v1/worker/gpu_model_runner.py", 1861, "execute_model", "model_output = self.model("),
            ("model_executor/models/qwen3_moe.py", 349, "forward", "hidden_states = self.mlp(hidden_states)"),
            (
                "model_executor/layers/fused_moe/fused_moe.py",
                1480,
                "fused_experts_impl",
                "intermediate_cache1 = torch.empty((M, topk_ids.shape[1], N),",
            ),
        )
        + W1
        + torch_oom("6.25 GiB", "79.19 GiB", "2.93 GiB", "76.25 GiB", "71.9 GiB", "1.54 GiB")
        + "\n"
    )
    metrics = "".join(
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="Qwen/Qwen3-30B-A3B"}} {u}\n'
        f'vllm:num_requests_running{{engine="0",model_name="Qwen/Qwen3-30B-A3B"}} {r}.0\n'
        f'vllm:num_requests_waiting{{engine="0",model_name="Qwen/Qwen3-30B-A3B"}} 0.0\n'
        for u, r in ((0.18, 6), (0.21, 7))
    )
    _, result, _ = run_diagnose(trace, metrics, names=("worker.log", "metrics.prom"))
    assert top(result) == "activation-peak"
    assert "kv-exhaustion-at-runtime" not in classes(result, 2)


def test_v0_stats_at_full_kv_with_preemption_warnings_is_kv_exhaustion(run_diagnose):
    lines = "".join(
        V0.format(s=10 + i, file="metrics.py:351")
        + f"Avg prompt throughput: 1520.3 tokens/s, Avg generation "
        f"throughput: 410.2 tokens/s, Running: 112 reqs, Swapped: {i * 3} reqs, Pending: {20 + 9 * i} reqs, "
        "GPU KV "
        f"cache usage: {97.1 + i:.1f}%, CPU KV cache usage: {i * 4.0:.1f}%.\n"
        + f"WARNING 11-05 14:02:{10 + i:02d} scheduler.py:1089] Sequence group chat-{i}a is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the "
        "end-to-end "
        "performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache "
        "memory. "
        "total_num_cumulative_preemption=1\n"
        for i in range(3)
    )
    _, result, _ = run_diagnose(lines)
    assert top(result) == "kv-exhaustion-at-runtime"


def test_only_metrics_with_full_kv_rising_queue_and_preemptions_is_kv_exhaustion(run_diagnose):
    scrapes = "".join(
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {u}\n'
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {w}.0\n'
        "# TYPE vllm:num_preemptions_total counter\n"
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {p}.0\n'
        for u, w, p in ((0.71, 0, 0), (0.94, 18, 12), (0.99, 57, 140))
    )
    _, result, _ = run_diagnose(scrapes, names=("metrics.txt",))
    assert top(result) == "kv-exhaustion-at-runtime"


def test_expert_parallel_dispatch_frames_at_moderate_kv_is_ep_all2all(run_diagnose):
    dp1 = "(EngineCore_DP1 pid=5521) ERROR 09-12 03:44:10 [core.py:720] "
    text = (
        "(APIServer pid=1) INFO 09-12 03:40:00 [utils.py:326] non-default args: {'model': "
        "'deepseek-ai/DeepSeek-V2-Lite', 'data_parallel_size': 2, 'enable_expert_parallel': True}\n"
        "(APIServer pid=1) INFO 09-12 03:44:01 [loggers.py:123] Engine 001: Avg prompt throughput: 5120.0 "
        "tokens/s, Avg generation throughput: 300.0 tokens/s, Running: 30 reqs, Waiting: 0 reqs, GPU KV "
        "cache "
        "usage: 38.5%, Prefix cache hit rate: 0.0%\n"
        + frames(
            dp1,
            (
                "model_executor/layers/fused_moe/modular_kernel.py",
                745,
                "forward",
                "a1q, a1q_scale, expert_num_tokens, _expert_topk_ids, _expert_topk_weights = "  # noqa: ISC004
                "self.prepare_finalize.prepare(",
            ),
            (
                "model_executor/layers/fused_moe/pplx_prepare_finalize.py",
                212,
                "prepare",
                "self.a2a.dispatch(",
            ),
        )
        + dp1
        + torch_oom("2.10 GiB", "79.19 GiB", "1.05 GiB", "78.1 GiB")
        + "\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "ep-all2all-buffer"


def test_dp_ranks_reporting_different_kv_memory_is_dp_accounting(run_diagnose):
    text = "".join(
        f"(EngineCore_DP{i} pid={700 + i}) INFO 09-01 10:00:0{i} [gpu_worker.py:298] Available KV cache "
        f"memory: {v} GiB\n"
        for i, v in enumerate((61.2, 38.7))
    )
    text += (
        "(EngineCore_DP1 pid=701) ERROR 09-01 11:20:44 [core.py:720] "
        + torch_oom("1.50 GiB", "79.19 GiB", "1.10 GiB")
        + "\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "dp-replica-kv-accounting"


def test_pytorch_1x_message_with_reserved_far_above_allocated_is_fragmentation(run_diagnose):
    text = (
        "RuntimeError: CUDA out of memory. Tried to allocate 3.00 GiB (GPU 0; 23.65 GiB total capacity; "
        "14.02 GiB "
        "already allocated; 2.31 GiB free; 20.75 GiB reserved in total by PyTorch) If reserved memory is >> "
        "allocated memory try setting max_split_size_mb to avoid fragmentation.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "fragmentation"


def test_rss_growth_at_steady_load_ending_in_oomkilled_is_a_leak_not_just_host_ram(run_diagnose):
    scrapes = "".join(
        f"process_resident_memory_bytes {gb}e9\n"
        f'vllm:num_requests_running{{engine="0",model_name="m"}} 24.0\n'
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} 0.3{i}\n'
        for i, gb in enumerate((31, 38, 46, 55, 63))
    )
    describe = (
        "    State:          Running\n    Last State:     Terminated\n      Reason:       OOMKilled\n"
        "      Exit Code:    137\n    Restart Count:  3\n    Limits:\n      memory:  64Gi\n"
    )
    _, result, _ = run_diagnose(scrapes, describe, names=("metrics.prom", "describe.txt"))
    assert top(result) == "memory-leak"
    assert "host-ram-oom" in classes(result)


def test_sglang_unbalanced_memory_is_another_process(run_diagnose):
    text = (
        "[2025-03-04 11:02:12 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
        "[2025-03-04 11:02:12 TP3] RuntimeError: The memory capacity is unbalanced. Some GPUs may be "
        "occupied by "
        "other processes. min_per_gpu_memory=41.83, local_gpu_memory=77.22, local_gpu_memory * 0.9=69.50\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "other-process-or-shared-gpu"


def test_only_kubectl_events_with_oomkilling_is_host_ram(run_diagnose):
    events = (
        "LAST SEEN   TYPE      REASON       OBJECT                      MESSAGE\n"
        "4m12s       Warning   OOMKilling   node/gpu-node-7             Memory cgroup out of memory: Killed "
        "process 2811 (pt_main_thread) total-vm:181203484kB, anon-rss:67108164kB, file-rss:90112kB, "
        "shmem-rss:0kB, UID:0 pgtables:141160kB oom_score_adj:-997\n"
        "4m10s       Warning   BackOff      pod/vllm-qwen-7c9f8d-x2k    Back-off restarting failed container "
        "vllm in pod vllm-qwen-7c9f8d-x2k\n"
    )
    _, result, _ = run_diagnose(events)
    assert top(result) == "host-ram-oom"


def test_systemd_oom_kill_result_in_journalctl_is_host_ram(run_diagnose):
    text = (
        "Mar 03 02:14:51 gpu-07 systemd[1]: vllm.service: A process of this unit has been killed by the OOM "
        "killer.\n"
        "Mar 03 02:14:52 gpu-07 systemd[1]: vllm.service: Main process exited, code=killed, status=9/KILL\n"
        "Mar 03 02:14:52 gpu-07 systemd[1]: vllm.service: Failed with result 'oom-kill'.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "host-ram-oom"


def test_cgroup_v2_files_with_oom_kills_are_host_ram(run_diagnose):
    _, result, _ = run_diagnose(
        "low 0\nhigh 0\nmax 412\noom 3\noom_kill 3\noom_group_kill 0\n",
        "68719476736\n",
        "68702699520\n",
        names=("cgroup/memory.events", "cgroup/memory.max", "cgroup/memory.current"),
    )
    assert top(result) == "host-ram-oom"
    support = " ".join(e["why"] for e in result["causes"][0]["evidence"])
    assert "oom_kill" in support


def test_oom_in_the_vision_tower_at_runtime_is_the_multimodal_encoder(run_diagnose):
    text = (
        frames(
            E1,
            (
                "v1/worker/gpu_model_runner.py",
                1502,
                "_execute_mm_encoder",
                "curr_group_outputs = self.model.get_multimodal_embeddings(**batched_mm_inputs)",
            ),
            (
                "model_executor/models/qwen2_5_vl.py",
                1046,
                "_process_image_input",
                "image_embeds = self.visual(pixel_values, grid_thw=grid_thw_list)",
            ),
            ("model_executor/models/qwen2_5_vl.py", 404, "forward", "attn = (q @ k.transpose(-2, -1))"),
        )
        + E1
        + torch_oom("17.27 GiB", "79.19 GiB", "9.12 GiB", "70.06 GiB")
        + "\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "multimodal-encoder"


def test_oom_inside_the_eagle_drafter_is_spec_decode(run_diagnose):
    text = (
        frames(
            E1,
            (
                "v1/worker/gpu_model_runner.py",
                1660,
                "execute_model",
                "draft_token_ids = self.propose_draft_token_ids(",
            ),
            ("v1/spec_decode/eagle.py", 228, "propose", "hidden_states = self.model("),
            ("model_executor/models/llama_eagle3.py", 141, "forward", "return self.model(input_ids,"),
        )
        + E1
        + torch_oom("1.96 GiB", "44.53 GiB", "1.27 GiB", "43.25 GiB")
        + "\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "spec-decode-or-lora-extra"


def test_illegal_memory_access_in_a_huge_profile_run_is_int32_overflow(run_diagnose):
    text = (
        "(APIServer pid=1) INFO 07-01 10:00:00 [utils.py:326] non-default args: {'model': 'Qwen/Qwen3-32B', "
        "'max_num_batched_tokens': 262144}\n"
        + frames(
            E1,
            ("v1/worker/gpu_worker.py", 244, "determine_available_memory", "self.model_runner.profile_run()"),
            ("v1/worker/gpu_model_runner.py", 2210, "profile_run", "hidden_states = self._dummy_run("),
        )
        + E1
        + "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "int32-index-overflow"


def test_sampler_frames_without_the_warmup_message_are_sampler(run_diagnose):
    text = (
        frames(
            E1,
            (
                "v1/worker/gpu_worker.py",
                261,
                "compile_or_warm_up_model",
                "self.model_runner._dummy_sampler_run(",
            ),
            ("v1/worker/gpu_model_runner.py", 2301, "_dummy_sampler_run", "sampler_output = self.sampler("),
            (
                "v1/sample/ops/topk_topp_sampler.py",
                190,
                "apply_top_k_top_p",
                "logits_sort, logits_idx = logits.sort(dim=-1, descending=False)",
            ),
        )
        + E1
        + torch_oom("1.16 GiB", "23.55 GiB", "611.44 MiB", "22.94 GiB")
        + "\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "sampler-or-logits"


# --- how people hand the evidence over ---------------------------------------------------------------------


def test_grepped_startup_lines_and_an_oom_hours_later_are_runtime_not_graph_capture(run_diagnose):
    text = (
        "(EngineCore_DP0 pid=312) INFO 10-14 16:59:40 [gpu_model_runner.py:2653] Model loading took 14.99 "
        "GiB "
        "and 30.1 seconds\n"
        "(EngineCore_DP0 pid=312) INFO 10-14 17:00:05 [gpu_worker.py:298] Available KV cache memory: 56.61 "
        "GiB\n"
        "(EngineCore_DP0 pid=312) ERROR 10-14 23:11:02 [core.py:851] "
        + torch_oom("3.50 GiB", "79.19 GiB", "1.21 GiB", "77.96 GiB", "75.10 GiB", "1.02 GiB")
        + "\n"
    )
    _, result, _ = run_diagnose(text)
    assert result["phase"] == "runtime" and "min after the last startup step" in result["phase_why"]
    assert top(result) != "cuda-graph-capture"


def test_docker_compose_prefixes_and_crlf_line_ends_are_read(run_diagnose):
    text = (
        "vllm-1  | INFO 08-19 07:51:03 model_runner.py:732] Loading model weights took 2.3463 GB\r\n"
        "vllm-1  | INFO 08-19 07:51:08 distributed_gpu_executor.py:56] # GPU blocks: 22982, # CPU blocks: "
        "6241\r\n"
        "vllm-1  | INFO 08-19 07:51:12 model_runner.py:1024] Capturing the model for CUDA graphs. This may "
        "lead "
        "to unexpected consequences if the model is not static.\r\n"
        "vllm-1  | " + torch_oom("64.00 MiB", "22.05 GiB", "31.12 MiB", "22.01 GiB") + "\r\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "cuda-graph-capture"


def test_grep_n_numbered_lines_keep_their_process_tags(run_diagnose):
    text = "".join(
        f"{1200 + i}:(EngineCore_DP{i} pid={90 + i}) INFO 01-01 00:00:0{i} [kv_cache_utils.py:2464] GPU KV "
        f"cache size: {v:,} tokens, Maximum concurrency for 8,192 tokens per request: 9.0x\n"
        for i, v in enumerate((402000, 251000))
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "dp-replica-kv-accounting"


def test_oom_message_listing_another_large_process_is_a_shared_gpu(run_diagnose):
    text = (
        E1
        + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 768.00 MiB. GPU 0 has a total capacity "  # noqa: E501
        "of 79.19 GiB of which 402.56 MiB is free. Process 1877 has 21.04 GiB memory in use. Process 2210 "
        "has "
        "57.73 GiB memory in use. Of the allocated memory 55.91 GiB is allocated by PyTorch, and 311.20 MiB "
        "is "
        "reserved by PyTorch but unallocated.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "other-process-or-shared-gpu"
    fixes = " ".join(f["summary"] for f in result["causes"][0]["fixes"])
    assert "PID 1877: 21.04 GiB" in fixes


def test_idle_engine_holding_kv_with_nothing_running_is_a_leak(run_diagnose):
    lines = "".join(
        f"(APIServer pid=1) INFO 03-01 0{h}:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: "
        f"0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV "
        f"cache usage: {u}%, Prefix cache hit rate: 0.0%\n"
        for h, u in ((1, 41.0), (2, 57.5), (3, 73.9))
    )
    _, result, _ = run_diagnose(lines)
    assert top(result) == "memory-leak"


def test_intel_xpu_out_of_device_memory_at_runtime_with_low_kv_is_activation(run_diagnose):
    text = (
        "(APIServer pid=1) INFO 06-02 10:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 800.0 "
        "tokens/s, "
        "Avg generation throughput: 20.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, XPU KV cache usage: "
        "9.4%, "
        "Prefix cache hit rate: 0.0%\n"
        + E1
        + "RuntimeError: UR error: UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "activation-peak"


def cudagraph_startup(version: str) -> str:
    return (
        f"(APIServer pid=1) INFO 05-02 11:59:00 [api_server.py:1] vLLM API server version {version}\n"
        "(EngineCore_DP0 pid=71) INFO 05-02 12:00:52 [gpu_model_runner.py:5301] Estimated CUDA graph memory: "
        "9.50 GiB total\n"
        "(EngineCore_DP0 pid=71) INFO 05-02 12:00:52 [gpu_worker.py:402] Available KV cache memory: -2.25 "
        "GiB\n"
        + E1
        + "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        "when initializing the engine.\n"
    )


def test_from_v021_an_estimate_larger_than_the_kv_deficit_is_what_left_no_kv(run_diagnose):
    _, result, _ = run_diagnose(cudagraph_startup("0.21.0"))
    assert top(result) == "cuda-graph-capture"
    support = " ".join(e["why"] for e in result["causes"][0]["evidence"])
    assert "without it 7.25 GiB would remain" in support
    fixes = " ".join(f["summary"] for f in result["causes"][0]["fixes"])
    assert "KV gets 7.25 GiB instead of -2.25 GiB" in fixes


def test_before_v021_the_estimate_was_only_logged_so_it_does_not_explain_the_empty_pool(run_diagnose):
    _, result, _ = run_diagnose(cudagraph_startup("0.19.1"))
    assert top(result) == "kv-cache-insufficient-at-startup"


def test_a_long_weight_load_is_still_startup_however_late_the_oom(run_diagnose):
    text = (
        "(EngineCore_DP0 pid=88) INFO 11-20 10:00:02 [gpu_model_runner.py:3051] Starting to load model "
        "deepseek-ai/DeepSeek-R1...\n"
        + E1.replace("02-14 09:31:12", "11-20 10:48:40")
        + torch_oom("3.50 GiB", "139.80 GiB", "1.02 GiB", "138.7 GiB")
        + "\n"
    )
    _, result, _ = run_diagnose(text)
    assert result["phase"] == "startup-weights" and top(result) == "weights-dont-fit"


def test_ray_memory_monitor_kill_is_host_ram_not_a_gpu_oom(run_diagnose):
    text = (
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
        "Memory on the node (IP: 10.0.3.17, ID: 8c1e) where the task (actor ID: 5f2a, name=RayWorkerWrapper."
        "__init__, pid=4101) was running was 241.07GB / 251.53GB (0.958414), which exceeds the memory usage "
        "threshold of 0.95. Ray killed this worker (ID: 31aa) because it was the most recently scheduled "
        "task.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "host-ram-oom"
    assert "node/container memory" in result["questions"][3]["answer"]


def test_cpu_allocator_refusal_is_host_ram(run_diagnose):
    text = (
        "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you "
        "tried "
        "to allocate 8589934592 bytes.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "host-ram-oom"


def test_sglang_decode_out_of_memory_is_the_kv_pool_running_full(run_diagnose):
    text = (
        "[2025-05-11 03:12:40 TP0] Decode batch. #running-req: 212, #token: 480331, token usage: 0.99, "
        "gen throughput (token/s): 4120.77, #queue-req: 57\n"
        "[2025-05-11 03:12:41 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        "RuntimeError: Decode out of memory. Try to lower your batch size.\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "kv-exhaustion-at-runtime"


def test_v0_preemption_warning_alone_is_kv_exhaustion(run_diagnose):
    text = (
        "WARNING 04-02 18:11:07 scheduler.py:1560] Sequence group cmpl-9f1c2 is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the "
        "end-to-end "
        "performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache "
        "memory. "
        "total_num_cumulative_preemption=51\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "kv-exhaustion-at-runtime"


def test_engine_init_failure_places_a_bare_oom_at_startup(run_diagnose):
    text = (
        E1 + torch_oom("1.00 GiB", "23.55 GiB", "706.12 MiB", "22.86 GiB") + "\n"
        "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed "
        "core "
        "proc(s): {}\n"
    )
    _, result, _ = run_diagnose(text)
    assert result["phase"] == "startup"
    assert not {"kv-exhaustion-at-runtime", "memory-leak"} & set(classes(result))
