"""Streaming speed and memory of `diagnose` on a large server log.

Generates a realistic vLLM V1 log (startup ledger, then access lines, periodic stats lines, scheduler
warnings, and a runtime CUDA OOM traceback near the end) of the requested size in /tmp, reads it through the
full evidence pipeline on one core, prints MB/s and peak RSS, and deletes the file.
Usage: python bench/diagnose_speed.py [size_mb=1024]
"""

from __future__ import annotations

import os
import random
import resource
import sys
import tempfile
import time

from oomguard.diagnose.diagnosis import diagnose
from oomguard.diagnose.read import read_evidence

STARTUP = """(APIServer pid=1) INFO 10-14 16:59:01 [utils.py:278] non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 32768, 'gpu_memory_utilization': 0.95}
(EngineCore_DP0 pid=312) INFO 10-14 16:59:05 [core.py:129] Initializing a V1 LLM engine (v0.31.0) with config: model='meta-llama/Llama-3.1-8B-Instruct', dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=1, pipeline_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto
(EngineCore_DP0 pid=312) INFO 10-14 16:59:40 [gpu_model_runner.py:5405] Model loading took 14.99 GiB memory and 30.1 seconds
(EngineCore_DP0 pid=312) INFO 10-14 17:00:05 [gpu_worker.py:563] Available KV cache memory: 56.61 GiB
(EngineCore_DP0 pid=312) INFO 10-14 17:00:05 [kv_cache_utils.py:2464] GPU KV cache size: 463,744 tokens, Maximum concurrency for 32,768 tokens per request: 14.15x
(EngineCore_DP0 pid=312) INFO 10-14 17:00:31 [gpu_model_runner.py:6913] Graph capturing finished in 26 secs, took 0.94 GiB
(APIServer pid=1) INFO 10-14 17:00:33 [launcher.py:44] Application startup complete.
"""
CRASH = """(EngineCore_DP0 pid=312) ERROR 10-14 23:11:02 [core.py:851] EngineCore encountered a fatal error.
(EngineCore_DP0 pid=312) ERROR 10-14 23:11:02 [core.py:851] Traceback (most recent call last):
(EngineCore_DP0 pid=312) ERROR 10-14 23:11:02 [core.py:851]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 842, in run_engine_core
(EngineCore_DP0 pid=312) ERROR 10-14 23:11:02 [core.py:851]     engine_core.run_busy_loop()
(EngineCore_DP0 pid=312) ERROR 10-14 23:11:02 [core.py:851]   File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/llama.py", line 287, in forward
(EngineCore_DP0 pid=312) ERROR 10-14 23:11:02 [core.py:851]     hidden_states = self.mlp(hidden_states)
(EngineCore_DP0 pid=312) ERROR 10-14 23:11:02 [core.py:851] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.21 GiB is free. Including non-PyTorch memory, this process has 77.96 GiB memory in use. Of the allocated memory 75.10 GiB is allocated by PyTorch, and 1.02 GiB is reserved by PyTorch but unallocated.
"""


def generate(path: str, size: int) -> None:
    rng = random.Random(7)
    with open(path, "w") as out:
        out.write(STARTUP)
        written, second = len(STARTUP), 0
        chunk: list[str] = []
        while written < size:
            second += 1
            hh, mm, ss = 17 + second // 3600 % 6, second // 60 % 60, second % 60
            for _ in range(rng.randint(8, 14)):
                ip = f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
                chunk.append(
                    f'(APIServer pid=1) INFO:     {ip}:{rng.randint(30000, 60000)} - "POST /v1/chat/completions '
                    f'HTTP/1.1" 200 OK\n'
                )
            if second % 10 == 0:
                chunk.append(
                    f"(APIServer pid=1) INFO 10-14 {hh:02d}:{mm:02d}:{ss:02d} [loggers.py:123] Engine 000: Avg prompt "
                    f"throughput: {rng.uniform(500, 3000):.1f} tokens/s, Avg generation throughput: "
                    f"{rng.uniform(300, 900):.1f} tokens/s, Running: {rng.randint(10, 60)} reqs, Waiting: 0 reqs, "
                    f"GPU KV cache usage: {rng.uniform(5, 40):.1f}%, Prefix cache hit rate: {rng.uniform(20, 60):.1f}%\n"
                )
            if second % 97 == 0:
                chunk.append(
                    f"(APIServer pid=1) WARNING 10-14 {hh:02d}:{mm:02d}:{ss:02d} [protocol.py:70] The following "
                    "fields were present in the request but ignored: {'stream_options'}\n"
                )
            if len(chunk) > 5000:
                text = "".join(chunk)
                out.write(text)
                written += len(text)
                chunk = []
        out.write("".join(chunk) + CRASH)


def main(argv: list[str]) -> int:
    size_mb = int(argv[0]) if argv else 1024
    fd, path = tempfile.mkstemp(prefix="oomguard-bench-", suffix=".log", dir="/tmp")
    os.close(fd)
    try:
        t0 = time.perf_counter()
        generate(path, size_mb << 20)
        gen_s = time.perf_counter() - t0
        size = os.path.getsize(path)
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        evidence = read_evidence([path])
        result = diagnose(evidence)
        secs = time.perf_counter() - t0
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    finally:
        os.unlink(path)
    print(f"{'log size':<22} {size / 1e6:,.0f} MB  (generated in {gen_s:.1f} s)")
    print(f"{'read + diagnose':<22} {secs:.2f} s")
    print(f"{'throughput':<22} {size / 1e6 / secs:,.0f} MB/s  (target >= 100)")
    print(f"{'peak RSS':<22} {rss_after / 1024:,.0f} MiB  (before reading: {rss_before / 1024:,.0f} MiB)")
    print(f"{'facts kept':<22} {len(list(evidence)):,} of {len(evidence):,} seen")
    print(f"{'top cause':<22} {result.causes[0].cls} ({result.causes[0].confidence:.0%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
