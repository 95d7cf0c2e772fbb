"""The CI guard: will each deployment start, with the headroom you require? Usable from pytest:

    from oomguard.planning.check import check_command
    def test_serving_config_fits():
        result = check_command("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768",
        gpu="H100",
                               min_headroom="2GiB")
        assert result.ok, result.message

Inputs: a `vllm serve` command, vLLM's `--config` YAML, or Kubernetes manifests (Deployment, StatefulSet, Pod,
Job, LeaderWorkerSet, KServe InferenceService, ...: any object whose containers run vLLM).
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from oomguard.engines.vllm.cli_flags import RefusedFlagError
from oomguard.engines.vllm.engine import PLANNER as VLLM
from oomguard.engines.vllm.flags import ServeArgs, args_from_mapping, parse_serve_command
from oomguard.engines.vllm.plan import PlanRequest, plan
from oomguard.engines.vllm.versions import NEWEST_KNOWN
from oomguard.errors import ConfigError, InputFormatError, OomguardError
from oomguard.hardware import find_gpu
from oomguard.host.ledger import HostLedger, HostLimits, HostVerdict
from oomguard.host.limits import docker_limits, given_limits, pod_limits
from oomguard.inputs import MAX_CONFIG_BYTES, read_text_bounded
from oomguard.kinds import Verdict
from oomguard.planning.dispatch import finish
from oomguard.result import PlanResult
from oomguard.units import GiB, parse_bytes
from oomguard.yaml_input import load_yaml_documents

GPU_RESOURCE_KEYS = ("nvidia.com/gpu", "amd.com/gpu")
GPU_PRODUCT_LABELS = (
    "nvidia.com/gpu.product",
    "cloud.google.com/gke-accelerator",
    "node.kubernetes.io/instance-type",
)


@dataclass(frozen=True)
class Deployment:
    """One vLLM server found in the input."""

    name: str
    args: ServeArgs
    gpu: str | None
    gpus_requested: int | None  # GPUs the whole deployment gets (all pods of a LeaderWorkerSet group)
    where: str
    limits: HostLimits | None = None  # the container's memory limit, request and /dev/shm
    local_gpus: int | None = None  # GPUs of the pod the server runs in (one node)
    vllm_version: str | None = None  # from the container image's tag (vllm/vllm-openai:v0.11.0)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckResult:
    deployment: Deployment
    ok: bool
    message: str
    plan: PlanResult | None
    bad_input: bool = False  # oomguard could not read the input (exit 2), rather than the deployment failing
    host: HostLedger | None = None

    def __bool__(self) -> bool:
        return self.ok


def check_deployment(
    deployment: Deployment,
    *,
    gpu: str | None = None,
    gpu_memory: str | None = None,
    vllm_version: str | None = None,
    min_headroom: str | int = 0,
    min_concurrency: float = 0.0,
    allow_marginal: bool = False,
    safety: str | int | None = None,
    host_memory: str | None = None,
    shm_size: str | None = None,
) -> CheckResult:
    # a NaN threshold compares false with everything and would turn the guard off
    if isinstance(min_concurrency, bool) or not isinstance(min_concurrency, (int, float)):
        raise ConfigError(f"min_concurrency must be a number, got {type(min_concurrency).__name__}")
    if not math.isfinite(min_concurrency) or min_concurrency < 0:
        raise ConfigError(f"min_concurrency must be a finite number >= 0, got {min_concurrency}")
    if isinstance(min_headroom, bool) or not isinstance(min_headroom, (str, int, float)):
        raise ConfigError(
            f"min_headroom must be a size like 2GiB or bytes, got {type(min_headroom).__name__}"
        )
    if isinstance(min_headroom, float) and not (math.isfinite(min_headroom) and min_headroom >= 0):
        raise ConfigError(f"min_headroom must be a finite number of bytes >= 0, got {min_headroom}")
    headroom_needed = parse_bytes(str(min_headroom)) if isinstance(min_headroom, str) else int(min_headroom)
    safety_bytes = parse_bytes(str(safety)) if isinstance(safety, str) else safety
    if deployment.gpu is None and gpu is None and gpu_memory is None:
        return CheckResult(
            deployment,
            False,
            f"{deployment.name}: no GPU given: the input names none (nodeSelector, node affinity or a GPU "
            "resource name); pass --gpu NAME or --gpu-memory SIZE",
            None,
            bad_input=True,
        )
    request = PlanRequest(
        args=deployment.args,
        gpu=deployment.gpu or gpu,
        gpu_memory=gpu_memory,
        vllm_version=vllm_version or deployment.vllm_version or NEWEST_KNOWN,
        safety_bytes=safety_bytes,
        host=_limits(deployment, host_memory, shm_size),
        local_gpus=deployment.local_gpus,
    )
    try:
        native = plan(request)
    except RefusedFlagError as err:
        return CheckResult(deployment, False, f"{deployment.name}: will not start: {err}", None)
    except OomguardError as err:
        return CheckResult(deployment, False, f"{deployment.name}: cannot plan: {err}", None, bad_input=True)
    # The fix search runs only where the message offers a fix: a plan that does not start, a refused margin.
    wants_fix = not native.fits or (native.verdict == Verdict.MARGINAL and not allow_marginal)
    result = finish(VLLM, native, fixes=wants_fix)
    gpu_check = _check_gpu(
        deployment,
        result,
        headroom_needed,
        min_concurrency,
        vllm_version=vllm_version,
        allow_marginal=allow_marginal,
    )
    return _with_host(gpu_check, result.host) if result.host is not None else gpu_check


def _limits(deployment: Deployment, host_memory: str | None, shm_size: str | None) -> HostLimits | None:
    """The manifest's limits, with --host-memory / --shm-size given on the command line winning."""
    given = given_limits(host_memory, shm_size)
    found = deployment.limits or HostLimits()
    if not (host_memory or shm_size or deployment.limits):
        return None
    return HostLimits(
        given.memory_limit if host_memory else found.memory_limit,
        found.memory_request,
        given.shm if shm_size else found.shm,
        given.source if host_memory else found.source,
    )


