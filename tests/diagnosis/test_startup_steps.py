"""The startup step a failure is in, and the engines' own words for a KV pool too small to start (issue 8):
each mechanism from the engine's code or a public thread, with a near-miss text of another class that must
not be taken for it."""

from __future__ import annotations

import io

from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.evidence import Evidence, Signal
from oomguard.diagnosis.read import read_one, require_evidence


def ranked(text: str) -> list[str]:
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), evidence)
    require_evidence(evidence)
    return [c.cls for c in diagnose(evidence).causes]


def signals(text: str) -> set[str]:
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), evidence)
    return {s.name for s in evidence.of(Signal)}


# vLLM v0.12+ vllm/config/compilation.py (resolve_cudagraph_mode_and_sizes, see vllm-project/vllm#34094): a
# hybrid model's recurrent-state pool holds one block per running sequence, sized from the KV budget.
STATE_BLOCKS_REFUSAL = (
    "(EngineCore pid=196) ValueError: max_num_seqs (256) exceeds available Mamba cache blocks (73). Each "
    "decode sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower "
    "max_num_seqs to at most 73 or increase gpu_memory_utilization."
)
# A sentence about the same pool that reports no refusal (a sizing note, not a failure).
STATE_BLOCKS_SIZING_NOTE = (
    "With --max-num-seqs 64 the engine starts fine: the hybrid model has 122 Mamba cache blocks at "
    "--gpu-memory-utilization 0.9, so 64 sequences fit."
)


def test_too_few_state_blocks_for_max_num_seqs_is_the_pool_at_startup() -> None:
    causes = ranked(STATE_BLOCKS_REFUSAL)
    assert causes[0] == "kv-cache-insufficient-at-startup"
    assert "cuda-graph-capture" not in causes[:1]
    assert "state-blocks-below-max-seqs" not in signals(STATE_BLOCKS_SIZING_NOTE)
