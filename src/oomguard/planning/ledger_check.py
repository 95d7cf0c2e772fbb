"""A GPU ledger given as numbers, checked: `weights=20GiB,kv=25GiB/replica,dp=2,ep_buffer=12GiB`.

The question a planner that budgets one replica gets wrong: with data-parallel replicas sharing a GPU, the
weights (one copy when the replicas share a process) and the EP all2all buffer are held once, but every
replica holds its own KV cache. Lines marked `/replica` are held once per replica; the others once per GPU.

    from oomguard.planning.ledger_check import check_ledger
    def test_the_dp_ep_ledger_fits():
        result = check_ledger("weights=20GiB,kv=25GiB/replica,dp=2,ep_buffer=12GiB", gpu_memory="80GiB")
        assert result.ok, result.message
"""

from __future__ import annotations

from dataclasses import dataclass

from oomguard.errors import ConfigError
from oomguard.hardware import find_gpu, gpu_with_memory
from oomguard.ledger import (
    ACTIVATION,
    COMM_BUFFERS,
    CONTEXT,
    CUDA_GRAPHS,
    KV_CACHE,
    LINE_LABELS,
    NON_TORCH,
    OTHER_PROCESSES,
    WEIGHTS,
    GpuLedger,
)
from oomguard.planning.advise import LedgerFix, fix_ledger
from oomguard.units import GiB, parse_bytes

# The names a user may give each line (the ledger's own keys work too).
LINE_NAMES = {
    "weights": WEIGHTS,
    "w": WEIGHTS,
    "kv": KV_CACHE,
    "kv_cache": KV_CACHE,
    "activation": ACTIVATION,
    "activations": ACTIVATION,
    "ep_buffer": COMM_BUFFERS,
    "ep": COMM_BUFFERS,
    "comm_buffers": COMM_BUFFERS,
    "all2all": COMM_BUFFERS,
    "graphs": CUDA_GRAPHS,
    "cuda_graph": CUDA_GRAPHS,
    "cuda_graphs": CUDA_GRAPHS,
    "non_torch": NON_TORCH,
    "context": CONTEXT,
    "cuda_context": CONTEXT,
    "other": OTHER_PROCESSES,
    "other_processes": OTHER_PROCESSES,
}
REPLICA_NAMES = ("dp", "replicas")
PER_REPLICA_SUFFIX = "/replica"


@dataclass(frozen=True)
class LedgerCheck:
    ledger: GpuLedger
    ok: bool
    message: str
    fixes: tuple[LedgerFix, ...]

    def __bool__(self) -> bool:
        return self.ok


def parse_ledger(text: str, total_bytes: int) -> GpuLedger:
    """`weights=20GiB,kv=25GiB/replica,dp=2,ep_buffer=12GiB` -> a GpuLedger of `total_bytes`."""
    items: dict[str, int] = {}
    per_replica: set[str] = set()
    replicas = 1
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, eq, value = part.partition("=")
        name = name.strip().lower().replace("-", "_")
        if not eq or not value.strip():
            raise ConfigError(f"--ledger: {part!r} is not NAME=SIZE (e.g. kv=25GiB/replica)")
        if name in REPLICA_NAMES:
            try:
                replicas = int(value)
            except ValueError:
                raise ConfigError(
                    f"--ledger: {name} expects a whole number of replicas, got {value!r}"
                ) from None
            if replicas < 1:
                raise ConfigError(f"--ledger: {name} must be >= 1, got {value!r}")
            continue
        key = LINE_NAMES.get(name)
        if key is None:
            raise ConfigError(
                f"--ledger: unknown line {name!r}; use "
                f"{', '.join(sorted(set(LINE_NAMES) | set(REPLICA_NAMES)))}"
            )
        size = value.strip()
        if size.endswith(PER_REPLICA_SUFFIX):
            size = size[: -len(PER_REPLICA_SUFFIX)]
            per_replica.add(key)
        if size.replace(".", "", 1).isdigit():
            raise ConfigError(f"--ledger: {name}={value} has no unit; write e.g. {size}GiB")
        items[key] = items.get(key, 0) + parse_bytes(size)
    if not items:
        raise ConfigError("--ledger: no lines given (e.g. weights=20GiB,kv=25GiB/replica,dp=2)")
    shared = tuple(key for key in items if key not in per_replica)
    return GpuLedger.from_items(total_bytes, replicas=replicas, shared=shared, label="given ledger", **items)


def _sum_text(ledger: GpuLedger) -> str:
    parts = []
    for line in ledger.lines:
        label = LINE_LABELS.get(line.key, line.key)
        times = f" x {ledger.replicas}" if line.per_replica and ledger.replicas > 1 else ""
        parts.append(f"{label} {line.bytes / GiB:.2f}{times}")
    return " + ".join(parts)


def check_ledger(text: str, *, gpu: str | None = None, gpu_memory: str | int | None = None) -> LedgerCheck:
    """Does a ledger given as numbers fit the device; if not, the degraded setting that does."""
    if gpu_memory is None and gpu is None:
        raise ConfigError("--ledger needs the device: --gpu-memory 80GiB or --gpu NAME")
    device = gpu_with_memory(gpu_memory, gpu) if gpu_memory is not None else find_gpu(str(gpu))
    ledger = parse_ledger(text, device.total_bytes)
    total = f"{ledger.used_bytes / GiB:.2f} GiB"
    device_text = f"{ledger.total_bytes / GiB:.2f} GiB"
    if ledger.fits:
        return LedgerCheck(
            ledger,
            True,
            f"given ledger fits: {_sum_text(ledger)} = {total} <= {device_text}, "
            f"{ledger.free_bytes / GiB:.2f} GiB free at peak",
            (),
        )
    fixes = tuple(fix_ledger(ledger))
    fix_text = (
        "; ".join(f"{f.summary} -> {f.ledger.used_bytes / GiB:.2f} GiB" for f in fixes)
        or "no single change fits; a larger GPU"
    )
    return LedgerCheck(
        ledger,
        False,
        f"given ledger does not fit: {_sum_text(ledger)} = {total} > {device_text}; fits with: {fix_text}",
        fixes,
    )
