"""vLLM's KV arithmetic: pages, groups, blocks, the reported capacity, the fit check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomguard.engines.vllm import kv
from oomguard.engines.vllm.config import resolve_engine_config
from oomguard.engines.vllm.flags import ServeArgs
from oomguard.engines.vllm.kv_check import KvCase, predict
from oomguard.engines.vllm.parallel import distinct_ranks
from oomguard.models.resolve import resolve_model

GiB = 1 << 30
H100 = 85_029_158_912
RECORDED = Path(__file__).resolve().parents[2] / "bench" / "data" / "kv_oracle_results.jsonl"


def layout_for(model: str, version: str = "0.19.0", **flags):
    spec = resolve_model(model)
    args = ServeArgs(model, {"max_model_len": flags.pop("max_model_len", 8192), **flags})
    cfg = resolve_engine_config(
        args,
        spec,
        gpu_total_bytes=H100,
        gpu_name="NVIDIA H100 80GB HBM3",
        compute_capability=(9, 0),
        vllm_version=version,
    )
    rank = distinct_ranks(spec, cfg)[0]
    return kv.group_layers(kv.layer_specs(spec, cfg, rank.layer_indices)), cfg


def test_llama_8b_block_is_2_mib_and_one_8k_request_takes_512_blocks() -> None:
    layout, cfg = layout_for("meta-llama/Llama-3.1-8B-Instruct")
    assert layout.groups[0].page_bytes == 2 * 16 * 8 * 128 * 2 == 65_536
    assert layout.bytes_per_block == 65_536 * 32
    assert layout.blocks_per_request(8192, cfg) == 512


def test_tp_beyond_kv_heads_replicates_heads() -> None:
    layout, _ = layout_for("meta-llama/Llama-3.1-8B-Instruct", tensor_parallel_size=16)
    assert layout.groups[0].page_bytes == 2 * 16 * 1 * 128 * 2  # max(1, 8 // 16) heads


def test_mla_page_is_one_latent_not_divided_by_tp() -> None:
    one, _ = layout_for("deepseek-ai/DeepSeek-V2-Lite-Chat")
    four, _ = layout_for("deepseek-ai/DeepSeek-V2-Lite-Chat", tensor_parallel_size=4)
    assert one.groups[0].page_bytes == four.groups[0].page_bytes == 16 * 576 * 2


@pytest.mark.parametrize(
    "model, tp, blocks, tokens",
    [
        # num_gpu_blocks and "GPU KV cache size" pairs logged by vLLM 0.19.0 (llm-d sweep,
        # vllm_startup_dev.jsonl)
        ("codellama/CodeLlama-7b-hf", 1, 7891, 126_256),
        ("google/gemma-2-9b-it", 1, 21110, 168_880),
        ("google/gemma-3-12b-it", 1, 48867, 130_304),
        ("google/gemma-3-27b-it", 1, 15997, 36_560),
        ("openai/gpt-oss-20b", 2, 323972, 2_591_776),
        ("deepseek-ai/DeepSeek-V2-Lite-Chat", 1, 94097, 1_505_552),
    ],
)
def test_reported_tokens_match_vllm_0_19_logs(model: str, tp: int, blocks: int, tokens: int) -> None:
    layout, cfg = layout_for(model, tensor_parallel_size=tp)
    assert kv.reported_kv_tokens(blocks, layout, cfg) == tokens


def test_hybrid_groups_share_tensors_so_a_block_costs_page_times_group_size() -> None:
    layout, _ = layout_for("google/gemma-3-27b-it")
    sliding = [g for g in layout.groups if g.kind == "sliding_window"]
    assert [g.num_layers for g in sliding] == [9, 9, 9, 9, 8, 8]  # 52 local layers striped over 6 groups
    assert layout.bytes_per_block == layout.groups[0].page_bytes * 10
    assert layout.padding_layers == 8


def test_sliding_window_reserve_uses_in_flight_tokens_from_0_26() -> None:
    old, old_cfg = layout_for("openai/gpt-oss-20b", version="0.25.0", max_model_len=131072)
    new, new_cfg = layout_for(
        "openai/gpt-oss-20b", version="0.33.0", max_model_len=131072, async_scheduling=True
    )
    sw_old = next(g for g in old.groups if g.kind == "sliding_window").blocks_per_request(131072, old_cfg)
    sw_new = next(g for g in new.groups if g.kind == "sliding_window").blocks_per_request(131072, new_cfg)
    assert sw_old == kv.cdiv(128 - 1 + 8192, 16) + 1
    assert sw_new == kv.cdiv(128 - 1 + 2 * 8192, 16) + 1


def test_fit_error_gives_vllms_estimated_max_model_len() -> None:
    # Qwen3-Coder-480B, DP8 + EP: 62 layers x 8 KV heads x 128 x 2 x 2 B = 248 KiB per token; vLLM 0.10.1
    # reported 62.00 GiB needed for 262,144 tokens against 48.66 GiB and estimated 205,728.
    layout, cfg = layout_for(
        "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", version="0.10.1", max_model_len=262144
    )
    check = kv.check_fits(int(48.66 * GiB), layout, cfg, 262144)
    assert not check.ok
    assert check.estimated_max_model_len == 205_728
    assert "(62.00 GiB KV cache is needed" in (check.error or "")
    assert "models's max seq len (262144)" in (check.error or "")


def test_no_memory_at_all_is_vllms_no_cache_blocks_error() -> None:
    layout, cfg = layout_for("meta-llama/Llama-3.1-8B-Instruct")
    check = kv.check_fits(-int(1.44 * GiB), layout, cfg, 131072)
    assert not check.ok and (check.error or "").startswith("No available memory for the cache blocks")


@pytest.mark.skipif(not RECORDED.exists(), reason="no recorded vLLM oracle answers")
def test_identical_to_recorded_answers_of_vllms_own_kv_functions(shared_data: Path) -> None:
    configs = shared_data.parent / "tools" / "vllm_oracle" / "configs"
    rows = [json.loads(line) for line in RECORDED.read_text().splitlines() if line.strip()]
    assert rows
    for row in rows:
        case, truth = KvCase.from_dict(row["case"]), row["vllm"]
        ours = predict(case, configs)
        if truth.get("error"):
            assert ours.fit_error == truth["error"], case.label()  # vLLM's text, estimate included
            continue
        assert ours.num_blocks == truth["num_blocks"], case.label()
        assert ours.kv_tokens == truth["gpu_kv_cache_size_tokens"], case.label()
        assert ours.max_concurrency == pytest.approx(truth["max_concurrency"], rel=1e-12), case.label()
