"""What a reporter's sentences say about the mechanism (its trend, who holds the memory, which tensor is
large), read on prose lines only. Each reading has its real text (thread cited) and a near-miss that must not
fire: the same words in a log line, a table, or a sentence about another mechanism."""

from __future__ import annotations

from tests.diagnosis.pasted import ranked, read

from oomguard.diagnosis.evidence import Signal


def prose(text: str) -> set[str]:
    return {s.name for s in read(text).of(Signal) if s.name.startswith("prose-")}


# --- a trend: the memory grows over time -------------------------------------------------------------------

# https://github.com/waybarrios/vllm-mlx/issues/442
GROWS_OVER_TIME = (
    "vllm-mlx / MLX backend grows wired/Metal memory over time and eventually aborts with "
    "`kIOGPUCommandBufferCallbackErrorOutOfMemory`"
)
# https://github.com/LMCache/LMCache/issues/3767
GROWS_MONOTONICALLY = """\
When replaying a long timed trace (Mooncake `toolagent_trace.jsonl`, ~23K
  requests) against vLLM + LMCache v1 in embedded mode (LMCacheConnectorV1,
  `kv_role: kv_both`), the vLLM EngineCore process's `RssAnon`
  (anonymous-page RSS) grows monotonically. The host eventually OOM-kills
  EngineCore.
"""
# https://github.com/hiyouga/EasyR1/issues/159 ("during training the RAM keeps increasing, OOM happens")
GROWS_CHINESE = (
    "训练的时候内存会不断的增加，会出现OOM的情况，"
    "即使关掉了val的部分，还是很容易会OOM，更新了vllm版本后依然没有解决"
)
# https://github.com/ggml-org/llama.cpp/issues/23446: it grows with the context, which is the context's size.
GROWS_WITH_CONTEXT = (
    "VRAM grows monotonically by Δ_context × n_kv_heads × head_dim × sizeof(half) × 2 (K+V) per turn."
)


def test_a_memory_growing_over_time_is_read_however_it_is_said():
    for text in (GROWS_OVER_TIME, GROWS_MONOTONICALLY, GROWS_CHINESE):
        assert "prose-growth" in prose(text), text
        assert ranked(text)[0] == "memory-leak", text


def test_a_growth_with_the_context_is_no_trend():
    assert "prose-growth" not in prose(GROWS_WITH_CONTEXT)


def test_a_growth_in_a_log_line_is_no_sentence():
    line = "INFO 05-01 10:00:00 [monitor.py:12] memory grows monotonically since start (1.2 GiB)"
    assert "prose-growth" not in prose(line)
