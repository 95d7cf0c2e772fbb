"""Family readers added for wider coverage: every catalog id resolves; each new family's parameter count meets
a
published figure and its per-layer attention kinds (what sizes the KV cache) are exact."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from oomguard.engines.vllm.kv import layer_specs
from oomguard.errors import ConfigError
from oomguard.models.families.common import mamba2_state
from oomguard.models.hf_config import spec_from_config
from oomguard.models.resolve import catalog_ids, resolve_model
from oomguard.models.spec import FullAttention, MambaState, ModelSpec, MoeMlp, Role, SlidingWindowAttention
from oomguard.models.weights import RankPlacement, rank_tensor_bytes, rank_weight_bytes
from oomguard.planning import PlanRequest, plan


@pytest.mark.parametrize("model_id", catalog_ids())
def test_every_catalog_entry_resolves_to_a_consistent_spec(model_id: str) -> None:
    spec = resolve_model(model_id)
    assert spec.num_hidden_layers == len(spec.layers) > 0
    assert spec.num_params > 0
    # every decoder-layer tensor belongs to a layer the planner can place (MTP blocks follow the main stack)
    assert all(
        t.layer is None or 0 <= t.layer < spec.num_hidden_layers for t in spec.tensors if t.role != Role.MTP
    )


def kinds(spec: ModelSpec) -> Counter[str]:
    return Counter(layer.attention.kind for layer in spec.layers)


# Published sizes (Hugging Face model pages, computed there from the safetensors headers; DeepSeek-MoE paper).
PUBLISHED = {
    "bigcode/starcoder2-7b": 7.17e9,
    "CohereForAI/aya-23-8B": 8.03e9,
    "deepseek-ai/deepseek-moe-16b-base": 16.4e9,
    "internlm/internlm2_5-7b-chat": 7.74e9,
    "stabilityai/stablelm-2-zephyr-1_6b": 1.64e9,
    "HuggingFaceTB/SmolLM-1.7B-Instruct": 1.71e9,
}


@pytest.mark.parametrize("model_id", sorted(PUBLISHED))
def test_parameter_count_meets_the_published_size(model_id: str) -> None:
    assert resolve_model(model_id).num_params == pytest.approx(PUBLISHED[model_id], rel=0.005)


def test_starcoder2_slides_a_4096_window_on_every_layer_and_ties_its_head() -> None:
    spec = resolve_model("bigcode/starcoder2-7b")
    assert {layer.attention for layer in spec.layers} == {SlidingWindowAttention(4, 128, 128, 4096)}
    assert spec.tie_word_embeddings and "lm_head.weight" not in {t.name for t in spec.tensors}


def test_cohere_has_no_lm_head_and_full_attention() -> None:
    spec = resolve_model("CohereForAI/aya-23-8B")
    assert kinds(spec) == {"full": 32}
    assert not any(t.name == "lm_head.weight" for t in spec.tensors)


def test_cohere2_is_three_sliding_to_one_global() -> None:
    config = {
        "model_type": "cohere2",
        "architectures": ["Cohere2ForCausalLM"],
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 256000,
        "sliding_window": 4096,
        "sliding_window_pattern": 4,
    }
    spec = spec_from_config(config)
    assert kinds(spec) == {"sliding_window": 24, "full": 8}
    assert spec.layers[3].attention.kind == "full" and spec.layers[0].attention.kind == "sliding_window"


def test_deepseek_moe_v1_is_mha_with_a_dense_first_layer_and_two_shared_experts() -> None:
    spec = resolve_model("deepseek-ai/deepseek-moe-16b-base")
    assert {layer.attention for layer in spec.layers} == {FullAttention(16, 128, 128)}
    assert spec.layers[0].mlp.kind == "dense" and spec.layers[1].mlp.kind == "moe"
    moe = spec.moe
    assert moe is not None and (moe.num_experts, moe.experts_per_token, moe.num_shared_experts) == (64, 6, 2)
    assert not any("e_score_correction_bias" in t.name for t in spec.tensors)


def test_internlm2_fuses_qkv_with_the_kv_heads() -> None:
    spec = resolve_model("internlm/internlm2_5-7b-chat")
    wqkv = next(t for t in spec.tensors if t.name == "model.layers.0.attention.wqkv.weight")
    assert wqkv.shape == ((32 + 2 * 8) * 128, 4096)
    assert {layer.attention for layer in spec.layers} == {FullAttention(8, 128, 128)}


@pytest.mark.parametrize("model_type", ["starcoder2", "stablelm", "internlm2", "granitemoehybrid"])
def test_zero_attention_heads_is_a_config_error_in_readers_that_divide_by_them(model_type: str) -> None:
    # these families take head_dim = hidden / heads whatever the config says
    config = {
        "model_type": model_type,
        "hidden_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 0,
        "intermediate_size": 128,
        "vocab_size": 100,
    }
    with pytest.raises(ConfigError, match="num_attention_heads"):
        spec_from_config(config)


def test_stablelm2_has_layernorm_biases_and_qkv_bias() -> None:
    names = {t.name for t in resolve_model("stabilityai/stablelm-2-zephyr-1_6b").tensors}
    assert {
        "model.layers.0.input_layernorm.bias",
        "model.layers.0.self_attn.q_proj.bias",
        "model.norm.bias",
    } <= names
    assert "model.layers.0.self_attn.o_proj.bias" not in names


# --- Gemma 4 --------------------------------------------------------------------------------------------


def test_gemma4_sliding_and_full_layers_differ_in_head_size_and_kv_heads(shared_data: Path) -> None:
    config = json.loads((shared_data / "models/configs/google/gemma-4-26B-A4B/config.json").read_text())
    spec = spec_from_config(config)
    text = config["text_config"]
    for kind, layer in zip(text["layer_types"], spec.layers):
        if kind == "full_attention":
            assert layer.attention == FullAttention(2, 512, 512)
        else:
            assert layer.attention == SlidingWindowAttention(8, 256, 256, 1024)
    assert kinds(spec) == {"sliding_window": 25, "full": 5}


def test_gemma4_k_eq_v_full_layers_store_no_v_proj(shared_data: Path) -> None:
    config = json.loads((shared_data / "models/configs/google/gemma-4-26B-A4B/config.json").read_text())
    names = {t.name for t in spec_from_config(config).tensors}
    assert "model.language_model.layers.5.self_attn.k_proj.weight" in names
    assert "model.language_model.layers.5.self_attn.v_proj.weight" not in names
    assert "model.language_model.layers.4.self_attn.v_proj.weight" in names


def test_gemma4_moe_block_runs_beside_the_dense_mlp(shared_data: Path) -> None:
    config = json.loads((shared_data / "models/configs/google/gemma-4-26B-A4B/config.json").read_text())
    spec = spec_from_config(config)
    mlp = spec.layers[0].mlp
    assert isinstance(mlp, MoeMlp)
    assert (mlp.num_experts, mlp.experts_per_token, mlp.expert_intermediate_size) == (128, 8, 704)
    assert mlp.shared_expert_intermediate_size == 2112
    experts = sum(t.numel for t in spec.tensors if t.role.value == "experts")
    assert experts == 30 * 128 * 3 * 704 * 2816


def test_gemma4_vision_tower_is_counted(shared_data: Path) -> None:
    config = json.loads((shared_data / "models/configs/google/gemma-4-26B-A4B/config.json").read_text())
    spec = spec_from_config(config)
    assert spec.vision is not None and spec.vision.num_layers == 27
    vc = config["vision_config"]
    h, inter, hd = vc["hidden_size"], vc["intermediate_size"], vc["head_dim"]
    per_layer = 4 * h * h + 3 * h * inter + 4 * h + 2 * hd
    expected = (
        27 * per_layer
        + h * 3 * 16 * 16
        + 2 * vc["position_embedding_size"] * h
        + config["text_config"]["hidden_size"] * h
    )
    assert spec.vision.num_params == expected


def test_gemma4_without_layer_types_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="layer_types"):
        spec_from_config(
            {
                "model_type": "gemma4_text",
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "intermediate_size": 128,
                "vocab_size": 100,
                "sliding_window": 16,
            }
        )


# --- Mamba2 hybrids -------------------------------------------------------------------------------------


def vllm_mamba2_state_bytes(
    heads: int, head_dim: int, state: int, groups: int, kernel: int, tp: int, conv_bytes: int, ssm_bytes: int
) -> int:
    """vLLM MambaStateShapeCalculator.mamba2_state_shape, written out: groups padded up to TP when TP does
    not divide them, conv (kernel - 1) x (I + 2·G·N) / TP, SSM (heads / TP) x head_dim x N."""
    padded = groups + (0 if groups % tp == 0 else tp - groups)
    conv = (kernel - 1) * (heads * head_dim + 2 * padded * state) // tp
    return conv * conv_bytes + heads // tp * head_dim * state * ssm_bytes


def oomguard_state_bytes(state: MambaState, tp: int, element: dict[str, int]) -> int:
    total = 0
    for shape, dtype, split in zip(state.state_shapes, state.state_dtypes, state.tp_split_dims):
        dims = list(shape)
        if split is not None:
            dims[split] = -(-dims[split] // tp)
        total += math.prod(dims) * element[dtype]
    return total


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("groups", [1, 8])
def test_mamba2_state_matches_vllm_shape_calculator_at_every_tp(tp: int, groups: int) -> None:
    # Nemotron-H shape from vLLM's own test (32 heads x 64, 8 groups, N 128, kernel 4), and Granite's 1 group.
    state = mamba2_state(32, 64, 128, groups, 4, ssm_dtype="float32")
    got = oomguard_state_bytes(state, tp, {"auto": 2, "float32": 4})
    assert got == vllm_mamba2_state_bytes(32, 64, 128, groups, 4, tp, conv_bytes=2, ssm_bytes=4)


# granite-4.0-h-small's config fields as quoted publicly. The quote tallies layer_types (36 mamba, 4
# attention)
# without their order, so the order here is the test's own (it changes neither counts nor bytes); that is also
# why this model is not in the bundled catalog.
GRANITE_H_SMALL: dict[str, Any] = {
    "architectures": ["GraniteMoeHybridForCausalLM"],
    "model_type": "granitemoehybrid",
    "hidden_size": 4096,
    "num_hidden_layers": 40,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 72,
    "num_experts_per_tok": 10,
    "shared_intermediate_size": 1536,
    "intermediate_size": 768,
    "mamba_d_state": 128,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "tie_word_embeddings": True,
    "vocab_size": 100352,
    "torch_dtype": "bfloat16",
    "layer_types": ["attention" if i % 10 == 5 else "mamba" for i in range(40)],
}
GRANITE_H_SMALL_SAFETENSORS_GIB = (
    59.99  # its safetensors total as the Hub lists it (public eligibility table)
)


def test_granite_hybrid_layers_are_mamba_state_or_full_attention() -> None:
    spec = spec_from_config(GRANITE_H_SMALL)
    assert kinds(spec) == {"mamba": 36, "full": 4}
    state = spec.layers[0].attention
    assert isinstance(state, MambaState)
    # mamba_n_heads 128 (config default), head dim 2 x 4096 / 128 = 64, one group, N 128
    assert oomguard_state_bytes(state, 1, {"auto": 2}) == vllm_mamba2_state_bytes(128, 64, 128, 1, 4, 1, 2, 2)
    assert spec.layers[5].attention == FullAttention(8, 128, 128)


def test_granite_hybrid_checkpoint_size_meets_the_hub_total() -> None:
    spec = spec_from_config(GRANITE_H_SMALL)
    assert spec.num_params * 2 / 2**30 == pytest.approx(GRANITE_H_SMALL_SAFETENSORS_GIB, abs=0.01)


def test_granite_hybrid_rejects_unknown_layer_types() -> None:
    with pytest.raises(ConfigError, match="layer_types"):
        spec_from_config({**GRANITE_H_SMALL, "layer_types": ["mamba"] * 39 + ["linear"]})


NEMOTRON_H_SMALL: dict[str, Any] = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "hidden_size": 256,
    "num_hidden_layers": 8,
    "hybrid_override_pattern": "M-M*-MME",
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 1000,
    "intermediate_size": 512,
    "mamba_num_heads": 8,
    "mamba_head_dim": 64,
    "n_groups": 2,
    "ssm_state_size": 16,
    "conv_kernel": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "n_shared_experts": 1,
    "moe_shared_expert_intermediate_size": 128,
}


def vllm_padded_groups(groups: int, tp: int) -> int:
    """MambaMixer2: n_groups + extra_groups_for_head_shards(n_groups, tp)."""
    return groups + (0 if groups % tp == 0 else tp - groups)


def vllm_mixer2_rank_rows(heads: int, head_dim: int, state: int, groups: int, tp: int) -> dict[str, int]:
    """MambaMixer2's column-parallel layers, written out: in_proj emits I + conv_dim + heads rows and conv1d
    conv_dim = I + 2·G'·N rows (G' the padded groups), each rank holding 1/TP of them."""
    conv_dim = heads * head_dim + 2 * vllm_padded_groups(groups, tp) * state
    return {"in_proj.weight": (heads * head_dim + conv_dim + heads) // tp, "conv1d.weight": conv_dim // tp}


MIXER2_CASES = [  # (config, mamba heads, head dim, N, groups)
    (GRANITE_H_SMALL, 128, 64, 128, 1),
    (NEMOTRON_H_SMALL, 8, 64, 16, 2),
]


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("case", range(len(MIXER2_CASES)))
def test_mamba2_projections_hold_whole_groups_per_rank_like_vllm(case: int, tp: int) -> None:
    config, heads, head_dim, state, groups = MIXER2_CASES[case]
    spec = spec_from_config(config)
    expected = vllm_mixer2_rank_rows(heads, head_dim, state, groups, tp)
    place = RankPlacement(tp_size=tp)
    for suffix, rows in expected.items():
        tensor = next(t for t in spec.tensors if t.role == Role.MAMBA and t.name.endswith(suffix))
        per_row = tensor.numel // tensor.shape[0]
        assert rank_tensor_bytes(tensor, spec, place) == rows * per_row * spec.dtype_bytes, suffix


def test_nemotron_h_numbers_every_block_as_its_own_layer() -> None:
    spec = spec_from_config(NEMOTRON_H_SMALL)
    # vLLM builds one decoder layer per hybrid_override_pattern character ("M-M*-MME"): mixers without an MLP,
    # MLP and MoE blocks without a mixer.
    assert spec.num_hidden_layers == len(NEMOTRON_H_SMALL["hybrid_override_pattern"]) == 8
    assert [layer.attention.kind for layer in spec.layers] == [
        "mamba",
        "none",
        "mamba",
        "full",
        "none",
        "mamba",
        "mamba",
        "none",
    ]
    assert [layer.mlp.kind for layer in spec.layers] == [
        "none",
        "dense",
        "none",
        "none",
        "dense",
        "none",
        "none",
        "moe",
    ]


def test_nemotron_h_tensors_sit_on_the_layer_their_name_numbers() -> None:
    spec = spec_from_config(NEMOTRON_H_SMALL)
    numbered = [t for t in spec.tensors if t.name.startswith("backbone.layers.")]
    assert numbered and all(t.layer == int(t.name.split(".")[2]) for t in numbered)


def test_nemotron_h_pipeline_stages_split_the_blocks_as_vllm_does() -> None:
    spec = spec_from_config(NEMOTRON_H_SMALL)
    first, last = (RankPlacement.for_stage(spec, pp_size=2, pp_rank=rank) for rank in (0, 1))
    # get_pp_indices over 8 blocks: 4 + 4, so the MoE block (7) is on the last stage only
    assert (first.layers, last.layers) == (range(4), range(4, 8))
    assert (
        rank_weight_bytes(spec, first).of(Role.EXPERTS) == 0 < rank_weight_bytes(spec, last).of(Role.EXPERTS)
    )


def test_nemotron_h_mlp_and_moe_layers_hold_no_kv_cache(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(NEMOTRON_H_SMALL))
    result = plan(PlanRequest(model=str(tmp_path), gpu="H100"))
    specs = layer_specs(result.model, result.engine, range(result.model.num_hidden_layers))
    pattern = NEMOTRON_H_SMALL["hybrid_override_pattern"]
    assert len(specs) == pattern.count("M") + pattern.count("*") == 5
    assert [type(s).__name__ for s in specs].count("MambaSpec") == 4


def test_nemotron_h_ssm_state_defaults_to_float32() -> None:
    state = spec_from_config(NEMOTRON_H_SMALL).layers[0].attention
    assert isinstance(state, MambaState) and state.state_dtypes[-1] == "float32"


def test_nemotron_h_pattern_must_cover_every_layer() -> None:
    with pytest.raises(ConfigError, match="hybrid_override_pattern"):
        spec_from_config({**NEMOTRON_H_SMALL, "hybrid_override_pattern": "M-M*"})
