"""`oomguard step`: seed 002's arithmetic, packed versus padded, int32 limit, EP and sampler terms."""

from __future__ import annotations

import json

import pytest

from oomguard.cli import main as oomguard
from oomguard.simulation.step_cli import parse_scheduled
from oomguard.simulation.step_memory import (
    ActivationModel,
    ModelWidths,
    Row,
    StepMemoryOptions,
    StepShape,
    step_memory,
)

SEED002 = "31344,1352,4,8,9,10,20,18,1d,1d"
GiB = 1 << 30


def _step_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert oomguard(["step", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_seed002_padded_tensor_is_8_rows_of_the_longest_chunk(capsys: pytest.CaptureFixture[str]) -> None:
    out = _step_json(capsys, "--hidden-size", "10240", "--dtype", "bfloat16", "--scheduled", SEED002)
    assert out["padded_tensor_bytes"] == 8 * 31344 * 10240 * 2
    assert round(out["padded_tensor_bytes"] / GiB, 2) == 4.78
    assert out["packed_tensor_bytes"] == 32767 * 10240 * 2
    assert out["num_prefills"] == 8 and out["num_decodes"] == 2


def test_seed002_shape_passes_the_int32_index_limit_only_padded(capsys: pytest.CaptureFixture[str]) -> None:
    out = _step_json(capsys, "--hidden-size", "10240", "--scheduled", SEED002)
    assert out["max_tensor_elements"] == 8 * 31344 * 10240 > 2**31
    assert out["exceeds_int32_index"] is True
    assert out["packed_max_tensor_elements"] < 2**31


def test_a_1424_token_row_beside_a_31344_chunk_is_padded_22x() -> None:
    model = ActivationModel.from_widths(ModelWidths(10240, 2))
    memory = step_memory(parse_scheduled("31344,1424"), model, StepMemoryOptions("padded"))
    assert round(memory.row_padding[1], 1) == 22.0


def test_seed002_shape_ooms_padded_and_fits_packed_in_the_seeds_free_memory(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _step_json(capsys, "--hidden-size", "10240", "--scheduled", SEED002, "--free", "11.8GiB")
    assert out["oom_padded"] is True
    assert out["oom_packed"] is False


def test_pasted_scheduler_dict_gives_the_same_shape() -> None:
    line = (
        "SchedulerOutput(num_scheduled_tokens={'chatcmpl-1': 31344, 'chatcmpl-2': 1352, 'c3': 4, 'c4': 8, "
        "'c5': 9, 'c6': 10, 'c7': 20, 'c8': 18, 'c9': 1, 'c10': 1}, total_num_scheduled_tokens=32767)"
    )
    assert parse_scheduled(line) == parse_scheduled(SEED002)


def test_ep_all_gather_grows_with_the_steps_tokens_and_the_dp_ranks() -> None:
    widths = ModelWidths(
        7168,
        2,
        intermediate_size=2048,
        vocab_size=129280,
        num_experts=256,
        experts_per_token=8,
        expert_parallel=True,
        data_parallel_size=8,
    )
    model = ActivationModel.from_widths(widths)
    small = step_memory(parse_scheduled("1024"), model)
    big = step_memory(parse_scheduled("8192"), model)
    assert (
        small.ep_dispatch_bytes == 1024 * 8 * 7168 * 2
    )  # every DP rank's tokens, gathered before the experts
    assert big.ep_dispatch_bytes == 8 * small.ep_dispatch_bytes
    assert big.ep_combine_bytes == big.ep_dispatch_bytes
    assert big.forward_bytes == 8 * small.forward_bytes  # the fused-MoE caches of the gathered tokens too


def test_sampler_logits_are_fp32_rows_by_vocab(capsys: pytest.CaptureFixture[str]) -> None:
    out = _step_json(capsys, "--hidden-size", "4096", "--vocab-size", "128256", "--scheduled", "512,3d")
    assert out["sampler_rows"] == 4
    assert out["sampler_logits_bytes"] == 4 * 128256 * 4 * 2  # two fp32 copies by default


@pytest.mark.parametrize("bad", ["12,abc", "0", "", "-5"])
def test_bad_shape_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], bad: str) -> None:
    assert oomguard(["step", "--hidden-size", "4096", "--scheduled", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("oomguard step: error:") and "\n" not in err


@pytest.mark.parametrize(
    ("model", "gpu", "flags"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "H100", {}),
        ("Qwen/Qwen3-30B-A3B", "H100", {"data_parallel_size": 2, "enable_expert_parallel": True}),
        (
            "meta-llama/Llama-3.1-70B-Instruct",
            "H100",
            {"tensor_parallel_size": 2, "pipeline_parallel_size": 2},
        ),
        ("deepseek-ai/DeepSeek-V3", "H200", {"tensor_parallel_size": 8}),
    ],
)
def test_the_profile_runs_shape_costs_what_the_planner_reserved(model: str, gpu: str, flags: dict) -> None:
    from oomguard.planning import PlanRequest, plan
    from oomguard.simulation.model_facts import activation_of_rank

    result = plan(PlanRequest(model=model, gpu=gpu, flags=flags))
    cfg = result.engine
    for rank in result.ranks:
        # vLLM's profile run: one forward of max_num_batched_tokens tokens, the sampler over sampler_rows
        # rows.
        rows = cfg.sampler_rows if rank.placement.holds_lm_head else 0
        profile = StepShape(
            (Row(cfg.max_num_batched_tokens - rows, samples=False),) + (Row(1, 10, True),) * rows
        )
        assert step_memory(profile, activation_of_rank(result, rank)).peak_bytes == rank.activation.bytes


def test_step_with_a_model_judges_against_the_planners_headroom(capsys: pytest.CaptureFixture[str]) -> None:
    from oomguard.planning import PlanRequest, plan

    out = _step_json(
        capsys, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--scheduled", "8192,3d"
    )
    rank = plan(PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100")).rank0
    assert out["free_bytes"] == rank.gpu.free_bytes + rank.activation.bytes
    assert out["free_source"] == "planner headroom"
    assert out["oom_packed"] is False