def _with_host(checked: CheckResult, host: HostLedger) -> CheckResult:
    """The GPU verdict, then the node's: OOM-killed at a step, or a /dev/shm too small to start."""
    result = replace(checked, host=host)
    if not checked.ok:
        return result
    name = checked.deployment.name
    fixes = host.fixes
    hint = f"; fix: {fixes[0].summary}" if fixes else ""
    limit = host.limits.memory_limit
    peak = f"peak {host.peak_bytes / GiB:.1f} GiB +-{host.peak_band / GiB:.1f} at {host.peak_step.label}"
    if host.shm_fits is False and host.limits.shm is not None:
        return replace(
            result,
            ok=False,
            message=f"{name}: GPU fits, but /dev/shm holds "
            f"{(host.limits.shm.bytes or 0) / 2**20:.0f} MiB and "
            f"vLLM puts {host.shm_needed / 2**20:.0f} MiB there at startup ({host.limits.shm.source}){hint}",
        )
    if host.verdict is HostVerdict.OOM_KILLED and host.dies_at is not None and limit is not None:
        return replace(
            result,
            ok=False,
            message=f"{name}: GPU fits, but the container will be OOM-killed while {host.dies_at.label}: "
            f"{host.used_at(host.dies_at) / GiB:.1f} GiB > limit {limit / GiB:.1f} GiB ({peak}){hint}",
        )
    if limit is None:
        note = f"; host {peak}, no memory limit (a limit of {host.limit_that_fits // GiB}Gi fits)"
    else:
        note = f"; host {host.verdict.value}: {peak} of a {limit / GiB:.1f} GiB limit"
    return replace(result, message=checked.message + note)


