"""Build and check the bundled model catalog (src/oomguard/models/catalog/models.jsonl).

    python bench/build_catalog.py            # check: parameter counts vs published sizes, print a table
    python bench/build_catalog.py --build    # rebuild models.jsonl from the sources below, then check

Sources, in order of preference (a later source never overrides an earlier one for the same id):
  1. ../shared/data/models/configs/<org>/<name>/config.json: real config.json files, verbatim.
  2. ../shared/data/models/catalog.jsonl: 45 verified records whose fields are config.json fields;
     re-nested here under their real config key names (summary-only keys are dropped).
  3. EXTRA below: config.json copies found in public repositories (each with its source), keys that
     do not bear on shape (token ids, dropout, initializer) dropped, long RoPE factor lists dropped.
  4. Records already in models.jsonl that none of the above produce (added by hand, with sources).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED_MODELS = REPO.parent / "shared" / "data" / "models"
OUT = REPO / "src" / "oomguard" / "models" / "catalog" / "models.jsonl"

# Keys with no bearing on memory: dropped from copied configs to keep the file small.
DROP_KEYS = {
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "initializer_range",
    "attention_dropout",
    "embd_pdrop",
    "resid_pdrop",
    "use_cache",
    "transformers_version",
    "_name_or_path",
    "auto_map",
    "tokenizer_class",
    "output_router_logits",
    "router_aux_loss_coef",
    "context_window_size",
    "prefill_chunk_size",
    "attention_sink_size",
    "_attn_implementation",
    "attn_implementation",
    "transformers.js_config",
}

MLC = (
    "https://github.com/mlc-ai/mlc-llm/blob/01ced331a9e155c5ba4e7625b027a51bee611450/python/mlc_llm/model/"
    "model_preset.py (preset {!r}; mlc-only keys context_window_size/prefill_chunk_size dropped)"
)

# --- 3. config.json copies from public repositories ---------------------------------------------------
EXTRA: list[dict[str, Any]] = [
    {
        "id": "meta-llama/Meta-Llama-3-8B",
        "src": MLC.format("llama3_8b (commented out there)"),
        "config": {
            "architectures": ["LlamaForCausalLM"],
            "attention_bias": False,
            "hidden_act": "silu",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "max_position_embeddings": 8192,
            "model_type": "llama",
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "pretraining_tp": 1,
            "rms_norm_eps": 1e-05,
            "rope_scaling": None,
            "rope_theta": 500000.0,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 128256,
        },
    },
    {
        "id": "meta-llama/Meta-Llama-3-70B",
        "src": MLC.format("llama3_70b (commented out there)"),
        "config": {
            "architectures": ["LlamaForCausalLM"],
            "attention_bias": False,
            "hidden_act": "silu",
            "hidden_size": 8192,
            "intermediate_size": 28672,
            "max_position_embeddings": 8192,
            "model_type": "llama",
            "num_attention_heads": 64,
            "num_hidden_layers": 80,
            "num_key_value_heads": 8,
            "pretraining_tp": 1,
            "rms_norm_eps": 1e-05,
            "rope_scaling": None,
            "rope_theta": 500000.0,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 128256,
        },
    },
    {
        "id": "codellama/CodeLlama-13b-hf",
        "src": MLC.format("codellama_13b"),
        "config": {
            "architectures": ["LlamaForCausalLM"],
            "hidden_act": "silu",
            "hidden_size": 5120,
            "intermediate_size": 13824,
            "max_position_embeddings": 16384,
            "model_type": "llama",
            "num_attention_heads": 40,
            "num_hidden_layers": 40,
            "num_key_value_heads": 40,
            "pretraining_tp": 1,
            "rms_norm_eps": 1e-05,
            "rope_scaling": None,
            "rope_theta": 1000000,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 32016,
        },
    },
    {
        "id": "mistralai/Mixtral-8x7B-v0.1",
        "src": MLC.format("Mixtral-8x7B-v0.1"),
        "config": {
            "architectures": ["MixtralForCausalLM"],
            "hidden_act": "silu",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "max_position_embeddings": 32768,
            "model_type": "mixtral",
            "num_attention_heads": 32,
            "num_experts_per_tok": 2,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "num_local_experts": 8,
            "rms_norm_eps": 1e-05,
            "rope_theta": 1000000.0,
            "sliding_window": None,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 32000,
        },
    },
    {
        "id": "microsoft/Phi-3-mini-4k-instruct",
        "src": MLC.format("phi-3 (commented out there)"),
        "config": {
            "architectures": ["Phi3ForCausalLM"],
            "hidden_act": "silu",
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "max_position_embeddings": 4096,
            "model_type": "phi3",
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 32,
            "original_max_position_embeddings": 4096,
            "rms_norm_eps": 1e-05,
            "rope_scaling": None,
            "rope_theta": 10000.0,
            "sliding_window": 2047,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 32064,
        },
    },
    {
        "id": "microsoft/Phi-3.5-mini-instruct",
        "src": MLC.format("phi-3_5") + "; rope_scaling factor lists dropped",
        "config": {
            "architectures": ["Phi3ForCausalLM"],
            "attention_bias": False,
            "hidden_act": "silu",
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "max_position_embeddings": 131072,
            "model_type": "phi3",
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 32,
            "original_max_position_embeddings": 4096,
            "rms_norm_eps": 1e-05,
            "rope_scaling": {"type": "longrope"},
            "rope_theta": 10000.0,
            "sliding_window": 262144,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 32064,
        },
    },
    {
        "id": "microsoft/Phi-4-mini-instruct",
        "src": MLC.format("phi-4") + "; rope_scaling factor lists dropped",
        "config": {
            "architectures": ["Phi3ForCausalLM"],
            "attention_bias": False,
            "full_attn_mod": 1,
            "hidden_act": "silu",
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "interpolate_factor": 1,
            "lm_head_bias": False,
            "max_position_embeddings": 131072,
            "mlp_bias": False,
            "model_type": "phi3",
            "num_attention_heads": 24,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "original_max_position_embeddings": 4096,
            "partial_rotary_factor": 0.75,
            "rms_norm_eps": 1e-05,
            "rope_scaling": {"type": "longrope"},
            "rope_theta": 10000.0,
            "sliding_window": 262144,
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
            "vocab_size": 200064,
        },
    },
    {
        "id": "Qwen/Qwen2-0.5B-Instruct",
        "src": MLC.format("qwen2_0_5b"),
        "config": {
            "architectures": ["Qwen2ForCausalLM"],
            "hidden_act": "silu",
            "hidden_size": 896,
            "intermediate_size": 4864,
            "max_position_embeddings": 32768,
            "max_window_layers": 24,
            "model_type": "qwen2",
            "num_attention_heads": 14,
            "num_hidden_layers": 24,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "sliding_window": 32768,
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
            "use_sliding_window": False,
            "vocab_size": 151936,
        },
    },
    {
        "id": "Qwen/Qwen2-1.5B-Instruct",
        "src": MLC.format("qwen2_1_5b"),
        "config": {
            "architectures": ["Qwen2ForCausalLM"],
            "hidden_act": "silu",
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "max_position_embeddings": 32768,
            "max_window_layers": 28,
            "model_type": "qwen2",
            "num_attention_heads": 12,
            "num_hidden_layers": 28,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "sliding_window": 32768,
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
            "use_sliding_window": False,
            "vocab_size": 151936,
        },
    },
    {
        "id": "Qwen/Qwen2-7B-Instruct",
        "src": MLC.format("qwen2_7b"),
        "config": {
            "architectures": ["Qwen2ForCausalLM"],
            "hidden_act": "silu",
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "max_position_embeddings": 32768,
            "max_window_layers": 28,
            "model_type": "qwen2",
            "num_attention_heads": 28,
            "num_hidden_layers": 28,
            "num_key_value_heads": 4,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "sliding_window": 131072,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "use_sliding_window": False,
            "vocab_size": 152064,
        },
    },
    {
        "id": "Qwen/Qwen2.5-3B-Instruct",
        "src": MLC.format("qwen2.5_3b"),
        "config": {
            "architectures": ["Qwen2ForCausalLM"],
            "hidden_act": "silu",
            "hidden_size": 2048,
            "intermediate_size": 11008,
            "max_position_embeddings": 32768,
            "max_window_layers": 70,
            "model_type": "qwen2",
            "num_attention_heads": 16,
            "num_hidden_layers": 36,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "sliding_window": 32768,
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
            "use_sliding_window": False,
            "vocab_size": 151936,
        },
    },
    {
        "id": "Qwen/Qwen3-4B-Instruct-2507",
        "src": MLC.format("qwen3_4b_instruct_2507 (commented out there)"),
        "config": {
            "architectures": ["Qwen3ForCausalLM"],
            "attention_bias": False,
            "head_dim": 128,
            "hidden_act": "silu",
            "hidden_size": 2560,
            "intermediate_size": 9728,
            "max_position_embeddings": 262144,
            "max_window_layers": 36,
            "model_type": "qwen3",
            "num_attention_heads": 32,
            "num_hidden_layers": 36,
            "num_key_value_heads": 8,
            "rms_norm_eps": 1e-06,
            "rope_scaling": None,
            "rope_theta": 5000000,
            "sliding_window": None,
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
            "use_sliding_window": False,
            "vocab_size": 151936,
        },
    },
    {
        "id": "Qwen/Qwen3-4B-Thinking-2507",
        "src": MLC.format("qwen3_4b_thinking_2507 (commented out there)"),
        "config": {
            "architectures": ["Qwen3ForCausalLM"],
            "attention_bias": False,
            "head_dim": 128,
            "hidden_act": "silu",
            "hidden_size": 2560,
            "intermediate_size": 9728,
            "max_position_embeddings": 262144,
            "max_window_layers": 36,
            "model_type": "qwen3",
            "num_attention_heads": 32,
            "num_hidden_layers": 36,
            "num_key_value_heads": 8,
            "rms_norm_eps": 1e-06,
            "rope_scaling": None,
            "rope_theta": 5000000,
            "sliding_window": None,
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
            "use_sliding_window": False,
            "vocab_size": 151936,
        },
    },
    {
        "id": "google/gemma-2b",
        "src": MLC.format("gemma_2b"),
        "config": {
            "architectures": ["GemmaForCausalLM"],
            "attention_bias": False,
            "head_dim": 256,
            "hidden_act": "gelu",
            "hidden_size": 2048,
            "intermediate_size": 16384,
            "max_position_embeddings": 8192,
            "model_type": "gemma",
            "num_attention_heads": 8,
            "num_hidden_layers": 18,
            "num_key_value_heads": 1,
            "rms_norm_eps": 1e-06,
            "rope_scaling": None,
            "rope_theta": 10000.0,
            "torch_dtype": "bfloat16",
            "vocab_size": 256000,
        },
    },
    {
        "id": "google/gemma-2-2b-it",
        "src": MLC.format("gemma2_2b"),
        "config": {
            "architectures": ["Gemma2ForCausalLM"],
            "attention_bias": False,
            "attn_logit_softcapping": 50.0,
            "cache_implementation": "hybrid",
            "final_logit_softcapping": 30.0,
            "head_dim": 256,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": 2304,
            "intermediate_size": 9216,
            "max_position_embeddings": 8192,
            "model_type": "gemma2",
            "num_attention_heads": 8,
            "num_hidden_layers": 26,
            "num_key_value_heads": 4,
            "query_pre_attn_scalar": 256,
            "rms_norm_eps": 1e-06,
            "rope_theta": 10000.0,
            "sliding_window": 4096,
            "torch_dtype": "bfloat16",
            "vocab_size": 256000,
        },
    },
    {
        "id": "google/gemma-3-1b-it",
        "src": MLC.format("gemma3_1b_it"),
        "config": {
            "architectures": ["Gemma3ForCausalLM"],
            "attention_bias": False,
            "attn_logit_softcapping": None,
            "cache_implementation": "hybrid",
            "final_logit_softcapping": None,
            "head_dim": 256,
            "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": 1152,
            "intermediate_size": 6912,
            "max_position_embeddings": 32768,
            "model_type": "gemma3_text",
            "num_attention_heads": 4,
            "num_hidden_layers": 26,
            "num_key_value_heads": 1,
            "query_pre_attn_scalar": 256,
            "rms_norm_eps": 1e-06,
            "rope_local_base_freq": 10000,
            "rope_scaling": None,
            "rope_theta": 1000000,
            "sliding_window": 512,
            "sliding_window_pattern": 6,
            "torch_dtype": "bfloat16",
            "vocab_size": 262144,
        },
    },
    {
        "id": "deepseek-ai/deepseek-moe-16b-base",
        "src": MLC.format("deepseek"),
        "config": {
            "architectures": ["DeepseekForCausalLM"],
            "attention_bias": False,
            "first_k_dense_replace": 1,
            "hidden_act": "silu",
            "hidden_size": 2048,
            "intermediate_size": 10944,
            "max_position_embeddings": 4096,
            "model_type": "deepseek",
            "moe_intermediate_size": 1408,
            "moe_layer_freq": 1,
            "n_routed_experts": 64,
            "n_shared_experts": 2,
            "norm_topk_prob": False,
            "num_attention_heads": 16,
            "num_experts_per_tok": 6,
            "num_hidden_layers": 28,
            "num_key_value_heads": 16,
            "pretraining_tp": 1,
            "rms_norm_eps": 1e-06,
            "rope_scaling": None,
            "rope_theta": 10000,
            "scoring_func": "softmax",
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 102400,
        },
    },
    {
        "id": "bigcode/starcoder2-7b",
        "src": MLC.format("starcoder2"),
        "config": {
            "activation_function": "gelu",
            "architectures": ["Starcoder2ForCausalLM"],
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": 4608,
            "intermediate_size": 18432,
            "max_position_embeddings": 16384,
            "model_type": "starcoder2",
            "norm_epsilon": 1e-05,
            "num_attention_heads": 36,
            "num_hidden_layers": 32,
            "num_key_value_heads": 4,
            "rope_theta": 1000000,
            "sliding_window": 4096,
            "torch_dtype": "bfloat16",
            "use_bias": True,
            "vocab_size": 49152,
        },
    },
    {
        "id": "CohereForAI/aya-23-8B",
        "src": MLC.format("aya-23"),
        "config": {
            "architectures": ["CohereForCausalLM"],
            "attention_bias": False,
            "hidden_act": "silu",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "layer_norm_eps": 1e-05,
            "logit_scale": 0.0625,
            "max_position_embeddings": 8192,
            "model_type": "cohere",
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "rope_theta": 10000,
            "torch_dtype": "float16",
            "use_qk_norm": False,
            "vocab_size": 256000,
        },
    },
    {
        "id": "mistralai/Mistral-7B-v0.3",
        "src": MLC.format("mistral_7b_v03"),
        "config": {
            "architectures": ["MistralForCausalLM"],
            "hidden_act": "silu",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "max_position_embeddings": 32768,
            "model_type": "mistral",
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "rms_norm_eps": 1e-05,
            "rope_theta": 1000000.0,
            "sliding_window": None,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 32768,
        },
    },
    {
        "id": "google/gemma-2-2b-jpn-it",
        "src": MLC.format("gemma2_2b-jpn"),
        "config": {
            "architectures": ["Gemma2ForCausalLM"],
            "attention_bias": False,
            "attn_logit_softcapping": 50.0,
            "cache_implementation": "hybrid",
            "dtype": "bfloat16",
            "final_logit_softcapping": 30.0,
            "head_dim": 256,
            "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": 2304,
            "intermediate_size": 9216,
            "max_position_embeddings": 8192,
            "model_type": "gemma2",
            "num_attention_heads": 8,
            "num_hidden_layers": 26,
            "num_key_value_heads": 4,
            "query_pre_attn_scalar": 224,
            "rms_norm_eps": 1e-06,
            "rope_theta": 10000.0,
            "sliding_window": 4096,
            "torch_dtype": "bfloat16",
            "vocab_size": 256000,
        },
    },
    {
        "id": "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
        "src": MLC.format("tinyllama_1b_chat_v1.0"),
        "config": {
            "architectures": ["LlamaForCausalLM"],
            "attention_bias": False,
            "hidden_act": "silu",
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "max_position_embeddings": 2048,
            "model_type": "llama",
            "num_attention_heads": 32,
            "num_hidden_layers": 22,
            "num_key_value_heads": 4,
            "pretraining_tp": 1,
            "rms_norm_eps": 1e-05,
            "rope_scaling": None,
            "rope_theta": 10000.0,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 32000,
        },
    },
    {
        "id": "HuggingFaceTB/SmolLM2-135M",
        "src": MLC.format("smollm2_135m"),
        "config": {
            "architectures": ["LlamaForCausalLM"],
            "attention_bias": False,
            "hidden_act": "silu",
            "hidden_size": 576,
            "intermediate_size": 1536,
            "is_llama_config": True,
            "max_position_embeddings": 8192,
            "mlp_bias": False,
            "model_type": "llama",
            "num_attention_heads": 9,
            "num_hidden_layers": 30,
            "num_key_value_heads": 3,
            "pretraining_tp": 1,
            "rms_norm_eps": 1e-05,
            "rope_interleaved": False,
            "rope_scaling": None,
            "rope_theta": 100000,
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
            "vocab_size": 49152,
        },
    },
    {
        "id": "HuggingFaceTB/SmolLM2-360M",
        "src": MLC.format("smollm2_360m"),
        "config": {
            "architectures": ["LlamaForCausalLM"],
            "attention_bias": False,
            "hidden_act": "silu",
            "hidden_size": 960,
            "intermediate_size": 2560,
            "is_llama_config": True,
            "max_position_embeddings": 8192,
            "mlp_bias": False,
            "model_type": "llama",
            "num_attention_heads": 15,
            "num_hidden_layers": 32,
            "num_key_value_heads": 5,
            "pretraining_tp": 1,
            "rms_norm_eps": 1e-05,
            "rope_interleaved": False,
            "rope_scaling": None,
            "rope_theta": 100000,
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
            "vocab_size": 49152,
        },
    },
    {
        "id": "internlm/internlm2_5-7b-chat",
        "src": MLC.format("internlm2_5_7b"),
        "config": {
            "architectures": ["InternLM2ForCausalLM"],
            "bias": False,
            "hidden_act": "silu",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "max_position_embeddings": 32768,
            "model_type": "internlm2",
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "pretraining_tp": 1,
            "rms_norm_eps": 1e-05,
            "rope_scaling": {"type": "dynamic", "factor": 2.0},
            "rope_theta": 1000000,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 92544,
        },
    },
    {
        "id": "stabilityai/stablelm-2-zephyr-1_6b",
        "src": MLC.format("stablelm-2-zephyr-1_6b"),
        "config": {
            "architectures": ["StableLmForCausalLM"],
            "hidden_act": "silu",
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "layer_norm_eps": 1e-05,
            "max_position_embeddings": 4096,
            "model_type": "stablelm",
            "num_attention_heads": 32,
            "num_hidden_layers": 24,
            "num_key_value_heads": 32,
            "partial_rotary_factor": 0.25,
            "rope_theta": 10000,
            "tie_word_embeddings": False,
            "torch_dtype": "float16",
            "use_qkv_bias": True,
            "vocab_size": 100352,
        },
    },
    {
        "id": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        "src": "Qwen2Config printout of deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B in a public GitHub file (model-config "  # noqa: E501
        "helper; repo path not recorded by the search index)",
        "config": {
            "architectures": ["Qwen2ForCausalLM"],
            "hidden_act": "silu",
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "max_position_embeddings": 131072,
            "max_window_layers": 21,
            "model_type": "qwen2",
            "num_attention_heads": 12,
            "num_hidden_layers": 28,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-06,
            "rope_scaling": None,
            "rope_theta": 10000,
            "sliding_window": None,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "use_mrope": False,
            "use_sliding_window": False,
            "vocab_size": 151936,
        },
    },
]

# Published sizes to cross-check the parameter count against (model cards / names), in billions.
PUBLISHED_B: dict[str, float] = {
    "deepseek-ai/DeepSeek-V3": 671,
    "deepseek-ai/DeepSeek-R1": 671,  # README: 671B (+14B MTP)
    "deepseek-ai/DeepSeek-V2-Lite": 15.7,
    "deepseek-ai/DeepSeek-V2-Lite-Chat": 15.7,  # README: 15.7B
    "mistralai/Mixtral-8x7B-Instruct-v0.1": 46.7,
    "mistralai/Mixtral-8x7B-v0.1": 46.7,  # Mistral blog: 46.7B
    "mistralai/Mixtral-8x22B-Instruct-v0.1": 141,  # Mistral blog: 141B
    "zai-org/GLM-4.5": 355,
    "zai-org/GLM-4.5-Air": 106,  # model cards (GLM-4.5 includes the MTP layer)
    "moonshotai/Kimi-K2-Instruct": 1000,  # model card: 1T total
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": 109,
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": 400,
    "meta-llama/Llama-3.2-1B-Instruct": 1.23,  # model card
    "microsoft/phi-4": 14.7,
    "microsoft/Phi-3-mini-4k-instruct": 3.8,
    "microsoft/Phi-3.5-mini-instruct": 3.8,
    "microsoft/Phi-4-mini-instruct": 3.8,  # model cards
    "Qwen/Qwen1.5-MoE-A2.7B": 14.3,  # model card: 14.3B total, 2.7B active
    "google/gemma-2b": 2.5,
    "google/gemma-2-2b-it": 2.6,
    "google/gemma-2-2b-jpn-it": 2.6,  # Gemma papers
    "stabilityai/stablelm-2-zephyr-1_6b": 1.6,  # the name's "1_6b"
    "mistralai/Ministral-3-3B-Reasoning-2512": 3.4,  # model card: 3.4B language model + 0.4B vision encoder
}


def _clean(config: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in DROP_KEYS:
            continue
        out[key] = value
    return out


# --- 2. the 45 verified records, re-nested under their config key names -------------------------------
_FLAT = (
    "architectures",
    "model_type",
    "torch_dtype",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
    "max_position_embeddings",
    "rope_theta",
    "rope_scaling",
    "sliding_window",
)
_MOE_KEYS = (
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "n_shared_experts",
    "first_k_dense_replace",
    "moe_layer_freq",
    "norm_topk_prob",
    "routed_scaling_factor",
    "scoring_func",
    "topk_method",
    "n_group",
    "topk_group",
    "decoder_sparse_step",
    "mlp_only_layers",
    "interleave_moe_layer_step",
    "swiglu_limit",
)
_MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_LINEAR_KEYS = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "full_attention_interval",
)


def from_shared_record(rec: dict[str, Any]) -> dict[str, Any]:
    """config.json keys from one ../shared/data/models/catalog.jsonl record (summary-only keys dropped)."""
    mt = rec["model_type"]
    cfg: dict[str, Any] = {}
    for key in _FLAT:
        value = rec.get(key)
        if value is None and key in ("head_dim", "tie_word_embeddings", "sliding_window", "torch_dtype"):
            continue  # null there means "not in config.json" or "not seen", not an explicit null
        if key == "rope_scaling" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != "applies_to"}
        cfg[key] = value
    moe = rec.get("moe") or {}
    for key in _MOE_KEYS:
        if key in moe and moe[key] is not None:
            cfg[key] = moe[key]
    if mt == "mixtral":
        cfg.pop("moe_intermediate_size", None)  # Mixtral's expert width is intermediate_size
        cfg.pop("n_shared_experts", None)
    if mt in ("qwen3_moe",):
        cfg.pop("n_shared_experts", None)
    if mt == "qwen3_next" and moe.get("shared_expert_intermediate_size"):
        cfg["shared_expert_intermediate_size"] = moe["shared_expert_intermediate_size"]
        cfg.pop("n_shared_experts", None)
    for key in _MLA_KEYS:
        if rec.get("mla") and key in rec["mla"]:
            cfg[key] = rec["mla"][key]
    for key in _LINEAR_KEYS:
        if rec.get("linear_attention") and key in rec["linear_attention"]:
            cfg[key] = rec["linear_attention"][key]
    pattern = rec.get("layer_pattern") or ""
    if mt == "qwen2" and "use_sliding_window=false" in pattern:
        cfg["use_sliding_window"] = False
    if "Q/K/V projections have bias" in pattern or "qkv bias" in pattern:
        cfg["attention_bias"] = True
    if "partial_rotary_factor=0.5" in pattern:
        cfg["partial_rotary_factor"] = 0.5
    if "partial_rotary_factor=0.25" in pattern:
        cfg["partial_rotary_factor"] = 0.25
    if "use_qk_norm=true" in pattern:
        cfg["use_qk_norm"] = True
    elif "use_qk_norm=false" in pattern:
        cfg["use_qk_norm"] = False
    if isinstance(rec.get("mtp_layers_in_checkpoint"), int) and mt in ("deepseek_v3", "glm4_moe", "kimi_k2"):
        cfg["num_nextn_predict_layers"] = rec["mtp_layers_in_checkpoint"]
    quant = rec.get("quantization_config")
    if quant:
        cfg["quantization_config"] = {k: v for k, v in quant.items() if k != "note"}
    if mt == "llama4":
        return _llama4(rec, cfg)
    return cfg


def _llama4(rec: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Llama-4 nests the language model under text_config (model_type llama4_text)."""
    moe = rec["moe"]
    text = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "torch_dtype")}
    text["model_type"] = rec["text_model_type"]
    text["intermediate_size_mlp"] = moe["intermediate_size_mlp_dense_layers"]
    text["attention_chunk_size"] = 8192
    text.pop("n_shared_experts", None)
    text.pop("moe_intermediate_size", None)  # llama4_text: intermediate_size is the expert width
    vision = dict(rec["multimodal"]["vision_config"])
    return {
        "architectures": cfg["architectures"],
        "model_type": cfg["model_type"],
        "torch_dtype": cfg["torch_dtype"],
        "text_config": text,
        "vision_config": vision,
    }


