"""The bundled model catalog (models.jsonl) as data: well-formed, unique, sourced, and faithful to the
verified facts in ../shared/data/models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

CATALOG = Path(__file__).resolve().parents[2] / "src" / "oomguard" / "models" / "catalog" / "models.jsonl"


def _records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CATALOG.read_text(encoding="utf-8").splitlines() if line.strip()]


RECORDS = _records()
BY_ID = {r["id"]: r for r in RECORDS}


def _text(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's keys: multimodal configs nest them under text_config."""
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, dict) else config


def test_every_line_is_one_record_with_the_documented_keys() -> None:
    lines = [line for line in CATALOG.read_text(encoding="utf-8").splitlines() if line.strip()]
    for line in lines:
        record = json.loads(line)
        assert set(record) == {"id", "aliases", "config", "safetensors_total_size", "sources"}, record.get(
            "id"
        )
        assert isinstance(record["config"], dict)
        assert record["safetensors_total_size"] is None or (
            isinstance(record["safetensors_total_size"], int) and record["safetensors_total_size"] > 0
        )


def test_catalog_holds_at_least_ninety_models() -> None:
    assert len(RECORDS) >= 90


def test_ids_are_unique_hub_ids() -> None:
    ids = [r["id"] for r in RECORDS]
    assert len(ids) == len(set(ids))
    assert len({i.lower() for i in ids}) == len(ids)
    assert all(i.count("/") == 1 and " " not in i for i in ids)


def test_aliases_are_lowercase_and_name_one_model_only() -> None:
    owner: dict[str, str] = {r["id"].lower(): r["id"] for r in RECORDS}
    for record in RECORDS:
        for alias in record["aliases"]:
            assert alias == alias.lower() and alias.strip() == alias and alias, record["id"]
            assert owner.setdefault(alias, record["id"]) == record["id"], f"{alias} names two models"


def test_every_record_says_where_its_config_was_read() -> None:
    for record in RECORDS:
        assert record["sources"] and all(isinstance(s, str) and s.strip() for s in record["sources"]), record[
            "id"
        ]


def test_every_record_names_its_architecture() -> None:
    for record in RECORDS:
        config = record["config"]
        assert isinstance(config.get("model_type"), str) and config["model_type"], record["id"]
        assert isinstance(config.get("architectures"), list) and config["architectures"], record["id"]


# Gemma-3 multimodal configs are sparse: their text_config leaves vocab_size (and for 4b the head
# count) to transformers' Gemma3TextConfig defaults, as the real files do.
SPARSE_BY_DESIGN = {"gemma3"}


def test_every_record_has_the_shape_keys_of_a_decoder() -> None:
    for record in RECORDS:
        config = record["config"]
        text = _text(config)
        required = ["hidden_size", "num_hidden_layers"]
        if config["model_type"] not in SPARSE_BY_DESIGN:
            required += ["num_attention_heads", "vocab_size"]
        missing = [k for k in required if k not in text]
        assert not missing, f"{record['id']} lacks {missing}"


MOE_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


@pytest.mark.parametrize("record", RECORDS, ids=[r["id"] for r in RECORDS])
def test_family_specific_shape_keys(record: dict[str, Any]) -> None:
    config = record["config"]
    text = _text(config)
    model_type = text.get("model_type", config["model_type"])
    if model_type in (
        "mixtral",
        "qwen2_moe",
        "qwen3_moe",
        "deepseek_v2",
        "deepseek_v3",
        "kimi_k2",
        "glm4_moe",
        "gpt_oss",
        "llama4_text",
        "qwen3_next",
        "deepseek",
        "granitemoe",
        "phimoe",
    ):
        assert any(k in text for k in MOE_EXPERT_KEYS), "MoE without an expert count"
        assert "num_experts_per_tok" in text or "experts_per_token" in text
    if model_type in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            assert key in text, f"MLA without {key}"
    if model_type == "qwen3_next":
        for key in (
            "full_attention_interval",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
        ):
            assert key in text
    if model_type == "gpt_oss":
        assert text.get("sliding_window") == 128 and "layer_types" in text
    if model_type == "llama4_text":
        assert text.get("attention_chunk_size") and "interleave_moe_layer_step" in text
    quant = config.get("quantization_config")
    if quant is not None:
        assert quant.get("quant_method"), "quantization_config without quant_method"


