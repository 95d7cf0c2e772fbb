"""The memory a container may use, read where it is written: a Kubernetes pod spec, a `docker run` command,
or `--host-memory SIZE`.

Facts used (Kubernetes and Docker documentation):
- `resources.limits.memory` is the cgroup limit the kernel enforces: crossing it kills the container
  (`OOMKilled`, exit 137). `requests.memory` only reserves room when scheduling; a pod using more than it
  asked
  is the first evicted under node pressure. Pod-level `spec.resources` (Kubernetes 1.32+) bounds the sum.
- Quantities: plain bytes, `e` exponents, decimal suffixes k M G T P E and binary Ki Mi Gi Ti Pi Ei.
- A container's /dev/shm is 64 MiB unless something mounts over it: an `emptyDir` with `medium: Memory`
mounted
  at /dev/shm (sized by `sizeLimit`, else by the pod's memory limit; a tmpfs whose pages count against the
  container's memory), `hostIPC: true` (the node's own /dev/shm), or docker's `--shm-size` / `--ipc=host`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

from oomguard.errors import ConfigError
from oomguard.host.ledger import HostLimits, ShmSize
from oomguard.units import MiB, parse_bytes

# containerd's and Docker's default size of a container's /dev/shm.
RUNTIME_DEFAULT_SHM_BYTES = 64 * MiB
SHM_PATH = "/dev/shm"

_QUANTITY = re.compile(r"^\s*([+-]?[0-9]*\.?[0-9]+)\s*(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m|[eE][+-]?\d+)?\s*$")
_SCALE = {
    None: Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


def parse_quantity(value: object, where: str) -> int:
    """A Kubernetes memory quantity -> bytes ('64Gi', '68719476736', '64G', '1.5e9', '512Mi')."""
    text = str(value)
    match = _QUANTITY.match(text)
    if not match or isinstance(value, bool):
        raise ConfigError(f"{where}: cannot read {text!r} as a Kubernetes memory quantity (e.g. 64Gi)")
    suffix = match.group(2)
    try:
        number = Decimal(match.group(1))
        scale = Decimal(10) ** int(suffix[1:]) if suffix and suffix[0] in "eE" else _SCALE[suffix]
    except (InvalidOperation, ValueError):
        raise ConfigError(f"{where}: cannot read {text!r} as a Kubernetes memory quantity") from None
    size = number * scale
    if size <= 0 or size > Decimal(2) ** 70:
        raise ConfigError(f"{where}: memory quantity {text!r} is out of range")
    return int(size.to_integral_value(rounding=ROUND_CEILING))


def _mapping(node: Any) -> Mapping[str, Any]:
    return node if isinstance(node, Mapping) else {}


def _memory(resources: Mapping[str, Any], kind: str, where: str) -> int | None:
    value = _mapping(resources.get(kind)).get("memory")
    return None if value is None else parse_quantity(value, f"{where}: resources.{kind}.memory")


def pod_limits(pod: Mapping[str, Any], container: Mapping[str, Any], where: str) -> HostLimits:
    """The memory limit, request and /dev/shm size of one container of a pod spec."""
    resources = _mapping(container.get("resources"))
    pod_resources = _mapping(pod.get("resources"))
    limit = _memory(resources, "limits", where)
    request = _memory(resources, "requests", where)
    source = f"{where}: container resources.limits.memory"
    if limit is None:
        limit = _memory(pod_resources, "limits", where)
        source = f"{where}: pod resources.limits.memory"
    if request is None and limit is not None:
        request = limit  # Kubernetes defaults a missing request to the limit
    return HostLimits(limit, request, _pod_shm(pod, container, limit, where), source if limit else "")


def _pod_shm(pod: Mapping[str, Any], container: Mapping[str, Any], limit: int | None, where: str) -> ShmSize:
    if pod.get("hostIPC") is True:
        return ShmSize(None, f"{where}: hostIPC: true (the node's /dev/shm)")
    mounts = container.get("volumeMounts")
    volumes = pod.get("volumes")
    shm_volume = next(
        (
            str(m.get("name"))
            for m in (mounts if isinstance(mounts, list) else [])
            if isinstance(m, Mapping) and str(m.get("mountPath", "")).rstrip("/") == SHM_PATH
        ),
        None,
    )
    if shm_volume is None:
        return ShmSize(RUNTIME_DEFAULT_SHM_BYTES, f"{where}: no volume at /dev/shm (the runtime's 64 MiB)")
    volume = next(
        (
            v
            for v in (volumes if isinstance(volumes, list) else [])
            if isinstance(v, Mapping) and str(v.get("name")) == shm_volume
        ),
        None,
    )
    empty_dir = _mapping(_mapping(volume).get("emptyDir"))
    if volume is None or "emptyDir" not in volume:
        return ShmSize(None, f"{where}: volume {shm_volume!r} at /dev/shm (not an emptyDir: size unknown)")
    if empty_dir.get("medium") != "Memory":
        return ShmSize(None, f"{where}: emptyDir {shm_volume!r} at /dev/shm on the node's disk")
    size_limit = empty_dir.get("sizeLimit")
    if size_limit is not None:
        size = parse_quantity(size_limit, f"{where}: emptyDir {shm_volume!r} sizeLimit")
        return ShmSize(size, f"{where}: emptyDir {shm_volume!r} medium Memory sizeLimit {size_limit}")
    return ShmSize(
        limit, f"{where}: emptyDir {shm_volume!r} medium Memory without sizeLimit (the memory limit)"
    )


# ---------------------------------------------------------------------------------------------------------
# docker run
# ---------------------------------------------------------------------------------------------------------

_DOCKER_VALUE_FLAGS = ("--shm-size", "--memory", "-m", "--memory-reservation", "--ipc")
# `docker run` switches that take no value; every other flag written apart from its value takes the next word.
_DOCKER_SWITCHES = frozenset(
    [
        "-d",
        "--detach",
        "-i",
        "--interactive",
        "-t",
        "--tty",
        "--rm",
        "--privileged",
        "--init",
        "-P",
        "--publish-all",
        "--read-only",
        "--no-healthcheck",
        "--oom-kill-disable",
        "--sig-proxy",
        "-it",
        "-ti",
        "-dit",
        "-itd",
    ]
)


def docker_limits(argv: Sequence[str]) -> HostLimits | None:
    """`docker run --shm-size 16g -m 64g --ipc=host IMAGE ...` -> limits; None when argv is not `docker
    run`."""
    words = list(argv)
    if "docker" not in [w.rsplit("/", 1)[-1] for w in words[:3]] or "run" not in words[:4]:
        return None
    found: dict[str, str] = {}
    i = words.index("run") + 1
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-"):
            break  # the image: everything after it belongs to the container
        name, has_inline, inline = word.partition("=")
        if name in _DOCKER_SWITCHES or has_inline:
            if name in _DOCKER_VALUE_FLAGS:
                found[name] = inline
            continue
        if i < len(words):
            inline, i = words[i], i + 1
        if name in _DOCKER_VALUE_FLAGS:
            found[name] = inline
    memory = found.get("--memory", found.get("-m"))
    limit = _docker_size(memory, "docker --memory") if memory else None
    request = (
        _docker_size(found["--memory-reservation"], "docker --memory-reservation")
        if ("--memory-reservation" in found)
        else None
    )
    if found.get("--ipc") == "host":
        shm = ShmSize(None, "docker --ipc=host (the host's /dev/shm)")
    elif "--shm-size" in found:
        shm = ShmSize(
            _docker_size(found["--shm-size"], "docker --shm-size"), f"docker --shm-size {found['--shm-size']}"
        )
    else:
        shm = ShmSize(RUNTIME_DEFAULT_SHM_BYTES, "docker run without --shm-size (Docker's 64 MiB)")
    return HostLimits(limit, request, shm, "docker --memory" if limit else "")


def _docker_size(text: str, flag: str) -> int:
    """Docker sizes: a number with b, k, m or g (binary units); a bare number is bytes."""
    match = re.match(r"^\s*([0-9]*\.?[0-9]+)\s*([bkmgBKMG]?)[bB]?\s*$", text)
    if not match:
        raise ConfigError(f"{flag}: cannot read {text!r} as a size (e.g. 16g)")
    unit = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match.group(2).lower()]
    return int(float(match.group(1)) * unit)


def _size(text: str, option: str) -> int:
    """A size as oomguard writes them (64GiB, 80GB) or as Kubernetes does (64Gi, 512G)."""
    try:
        return parse_bytes(text)
    except ConfigError:
        try:
            return parse_quantity(text, option)
        except ConfigError:
            raise ConfigError(
                f"{option}: cannot read {text!r} as a memory size (e.g. 64GiB or 64Gi)"
            ) from None


def given_limits(host_memory: str | None, shm_size: str | None = None) -> HostLimits:
    """--host-memory SIZE (and --shm-size SIZE) given on oomguard's command line."""
    limit = _size(host_memory, "--host-memory") if host_memory else None
    shm = ShmSize(_size(shm_size, "--shm-size"), f"--shm-size {shm_size}") if shm_size else None
    return HostLimits(limit, None, shm, f"--host-memory {host_memory}" if host_memory else "")