def _check_gpu(
    deployment: Deployment,
    result: PlanResult,
    headroom_needed: int,
    min_concurrency: float,
    *,
    vllm_version: str | None,
    allow_marginal: bool,
) -> CheckResult:
    name = deployment.name
    if vllm_version is None and deployment.vllm_version:
        name += f" ({result.engine.display_name} {result.engine.version}, from the image tag)"
    if not result.fits:
        hint = f"; fix: {result.fixes[0].summary}" if result.fixes else ""
        return CheckResult(
            deployment,
            False,
            f"{name}: will not start ({result.failure}): {result.errors[0] if result.errors else ''}{hint}",
            result,
        )
    gpus = result.engine.total_gpus
    if result.verdict == Verdict.MARGINAL and not allow_marginal and result.margin is not None:
        hint = f"; fix: {result.fixes[0].summary}" if result.fixes else ""
        return CheckResult(
            deployment,
            False,
            f"{name}: marginal: fits at the estimate with {result.margin.slack_bytes / GiB:.2f} GiB to spare "
            "on "
            f"{result.margin.constraint}, less than the {result.margin.required_bytes / GiB:.2f} GiB its "
            f"estimates may be off by (--allow-marginal accepts it){hint}",
            result,
        )
    if deployment.gpus_requested is not None and deployment.gpus_requested < result.engine.world_size:
        return CheckResult(
            deployment,
            False,
            f"{name}: requests {deployment.gpus_requested} GPU(s) but TP x PP = {result.engine.world_size}",
            result,
        )
    free = min(r.gpu.free_bytes for r in result.ranks)
    if free < headroom_needed:
        return CheckResult(
            deployment,
            False,
            f"{name}: fits, but leaves {free / GiB:.2f} GiB free at peak, less than "
            f"the required {headroom_needed / GiB:.2f} GiB",
            result,
        )
    if result.kv.max_concurrency < min_concurrency:
        return CheckResult(
            deployment,
            False,
            f"{name}: fits, but holds {result.kv.max_concurrency:.2f}x concurrency "
            f"at {result.engine.request_length:,} tokens, less than the required {min_concurrency}x",
            result,
        )
    return CheckResult(
        deployment,
        True,
        f"{name}: fits on {gpus} x {result.gpu.name}: KV "
        f"{result.rank0.available_kv_bytes / GiB:.2f} GiB = {result.kv.tokens:,} tokens, "
        f"{result.kv.max_concurrency:.2f}x at {result.engine.request_length:,}; "
        f"{free / GiB:.2f} GiB free at peak",
        result,
    )


def check_command(command: str, **kwargs: Any) -> CheckResult:
    """Check one `vllm serve ...` command (see check_deployment for the keyword options)."""
    args = parse_serve_command(command)
    return check_deployment(Deployment(args.model or "command", args, None, None, "command"), **kwargs)


# ---------------------------------------------------------------------------------------------------------
# Finding the deployments in a file
# ---------------------------------------------------------------------------------------------------------


def deployments_in_file(path: str) -> list[Deployment]:
    """Kubernetes manifests (one or many documents), a vLLM --config YAML, or a text file holding a
    command."""
    text = read_text_bounded(path, limit=MAX_CONFIG_BYTES, what="deployment file", error=InputFormatError)
    first_line = text.strip().splitlines()[0] if text.strip() else ""
    if first_line.startswith(("vllm ", "python", "docker ")) or first_line.split()[:1] == ["serve"]:
        args = parse_serve_command(text)
        try:
            limits = docker_limits(shlex.split(text.replace("\\\n", " ")))
        except ValueError:
            limits = None
        return [Deployment(args.model or path, args, None, None, path, limits)]
    documents = [d for d in load_yaml_documents(text, path, InputFormatError) if d is not None]
    found: list[Deployment] = []
    for index, document in enumerate(documents):
        if not isinstance(document, Mapping):
            continue
        if "kind" in document and "apiVersion" in document:
            found += list(_from_manifest(document, f"{path}#{index + 1}"))
        elif "model" in document or "model_tag" in document:
            args = args_from_mapping(document, where=path, strict=True)
            found.append(Deployment(args.model or path, args, None, None, path))
    if not found:
        raise InputFormatError(
            f"{path}: no vLLM server found (expected a `vllm serve` command, a vLLM config YAML "
            "with `model:`, or Kubernetes objects whose containers run vLLM)"
        )
    return found


def _walk_pod_specs(node: Any) -> Iterator[Mapping[str, Any]]:
    """Every PodSpec-like mapping (one holding `containers`) anywhere in a manifest."""
    if isinstance(node, Mapping):
        if isinstance(node.get("containers"), list):
            yield node
        for value in node.values():
            yield from _walk_pod_specs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk_pod_specs(item)


def _string_list(container: Mapping[str, Any], key: str, where: str) -> list[str]:
    """A container's `command` / `args`: Kubernetes requires a list of strings (kubectl refuses anything
    else)."""
    value = container.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or any(isinstance(w, (dict, list)) for w in value):
        raise InputFormatError(
            f"{where}: container {container.get('name', '?')!r}: `{key}` must be a list of "
            f"strings, got {type(value).__name__}"
        )
    return [str(w) for w in value]


def _mapping(node: Any) -> Mapping[str, Any]:
    """A manifest field that should be a mapping; anything else reads as empty (kubectl would refuse it)."""
    return node if isinstance(node, Mapping) else {}


