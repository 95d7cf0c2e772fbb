"""Every verified record in ../shared/data/models/catalog.jsonl: parameter count, checkpoint bytes and
attention layout rebuilt from config.json facts alone."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from oomguard.models.resolve import resolve_model
from oomguard.models.spec import ModelSpec, Role
from oomguard.models.weights import checkpoint_weight_bytes

SHARED_CATALOG = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "models" / "catalog.jsonl"
RECORDS = (
    [json.loads(line) for line in SHARED_CATALOG.read_text().splitlines() if line.strip()]
    if SHARED_CATALOG.is_file()
    else []
)


def main_model_params(spec: ModelSpec, scope: str) -> int:
    """The catalog counts the main model: MTP apart, and for 'text decoder only' records no vision tower."""
    skip = {Role.MTP} | ({Role.VISION} if "text decoder only" in scope else set())
    return sum(t.numel for t in spec.tensors if t.role not in skip)


@pytest.mark.parametrize("record", RECORDS, ids=[r["hf_id"] for r in RECORDS])
def test_parameter_count_matches_the_verified_count(record: dict[str, object]) -> None:
    spec = resolve_model(str(record["hf_id"]))
    computed = record["params_computed_from_config"]
    assert isinstance(computed, dict)
    assert main_model_params(spec, str(computed.get("scope", ""))) == computed["total"]
    if "mtp_layer" in computed:
        assert sum(t.numel for t in spec.tensors if t.role == Role.MTP) == computed["mtp_layer"]
    if "vision_plus_projector" in computed:
        assert (
            sum(t.numel for t in spec.tensors if t.role == Role.VISION) == computed["vision_plus_projector"]
        )


SIZED = [r for r in RECORDS if (r.get("safetensors_total_size") or {}).get("bytes")]


@pytest.mark.parametrize("record", SIZED, ids=[r["hf_id"] for r in SIZED])
def test_checkpoint_bytes_match_the_published_safetensors_total_size(record: dict[str, object]) -> None:
    spec = resolve_model(str(record["hf_id"]))
    total = record["safetensors_total_size"]
    assert isinstance(total, dict)
    assert checkpoint_weight_bytes(spec).total == total["bytes"]


def kinds(model_id: str) -> Counter[str]:
    return Counter(layer.attention.kind for layer in resolve_model(model_id).layers)


def test_gemma3_is_five_local_to_one_global() -> None:
    assert kinds("google/gemma-3-27b-it") == {"sliding_window": 52, "full": 10}


def test_gemma2_alternates_local_and_global() -> None:
    assert kinds("google/gemma-2-9b-it") == {"sliding_window": 21, "full": 21}


def test_gpt_oss_alternates_128_token_window_and_full() -> None:
    spec = resolve_model("openai/gpt-oss-120b")
    assert spec.layers[0].attention.kind == "sliding_window" and spec.layers[1].attention.kind == "full"
    assert {getattr(layer.attention, "window", None) for layer in spec.layers[::2]} == {128}


def test_llama4_has_chunked_rope_layers_and_a_global_every_fourth() -> None:
    assert kinds("meta-llama/Llama-4-Maverick-17B-128E-Instruct") == {"chunked_local": 36, "full": 12}


def test_qwen3_next_has_a_full_attention_layer_every_fourth_and_deltanet_state_elsewhere() -> None:
    spec = resolve_model("Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert kinds("Qwen/Qwen3-Next-80B-A3B-Instruct") == {"mamba": 36, "full": 12}
    state = spec.layers[0].attention
    assert state.kind == "mamba" and state.state_shapes == ((3, 8192), (32, 128, 128))


def test_deepseek_mla_latent_and_dense_first_layers() -> None:
    spec = resolve_model("deepseek-ai/DeepSeek-V3")
    assert spec.uses_mla and {layer.attention.latent_size for layer in spec.layers} == {576}
    assert [layer.mlp.kind for layer in spec.layers[:4]] == ["dense", "dense", "dense", "moe"]
    assert spec.moe is not None and spec.moe.num_shared_experts == 1 and spec.mtp_layers == 1


def test_v2_lite_without_q_lora_has_a_plain_q_proj() -> None:
    names = {t.name for t in resolve_model("deepseek-ai/DeepSeek-V2-Lite").tensors}
    assert "model.layers.0.self_attn.q_proj.weight" in names
    assert "model.layers.0.self_attn.q_a_proj.weight" not in names
