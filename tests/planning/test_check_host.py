"""`check` and `plan` with the host ledger: real manifests (vLLM's Deployment and LeaderWorkerSet guides, a
KServe InferenceService), docker commands, --host-memory, the `host` JSON object and the Python API."""

from __future__ import annotations

import json
from pathlib import Path

from tests.run_oomguard import oomguard as oomguard_cli

import oomguard
from oomguard.host.ledger import HostStep, HostVerdict
from oomguard.planning.check import check_deployment, deployments_in_file
from oomguard.units import GiB, MiB

DATA = Path(__file__).resolve().parents[1] / "data" / "host"


def test_deployment_guide_fits_its_20g_limit_and_2gi_shm() -> None:
    (deployment,) = deployments_in_file(str(DATA / "deployment_emptydir_shm.yaml"))
    assert deployment.limits is not None and deployment.limits.memory_limit == 20 * 10**9
    assert deployment.args.get("max_num_batched_tokens") == 1024  # written --max_num_batched_tokens
    result = check_deployment(deployment, gpu="H100")
    assert result.ok and result.host is not None
    assert result.host.verdict is HostVerdict.FITS and result.host.shm_fits is True
    assert "host fits" in result.message
    tight = check_deployment(deployment, gpu="H100", host_memory="3GiB")
    assert not tight.ok and "OOM-killed while startup" in tight.message


def test_kserve_without_a_shm_volume_fails_at_startup_until_one_is_given() -> None:
    (deployment,) = deployments_in_file(str(DATA / "kserve_inferenceservice.yaml"))
    result = check_deployment(deployment, gpu="H100")
    assert not result.ok and "/dev/shm holds 64 MiB" in result.message
    assert result.host is not None and result.host.shm_needed > 64 * MiB
    assert "emptyDir {medium: Memory" in result.message
    assert check_deployment(deployment, gpu="H100", shm_size="2GiB").ok


def test_leaderworkerset_leader_runs_one_stage_of_the_group_on_ray() -> None:
    (leader,) = deployments_in_file(str(DATA / "leaderworkerset_ray.yaml"))
    assert leader.gpus_requested == 16 and leader.local_gpus == 8  # size 2 x 8 GPUs: TP 8 x PP 2
    assert leader.args.get("distributed_executor_backend") == "ray"  # the script starts Ray first
    result = check_deployment(leader, gpu="H100")
    assert result.ok, result.message
    assert result.host is not None
    roles = {p.role: p.count for p in result.host.processes}
    assert roles["GPU worker"] == 8 and roles["Ray services"] == 1
    small = check_deployment(leader, gpu="H100", host_memory="48GiB")
    assert not small.ok and small.host is not None and small.host.dies_at is HostStep.LOAD


def test_docker_run_file_carries_its_limits(tmp_path: Path) -> None:
    command = tmp_path / "run.sh"
    command.write_text(
        "docker run --gpus all -m 8g --shm-size 16g -p 8000:8000 vllm/vllm-openai:v0.33.0 \\\n"
        "  --model Qwen/Qwen3-32B --tensor-parallel-size 2 --max-model-len 32768\n"
    )
    (deployment,) = deployments_in_file(str(command))
    assert deployment.limits is not None and deployment.limits.memory_limit == 8 * GiB
    result = check_deployment(deployment, gpu="H100")
    assert not result.ok and "OOM-killed" in result.message


def test_check_json_has_the_host_object() -> None:
    done = oomguard_cli("check", str(DATA / "kserve_inferenceservice.yaml"), "--gpu", "H100", "--json")
    assert done.returncode == 1
    host = json.loads(done.stdout)["host"]
    assert host["shm_fits"] is False and host["limits"]["memory_limit_gib"] == 48.0


def test_plan_host_memory_sets_the_exit_code_and_the_json_host_object() -> None:
    command = ["--", "vllm", "serve", "Qwen/Qwen3-32B", "-tp", "2", "--enable-sleep-mode"]
    done = oomguard_cli("plan", "--gpu", "H100", "--host-memory", "40GiB", "--json", *command)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["fits"] is True  # the GPUs are fine
    assert report["host"]["verdict"] == "will be OOM-killed" and report["host"]["dies_at"] == "sleep"
    assert oomguard_cli("plan", "--gpu", "H100", "--host-memory", "256GiB", *command).returncode == 0


def test_python_api_returns_the_same_host_object_as_json() -> None:
    report = oomguard.plan(
        "vllm serve Qwen/Qwen3-32B -tp 2", gpu="H100", host_memory="16GiB", shm_size="64MiB"
    )
    assert report.host is not None and report.host.shm_fits is False
    done = oomguard_cli(
        "plan",
        "--gpu",
        "H100",
        "--host-memory",
        "16GiB",
        "--shm-size",
        "64MiB",
        "--json",
        "--",
        "vllm",
        "serve",
        "Qwen/Qwen3-32B",
        "-tp",
        "2",
    )
    assert report.to_dict()["host"] == json.loads(done.stdout)["host"]
