"""`oomguard plan` and `oomguard check` as a user runs them: exit codes, one-line errors, the JSON
contract."""

from __future__ import annotations

import json
from pathlib import Path

from tests.run_oomguard import oomguard

GiB = 1 << 30


def test_plan_prints_the_ledger_and_exits_0_when_it_fits() -> None:
    done = oomguard("plan", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--max-model-len", "8192")
    assert done.returncode == 0, done.stderr
    assert "FITS" in done.stdout
    assert "Available KV cache memory:" in done.stdout
    assert "weights" in done.stdout and "14.99" in done.stdout


def test_plan_takes_the_users_own_command_after_double_dash() -> None:
    done = oomguard(
        "plan",
        "--gpu",
        "H100",
        "--json",
        "--",
        "vllm",
        "serve",
        "meta-llama/Llama-3.1-8B-Instruct",
        "-tp",
        "2",
        "--max-model-len",
        "8192",
        "--max-num-queued-reqs",
        "64",
    )
    data = json.loads(done.stdout)
    assert data["engine"]["tensor_parallel_size"] == 2
    # A vLLM flag that moves no memory figure is kept and listed.
    assert data["engine"]["unknown_flags"] == ["--max-num-queued-reqs 64"]


def test_json_contract_keys() -> None:
    done = oomguard("plan", "Qwen/Qwen3-8B", "--gpu", "L40S", "--json")
    data = json.loads(done.stdout)
    for key in ("fits", "kv_cache_tokens", "num_gpu_blocks", "max_concurrency", "ranks", "fixes", "errors"):
        assert key in data
    for key in (
        "weights_gib",
        "activation_gib",
        "non_torch_gib",
        "cuda_graph_gib",
        "comm_buffers_gib",
        "kv_cache_gib",
        "num_gpu_blocks",
    ):
        assert key in data["ranks"][0]
    assert data["num_gpu_blocks"] == data["ranks"][0]["num_gpu_blocks"] > 0


def test_does_not_fit_exits_1_with_vllms_error_and_fixes() -> None:
    done = oomguard("plan", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "H100", "--json")
    assert done.returncode == 1
    data = json.loads(done.stdout)
    assert data["fits"] is False
    assert data["errors"] and data["fixes"]
    assert all(
        fix["command"].startswith("vllm serve meta-llama/Llama-3.1-70B-Instruct") for fix in data["fixes"]
    )


def test_bad_input_is_one_line_and_exit_2() -> None:
    for args in (
        ["plan", "no-such/model-zzz", "--gpu", "H100"],
        ["plan", "Qwen/Qwen3-14B", "--gpu", "H100", "-tp", "5"],
        ["plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--gpu-memory-utilization", "abc"],
        ["plan", "Qwen/Qwen3-8B", "--gpu", "not-a-gpu-9000"],
    ):
        done = oomguard(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr


def test_malformed_local_config_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama", "hidden_size": ')
    done = oomguard("plan", str(tmp_path), "--gpu", "H100")
    assert done.returncode == 2
    assert "config.json" in done.stderr and "Traceback" not in done.stderr


def test_check_fails_a_manifest_that_would_not_start(tmp_path: Path) -> None:
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text("""
apiVersion: apps/v1
kind: Deployment
metadata: {name: big}
spec:
  template:
    spec:
      nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.33.0
          args: ["--model", "meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "32768"]
          resources: {limits: {nvidia.com/gpu: 1}}
---
apiVersion: v1
kind: Pod
metadata: {name: small}
spec:
  containers:
    - name: server
      image: python:3.11
      command: ["/bin/sh", "-c", "pip install vllm && vllm serve Qwen/Qwen3-8B --max-model-len 32768"]
""")
    done = oomguard("check", str(manifest), "--gpu", "H100")
    assert done.returncode == 1
    assert "FAIL big/vllm" in done.stdout and "PASS small/server" in done.stdout


def test_check_enforces_headroom() -> None:
    command = ["--", "vllm", "serve", "Qwen/Qwen3-8B", "--max-model-len", "8192"]
    assert oomguard("check", "--gpu", "H100", "--min-headroom", "1GiB", *command).returncode == 0
    assert oomguard("check", "--gpu", "H100", "--min-headroom", "30GiB", *command).returncode == 1


def test_check_api_is_usable_from_pytest() -> None:
    from oomguard.planning.check import check_command

    result = check_command("vllm serve Qwen/Qwen3-8B --max-model-len 8192", gpu="H100", min_headroom="1GiB")
    assert result.ok, result.message