def _aliases(model_id: str) -> list[str]:
    name = model_id.split("/", 1)[1].lower()
    out = [name]
    if name.endswith("-hf"):
        out.append(name[:-3])
    if name.startswith("meta-llama-"):
        out.append(name[len("meta-") :])
    return out


def build() -> list[dict[str, Any]]:
    records: dict[str, dict[str, Any]] = {}

    def add(model_id: str, config: dict[str, Any], sources: list[str], total: int | None = None) -> None:
        if model_id in records:
            return
        records[model_id] = {
            "id": model_id,
            "aliases": _aliases(model_id),
            "config": config,
            "safetensors_total_size": total,
            "sources": sources,
        }

    shared_records = {
        json.loads(line)["hf_id"]: json.loads(line)
        for line in (SHARED_MODELS / "catalog.jsonl").read_text().splitlines()
        if line.strip()
    }
    for cfg_path in sorted((SHARED_MODELS / "configs").glob("*/*/config.json")):
        model_id = f"{cfg_path.parent.parent.name}/{cfg_path.parent.name}"
        meta = json.loads((cfg_path.parent / "sources.json").read_text())
        total = meta.get("safetensors_total_size")
        rec = shared_records.get(model_id)
        if total is None and rec and isinstance(rec.get("safetensors_total_size"), dict):
            total = rec["safetensors_total_size"].get("bytes")
        add(
            model_id,
            _clean(json.loads(cfg_path.read_text())),
            [s for s in meta["sources"] if "not read" not in s] or meta["sources"],
            total,
        )
    for model_id, rec in shared_records.items():
        st = rec.get("safetensors_total_size")
        total = st.get("bytes") if isinstance(st, dict) else None
        sources = [s for s in rec["sources"] if "canonical location" not in s and "not read" not in s]
        add(
            model_id,
            from_shared_record(rec),
            sources,  # the verified record's own public sources
            total,
        )
    for extra in EXTRA:
        add(extra["id"], _clean(extra["config"]), [extra["src"]])
    if OUT.exists():  # 4. hand-added records keep their place
        for line in OUT.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                add(rec["id"], rec["config"], rec["sources"], rec.get("safetensors_total_size"))
                records[rec["id"]]["aliases"] = rec["aliases"]
    return list(records.values())


