"""Issue 11 point 6: Kubernetes manifests checked as deployed (image tag version, $(VAR), LeaderWorkerSet
size, the GPU from nodeSelector / affinity / resource names or a FAIL, KServe huggingface predictors)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.run_oomguard import oomguard

from oomguard.planning.check import deployments_in_file, expand_env_refs, image_vllm_version

K8S = Path(__file__).resolve().parent / "data" / "k8s"


def _by_name(out: str) -> dict[str, dict[str, object]]:
    return {d["name"]: d for d in (json.loads(line) for line in out.splitlines())}


def test_the_vllm_version_comes_from_the_image_tag_unless_given() -> None:
    assert image_vllm_version("vllm/vllm-openai:v0.11.0") == "0.11.0"
    assert image_vllm_version("vllm/vllm-openai:latest") is None
    tagged = oomguard("check", str(K8S / "vllm.yaml"), "--gpu", "H100")
    assert "llama70b/vllm (vLLM 0.11.0, from the image tag)" in tagged.stdout
    assert "models's max seq len" in tagged.stdout  # 0.11's own wording, not 0.33's
    forced = oomguard("check", str(K8S / "vllm.yaml"), "--gpu", "H100", "--vllm-version", "0.33.0")
    assert "from the image tag" not in forced.stdout and "model's max seq len" in forced.stdout


def test_no_gpu_in_the_manifest_fails_unless_gpu_is_given() -> None:
    done = oomguard("check", str(K8S / "vllm.yaml"))
    assert done.returncode == 2
    assert "qwen8b/server: no GPU given" in done.stdout and "--gpu" in done.stderr
    assert "H100" not in done.stdout.split("qwen8b/server")[1]
    given = _by_name(oomguard("check", str(K8S / "vllm.yaml"), "--gpu", "H100", "--json").stdout)
    assert given["qwen8b/server"]["ok"] is True


def test_kubernetes_var_references_expand_from_the_container_env() -> None:
    assert expand_env_refs("--model=$(MODEL_ID)", {"MODEL_ID": "m"}) == "--model=m"
    assert expand_env_refs("$$(MODEL_ID) $(UNSET)", {"MODEL_ID": "m"}) == "$(MODEL_ID) $(UNSET)"
    (deployment,) = deployments_in_file(str(K8S / "gke.yaml"))
    assert deployment.args.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert deployment.args.values["gpu_memory_utilization"] == 0.9
    done = oomguard("check", str(K8S / "gke.yaml"))
    assert done.returncode in (0, 1) and "gemma/inference-server" in done.stdout and "L4" in done.stdout


def test_a_leaderworkerset_group_counts_every_pod_and_the_gpu_comes_from_affinity() -> None:
    (deployment,) = deployments_in_file(str(K8S / "lws.yaml"))
    assert deployment.gpus_requested == 16 and deployment.gpu is not None and "h100" in deployment.gpu
    done = oomguard("check", str(K8S / "lws.yaml"))
    assert "requests 8 GPU(s)" not in done.stdout
    assert "16 x NVIDIA H100" in done.stdout or "will not start" in done.stdout


def test_a_kserve_huggingface_predictor_is_planned() -> None:
    (deployment,) = deployments_in_file(str(K8S / "kserve.yaml"))
    assert deployment.args.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert deployment.args.values["max_model_len"] == 16384
    done = oomguard("check", str(K8S / "kserve.yaml"))
    assert "no vLLM server found" not in done.stderr and "A10G" in done.stdout


def test_fix_commands_never_print_a_manifests_secrets() -> None:
    (deployment,) = deployments_in_file(str(K8S / "gke.yaml"))
    assert all("HF_TOKEN" not in word for word in deployment.args.to_argv())


def test_check_exits_2_on_input_it_cannot_read_as_plan_does() -> None:
    command = ["--", "vllm", "serve", "Qwen/Qwen3-8B"]
    bad_gpu = oomguard("check", "--gpu", "NotAGPU", *command)
    assert bad_gpu.returncode == 2 and bad_gpu.stderr.startswith("oomguard check: error:")
    assert oomguard("plan", "--gpu", "NotAGPU", *command).returncode == 2
