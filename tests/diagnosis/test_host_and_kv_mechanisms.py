"""Every way a host or container says it ran out of memory, and every way an engine says its KV blocks ran out
while serving (issue 8): each mechanism's text as the engine, the kernel or the tool that prints it words it,
cited to the public thread or the source file that prints it, ranks its class first; a near miss of another
class (same tool, another cause) does not."""

from __future__ import annotations

import io

import pytest

from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.evidence import Evidence
from oomguard.diagnosis.read import read_one, require_evidence
from oomguard.errors import InputFormatError

HOST = "host-ram-oom"
KV = "kv-exhaustion-at-runtime"


def first(text: str) -> str:
    """The first cause ranked, or "(no answer)" when nothing in the text was read as a failure."""
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), evidence)
    try:
        require_evidence(evidence)
    except InputFormatError:
        return "(no answer)"
    return str(diagnose(evidence).causes[0].cls)


# --- A process ended by SIGKILL, as the tool that waited for it reports the exit status -----------------

SIGKILL_EXITS = {
    # vLLM V1 names each engine core that died with its exit code (vllm/v1/engine/utils.py,
    # wait_for_engine_startup, v0.8-v0.11): a negative code is the signal that ended it.
    "vllm-v1-core-proc": (
        "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {'EngineCore_DP0': -9}"
    ),
    # vLLM V0's multiproc executor (vllm/executor/multiproc_worker_utils.py, v0.4-v0.10): "Worker %s pid %s
    # died, exit code: %s" (https://github.com/vllm-project/vllm/issues/15800, CPU backend, -9).
    "vllm-v0-worker": (
        "ERROR 03-31 15:45:10 [multiproc_worker_utils.py:124] Worker VllmWorkerProcess pid 1867860 died, "
        "exit code: -9"
    ),
    # torchrun's root-cause table (torch/distributed/elastic/multiprocessing/errors/__init__.py).
    "torchrun": (
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2024-08-25_17:31:27\n"
        "  host      : 4b1a9e8a140f\n"
        "  rank      : 0 (local_rank: 0)\n"
        "  exitcode  : -9 (pid: 8158)\n"
        "  error_file: <N/A>\n"
        "  traceback : Signal 9 (SIGKILL) received by PID 8158\n"
    ),
    # Python's subprocess (Lib/subprocess.py, CalledProcessError.__str__) for a signal and for a shell's 137.
    "subprocess-signal": (
        "subprocess.CalledProcessError: Command '['python3', 'convert_checkpoint.py']' died with "
        "<Signals.SIGKILL: 9>."
    ),
    "subprocess-137": (
        "subprocess.CalledProcessError: Command 'python3 build.py --model_dir llama-7b' returned non-zero "
        "exit status 137."
    ),
    # docker ps (STATUS column "Exited (137) ...").
    "docker-ps": (
        "CONTAINER ID   IMAGE                     STATUS                       NAMES\n"
        "3f1c2a9b8d7e   vllm/vllm-openai:v0.8.5   Exited (137) 2 minutes ago   vllm\n"
    ),
    # https://github.com/oobabooga/text-generation-webui/issues/1799: docker compose's words.
    "compose-error-code": "with CPU (64GB ram)  container exits with error code 137",
    # Go's os/exec ExitError ("signal: killed") as ollama relays it (llm/server.go).
    "ollama-runner": "Error: llama runner process has terminated: signal: killed",
    # zsh's and bash's job reports of a SIGKILLed child.
    "zsh": "zsh: killed     python -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-2-70b-hf",
    "bash-job": "[1]+  Killed                  python serve.py --model Qwen/Qwen2.5-72B-Instruct",
    # supervisord's process state log (supervisor/process.py, "terminated by %s").
    "supervisord": "2024-05-01 10:00:00,123 WARN exited: vllm (terminated by SIGKILL; not expected)",
}


@pytest.mark.parametrize("name", sorted(SIGKILL_EXITS))
def test_a_sigkill_exit_status_in_any_spelling_is_the_host(name: str) -> None:
    assert first(SIGKILL_EXITS[name]) == HOST