# --- parameter count (independent of oomguard's own code, to cross-check both) ------------------------


def _text(cfg: dict[str, Any]) -> dict[str, Any]:
    return {**cfg, **cfg["text_config"]} if isinstance(cfg.get("text_config"), dict) else cfg


def param_count(config: dict[str, Any]) -> int | None:
    """Language-model parameters from config fields (embeddings, attention, MLP/experts, norms)."""
    c = _text(config)
    try:
        h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
        heads = c["num_attention_heads"]
    except KeyError:
        return None
    kv = c.get("num_key_value_heads") or heads
    hd = c.get("head_dim") or h // heads
    if "kv_lora_rank" in c:  # MLA
        q_lora, kvr = c.get("q_lora_rank"), c["kv_lora_rank"]
        nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        q = h * heads * (nope + rope) if not q_lora else h * q_lora + q_lora + q_lora * heads * (nope + rope)
        attn = q + h * (kvr + rope) + kvr + kvr * heads * (nope + vd) + heads * vd * h
    else:
        attn = h * heads * hd + 2 * h * kv * hd + heads * hd * h
        if c.get("attention_bias") or c.get("use_bias") or c.get("model_type") in ("qwen2", "qwen2_moe"):
            attn += heads * hd + 2 * kv * hd
    experts = c.get("num_experts") or c.get("num_local_experts") or c.get("n_routed_experts")
    inter = c["intermediate_size"]
    gated = c.get("model_type") not in ("starcoder2",)  # starcoder2: c_fc + c_proj, no gate
    dense_mlp = (3 if gated else 2) * h * inter
    if experts:
        width = c.get("moe_intermediate_size") or inter
        shared = (c.get("n_shared_experts") or 0) * 3 * h * width + 3 * h * (
            c.get("shared_expert_intermediate_size") or 0
        )
        if c.get("model_type") == "llama4_text":  # one implicit shared expert of the same width
            shared = 3 * h * width
        moe_mlp = experts * 3 * h * width + h * experts + shared
        first_dense = c.get("first_k_dense_replace", 0)
        step = c.get("interleave_moe_layer_step", 1) or 1
        if step > 1:
            n_moe = layers // step
            dense_mlp = 3 * h * c.get("intermediate_size_mlp", inter)
        else:
            n_moe = layers - first_dense
        mlp_total = n_moe * moe_mlp + (layers - n_moe) * dense_mlp
    else:
        mlp_total = layers * dense_mlp
    norms = layers * 2 * h + h
    tied_default = c.get("model_type", "").startswith(("gemma", "cohere"))  # their configs default to tied
    tied = c.get("tie_word_embeddings", config.get("tie_word_embeddings", tied_default))
    embed = vocab * h * (1 if tied else 2)
    return embed + layers * attn + mlp_total + norms


