"""Per-rank weight bytes: placement rules, checked against vLLM's measured "Model loading took" figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomguard.models.resolve import resolve_model
from oomguard.models.spec import Role
from oomguard.models.weights import (
    RankPlacement,
    experts_on_rank,
    pp_layer_range,
    rank_weight_bytes,
    rope_cache_bytes,
)
from oomguard.units import GiB


def measured_rows(shared_data: Path, model: str) -> list[dict[str, object]]:
    rows = [
        json.loads(line)
        for line in (shared_data / "validation" / "vllm_startup_dev.jsonl").read_text().splitlines()
    ]
    return [r for r in rows if r["model"] == model and r["measured"]["weights_gib"] is not None]


def loaded_gib(model: str, tp: int) -> float:
    spec = resolve_model(model)
    return (rank_weight_bytes(spec, RankPlacement(tp_size=tp)).total + rope_cache_bytes(spec)) / GiB


@pytest.mark.parametrize(
    "model",
    [
        "codellama/CodeLlama-7b-hf",
        "google/gemma-2-27b-it",
        "google/gemma-3-4b-it",
        "Qwen/Qwen3-14B",
        "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
        "Qwen/Qwen1.5-MoE-A2.7B",
        "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
        "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8",
    ],
)
def test_rank_weights_match_vllm_model_loading_within_one_percent(shared_data: Path, model: str) -> None:
    rows = measured_rows(shared_data, model)
    assert rows
    for row in rows:
        measured = float(row["measured"]["weights_gib"])  # type: ignore[index]
        assert loaded_gib(model, int(row["tp"])) == pytest.approx(measured, rel=0.01)  # type: ignore[arg-type]


def test_pipeline_remainder_goes_to_the_stages_before_the_last() -> None:
    assert [len(pp_layer_range(22, 4, r)) for r in range(4)] == [5, 6, 6, 5]
    assert [pp_layer_range(61, 2, r) for r in range(2)] == [range(31), range(31, 61)]


def test_last_stage_of_a_tied_model_holds_the_embedding_as_its_head() -> None:
    spec = resolve_model("Qwen/Qwen3-0.6B")
    first = RankPlacement.for_stage(spec, pp_size=2, pp_rank=0)
    last = RankPlacement.for_stage(spec, pp_size=2, pp_rank=1)
    assert (
        rank_weight_bytes(spec, last).of(Role.EMBEDDING)
        == rank_weight_bytes(spec, first).of(Role.EMBEDDING)
        > 0
    )
    assert rank_weight_bytes(spec, first).of(Role.NORM) < rank_weight_bytes(spec, last).of(Role.NORM)


def test_kv_projections_are_replicated_when_tp_exceeds_kv_heads() -> None:
    spec = resolve_model("meta-llama/Llama-3.1-70B-Instruct")  # 8 KV heads
    k_proj = next(t for t in spec.tensors if t.name == "model.layers.0.self_attn.k_proj.weight")
    from oomguard.models.weights import rank_tensor_bytes

    at8 = rank_tensor_bytes(k_proj, spec, RankPlacement(tp_size=8))
    assert rank_tensor_bytes(k_proj, spec, RankPlacement(tp_size=16)) == at8  # one head per rank either way


def test_expert_parallel_places_whole_experts_with_the_remainder_first() -> None:
    assert [experts_on_rank(256 + 32, 24, r) for r in (0, 23)] == [12, 12]
    assert [experts_on_rank(10, 4, r) for r in range(4)] == [3, 3, 2, 2]


def test_expert_parallel_and_tp_sharding_hold_the_same_expert_bytes_in_total() -> None:
    spec = resolve_model("Qwen/Qwen3-30B-A3B")
    sharded = rank_weight_bytes(spec, RankPlacement(tp_size=4)).of(Role.EXPERTS)
    whole = [
        rank_weight_bytes(spec, RankPlacement(tp_size=4, ep_size=4, ep_rank=r)).of(Role.EXPERTS)
        for r in range(4)
    ]
    assert sum(whole) == 4 * sharded


def test_redundant_experts_add_weight_on_ep_ranks() -> None:
    spec = resolve_model("Qwen/Qwen3-30B-A3B")
    plain = rank_weight_bytes(spec, RankPlacement(tp_size=8, ep_size=8)).of(Role.EXPERTS)
    eplb = rank_weight_bytes(spec, RankPlacement(tp_size=8, ep_size=8, redundant_experts=8)).of(Role.EXPERTS)
    assert eplb == plain * 17 // 16


def test_mtp_weights_load_only_when_asked() -> None:
    spec = resolve_model("deepseek-ai/DeepSeek-V3")
    assert rank_weight_bytes(spec, RankPlacement(tp_size=8)).of(Role.MTP) == 0
    assert rank_weight_bytes(spec, RankPlacement(tp_size=8, load_mtp=True)).of(Role.MTP) > 0


def test_rope_cache_is_positions_times_rotary_dim_in_model_dtype() -> None:
    assert rope_cache_bytes(resolve_model("meta-llama/Llama-3.1-8B-Instruct")) == 131072 * 128 * 2
    # Gemma-3: a linear-scaled (x8) global cache plus the unscaled local one.
    assert rope_cache_bytes(resolve_model("google/gemma-3-4b-it")) == (131072 * 8 + 131072) * 256 * 2
