"""The scheduler model against vLLM 0.33.0's real scheduler: the three recorded reference scenarios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomguard.simulation.cli import main

ORACLE_MODELS = "tools/vllm_oracle/configs"


def _run(
    shared_data: Path, scenario: str, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[dict, dict, Path]:
    ref = shared_data / "scheduler_reference" / scenario
    a = json.loads((ref / "params.json").read_text())["oracle_args"]
    model = shared_data.parent / ORACLE_MODELS / Path(a["model_dir"]).name
    argv = [
        str(ref / "workload.jsonl"),
        "--model",
        str(model),
        "--num-gpu-blocks-override",
        str(a["num_gpu_blocks"]),
        "--max-num-batched-tokens",
        str(a["max_num_batched_tokens"]),
        "--max-num-seqs",
        str(a["max_num_seqs"]),
        "--max-model-len",
        str(a["max_model_len"]),
        "--block-size",
        str(a["block_size"]),
        "--no-async-scheduling",
        "--enable-prefix-caching" if a["prefix_caching"] else "--no-enable-prefix-caching",
        "--json",
        *extra,
    ]
    assert main(argv) == 0
    ours = json.loads(capsys.readouterr().out)
    return ours, json.loads((ref / "summary.json").read_text()), ref


@pytest.mark.parametrize(
    "scenario", ["azure_code_first1000_offline", "seed002_mixed", "extra_gptoss_azure_code_first1000"]
)
def test_summary_numbers_match_vllm(
    shared_data: Path, scenario: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ours, oracle, _ = _run(shared_data, scenario, capsys)
    assert ours["steps"] == oracle["total_steps"]
    assert ours["preemptions"] == oracle["total_preemptions"]
    assert ours["max_kv_blocks_used"] == oracle["max_kv_blocks_used"]
    assert ours["max_running"] == oracle["max_running"]


@pytest.mark.parametrize("scenario", ["seed002_mixed", "extra_gptoss_azure_code_first1000"])
def test_timeline_chunks_match_vllm_step_by_step(
    shared_data: Path, scenario: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    timeline = tmp_path / "timeline.csv"
    _, _, ref = _run(shared_data, scenario, capsys, "--timeline", str(timeline))
    import csv

    with timeline.open() as f:
        ours = list(csv.DictReader(f))
    oracle = [json.loads(line) for line in (ref / "timeline.jsonl").read_text().splitlines()]
    oracle = [o for o in oracle if o["executed"]]
    assert len(ours) == len(oracle)
    for mine, theirs in zip(ours, oracle):
        assert int(mine["step"]) == theirs["step"]
        assert int(mine["tokens"]) == theirs["tokens"]
        assert int(mine["num_prefills"]) == theirs["num_prefills"]
        assert int(mine["num_decodes"]) == theirs["num_decodes"]
        assert int(mine["max_prefill"]) == max((p[1] for p in theirs["prefill"]), default=0)
        assert int(mine["kv_blocks_used"]) == theirs["kv_blocks_used"]
        assert int(mine["running"]) == theirs["running"]