def check(records: list[dict[str, Any]]) -> int:
    print(f"{'model':58} {'params (B)':>11} {'total_size/2 (B)':>17} {'published':>10}")
    bad = 0
    for rec in records:
        n = param_count(rec["config"])
        total = rec.get("safetensors_total_size")
        half = f"{total / 2e9:.2f}" if total else "-"
        published = _published(rec["id"])
        flag = ""
        if n and published and abs(n / 1e9 - published) / published > 0.12:
            flag = "  <-- check"
            bad += 1
        count = f"{n / 1e9:.2f}" if n else "-"
        print(f"{rec['id']:58} {count:>11} {half:>17} {published or '-':>10}{flag}")
    print(f"\n{len(records)} models; {bad} flagged (count off the size in the name by more than 12%)")
    return bad


def _published(model_id: str) -> float | None:
    """The size in the repo name ('8B', '0.5B', '8x7B' -> 56): a public, if rounded, figure."""
    import re

    name = model_id.split("/")[1]
    m = re.search(r"(\d+)x(\d+(?:\.\d+)?)[Bb]\b", name)
    if m:
        return None  # MoE names ("8x7B") count shared parts once per expert: not comparable
    if model_id in PUBLISHED_B:
        return PUBLISHED_B[model_id]
    m = re.search(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)[Bb](?![a-z])", name)
    return float(m.group(1)) if m else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="store_true", help="rewrite models.jsonl from the sources")
    args = parser.parse_args(argv)
    if args.build:
        records = build()
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
        print(f"wrote {len(records)} records to {OUT}")
    else:
        records = [json.loads(line) for line in OUT.read_text().splitlines() if line.strip()]
    check(records)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