SIGKILL_NEAR_MISSES = {
    # SIGILL (-4): an instruction the CPU lacks, not memory.
    "core-proc-sigill": (
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {'EngineCore_DP0': -4}"
    ),
    "worker-exit-1": (
        "ERROR 03-31 15:45:10 [multiproc_worker_utils.py:124] Worker VllmWorkerProcess pid 1867860 died, "
        "exit code: 1"
    ),
    "torchrun-sigabrt": (
        "  exitcode  : -6 (pid: 8158)\n  traceback : Signal 6 (SIGABRT) received by PID 8158\n"
    ),
    "ollama-segfault": (
        "Error: llama runner process has terminated: signal: segmentation fault (core dumped)"
    ),
    # PyTorch's CPU allocator error carries "Error code 12": errno ENOMEM, not an exit status (and it is the
    # host, read as the allocation it is, not as a kill).
}


@pytest.mark.parametrize("name", sorted(SIGKILL_NEAR_MISSES))
def test_another_exit_status_is_not_the_host(name: str) -> None:
    assert first(SIGKILL_NEAR_MISSES[name]) != HOST


# --- Host OOM killers other than the kernel's own report ------------------------------------------------

HOST_KILLERS = {
    # systemd-oomd (src/oom/oomd-manager.c, "Killed %s due to memory pressure for %s being ...").
    "systemd-oomd": (
        "Sep 21 09:15:58 dvd-nas systemd-oomd[581]: Killed /user.slice/user-1000.slice/user@1000.service/"
        "app.slice/vllm.scope due to memory pressure for /user.slice/user-1000.slice/user@1000.service being "
        "86.80% > 50.00% for > 20s with reclaim activity"
    ),
    # Slurm's cgroup plugin (src/plugins/task/cgroup, "Detected %u oom-kill event(s) in %ps").
    "slurm": (
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=1234.0. Some of your processes may have "
        "been killed by the cgroup out-of-memory handler."
    ),
    # The kubelet's SystemOOM event (pkg/kubelet/oom/oom_watcher_linux.go).
    "kubelet-system-oom": (
        "  Warning  SystemOOM  2m  kubelet  System OOM encountered, victim process: python3, pid: 4101"
    ),
    # The kubelet's eviction message (pkg/kubelet/eviction/helpers.go).
    "eviction-message": (
        "Message:      The node was low on resource: memory. Threshold quantity: 100Mi, available: 52Mi. "
        "Container vllm was using 61Gi, which exceeds its request of 0."
    ),
    # The memory cgroup's line of the kernel's OOM report (mm/memcontrol.c, mem_cgroup_print_oom_meminfo),
    # https://github.com/triton-inference-server/server/issues/4154.
    "memcg-oom-report": (
        "[44517.301476] memory: usage 131072kB, limit 131072kB, failcnt 15691\n"
        "[44517.301477] memory+swap: usage 0kB, limit 9007199254740988kB, failcnt 0\n"
        "[44517.301477] kmem: usage 19932kB, limit 9007199254740988kB, failcnt 0\n"
    ),
    # Jetson's nvmap: the Tegra GPU allocates from the board's RAM (the L4T driver's NvMap allocator).
    "jetson-nvmap": (
        "NvMapMemAllocInternalTagged: 1075072515 error 12\n"
        "NvMapMemHandleAlloc: error 12\n"
        "RuntimeError: CUDA error: out of memory\n"
    ),
    # Container platforms' words for the kill at the memory limit: AWS ECS's stopped reason
    # (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/stopped-task-error-codes.html) and Cloud
    # Run's (https://cloud.google.com/run/docs/configuring/services/memory-limits).
    "ecs": "Stopped reason: OutOfMemoryError: Container killed due to memory usage",
    "cloud-run": (
        "Memory limit of 16384 MiB exceeded with 16502 MiB used. Consider increasing the memory limit, see "
        "https://cloud.google.com/run/docs/configuring/memory-limits"
    ),
    # Kernels before 4.19 (mm/oom_kill.c, "Out of memory: Kill process %d (%s) score %u or sacrifice child").
    "kernel-pre-4.19": (
        "[ 1234.567890] Out of memory: Kill process 1234 (python) score 912 or sacrifice child"
    ),
}


@pytest.mark.parametrize("name", sorted(HOST_KILLERS))
def test_a_host_oom_killer_in_any_form_is_the_host(name: str) -> None:
    assert first(HOST_KILLERS[name]) == HOST


def test_a_pod_evicted_for_disk_is_not_the_host() -> None:
    text = (
        "Message:      The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: "
        "2Gi. Container vllm was using 40Gi, which exceeds its request of 0."
    )
    assert first(text) != HOST


# --- The host refused an allocation, as each runtime words it --------------------------------------------