def test_the_families_users_serve_are_covered() -> None:
    model_types = {r["config"]["model_type"] for r in RECORDS}
    for family in (
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "qwen3_next",
        "gemma",
        "gemma2",
        "gemma3",
        "phi3",
        "granite",
        "deepseek_v2",
        "deepseek_v3",
        "gpt_oss",
        "llama4",
        "glm4_moe",
        "kimi_k2",
    ):
        assert family in model_types, family


def test_quantized_checkpoints_of_several_methods_are_covered() -> None:
    methods = {(r["config"].get("quantization_config") or {}).get("quant_method") for r in RECORDS}
    for method in ("fp8", "compressed-tensors", "awq", "mxfp4"):
        assert method in methods, method


# --- faithful to ../shared/data/models -------------------------------------------------------------------

SHAPE_FACTS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "max_position_embeddings",
)


def _shared_records(shared_data: Path) -> list[dict[str, Any]]:
    path = shared_data / "models" / "catalog.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_all_shared_verified_models_are_present_with_the_same_shape(shared_data: Path) -> None:
    shared = _shared_records(shared_data)
    assert len(shared) == 45
    for fact in shared:
        record = BY_ID.get(fact["hf_id"])
        assert record is not None, f"{fact['hf_id']} missing from the catalog"
        text = _text(record["config"])
        for key in SHAPE_FACTS:
            if fact.get(key) is None or (
                key not in text and record["config"]["model_type"] in SPARSE_BY_DESIGN
            ):
                continue
            assert text.get(key) == fact[key], f"{fact['hf_id']}: {key} {text.get(key)} != {fact[key]}"
        if fact.get("head_dim") is not None and "head_dim" in text:
            assert text["head_dim"] == fact["head_dim"], fact["hf_id"]
        if isinstance(fact.get("tie_word_embeddings"), bool) and "tie_word_embeddings" in text:
            assert text["tie_word_embeddings"] == fact["tie_word_embeddings"], fact["hf_id"]
        assert text["model_type"] in (fact["model_type"], fact.get("text_model_type")), fact["hf_id"]


def test_moe_and_mla_facts_match_the_shared_records(shared_data: Path) -> None:
    for fact in _shared_records(shared_data):
        text = _text(BY_ID[fact["hf_id"]]["config"])
        moe = fact.get("moe") or {}
        for key in ("num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok"):
            if moe.get(key) is not None:
                assert text.get(key) == moe[key], f"{fact['hf_id']}: {key}"
        for key, value in (fact.get("mla") or {}).items():
            if key in text:
                assert text[key] == value, f"{fact['hf_id']}: {key}"


def test_real_config_files_are_carried_verbatim(shared_data: Path) -> None:
    """Every key of the real config.json files that the catalog keeps has the file's value."""
    for path in sorted((shared_data / "models" / "configs").glob("*/*/config.json")):
        model_id = f"{path.parent.parent.name}/{path.parent.name}"
        real = json.loads(path.read_text())
        record = BY_ID.get(model_id)
        assert record is not None, model_id
        for key, value in record["config"].items():
            assert real.get(key) == value, f"{model_id}: {key}"
        for key in ("hidden_size", "num_hidden_layers", "quantization_config", "text_config", "layer_types"):
            if key in real:
                assert key in record["config"], f"{model_id} dropped {key}"


def test_published_checkpoint_sizes_are_twice_the_bf16_parameter_count_where_recorded() -> None:
    """Where safetensors_total_size is known for an unquantized bf16 checkpoint, it is even (2 bytes each)."""
    for record in RECORDS:
        total = record["safetensors_total_size"]
        if total and not record["config"].get("quantization_config"):
            assert total % 2 == 0, record["id"]