def _gpu_count(limits: Mapping[str, Any], where: str) -> int | None:
    for key in _gpu_resources(limits):
        if key in limits:
            try:
                return int(str(limits[key]))
            except ValueError:
                raise InputFormatError(
                    f"{where}: resources.limits {key} must be a whole number of GPUs, got {limits[key]!r}"
                ) from None
    return None


def _container_command(container: Mapping[str, Any], where: str) -> list[str] | None:
    words = _string_list(container, "command", where) + _string_list(container, "args", where)
    image = str(container.get("image") or "")
    joined = " ".join(words)
    if len(words) >= 2 and words[0].endswith("sh") and words[1] in ("-c", "-lc", "-ec"):
        script = " ".join(words[2:])
        for part in script.replace("&&", ";").split(";"):
            if "vllm" in part and ("serve" in part or "api_server" in part):
                try:
                    return shlex.split(part.replace("\\\n", " "))
                except ValueError:
                    raise ConfigError(f"cannot split the shell command {part.strip()[:80]!r}") from None
        return None
    if "vllm" in joined and ("serve" in joined or "api_server" in joined):
        return words
    if "vllm" in image:
        # The vllm/vllm-openai image's entrypoint is the API server: args are its flags.
        return ["vllm", "serve", *words]
    return None


def _gpu_resources(limits: Mapping[str, Any]) -> list[str]:
    """GPU resource names: nvidia.com/gpu, amd.com/gpu, and device-plugin names that carry the product
    (nvidia.com/gpu-h100, nvidia.com/mig-3g.40gb is not a whole GPU and is not counted)."""
    return [
        str(key)
        for key in limits
        if str(key) in GPU_RESOURCE_KEYS
        or (str(key).startswith(("nvidia.com/gpu-", "amd.com/gpu-")) and "mig" not in str(key))
    ]


def _known_gpu(text: str) -> str | None:
    for candidate in (text, text.replace("-", " ")):
        try:
            return find_gpu(candidate).key
        except OomguardError:
            continue
    return None


def _gpu_of_pod(pod: Mapping[str, Any], limits: Mapping[str, Any]) -> str | None:
    """The GPU a pod lands on: nodeSelector, then required node affinity, then a product in a resource
    name."""
    selector = _mapping(pod.get("nodeSelector"))
    for label in GPU_PRODUCT_LABELS:
        if label in selector:
            return _known_gpu(str(selector[label]))
    affinity = _mapping(_mapping(_mapping(pod.get("affinity")).get("nodeAffinity")))
    required = _mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = required.get("nodeSelectorTerms")
    for term in terms if isinstance(terms, list) else []:
        expressions = _mapping(term).get("matchExpressions")
        for expression in expressions if isinstance(expressions, list) else []:
            item = _mapping(expression)
            values = item.get("values")
            if item.get("key") in GPU_PRODUCT_LABELS and item.get("operator") == "In" and values:
                found = _known_gpu(str(values[0])) if isinstance(values, list) else None
                if found:
                    return found
    for key in _gpu_resources(limits):
        product = key.split("/", 1)[1].removeprefix("gpu-").removeprefix("gpu")
        if product:
            found = _known_gpu(product)
            if found:
                return found
    return None


_TAG_VERSION = re.compile(r"^v?(\d+\.\d+(?:\.\d+)?)")


def image_vllm_version(image: str) -> str | None:
    """vllm/vllm-openai:v0.11.0 -> '0.11.0'; tags without a version (latest, nightly) -> None."""
    if "vllm" not in image or ":" not in image.rsplit("/", 1)[-1]:
        return None
    match = _TAG_VERSION.match(image.rsplit(":", 1)[1])
    return match.group(1) if match else None


_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand_env_refs(word: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) in command/args: replaced by the container's env value; $$ is a literal $; an
    undefined reference stays as written (as the kubelet leaves it)."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _VAR_REF.sub(one, word)


# A container script that starts Ray before `vllm serve` (vLLM's multi-node-serving.sh does) serves on Ray.
RAY_STARTERS = ("ray start", "multi-node-serving.sh")


def _group_size(manifest: Mapping[str, Any]) -> int:
    """Pods per group: a LeaderWorkerSet's leaderWorkerTemplate.size (one engine spans them), else 1."""
    if manifest.get("kind") != "LeaderWorkerSet":
        return 1
    size = _mapping(_mapping(manifest.get("spec")).get("leaderWorkerTemplate")).get("size", 1)
    return size if isinstance(size, int) and size >= 1 else 1


