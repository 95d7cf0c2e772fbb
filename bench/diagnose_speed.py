"""Speed and memory of `oomguard diagnose` on a production-like server log, beside `grep -c` on the same file.

The log is the shape of a real vLLM server's day: a third of its lines the periodic engine stats line, most of
the rest access-log lines, a few warnings, a runtime CUDA OOM traceback at the end. It is written to /tmp by
../shared/tools/bench_inputs/make_server_log.py when that generator is there (else by the same mix below),
read by the real CLI in a child process (wall time; CPU time of all its processes, the workers that survey
the chunks of a large file on the other cores included; peak RSS of the largest), compared with `grep -c`
over the same file in the same run (the machine's speed at that moment), and, with --verify, with the full
read (every line to every parser): the top cause, its KV-usage evidence line and that line's number must be
identical. The file is deleted at the end.

Usage: python bench/diagnose_speed.py [SIZE_MB ...] [--verify] [--compose]     (default: 300 1024)
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GENERATOR = REPO.parent / "shared" / "tools" / "bench_inputs" / "make_server_log.py"
TARGET_MB_S = 150
MAX_RSS_MIB = 256

HEAD = [
    "INFO 11-29 07:00:01 [api_server.py:1880] vLLM API server version 0.33.0",
    (
        "INFO 11-29 07:00:01 [utils.py:278] non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct', "
        "'max_model_len': 32768, 'gpu_memory_utilization': 0.95, 'max_num_batched_tokens': 32768}"
    ),
    "(EngineCore pid=120) INFO 11-29 07:00:30 [gpu_worker.py:508] Available KV cache memory: 55.1 GiB",
    (
        "(EngineCore pid=120) INFO 11-29 07:00:30 [kv_cache_utils.py:1733] GPU KV cache size: 451,376 "
        "tokens, "
        "Maximum concurrency for 32,768 tokens per request: 13.77x"
    ),
]
TAIL = [
    "(EngineCore pid=120) ERROR 11-29 09:59:59 [core.py:935] EngineCore encountered a fatal error.",
    "(EngineCore pid=120) ERROR 11-29 09:59:59 [core.py:935] Traceback (most recent call last):",
    (
        "(EngineCore pid=120) ERROR 11-29 09:59:59 [core.py:935]   File "
        '"/usr/local/lib/python3.12/dist-packages/'
        'vllm/model_executor/models/llama.py", line 261, in forward'
    ),
    (
        "(EngineCore pid=120) ERROR 11-29 09:59:59 [core.py:935] torch.OutOfMemoryError: CUDA out of memory. "
        "Tried "
        "to allocate 3.50 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.21 GiB is free. Including "
        "non-PyTorch memory, this process has 77.96 GiB memory in use. Of the allocated memory 74.02 GiB is "
        "allocated by PyTorch, and 1.31 GiB is reserved by PyTorch but unallocated."
    ),
]


def generate(path: str, size_mb: int) -> str:
    """Write the log; returns which generator wrote it."""
    if GENERATOR.is_file():
        subprocess.run([sys.executable, str(GENERATOR), path, str(size_mb)], check=True)
        return GENERATOR.name
    rnd = random.Random(7)
    with open(path, "w") as out:
        out.write("\n".join(HEAD) + "\n")
        written, target = 0, size_mb << 20
        while written < target:
            lines = []
            for _ in range(1000):
                k, t = rnd.random(), f"11-29 08:{rnd.randrange(60):02d}:{rnd.randrange(60):02d}"
                if k < 0.6:
                    lines.append(
                        f'(APIServer pid=1) INFO {t} [loggers.py:257] "POST /v1/chat/completions HTTP/1.1" '
                        "200 OK"
                    )
                elif k < 0.95:
                    lines.append(
                        f"(APIServer pid=1) INFO {t} [loggers.py:123] Engine 000: Avg prompt throughput: "
                        f"{rnd.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: "
                        f"{rnd.uniform(0, 3000):.1f} tokens/s, Running: {rnd.randrange(64)} reqs, Waiting: "
                        f"{rnd.randrange(8)} reqs, GPU KV cache usage: {rnd.uniform(0, 40):.1f}%, Prefix "
                        "cache "
                        f"hit rate: {rnd.uniform(0, 60):.1f}%"
                    )
                else:
                    lines.append(
                        f"(APIServer pid=1) WARNING {t} [protocol.py:93] The following fields were present "
                        "in "
                        "the request but ignored: {'stream_options'}"
                    )
            chunk = "\n".join(lines) + "\n"
            out.write(chunk)
            written += len(chunk)
        out.write("\n".join(TAIL) + "\n")
    return "the mix in bench/diagnose_speed.py"


def timed(cmd: list[str]) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds, peak RSS (MiB) of the child, its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # As installed: pip writes the bytecode at install time, so the child may write and reuse it here too.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**env, "LC_ALL": "C"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, after.ru_maxrss // 1024, proc.stdout


def answer(report: dict[str, Any]) -> tuple[str, str, str]:
    """The top cause and its KV-usage evidence line: (class, source:line, why)."""
    top = report["causes"][0]
    kv = next((e for e in top["evidence"] if "KV usage" in e["why"]), {"where": "-", "why": "-"})
    return top["class"], kv["where"], kv["why"]


def as_compose_log(path: str) -> None:
    """Rewrite the log as `docker compose logs` prints it: "vllm-1  | " before every line."""
    with open(path, "rb") as src, open(path + ".compose", "wb") as out:
        out.writelines(b"vllm-1  | " + line for line in src)
    os.replace(path + ".compose", path)


def bench(size_mb: int, verify: bool, compose: bool) -> bool:
    fd, path = tempfile.mkstemp(prefix="oomguard-bench-", suffix=".log", dir="/tmp")
    os.close(fd)
    try:
        made_by = generate(path, size_mb)
        if compose:
            as_compose_log(path)
            made_by += ", docker compose prefix on every line"
        size = os.path.getsize(path)
        subprocess.run(["cat", path], check=True, stdout=subprocess.DEVNULL)  # warm the page cache
        grep_wall, grep_cpu, _, _ = timed(["grep", "-c", "KV cache usage", path])
        cli = [sys.executable, "-m", "oomguard", "diagnose", "--json", path]
        # The same CLI on the log's first line: what the interpreter's start and the imports take.
        with open(path, "rb") as log, tempfile.NamedTemporaryFile(suffix=".log", dir="/tmp") as tiny:
            tiny.write(log.readline())
            tiny.flush()
            start_wall, start_cpu, _, _ = timed([*cli[:-1], tiny.name])
        wall, cpu, rss, out = timed(cli)
        fast = answer(json.loads(out))
        full = None
        if verify:
            full_wall, _, _, full_out = timed([*cli, "--every-line"])
            full = answer(json.loads(full_out))
    finally:
        os.unlink(path)
    mb = size / 1e6
    print(
        f"log: {mb:,.0f} MB written by {made_by}; {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(f"  grep -c            {mb / grep_wall:7,.0f} MB/s  ({grep_wall:.2f} s wall, {grep_cpu:.2f} s CPU)")
    print(
        f"  oomguard diagnose  {mb / wall:7,.0f} MB/s  ({wall:.2f} s wall, {cpu:.2f} s CPU = {mb / cpu:,.0f} "
        "MB/s "
        f"of CPU; target >= {TARGET_MB_S} MB/s)"
    )
    print(
        f"  of which reading   {mb / (wall - start_wall):7,.0f} MB/s  (less the {start_wall:.2f} s wall, "
        f"{start_cpu:.2f} s CPU the CLI takes to start: {mb / (cpu - start_cpu):,.0f} MB/s of CPU)"
    )
    print(f"  peak RSS           {rss:7,} MiB  (target < {MAX_RSS_MIB})")
    print(f"  top cause          {fast[0]}; KV-usage evidence at {fast[1]}: {fast[2]}")
    same = True
    if full is not None:
        same = full == fast
        print(f"  full read          {mb / full_wall:7,.1f} MB/s; same cause, line and number: {same}")
    return same and rss < MAX_RSS_MIB


def main(argv: list[str]) -> int:
    verify, compose = "--verify" in argv, "--compose" in argv
    sizes = [int(a) for a in argv if not a.startswith("--")] or [300, 1024]
    ok = all(bench(size, verify, compose) for size in sizes)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