HOST_REFUSED = {
    # PyTorch's CPU allocator (c10/core/impl/alloc_cpu.cpp, 1.6+) and its wording before 1.6 (Windows).
    "torch-cpu-allocator": (
        "RuntimeError: [enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: can't allocate "
        "memory: you tried to allocate 2359296 bytes. Error code 12 (Cannot allocate memory)"
    ),
    "torch-cpu-allocator-old": (
        "RuntimeError: [enforce fail at ..\\c10\\core\\impl\\alloc_cpu.cpp:72] data. DefaultCPUAllocator: "
        "not enough memory: you tried to allocate 1073741824 bytes."
    ),
    # NumPy's _ArrayMemoryError (numpy/core/_exceptions.py).
    "numpy": (
        "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 3.00 GiB for an array with shape "
        "(32000, 25165) and data type float32"
    ),
    # Rust's default allocation error hook (library/std/src/alloc.rs): tokenizers, TGI's router, mistral.rs.
    "rust": "memory allocation of 17179869184 bytes failed",
    # Go's runtime (runtime/malloc.go), ollama's server.
    "go": "fatal error: runtime: out of memory",
    # Windows' commit limit (ERROR_COMMITMENT_LIMIT, 1455) loading torch's DLLs.
    "windows-paging-file": (
        "OSError: [WinError 1455] The paging file is too small for this operation to complete. Error loading "
        '"C:\\Python310\\lib\\site-packages\\torch\\lib\\cudnn_cnn_infer64_8.dll" or one of its dependencies.'
    ),
    # /dev/shm: NCCL's shared-memory transport (src/include/shm.h) and PyTorch's DataLoader
    # (torch/utils/data/_utils/signal_handling.py).
    "nccl-shm": (
        "node1:123:456 [0] include/shm.h:28 NCCL WARN Error while creating shared memory segment "
        "/dev/shm/nccl-4hXb3s (size 9637888)"
    ),
    "dataloader-shm": (
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared "
        "memory (shm)."
    ),
    # vLLM V0 (vllm/config.py, CacheConfig.verify_with_parallel_config, v0.2-v0.10): the pinned CPU swap space
    # takes over 40% of the host.
    "vllm-swap-warning": (
        "WARNING 05-10 08:01:02 config.py:1012] Possibly too large swap space. 16.00 GiB out of the "
        "31.27 GiB total CPU memory is allocated for the swap space."
    ),
    # ggml's pinned host buffer (ggml-cuda.cu, ggml_cuda_host_malloc) and no GPU failure after it
    # (https://github.com/ollama/ollama/pull/5469).
    "ggml-pinned": (
        "Jul 10 16:29:17 DESKTOP ollama[180]: ggml_cuda_host_malloc: failed to allocate 16607.35 MiB of "
        "pinned memory: out of memory"
    ),
}


@pytest.mark.parametrize("name", sorted(HOST_REFUSED))
def test_a_host_allocation_refused_in_any_runtime_is_the_host(name: str) -> None:
    assert first(HOST_REFUSED[name]) == HOST


HOST_REFUSED_NEAR_MISSES = {
    # Triton's "shared memory" is the GPU's on-chip SMEM, not /dev/shm.
    "triton-smem": (
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 98304, Hardware "
        "limit: 65536. Reducing block sizes or `num_stages` may help."
    ),
    # A library's thread-local storage, not memory.
    "static-tls": (
        "ImportError: /usr/lib/aarch64-linux-gnu/libgomp.so.1: cannot allocate memory in static TLS block"
    ),
    # A full disk, not /dev/shm.
    "disk-full": (
        "OSError: [Errno 28] No space left on device: "
        "'/root/.cache/huggingface/hub/models--meta-llama--Llama-2-70b-hf/blobs/tmp'"
    ),
    # ggml warns that pinning failed and falls back; the failure is the GPU's after it, under WSL's cap on
    # page-locked memory (https://github.com/abetlen/llama-cpp-python/issues/229).
    "pinned-then-gpu-oom": (
        "WARNING: failed to allocate 512.00 MB of pinned memory: out of memory\n"
        "WARNING: failed to allocate 512.00 MB of pinned memory: out of memory\n"
        "CUDA error 2 at /tmp/pip-install-dcpg9e3d/llama-cpp-python_0b20594a2c9f4aa6a0b4bdca1b250223/vendor/"
        "llama.cpp/ggml-cuda.cu:781: out of memory\n"
    ),
}


@pytest.mark.parametrize("name", sorted(HOST_REFUSED_NEAR_MISSES))
def test_a_gpu_or_disk_refusal_is_not_the_host(name: str) -> None:
    assert first(HOST_REFUSED_NEAR_MISSES[name]) != HOST