def _from_manifest(manifest: Mapping[str, Any], where: str) -> Iterator[Deployment]:
    name = str(_mapping(manifest.get("metadata")).get("name") or manifest.get("kind"))
    group_size = _group_size(manifest)
    yield from _kserve_huggingface(manifest, name, where)
    for pod in _pod_specs(manifest):
        for container in pod.get("containers") or []:
            if not isinstance(container, Mapping):
                continue
            command = _container_command(container, where)
            if command is None:
                continue
            env_list = container.get("env")
            env = {
                str(e.get("name")): str(e.get("value"))
                for e in (env_list if isinstance(env_list, list) else [])
                if isinstance(e, Mapping) and "value" in e
            }
            command = [expand_env_refs(word, env) for word in command]
            args = parse_serve_command([f"{k}={v}" for k, v in env.items() if _ENV_NAME.match(k)] + command)
            script = " ".join(
                _string_list(container, "command", where) + _string_list(container, "args", where)
            )
            if any(s in script for s in RAY_STARTERS) and "distributed_executor_backend" not in args.values:
                args = args.with_values(distributed_executor_backend="ray")
            limits = _mapping(_mapping(container.get("resources")).get("limits"))
            gpus = _gpu_count(limits, where)
            yield Deployment(
                f"{name}/{container.get('name', 'vllm')}",
                args,
                _gpu_of_pod(pod, limits),
                None if gpus is None else gpus * group_size,
                where,
                pod_limits(pod, container, where),
                gpus,
                vllm_version=image_vllm_version(str(container.get("image") or "")),
            )


_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def _pod_specs(manifest: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The pods that run `vllm serve`: a LeaderWorkerSet's leader only (its workers join the leader's Ray
    cluster), every pod spec of anything else."""
    template = _mapping(_mapping(manifest.get("spec")).get("leaderWorkerTemplate"))
    leader = _mapping(_mapping(template.get("leaderTemplate")).get("spec"))
    if manifest.get("kind") == "LeaderWorkerSet" and isinstance(leader.get("containers"), list):
        yield leader
        return
    yield from _walk_pod_specs(manifest)


# KServe's huggingface runtime flags that are its own, not vLLM's (kserve/huggingfaceserver __main__.py).
KSERVE_OWN_FLAGS = frozenset(
    {
        "--model_name",
        "--model_dir",
        "--model_id",
        "--model_revision",
        "--tokenizer_revision",
        "--backend",
        "--task",
        "--return_probabilities",
        "--disable_lower_case",
        "--disable_special_tokens",
        "--return_token_type_ids",
        "--return_raw_logits",
        "--http_port",
        "--grpc_port",
        "--predictor_host",
        "--workers",
        "--max_length",
    }
)


def _kserve_huggingface(manifest: Mapping[str, Any], name: str, where: str) -> Iterator[Deployment]:
    """KServe InferenceService with a `huggingface` model format: its runtime serves through vLLM, taking the
    model from --model_id (or storageUri) and passing the other args to vLLM's engine."""
    if manifest.get("kind") != "InferenceService":
        return
    predictor = _mapping(_mapping(manifest.get("spec")).get("predictor"))
    model = _mapping(predictor.get("model"))
    if str(_mapping(model.get("modelFormat")).get("name", "")).lower() != "huggingface":
        return
    words = _string_list(model, "args", where)
    model_id: str | None = None
    vllm_words: list[str] = []
    i = 0
    while i < len(words):
        flag, eq, value = words[i].partition("=")
        i += 1
        if flag in KSERVE_OWN_FLAGS:
            if not eq and i < len(words) and not words[i].startswith("--"):
                value, i = words[i], i + 1
            if flag == "--model_id":
                model_id = value
            continue
        vllm_words.append(words[i - 1])
    model_id = model_id or (str(model.get("storageUri")) if model.get("storageUri") else None)
    limits = _mapping(_mapping(model.get("resources")).get("limits"))
    args = parse_serve_command(["vllm", "serve", *([model_id] if model_id else []), *vllm_words])
    yield Deployment(
        f"{name}/kserve-huggingface",
        args,
        _gpu_of_pod(predictor, limits),
        _gpu_count(limits, where),
        where,
        None,
    )
