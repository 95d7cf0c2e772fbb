"""config.json (a dict) -> ModelSpec.

The family reader is chosen by `model_type` (or, for configs without one, by `architectures`) from the
registry
filled by `oomguard.models.families`; this module adds what does not depend on the family: the dtype vLLM will
run in, the quantization, the name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oomguard.errors import ConfigError
from oomguard.models.families import FAMILY_READERS
from oomguard.models.families.base import Cfg, FamilyFacts
from oomguard.models.quantization import quantization_from_config, resolve_quantization
from oomguard.models.spec import DTYPE_BYTES, ModelSpec, Quantization

# `--dtype` spellings vLLM accepts -> canonical torch dtype name.
DTYPE_ALIASES: dict[str, str] = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "half": "float16",
    "fp16": "float16",
    "float32": "float32",
    "float": "float32",
    "fp32": "float32",
}
# NOTE: vLLM serves a float32 (or dtype-less) checkpoint in bfloat16 under --dtype auto
# (ModelConfig._resolve_auto_dtype).
AUTO_DTYPE_FOR_FLOAT32 = "bfloat16"

# For configs that lack `model_type`: the architecture class names of each family.
ARCHITECTURE_TYPES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "GraniteForCausalLM": "granite",
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "Gemma3ForConditionalGeneration": "gemma3",
    "Phi3ForCausalLM": "phi3",
    "PhiForCausalLM": "phi",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GptOssForCausalLM": "gpt_oss",
    "Llama4ForConditionalGeneration": "llama4",
    "Glm4MoeForCausalLM": "glm4_moe",
    "Qwen3NextForCausalLM": "qwen3_next",
    "NemotronHForCausalLM": "nemotron_h",
    "Mistral3ForConditionalGeneration": "mistral3",
    "Qwen2VLForConditionalGeneration": "qwen2_vl",
    "Qwen2_5_VLForConditionalGeneration": "qwen2_5_vl",
    "GraniteMoeForCausalLM": "granitemoe",
    "GraniteMoeHybridForCausalLM": "granitemoehybrid",
    "CohereForCausalLM": "cohere",
    "Cohere2ForCausalLM": "cohere2",
    "Starcoder2ForCausalLM": "starcoder2",
    "StableLmForCausalLM": "stablelm",
    "InternLM2ForCausalLM": "internlm2",
    "DeepseekForCausalLM": "deepseek",
    "Gemma4ForConditionalGeneration": "gemma4",
    "Gemma4ForCausalLM": "gemma4_text",
}


def supported_model_types() -> list[str]:
    return sorted(FAMILY_READERS)


def config_model_type(config: Mapping[str, Any]) -> str:
    """The registry key for a config: its model_type, else the first known architecture."""
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in FAMILY_READERS:
        return model_type
    architectures = config.get("architectures") or []
    if isinstance(architectures, list):
        for arch in architectures:
            if isinstance(arch, str) and ARCHITECTURE_TYPES.get(arch) in FAMILY_READERS:
                return ARCHITECTURE_TYPES[arch]
    shown = model_type if isinstance(model_type, str) else architectures
    raise ConfigError(
        f"config.json: model type {shown!r} is not supported "
        f"(supported model_type values: {', '.join(supported_model_types())})"
    )


def read_facts(config: Mapping[str, Any]) -> tuple[str, FamilyFacts]:
    if not isinstance(config, Mapping):
        raise ConfigError(f"config.json must hold a JSON object, got {type(config).__name__}")
    model_type = config_model_type(config)
    return model_type, FAMILY_READERS[model_type](Cfg(config))


def checkpoint_dtype(config: Mapping[str, Any]) -> str | None:
    """`torch_dtype` (transformers < 4.56) or `dtype` (newer), at the top or in text_config."""
    for where in (config, config.get("text_config")):
        if isinstance(where, Mapping):
            for key in ("torch_dtype", "dtype"):
                value = where.get(key)
                if isinstance(value, str):
                    name = value.replace("torch.", "")
                    if name in DTYPE_ALIASES:
                        return DTYPE_ALIASES[name]
    return None


def resolve_dtype(config_dtype: str | None, requested: str | None) -> str:
    """The dtype vLLM will run in: `--dtype` if given, else the checkpoint's (float32 -> bfloat16)."""
    if requested is not None and requested.lower() not in ("", "auto"):
        name = requested.lower().replace("torch.", "")
        if name not in DTYPE_ALIASES:
            raise ConfigError(
                f"--dtype {requested}: not a dtype vLLM accepts (auto, bfloat16, float16, float32)"
            )
        return DTYPE_ALIASES[name]
    if config_dtype is None or config_dtype == "float32":
        return AUTO_DTYPE_FOR_FLOAT32
    return config_dtype


def config_quantization(config: Mapping[str, Any]) -> Quantization | None:
    for where in (config, config.get("text_config")):
        if isinstance(where, Mapping) and where.get("quantization_config") is not None:
            return quantization_from_config(where["quantization_config"])
    return None


def spec_from_config(
    config: Mapping[str, Any], *, name: str = "", dtype: str | None = None, quantization: str | None = None
) -> ModelSpec:
    """Build the ModelSpec of one config.json dict, as vLLM would load it with `--dtype` /
    `--quantization`."""
    model_type, facts = read_facts(config)
    stored_dtype = checkpoint_dtype(config)
    run_dtype = resolve_dtype(stored_dtype, dtype)
    assert run_dtype in DTYPE_BYTES
    quant = resolve_quantization(config_quantization(config), quantization)
    architectures = config.get("architectures") or [""]
    shape = facts.shape
    return ModelSpec(
        name=name,
        architecture=str(architectures[0]) if isinstance(architectures, list) and architectures else "",
        model_type=model_type,
        dtype=run_dtype,
        hidden_size=shape.hidden_size,
        num_hidden_layers=len(facts.layers),
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        head_dim=shape.head_dim,
        intermediate_size=shape.intermediate_size,
        vocab_size=shape.vocab_size,
        max_position_embeddings=shape.max_position_embeddings,
        tie_word_embeddings=shape.tie_word_embeddings,
        layers=tuple(facts.layers),
        tensors=tuple(facts.inventory.tensors),
        rotary_dim=facts.rotary_dim,
        rope_caches=facts.rope_caches,
        checkpoint_dtype=stored_dtype,
        quantization=quant,
        vision=facts.vision,
        mtp_layers=facts.mtp_layers,
        notes=tuple(facts.notes),
    )