# --- Ray's memory monitor, whichever line of its kill message survives the paste --------------------------

RAY_MONITOR_LINES = {
    # https://github.com/OpenRLHF/OpenRLHF/issues/911: the table of the top users and the advice after it.
    "table-and-advice": (
        "(ActorModelRayActor pid=8249) 8800\t1.18\tray::ReferenceModelRayActor\n"
        "(ActorModelRayActor pid=8249) 8798\t1.17\tray::ReferenceModelRayActor\n"
        "(ActorModelRayActor pid=8249) Refer to the documentation on how to address the out of memory issue: "
        "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning "
        "more memory on this node or reducing task parallelism by requesting more CPUs per task. Set "
        "max_restarts and max_task_retries to enable retry when the task crashes due to OOM. To adjust the "
        "kill threshold, set the environment variable `RAY_memory_usage_threshold` when starting Ray. To "
        "disable worker killing, set the environment variable `RAY_memory_monitor_refresh_ms` to zero.\n"
    ),
    # The dead worker's exit type (src/ray/protobuf/common.proto, WorkerExitType.NODE_OUT_OF_MEMORY) as
    # ActorDiedError prints it.
    "exit-type": (
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
        "\tclass_name: RayWorkerWrapper\n"
        "The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY "
        "Worker exit detail: Task was killed due to the node running low on memory."
    ),
}


@pytest.mark.parametrize("name", sorted(RAY_MONITOR_LINES))
def test_any_line_of_rays_memory_monitor_is_the_host(name: str) -> None:
    assert first(RAY_MONITOR_LINES[name]) == HOST


