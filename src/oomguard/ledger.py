"""The memory ledger of one GPU: every line that takes memory, and whether they fit.

    weights + KV cache (x every engine replica on the GPU) + peak activations + communication buffers
    + CUDA graphs + non-torch memory + CUDA context  <=  device total (what the CUDA runtime reports)

A planner that forgets a line (KV x replicas, the EP buffer, the padded activation) lets the engine fill
memory and crash mid-forward. The ledger keeps every line with its provenance (exact / derived / estimated
with a band) and is engine-independent: engines fill it, renderers print it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oomguard.kinds import Provenance
from oomguard.units import GiB

# Line keys, in the order the ledger prints them; the JSON contract names them `<key>_gib`.
WEIGHTS = "weights"
KV_CACHE = "kv_cache"
ACTIVATION = "activation"
COMM_BUFFERS = "comm_buffers"
CUDA_GRAPHS = "cuda_graph"
NON_TORCH = "non_torch"
CONTEXT = "cuda_context"
OTHER_PROCESSES = "other_processes"  # memory other processes hold on the GPU (nvidia-smi, --other-processes)
LINE_ORDER = (WEIGHTS, KV_CACHE, ACTIVATION, COMM_BUFFERS, CUDA_GRAPHS, NON_TORCH, CONTEXT, OTHER_PROCESSES)
LINE_LABELS = {
    WEIGHTS: "weights",
    KV_CACHE: "KV cache",
    ACTIVATION: "activation peak",
    COMM_BUFFERS: "EP all2all buffers",
    CUDA_GRAPHS: "CUDA graphs",
    NON_TORCH: "non-torch (NCCL, cuBLAS)",
    CONTEXT: "CUDA context",
    OTHER_PROCESSES: "other processes",
}


@dataclass(frozen=True)
class Estimate:
    """A number with its provenance: `exact` (from config and code), `derived` (exact given an estimate),
    or `estimated` with an error band (+- bytes), and the source or mechanism behind it."""

    bytes: int
    kind: Provenance
    band: int
    source: str

    @staticmethod
    def exact(num_bytes: int, source: str) -> Estimate:
        return Estimate(int(num_bytes), Provenance.EXACT, 0, source)

    @staticmethod
    def estimated(num_bytes: int, band: int, source: str) -> Estimate:
        return Estimate(int(num_bytes), Provenance.ESTIMATED, int(band), source)

    @staticmethod
    def zero(source: str) -> Estimate:
        return Estimate(0, Provenance.EXACT, 0, source)


@dataclass(frozen=True)
class LedgerLine:
    """One use of GPU memory by one engine process. `in_budget`: inside vLLM's utilization budget (the rest
    comes out of total - budget). `kind`: exact | derived | estimated; `band`: +- bytes when estimated."""

    key: str
    bytes: int
    kind: Provenance
    source: str
    band: int = 0
    in_budget: bool = True
    per_replica: bool = True  # False: one copy on the GPU however many replicas share it

    @property
    def label(self) -> str:
        return LINE_LABELS.get(self.key, self.key)

    @property
    def gib(self) -> float:
        return self.bytes / GiB


@dataclass(frozen=True)
class GpuLedger:
    """All the lines on one GPU: one engine process's lines, times the replicas that share the GPU."""

    total_bytes: int
    lines: tuple[LedgerLine, ...]
    replicas: int = 1
    label: str = ""
    notes: tuple[str, ...] = field(default=())

    def line(self, key: str) -> LedgerLine | None:
        for item in self.lines:
            if item.key == key:
                return item
        return None

    def bytes_of(self, key: str) -> int:
        item = self.line(key)
        return item.bytes if item else 0

    @property
    def per_replica_bytes(self) -> int:
        return sum(item.bytes for item in self.lines if item.per_replica)

    @property
    def shared_bytes(self) -> int:
        return sum(item.bytes for item in self.lines if not item.per_replica)

    @property
    def used_bytes(self) -> int:
        """Peak use of the GPU: shared lines once, each replica's lines once per replica, all at their
        peaks."""
        return self.shared_bytes + self.per_replica_bytes * self.replicas

    @property
    def free_bytes(self) -> int:
        return self.total_bytes - self.used_bytes

    @property
    def fits(self) -> bool:
        return self.used_bytes <= self.total_bytes

    @property
    def uncertainty_bytes(self) -> int:
        return sum(item.band * (self.replicas if item.per_replica else 1) for item in self.lines)

    @staticmethod
    def from_items(
        total_bytes: int, *, replicas: int = 1, shared: tuple[str, ...] = (), label: str = "", **items: int
    ) -> GpuLedger:
        """A ledger from known numbers (keys: weights, kv_cache, activation, comm_buffers, cuda_graph,
        non_torch, cuda_context), for what-if questions and for checking another planner's figures. `shared`
        names the lines held once per GPU (e.g. weights and the EP buffer of one process serving several
        data-parallel replicas); every other line is held once per replica."""
        unknown = (set(items) | set(shared)) - set(LINE_ORDER)
        if unknown:
            raise ValueError(f"unknown ledger lines: {', '.join(sorted(unknown))}")
        lines = tuple(
            LedgerLine(key, int(items[key]), Provenance.GIVEN, "given", per_replica=key not in shared)
            for key in LINE_ORDER
            if key in items
        )
        return GpuLedger(int(total_bytes), lines, replicas, label)

    def with_replicas(self, replicas: int) -> GpuLedger:
        return GpuLedger(self.total_bytes, self.lines, replicas, self.label, self.notes)

    def with_line(self, key: str, num_bytes: int) -> GpuLedger:
        lines = tuple(
            LedgerLine(
                item.key, int(num_bytes), item.kind, item.source, item.band, item.in_budget, item.per_replica
            )
            if item.key == key
            else item
            for item in self.lines
        )
        return GpuLedger(self.total_bytes, lines, self.replicas, self.label, self.notes)


def largest_line_that_fits(ledger: GpuLedger, key: str) -> int:
    """The most bytes line `key` can take (per replica when it is a per-replica line), every other line as it
    is."""
    item = ledger.line(key)
    count = ledger.replicas if item is None or item.per_replica else 1
    others = ledger.used_bytes - ledger.bytes_of(key) * count
    return (ledger.total_bytes - others) // count
