"""Issue 11 point 1: what vLLM's own parser would refuse is refused (plan exits 2, check FAILs naming the
closest real flag); vLLM's spellings are read as vLLM reads them; oomguard's own mistyped options are
errors."""

from __future__ import annotations

import json
from pathlib import Path

from tests.run_oomguard import oomguard


def test_a_flag_vllm_does_not_have_makes_plan_exit_2_naming_the_closest_flag() -> None:
    done = oomguard(
        "plan", "--gpu", "H100", "--", "vllm", "serve", "Qwen/Qwen3-8B", "--max-model-length", "8192"
    )
    assert done.returncode == 2
    assert "unrecognized arguments: --max-model-length 8192" in done.stderr
    assert "--max-model-len" in done.stderr.replace("--max-model-length", "")
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_check_fails_on_a_flag_vllm_would_refuse() -> None:
    done = oomguard("check", "--gpu", "H100", "--", "vllm", "serve", "Qwen/Qwen3-8B", "--gpu-mem-util", "0.5")
    assert done.returncode == 1
    assert done.stdout.startswith("FAIL")
    assert "--gpu-mem-util" in done.stdout and "did you mean --gpu-memory-utilization" in done.stdout


def test_underscore_and_equals_spellings_are_read_as_vllm_reads_them() -> None:
    done = oomguard(
        "plan",
        "--gpu",
        "H100",
        "--json",
        "--no-fixes",
        "--",
        "vllm",
        "serve",
        "Qwen/Qwen3-32B",
        "--tensor_parallel_size",
        "2",
        "--max_model_len=32768",
    )
    data = json.loads(done.stdout)
    assert data["engine"]["tensor_parallel_size"] == 2
    assert data["engine"]["max_model_len"] == 32768
    assert data["engine"]["unknown_flags"] == []


def test_a_unique_prefix_is_the_flag_and_an_ambiguous_one_is_refused() -> None:
    data = json.loads(
        oomguard(
            "plan", "--gpu", "H100", "--json", "--", "vllm", "serve", "Qwen/Qwen3-8B", "--max-model", "8192"
        ).stdout
    )
    assert data["engine"]["max_model_len"] == 8192
    done = oomguard("plan", "--gpu", "H100", "--", "vllm", "serve", "Qwen/Qwen3-8B", "--max-num", "8")
    assert done.returncode == 2 and "ambiguous option: --max-num" in done.stderr


def test_json_valued_flags_and_negated_switches_are_accepted() -> None:
    done = oomguard(
        "plan",
        "--gpu",
        "H100",
        "--json",
        "--",
        "vllm",
        "serve",
        "Qwen/Qwen3-8B",
        "--compilation-config",
        '{"cudagraph_mode": "PIECEWISE"}',
        "--no-enable-prefix-caching",
        "--max-model-len",
        "8192",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["engine"]["unknown_flags"] == []


def test_a_real_vllm_flag_that_is_not_modelled_stays_a_note() -> None:
    done = oomguard(
        "plan",
        "--gpu",
        "H100",
        "--json",
        "--",
        "vllm",
        "serve",
        "Qwen/Qwen3-8B",
        "--max-num-queued-reqs",
        "64",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["engine"]["unknown_flags"] == ["--max-num-queued-reqs 64"]


def test_config_yaml_keys_are_checked_like_flags(tmp_path: Path) -> None:
    good = tmp_path / "serve.yaml"
    good.write_text("model: Qwen/Qwen3-32B\ntensor_parallel_size: 2\nmax-model-len: 32768\n")
    data = json.loads(
        oomguard("plan", "--gpu", "H100", "--json", "--", "vllm", "serve", "--config", str(good)).stdout
    )
    assert data["engine"]["tensor_parallel_size"] == 2 and data["engine"]["max_model_len"] == 32768
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: Qwen/Qwen3-8B\nmax_model_length: 8192\n")
    done = oomguard("check", "--gpu", "H100", str(bad))
    assert done.returncode == 1 and "max_model_length" in done.stdout and "--max-model-len" in done.stdout


def test_oomguards_own_mistyped_option_is_an_error_not_an_h100_plan() -> None:
    done = oomguard("plan", "Qwen/Qwen3-8B", "--gpus", "A10G")
    assert done.returncode == 2
    assert "--gpus" in done.stderr and "--gpu" in done.stderr.replace("--gpus", "")
    assert "H100" not in done.stdout


def test_a_flag_older_vllm_had_is_refused_by_0_33_and_accepted_for_the_old_version() -> None:
    command = ["--", "vllm", "serve", "Qwen/Qwen3-8B", "--max-seq-len-to-capture", "8192"]
    assert oomguard("plan", "--gpu", "H100", *command).returncode == 2
    assert oomguard("plan", "--gpu", "H100", "--vllm-version", "0.8.5", *command).returncode in (0, 1)