def test_a_gpu_oom_raised_inside_a_ray_task_is_not_the_host() -> None:
    # The task's own exception wrapped by Ray (ray.exceptions.RayTaskError), not the memory monitor.
    text = (
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::RayWorkerWrapper.execute_method() (pid=3051, "
        "ip=10.0.0.12, actor_id=8a9c0f, repr=<vllm.executor.ray_utils.RayWorkerWrapper object at 0x7f>)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity "
        "of 79.15 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.94 GiB "
        "memory in use. Of the allocated memory 75.10 GiB is allocated by PyTorch, and 1.30 GiB is reserved "
        "by PyTorch but unallocated.\n"
    )
    assert first(text) != HOST


# --- An engine's KV pool empty while serving, in each engine's and version's words -----------------------

KV_POOL_EMPTY = {
    # vLLM V0 block manager v1 (vllm/core/block_manager_v1.py, v0.2-v0.6).
    "vllm-v0-block-manager-v1": "ValueError: Out of memory! No free blocks are available.",
    # vLLM V0 block manager v2 (vllm/core/block/interfaces.py, v0.4-v0.10).
    "vllm-v0-block-manager-v2": (
        '  File "/usr/local/lib/python3.10/dist-packages/vllm/core/block/naive_block.py", line 137, in '
        "_allocate_block_id\n"
        "    raise BlockAllocator.NoFreeBlocksError()\n"
        "vllm.core.block.interfaces.BlockAllocator.NoFreeBlocksError\n"
    ),
    # vllm-metal's own allocator before it used vLLM's scheduler
    # (https://github.com/vllm-project/vllm-metal/pull/128).
    "vllm-metal": "RuntimeError: Not enough free blocks",
    # vLLM V0's stats line with requests swapped out (https://github.com/vllm-project/vllm/issues/5578).
    "vllm-v0-swapped": (
        "INFO 06-16 10:12:31 metrics.py:341] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
        "2311.4 tokens/s, Running: 39 reqs, Swapped: 129 reqs, Pending: 9831 reqs, GPU KV cache usage: "
        "99.6%, CPU KV cache usage: 97.2%.\n"
    ),
    # vLLM V1's scheduler resuming a preempted request (vllm/v1/core/sched/scheduler.py), as quoted in
    # https://github.com/LMCache/LMCache/pull/1361.
    "vllm-v1-preempted": (
        "(EngineCore_0 pid=3945189) INFO 08-21 07:17:09 [scheduler.py:495] Preempted request "
        "cmpl-e5951453df7d471e8aac25957dbc9096-0 has been resumed!\n"
        "(EngineCore_0 pid=3945189) INFO 08-21 07:17:09 [scheduler.py:495] Preempted request "
        "cmpl-d6ea6f87cb0d4f27a01cf8874e4e083b-0 has been resumed!\n"
    ),
    # vLLM V1's block pool (vllm/v1/core/block_pool.py, get_new_blocks).
    "vllm-v1-block-pool": "(EngineCore_DP0 pid=4012) ValueError: Cannot get 12 free blocks from the pool",
    # TensorRT-LLM's KV cache manager, an older assertion
    # (https://github.com/NVIDIA/TensorRT-LLM/issues/1279) and the 0.15+ one with a window size.
    "trtllm-free-block-assert": (
        "2024-03-11T18:16:28.919807829Z [TensorRT-LLM][ERROR] Encountered an error in forward function: "
        "[TensorRT-LLM][ERROR] Assertion failed: freeBlockIterator.has_value() "
        "(/tmp/tritonbuild/tensorrtllm/tensorrt_llm/cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp:249)"
    ),
    "trtllm-window-size": (
        "RuntimeError: [TensorRT-LLM][ERROR] Assertion failed: Can't allocate new blocks for window size 4096"
    ),
    # LMDeploy TurboMind (https://github.com/InternLM/lmdeploy/issues/720).
    "lmdeploy-turbomind": (
        "[TM][FATAL] No enough blocks. Assertion fail: /root/lmdeploy/src/turbomind/models/llama/"
        "LlamaBatch.cc:358"
    ),
    # LightLLM's token pool (lightllm/common/mem_manager.py, alloc).
    "lightllm": "ERROR 01-02 03:04:05 [mem_manager.py:120] warn no enough cache need_size 1024 left_size 37",
    # SGLang's request-slot pool (python/sglang/srt/mem_cache/common.py, alloc_req_slots).
    "sglang-req-slots": (
        "RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for "
        "`--max-running-requests`. req_to_token_pool.available_size()=29, num_reqs=30"
    ),
    # SGLang's slot allocator on the stack, the message cut off
    # (https://github.com/sgl-project/sglang/issues/26265).
    "sglang-allocator-stack": (
        "[TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File ".../sglang/srt/managers/scheduler.py", line 3249, in _get_new_batch_prefill_raw\n'
        "    new_batch.prepare_for_extend()\n"
        '  File ".../sglang/srt/managers/schedule_batch.py", line 1849, in prepare_for_extend\n'
        "    out_cache_loc, req_pool_indices_tensor, _ = alloc_for_extend(self)\n"
        '  File ".../sglang/srt/mem_cache/common.py", line 486, in alloc_for_extend\n'
        "    out_cache_loc = alloc_paged_token_slots_extend(...)\n"
        '  File ".../sglang/srt/mem_cache/common.py", line 412, in alloc_paged_token_slots_extend\n'
        "    raise RuntimeError(error_m\n"
    ),
}


@pytest.mark.parametrize("name", sorted(KV_POOL_EMPTY))
def test_an_empty_kv_pool_in_any_engine_is_runtime_kv_exhaustion(name: str) -> None:
    assert first(KV_POOL_EMPTY[name]) == KV


KV_POOL_NEAR_MISSES = {
    # TensorRT-LLM's executor refusing a request longer than the engine's limit: the context, not the pool.
    "trtllm-length-assert": (
        "[TensorRT-LLM][ERROR] Assertion failed: Input length (9000) + max new tokens (100) + draft tokens "
        "(0) must be less than max sequence length (8192). "
        "(/src/tensorrt_llm/batch_manager/llmRequest.cpp:120)"
    ),
    # A V0 stats line with nothing swapped and the pool half empty, then a CUDA OOM: not the KV pool.
    "vllm-v0-nothing-swapped": (
        "INFO 06-16 10:12:31 metrics.py:341] Avg prompt throughput: 812.0 tokens/s, Avg generation "
        "throughput: 95.1 tokens/s, Running: 4 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: "
        "41.2%, CPU KV cache usage: 0.0%.\n"
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total "
        "capacity of 79.15 GiB of which 2.10 GiB is free.\n"
    ),
    # vLLM sizing its pool at startup (vllm/worker/worker.py): no room for blocks at all, before serving.
    "vllm-startup-no-blocks": (
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine."
    ),
    # A CUDA OOM in SGLang's forward: the activations, not the slot allocator.
    "sglang-forward-oom": (
        "[TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File ".../sglang/srt/managers/scheduler.py", line 2050, in run_batch\n'
        "    batch_result = self.model_worker.forward_batch_generation(\n"
        '  File ".../sglang/srt/model_executor/model_runner.py", line 1720, in forward_extend\n'
        "    return self.model.forward(\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity "
        "of 79.10 GiB of which 2.10 GiB is free.\n"
    ),
}


@pytest.mark.parametrize("name", sorted(KV_POOL_NEAR_MISSES))
def test_a_limit_or_a_forward_oom_is_not_runtime_kv_exhaustion(name: str) -> None:
    assert first(KV_POOL_NEAR_MISSES[name]) != KV


# --- The reporter's words: how a host runs out, and a process killed without an error of its own ---------

HOST_PROSE = {
    # https://github.com/alibaba/ROLL/issues/234: the monitor "kills" (the present tense).
    "monitor-kills": (
        "During pipeline startup, multiple vLLM inference actors are created nearly concurrently. While the "
        "engine calls offload_states, node memory briefly spikes (actor RSS + Ray object store reservation + "
        "page cache). Ray's node memory monitor then kills the most recently scheduled actor around 92-93% "
        "node RAM usage."
    ),
    # https://github.com/huggingface/text-generation-inference/issues/247: the host's RAM as a size.
    "cpu-memory-size": (
        "With latest commit, all shards are first loaded into CPU memory ( in bfloat16 I guess ) which "
        "occupies around 40GB, and then moves quantized version to GPU which is around 13.5GB. As a result, "
        "unable to use g5.xlarge instance anymore to start server."
    ),
    # https://github.com/NVIDIA/TensorRT-LLM/issues/743: killed, and nothing else said.
    "always-killed": (
        "python3 build.py --model_dir /opt/llms/llama-7b --dtype float16 --use_gemm_plugin float16 "
        "--output_dir /opt/trtModel/llama/1-gpu\n"
        "but the program always be killed, I am confused。"
    ),
}


@pytest.mark.parametrize("name", sorted(HOST_PROSE))
def test_a_reporter_saying_the_host_killed_it_is_the_host(name: str) -> None:
    assert first(HOST_PROSE[name]) == HOST


HOST_PROSE_NEAR_MISSES = {
    # The reporter killed the process (active voice), after a GPU OOM.
    "user-killed-it": (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
        "of 23.65 GiB of which 1.05 GiB is free.\n"
        "After that I killed the server and restarted it with the same arguments."
    ),
    # VRAM is the GPU's: "ram" inside it is no host word.
    "vram-size": (
        "It fails with out of memory on my 4090 with 24GB VRAM, although the model is only 14GB in fp16."
    ),
    # A Tenstorrent card's DRAM is its device memory, not the host's
    # (https://github.com/tenstorrent/tt-metal/issues/21904).
    "device-dram": (
        "Out of Memory: Not enough space to allocate 71999488 B DRAM buffer across 12 banks, where each bank "
        "needs to store 6000320 B\n"
        "The KV cache does not fit in the DRAM of the N150 in accuracy mode."
    ),
}


@pytest.mark.parametrize("name", sorted(HOST_PROSE_NEAR_MISSES))
def test_a_user_kill_or_a_device_dram_is_not_the_host(name: str) -> None:
    assert first(HOST_PROSE_NEAR_MISSES[name]) != HOST


def test_a_journal_line_is_machine_text_not_a_sentence() -> None:
    # journald's prefix makes an engine's line machine text (https://github.com/ollama/ollama/pull/5469).
    evidence = Evidence()
    line = (
        "Jul 10 16:29:17 DESKTOP ollama[180]: llm_load_tensors: the model is larger than the memory of the "
        "host and it runs out of memory"
    )
    read_one("paste.txt", io.BytesIO(line.encode()), evidence)
    assert not [f for f in evidence if getattr(f, "name", "").startswith("prose-")]


# --- The host's own figures: a container at its limit, a host with nothing available ---------------------

# `docker stats` (https://docs.docker.com/reference/cli/docker/container/stats/): MEM USAGE / LIMIT.
DOCKER_STATS_AT_LIMIT = (
    "CONTAINER ID   NAME      CPU %     MEM USAGE / LIMIT     MEM %     NET I/O       BLOCK I/O     PIDS\n"
    "3f1c2a9b8d7e   vllm      101.25%   15.55GiB / 15.6GiB    99.68%    1.2kB / 0B    12.3GB / 0B   87\n"
)
# /proc/meminfo (fs/proc/meminfo.c, KiB) while the weights load.
MEMINFO_EXHAUSTED = (
    "$ cat /proc/meminfo\n"
    "MemTotal:       263855252 kB\n"
    "MemFree:          812344 kB\n"
    "MemAvailable:    1048576 kB\n"
    "Loading safetensors checkpoint shards:  25% Completed | 2/8\n"
)


def test_a_container_at_its_docker_stats_limit_is_the_host() -> None:
    assert first(DOCKER_STATS_AT_LIMIT) == HOST


def test_a_host_with_nothing_available_in_meminfo_is_the_host() -> None:
    assert first(MEMINFO_EXHAUSTED) == HOST


def test_a_container_far_below_its_limit_with_a_gpu_error_is_not_the_host() -> None:
    text = DOCKER_STATS_AT_LIMIT.replace("15.55GiB / 15.6GiB    99.68%", "4.55GiB / 62.6GiB    7.27%")
    assert first(text + "RuntimeError: CUDA error: out of memory\n") != HOST


def test_sglangs_older_retraction_notice_is_runtime_kv_exhaustion() -> None:
    # SGLang 0.1-0.3 (python/sglang/srt/managers/tp_worker.py, forward_decode_batch), quoted in
    # https://github.com/sgl-project/sglang/pull/6860.
    text = (
        "[gpu=0] Decode out of memory happened. #retracted_reqs: 3, #new_token_ratio: 0.4127 -> 0.6000\n"
        "This will cause low throughput and bugs."
    )
    assert first(text) == KV


def test_sglangs_graph_capture_oom_is_not_runtime_kv_exhaustion() -> None:
    # SGLang's own capture failure (python/sglang/srt/model_executor/cuda_graph_runner.py).
    text = (
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a "
        "total capacity of 79.10 GiB of which 1.09 GiB is free.\n"
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    )
    assert first(text) != KV


# --- A host allocation on the failing stack: pinned CPU pools, whatever the error calls the failure ------

# vLLM V0 allocating its CPU swap blocks (vllm/worker/cache_engine.py, v0.4-v0.6): pinned host memory, which
# CUDA refuses with "out of memory" (https://github.com/ai-dynamo/dynamo/issues/356 traced it there).
V0_CPU_SWAP_STACK = (
    '  File "/usr/local/lib/python3.10/dist-packages/vllm/worker/worker.py", line 188, in '
    "_init_cache_engine\n"
    "    self.cache_engine = CacheEngine(self.cache_config, self.model_config,\n"
    '  File "/usr/local/lib/python3.10/dist-packages/vllm/worker/cache_engine.py", line 52, in __init__\n'
    '    self.cpu_cache = self._allocate_kv_cache(self.num_cpu_blocks, "cpu")\n'
    '  File "/usr/local/lib/python3.10/dist-packages/vllm/worker/cache_engine.py", line 61, in '
    "_allocate_kv_cache\n"
    "    torch.zeros(kv_cache_shape,\n"
    "RuntimeError: CUDA error: out of memory\n"
)
# SGLang's HiCache host pool (python/sglang/srt/mem_cache/memory_pool_host.py, 0.4.6+).
HICACHE_HOST_POOL_STACK = (
    '  File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/hiradix_cache.py", line 48, in __init__\n'
    "    self.token_to_kv_pool_host = MHATokenToKVPoolHost(\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/memory_pool_host.py", line 90, in __init__\n'
    "    self.kv_buffer = self.init_kv_buffer()\n"
    "RuntimeError: CUDA error: out of memory\n"
)


@pytest.mark.parametrize("text", [V0_CPU_SWAP_STACK, HICACHE_HOST_POOL_STACK])
def test_a_host_pool_allocation_on_the_failing_stack_is_the_host(text: str) -> None:
    assert first(text) == HOST


def test_the_same_engines_gpu_block_allocation_is_not_the_host() -> None:
    # The GPU blocks go through the same _allocate_kv_cache (and its `pin_memory=pin_memory` line).
    text = V0_CPU_SWAP_STACK.replace(
        'self.cpu_cache = self._allocate_kv_cache(self.num_cpu_blocks, "cpu")',
        "self.gpu_cache = self._allocate_kv_cache(self.num_gpu_blocks, self.device_config.device_type)",
    ).replace(
        "RuntimeError: CUDA error: out of memory",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total "
        "capacity of 79.15 GiB of which 10.20 GiB is free.",
    )
    assert first(text) != HOST


# --- vLLM's CPU backend: every byte it holds is host RAM ----------------------------------------------------

# vLLM's platform detection (vllm/platforms/__init__.py) and the CPU backend's KV space warning
# (vllm/platforms/cpu.py), then a worker dying while the weights load
# (https://github.com/vllm-project/vllm/issues/15800).
CPU_BACKEND_WORKER_DIES = (
    "INFO 03-31 15:44:50 [__init__.py:239] Automatically detected platform cpu.\n"
    "WARNING 03-31 15:44:52 [cpu.py:80] Environment variable VLLM_CPU_KVCACHE_SPACE (GiB) for CPU backend is "
    "not set, using 4 by default.\n"
    "Loading safetensors checkpoint shards:  25% Completed | 2/8 [00:00<00:00,  7.24it/s]\n"
    "ChildProcessError: worker died\n"
)


def test_a_failure_on_vllms_cpu_backend_is_the_host() -> None:
    assert first(CPU_BACKEND_WORKER_DIES) == HOST


def test_the_same_failure_on_a_cuda_platform_is_not_the_host() -> None:
    text = (
        "INFO 03-31 15:44:50 [__init__.py:239] Automatically detected platform cuda.\n"
        "Loading safetensors checkpoint shards:  25% Completed | 2/8 [00:00<00:00,  7.24it/s]\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity "
        "of 23.65 GiB of which 512.00 MiB is free.\n"
    )
    assert first(text) != HOST


# `docker inspect` prints the OOM flag in every container's state
# (https://docs.docker.com/reference/cli/docker/inspect/).
DOCKER_STATE = (
    '        "State": {\n'
    '            "Status": "exited",\n'
    '            "Running": false,\n'
    '            "OOMKilled": true,\n'
    '            "Dead": false,\n'
    '            "ExitCode": 1,\n'
)


def test_docker_inspects_oom_flag_set_is_the_host() -> None:
    assert first(DOCKER_STATE) == HOST


def test_docker_inspects_oom_flag_unset_is_not_the_host() -> None:
    assert first(DOCKER_STATE.replace('"OOMKilled": true', '"OOMKilled": false')) != HOST


HOST_PROSE_MORE = {
    # What a host out of RAM does, said with the RAM named.
    "ram-fills-up": "While the weights load the system RAM fills up to 100% and the whole machine freezes.",
    # 内存 (RAM) 不足 (not enough), as Chinese reports say it.
    "neicun-buzu": "加载 Qwen2-72B 时内存不足，进程直接退出了。",
}


@pytest.mark.parametrize("name", sorted(HOST_PROSE_MORE))
def test_a_reporter_describing_ram_running_out_is_the_host(name: str) -> None:
    assert first(HOST_PROSE_MORE[name]) == HOST


def test_the_gpus_memory_in_chinese_is_not_the_host() -> None:
    # 显存 / GPU内存 is the GPU's memory.
    assert first("推理时 GPU内存不足，报错 CUDA out of memory。") != HOST


def test_a_reporter_saying_the_kv_cache_ran_out_of_blocks_is_runtime_kv_exhaustion() -> None:
    text = (
        "Under load the KV cache runs out of free blocks after a few minutes and requests keep getting "
        "retracted until throughput collapses."
    )
    assert first(text) == KV


def test_running_out_of_memory_with_a_kv_setting_named_is_not_runtime_kv_exhaustion() -> None:
    # https://github.com/NVIDIA/TensorRT-LLM/pull/18523: the activations, the KV fraction only named.
    text = (
        "The Gemma3 27B FP8 accuracy test can run out of memory during MMLU on an H100 even with the KV "
        "cache fraction at 0.9, because nothing is left for the activations."
    )
    assert first(text) != KV


# --- ggml's CPU buffers: the weights llama.cpp keeps in RAM ----------------------------------------------

# ggml's CPU backend failing the weights' buffer (ggml/src/ggml.c ggml_aligned_malloc, ggml-backend.cpp
# ggml_backend_cpu_buffer_type_alloc_buffer) while the model loads.
GGML_CPU_WEIGHTS = (
    "ggml_aligned_malloc: insufficient memory (attempted to allocate 40652.88 MB)\n"
    "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 42628415488\n"
)


def test_ggmls_cpu_buffer_failing_for_the_weights_is_the_host() -> None:
    assert first(GGML_CPU_WEIGHTS) == HOST


def test_ggmls_cpu_buffer_failing_for_a_million_token_kv_cache_is_the_context() -> None:
    # https://github.com/ggml-org/llama.cpp/issues/8101: the context step's KV buffer, in RAM, for n_ctx 1M.
    text = (
        "llama_new_context_with_model: n_ctx      = 1048576\n"
        "llama_new_context_with_model: n_batch    = 2048\n"
        "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 137438953504\n"
        "llama_kv_cache_init: failed to allocate buffer for kv cache\n"
        "llama_new_context_with_model: llama_kv_cache_init() failed for self-attention cache\n"
    )
    assert first(text) != HOST
