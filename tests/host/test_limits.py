"""The limits a container runs under, read from real manifests and docker commands."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from oomguard.errors import ConfigError
from oomguard.host.limits import (
    RUNTIME_DEFAULT_SHM_BYTES,
    docker_limits,
    given_limits,
    parse_quantity,
    pod_limits,
)
from oomguard.units import GiB, MiB

DATA = Path(__file__).resolve().parents[1] / "data" / "host"


def _pods(node: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(node, Mapping):
        if isinstance(node.get("containers"), list):
            yield node
        for value in node.values():
            yield from _pods(value)
    elif isinstance(node, list):
        for item in node:
            yield from _pods(item)


def _containers(name: str) -> dict[str, tuple[Mapping[str, Any], Mapping[str, Any]]]:
    found = {}
    for document in yaml.safe_load_all((DATA / name).read_text()):
        for pod in _pods(document):
            for container in pod["containers"]:
                found[container["name"]] = (pod, container)
    return found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("64Gi", 64 * GiB),
        ("20G", 20 * 10**9),
        ("512Mi", 512 * MiB),
        ("68719476736", 64 * GiB),
        ("1.5e9", 1_500_000_000),
        ("1124Gi", 1124 * GiB),
        ("128974848000m", 128_974_848),
    ],
)
def test_kubernetes_quantities_read_as_kubernetes_reads_them(text: str, expected: int) -> None:
    assert parse_quantity(text, "test") == expected


@pytest.mark.parametrize("text", ["64GB", "lots", "-1Gi", "0", "1Zi"])
def test_bad_quantities_are_named(text: str) -> None:
    with pytest.raises(ConfigError, match="test"):
        parse_quantity(text, "test")


def test_deployment_with_memory_backed_emptydir_shm() -> None:
    pod, container = _containers("deployment_emptydir_shm.yaml")["mistral-7b"]
    limits = pod_limits(pod, container, "deploy")
    assert limits.memory_limit == 20 * 10**9
    assert limits.memory_request == 6 * 10**9
    assert limits.shm is not None and limits.shm.bytes == 2 * GiB
    assert "sizeLimit 2Gi" in limits.shm.source


def test_leaderworkerset_leader_and_worker_pods_each_have_their_limits() -> None:
    found = _containers("leaderworkerset_ray.yaml")
    for name in ("vllm-leader", "vllm-worker"):
        pod, container = found[name]
        limits = pod_limits(pod, container, name)
        assert limits.memory_limit == 1124 * GiB
        assert limits.memory_request == 1124 * GiB  # no memory request: Kubernetes takes the limit
        assert limits.shm is not None and limits.shm.bytes == 15 * GiB


def test_kserve_container_without_shm_volume_gets_the_runtime_default() -> None:
    pod, container = _containers("kserve_inferenceservice.yaml")["kserve-container"]
    limits = pod_limits(pod, container, "isvc")
    assert limits.memory_limit == 48 * GiB and limits.memory_request == 40 * GiB
    assert limits.shm is not None and limits.shm.bytes == RUNTIME_DEFAULT_SHM_BYTES


def test_emptydir_without_size_limit_is_bounded_by_the_memory_limit() -> None:
    pod = {
        "containers": [],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }
    container = {
        "name": "vllm",
        "resources": {"limits": {"memory": "32Gi"}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm/"}],
    }
    limits = pod_limits(pod, container, "pod")
    assert limits.shm is not None and limits.shm.bytes == 32 * GiB


def test_host_ipc_uses_the_nodes_shm() -> None:
    limits = pod_limits({"hostIPC": True, "containers": []}, {"name": "c"}, "pod")
    assert limits.shm is not None and limits.shm.bytes is None and limits.memory_limit is None


def test_docker_run_flags() -> None:
    argv = (
        "docker run --gpus all -m 64g --shm-size=16g -p 8000:8000 vllm/vllm-openai --model m --swap-space 8"
    )
    limits = docker_limits(argv.split())
    assert limits is not None
    assert limits.memory_limit == 64 * GiB
    assert limits.shm is not None and limits.shm.bytes == 16 * GiB
    host_ipc = docker_limits(
        ["docker", "run", "--ipc=host", "--gpus", "all", "vllm/vllm-openai", "--model", "m"]
    )
    assert host_ipc is not None and host_ipc.shm is not None and host_ipc.shm.bytes is None
    plain = docker_limits(["docker", "run", "--gpus", "all", "vllm/vllm-openai", "--model", "m"])
    assert plain is not None and plain.shm is not None and plain.shm.bytes == RUNTIME_DEFAULT_SHM_BYTES
    assert docker_limits(["vllm", "serve", "m"]) is None


def test_host_memory_option() -> None:
    limits = given_limits("64GiB", "1GiB")
    assert limits.memory_limit == 64 * GiB
    assert limits.shm is not None and limits.shm.bytes == GiB


def test_host_memory_takes_kubernetes_quantities_too() -> None:
    assert given_limits("64Gi").memory_limit == 64 * GiB
    assert given_limits("512G").memory_limit == 512 * 10**9
    with pytest.raises(ConfigError, match="--host-memory"):
        given_limits("lots")
