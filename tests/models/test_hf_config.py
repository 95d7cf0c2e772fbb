"""config.json -> ModelSpec, checked against the verified facts in ../shared/data/models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomguard.models.hf_config import spec_from_config
from oomguard.models.spec import FullAttention, SlidingWindowAttention


def load_config(shared_data: Path, model_id: str) -> dict[str, object]:
    return json.loads((shared_data / "models" / "configs" / model_id / "config.json").read_text())


def catalog_record(shared_data: Path, model_id: str) -> dict[str, object]:
    for line in (shared_data / "models" / "catalog.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["hf_id"] == model_id:
            return record
    raise KeyError(model_id)


@pytest.mark.parametrize("model_id", ["Qwen/Qwen3-14B", "Qwen/Qwen3-0.6B", "Qwen/Qwen2.5-1.5B-Instruct"])
def test_dense_parameter_count_matches_the_catalog(shared_data: Path, model_id: str) -> None:
    spec = spec_from_config(load_config(shared_data, model_id), name=model_id)
    expected = catalog_record(shared_data, model_id)["params_computed_from_config"]
    assert isinstance(expected, dict)
    assert spec.num_params == expected["total"]


def test_qwen25_inert_sliding_window_is_full_attention(shared_data: Path) -> None:
    config = load_config(shared_data, "Qwen/Qwen2.5-1.5B-Instruct")
    assert config["sliding_window"] and config["use_sliding_window"] is False
    spec = spec_from_config(config)
    assert all(isinstance(layer.attention, FullAttention) for layer in spec.layers)


def test_mistral_v01_window_slides_on_every_layer(shared_data: Path) -> None:
    # Mistral-7B-v0.1's config is Mistral-Small's text shape with its real 4096 window (public config fields).
    config = {
        "model_type": "mistral",
        "architectures": ["MistralForCausalLM"],
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "sliding_window": 4096,
        "torch_dtype": "bfloat16",
    }
    spec = spec_from_config(config)
    assert {layer.attention for layer in spec.layers} == {SlidingWindowAttention(8, 128, 128, 4096)}
    assert spec.num_params == 7_241_732_096


def test_tied_embeddings_have_no_lm_head(shared_data: Path) -> None:
    spec = spec_from_config(load_config(shared_data, "Qwen/Qwen3-0.6B"))
    names = {t.name for t in spec.tensors}
    assert spec.tie_word_embeddings and "lm_head.weight" not in names and "model.embed_tokens.weight" in names
