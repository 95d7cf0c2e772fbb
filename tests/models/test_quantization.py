"""quantization_config -> Quantization, and the bytes each storage layout costs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomguard.errors import ConfigError
from oomguard.models.hf_config import spec_from_config
from oomguard.models.quantization import is_skipped, quantization_from_config, quantized_matrix_bytes
from oomguard.models.resolve import resolve_model
from oomguard.models.spec import Quantization
from oomguard.models.weights import (
    RankPlacement,
    checkpoint_weight_bytes,
    rank_weight_bytes,
    rope_cache_bytes,
)


def config(shared_data: Path, model: str) -> dict[str, object]:
    return json.loads((shared_data / "models" / "configs" / model / "config.json").read_text())


def test_fp8_block_scales_are_one_fp32_per_128_by_128_block(shared_data: Path) -> None:
    quant = quantization_from_config(config(shared_data, "deepseek-ai/DeepSeek-R1")["quantization_config"])
    assert quant.method == "fp8" and quant.block == (128, 128)
    assert quantized_matrix_bytes(7168, 2048, quant, 2) == 7168 * 2048 + 56 * 16 * 4


def test_awq_layout_is_packed_int4_zeros_and_fp16_group_scales(shared_data: Path) -> None:
    quant = quantization_from_config(config(shared_data, "Qwen/Qwen3-14B-AWQ")["quantization_config"])
    assert (quant.method, quant.weight_bits, quant.group_size) == ("awq", 4, 128)
    out_f, in_f = 5120, 17408
    groups = in_f // 128
    assert (
        quantized_matrix_bytes(out_f, in_f, quant, 2)
        == out_f * in_f // 2 + groups * out_f // 2 + groups * out_f * 2
    )


def test_gptq_adds_an_int32_g_idx_per_input_channel() -> None:
    gptq = quantization_from_config({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True})
    awq = quantization_from_config({"quant_method": "awq", "bits": 4, "group_size": 128})
    assert (
        quantized_matrix_bytes(4096, 4096, gptq, 2) - quantized_matrix_bytes(4096, 4096, awq, 2) == 4096 * 4
    )


def test_mxfp4_is_half_a_byte_plus_one_scale_byte_per_32() -> None:
    quant = quantization_from_config({"quant_method": "mxfp4"})
    assert quantized_matrix_bytes(2880, 2880, quant, 2) == 2880 * 2880 // 2 + 2880 * 2880 // 32


def test_nvfp4_is_half_a_byte_plus_one_fp8_scale_per_16() -> None:
    quant = quantization_from_config({"quantization": {"quant_algo": "NVFP4", "group_size": 16}})
    assert quant.method == "modelopt_fp4"
    assert quantized_matrix_bytes(4096, 4096, quant, 2) == 4096 * 4096 // 2 + 4096 * 4096 // 16 + 8


def test_bitsandbytes_nested_quant_shrinks_the_absmax() -> None:
    plain = quantization_from_config({"quant_method": "bitsandbytes", "load_in_4bit": True})
    nested = quantization_from_config(
        {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_use_double_quant": True}
    )
    assert quantized_matrix_bytes(4096, 4096, nested, 2) < quantized_matrix_bytes(4096, 4096, plain, 2)
    assert quantized_matrix_bytes(4096, 4096, plain, 2) > 4096 * 4096 // 2


def test_gpt_oss_keeps_attention_router_and_embeddings_in_bf16(shared_data: Path) -> None:
    spec = spec_from_config(config(shared_data, "openai/gpt-oss-20b"))
    assert spec.quantization is not None
    assert is_skipped("model.layers.3.self_attn.q_proj.weight", spec.quantization)
    assert is_skipped("model.layers.3.mlp.router.weight", spec.quantization)
    assert not is_skipped("model.layers.3.mlp.experts.gate_up_proj", spec.quantization)


def test_compressed_tensors_ignore_keeps_lm_head_unquantized(shared_data: Path) -> None:
    spec = resolve_model("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8")
    assert spec.quantization is not None and spec.quantization.scheme == "int"
    assert is_skipped("lm_head.weight", spec.quantization)


def test_runtime_fp8_of_a_bf16_checkpoint_halves_the_linears() -> None:
    bf16 = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    fp8 = resolve_model("meta-llama/Llama-3.1-8B-Instruct", quantization="fp8")
    assert fp8.quantization == Quantization(method="fp8", weight_bits=8, scale_bytes=4, from_config=False)
    saved = checkpoint_weight_bytes(bf16).total - checkpoint_weight_bytes(fp8).total
    linears = sum(t.numel for t in bf16.tensors if t.quantizable and len(t.shape) == 2)
    assert linears - 2 * 4 * 224 <= saved <= linears  # one fp32 scale per quantized matrix stays


def test_runtime_fp8_matches_vllms_measured_8b_load() -> None:
    # ACCOUNTING.md section 4: online `--quantization fp8` of Llama-3.1-8B measured 8.49 GiB.
    spec = resolve_model("meta-llama/Llama-3.1-8B-Instruct", quantization="fp8")
    loaded = rank_weight_bytes(spec, RankPlacement()).total + rope_cache_bytes(spec)
    assert loaded / (1 << 30) == pytest.approx(8.49, abs=0.01)


def test_unknown_quant_method_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unsupported quant_method"):
        quantization_from_config({"quant_method": "magic-2bit"})


def test_runtime_method_vllm_cannot_apply_online_is_refused() -> None:
    with pytest.raises(ConfigError, match="load time"):
        resolve_model("meta-llama/Llama-3.1-8B-Instruct", quantization="awq")
