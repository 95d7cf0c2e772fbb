"""vLLM's hardware plugins' own startup lines (Intel Gaudi HPUs): the step they had reached, where their
wording differs from vLLM's; and the CPU backend's lines, which make every byte host RAM. (vllm-ascend's
"Available memory: 0, total memory: N" is read by vllm_log.py.)

Formats:
- Intel Gaudi (HabanaAI/vllm-fork and vllm-gaudi, hpu_model_runner.py warmup_model): after the KV cache is
  allocated, every prompt and decode bucket is run once to compile and capture its HPU graph:
  "[Warmup][Prompt][1/40] batch_size:4 seq_len:1024 free_mem:23.65 GiB", "[Warmup][Decode][204/416]
  batch_size:224 num_blocks:384 free_mem:14.93 GiB", then "Warmup finished in 37 secs, allocated 14.19 GiB of
  device memory". The warm-up is the HPU's graph capture (`milestone-cudagraph-start` / `-done`): a log that
  stops inside it failed capturing graphs.
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import Context, LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

# vLLM on the CPU backend (vllm/platforms/cpu.py): the weights and the KV cache are host RAM. Its lines:
# "Automatically detected platform cpu." (platforms/__init__.py, 0.7+), "Environment variable
# VLLM_CPU_KVCACHE_SPACE (GiB) for CPU backend is not set, using 4 by default.", and V1's startup check on
# the device "cpu": "Free memory on device cpu (4.85/18.0 GiB) on startup is less than desired GPU memory
# utilization".
_CPU_PLATFORM = re.compile(
    r"\bdetected platform cpu\b|\bVLLM_CPU_KVCACHE_SPACE\b|\bFree memory on device cpu\b|"
    r"\bUsing CPU backend\b"
)
_HPU_WARMUP = re.compile(r"\[Warmup\]\[(?:Prompt|Decode|Graph/\w+)\]\[\d+/\d+\]")
_HPU_WARMUP_DONE = re.compile(r"\bWarmup finished in [\d.]+ secs?\b")


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "[Warmup][",
            "Warmup finished in",
            "detected platform cpu",
            "VLLM_CPU_KVCACHE_SPACE",
            "on device cpu",
            "Using CPU backend",
        )
    )

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.said: set[str] = set()

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        if "[Warmup][" in body and _HPU_WARMUP.search(body):
            self._once(line, body, "milestone-cudagraph-start")
        if "Warmup finished in" in body and _HPU_WARMUP_DONE.search(body):
            self._once(line, body, "milestone-cudagraph-done")
        if ("cpu" in body or "CPU" in body) and _CPU_PLATFORM.search(body):
            self._once(line, body, "cpu-platform")

    def _once(self, line: Line, body: str, name: str, **numbers: float | None) -> None:
        if name not in self.said:
            self.said.add(name)
            self.ctx.signal(line, body, name, **numbers)
