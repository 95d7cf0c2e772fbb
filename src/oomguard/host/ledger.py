"""The host-memory ledger of one node: what every process of the server holds in RAM, step by step.

    baseline of every process + loading peak (x workers loading at once) + pinned buffers + /dev/shm
    + caches that fill while serving + what sleep mode copies back  <=  the container's memory limit

The cgroup OOM killer takes the whole container (exit 137, `OOMKilled`) the moment the sum crosses the limit,
with every GPU fine. So the ledger is kept per step of the server's life, in the order the engine walks them,
and the verdict names the first step at which the sum no longer fits. Each line keeps its provenance (exact /
derived / estimated with a band) like the GPU ledger's. Engine-independent: an engine fills the lines, the
renderers print them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from oomguard.kinds import Provenance
from oomguard.units import GiB, MiB


class HostStep(Enum):
    """The steps of a server's life, in order; a line is held from its step on (or only during it)."""

    STARTUP = "startup"  # processes started, libraries imported, shared-memory queues created
    LOAD = "load"  # weights read from the checkpoint and copied to the GPUs
    INIT = "init"  # KV cache, warm-up and the host buffers sized by the scheduler limits
    SERVING = "serving"  # requests (with images) fill the caches that grow while serving
    SLEEP = "sleep"  # sleep mode copies GPU state back to host memory

    @property
    def label(self) -> str:
        return STEP_LABELS[self]


STEP_ORDER = tuple(HostStep)
STEP_LABELS = {
    HostStep.STARTUP: "startup",
    HostStep.LOAD: "loading the weights",
    HostStep.INIT: "engine init (KV cache, buffers)",
    HostStep.SERVING: "serving (first requests with images)",
    HostStep.SLEEP: "sleep (level 1)",
}


class HostVerdict(Enum):
    FITS = "fits"
    MARGINAL = "marginal"
    OOM_KILLED = "will be OOM-killed"
    NO_LIMIT = "no limit given"


# Below this headroom a fit is called marginal even when the bands say it fits: the kernel, sidecars and the
# page cache of a busy node take a few hundred MiB that no ledger line names.
MARGINAL_HEADROOM_BYTES = 1 * GiB


@dataclass(frozen=True)
class HostLine:
    """One use of host memory. `count` copies of `bytes_each` (per process, per worker ...), held from `step`
    on;
    `transient` lines only during their step (the loading peak). `shm`: the bytes live in /dev/shm (a tmpfs:
    they
    count against the memory limit and need room in the shm mount). `reclaimable`: page cache the kernel drops
    before it kills anything; shown, never summed."""

    key: str
    label: str
    bytes_each: int
    count: int
    kind: Provenance
    source: str
    step: HostStep
    band_each: int = 0
    transient: bool = False
    shm: bool = False
    reclaimable: bool = False

    @property
    def bytes(self) -> int:
        return self.bytes_each * self.count

    @property
    def band(self) -> int:
        return self.band_each * self.count

    def held_at(self, step: HostStep) -> bool:
        if self.reclaimable:
            return False
        if self.transient:
            return step is self.step
        return STEP_ORDER.index(step) >= STEP_ORDER.index(self.step)


@dataclass(frozen=True)
class HostProcess:
    """One kind of process the server starts on this node, how many, and what it is."""

    role: str  # "API server", "engine core", "GPU worker", "DP coordinator", "Ray head services" ...
    count: int
    note: str = ""


@dataclass(frozen=True)
class ShmSize:
    """The size of the container's /dev/shm and where that size comes from (None: unbounded but the
    memory)."""

    bytes: int | None
    source: str


@dataclass(frozen=True)
class HostLimits:
    """The memory the node's container may use: the cgroup limit the OOM killer enforces, the request the
    scheduler reserved, the /dev/shm size. None where nothing says."""

    memory_limit: int | None = None
    memory_request: int | None = None
    shm: ShmSize | None = None
    source: str = ""


@dataclass(frozen=True)
class HostFix:
    summary: str  # one line: the change
    detail: str = ""  # why it helps, with the figure


@dataclass(frozen=True)
class HostLedger:
    """The lines of one node, the processes behind them, the limits, and the engine's fixes."""

    node: str
    processes: tuple[HostProcess, ...]
    lines: tuple[HostLine, ...]
    limits: HostLimits
    engine_fixes: tuple[HostFix, ...] = ()
    notes: tuple[str, ...] = field(default=())
    load_workers_at_once: int = 1
    per_worker_load_peak: int = 0

    # --- the sums
    # --------------------------------------------------------------------------------------------

    def used_at(self, step: HostStep) -> int:
        return sum(line.bytes for line in self.lines if line.held_at(step))

    def band_at(self, step: HostStep) -> int:
        return sum(line.band for line in self.lines if line.held_at(step))

    def shm_needed_at(self, step: HostStep) -> int:
        return sum(line.bytes for line in self.lines if line.shm and line.held_at(step))

    @property
    def steps(self) -> tuple[HostStep, ...]:
        """The steps this server reaches (sleep only when a line says it sleeps)."""
        present = {line.step for line in self.lines}
        return tuple(s for s in STEP_ORDER if s is not HostStep.SLEEP or s in present)

    @property
    def peak_step(self) -> HostStep:
        return max(self.steps, key=lambda s: (self.used_at(s), -STEP_ORDER.index(s)))

    @property
    def peak_bytes(self) -> int:
        return self.used_at(self.peak_step)

    @property
    def peak_band(self) -> int:
        return self.band_at(self.peak_step)

    @property
    def shm_needed(self) -> int:
        return max(self.shm_needed_at(s) for s in self.steps)

    # --- the verdict
    # -----------------------------------------------------------------------------------------

    @property
    def dies_at(self) -> HostStep | None:
        """The first step whose sum crosses the memory limit."""
        limit = self.limits.memory_limit
        if limit is None:
            return None
        for step in self.steps:
            if self.used_at(step) > limit:
                return step
        return None

    @property
    def verdict(self) -> HostVerdict:
        limit = self.limits.memory_limit
        if limit is None:
            return HostVerdict.NO_LIMIT
        if self.dies_at is not None:
            return HostVerdict.OOM_KILLED
        worst = max(self.used_at(s) + self.band_at(s) for s in self.steps)
        if worst > limit or limit - self.peak_bytes < MARGINAL_HEADROOM_BYTES:
            return HostVerdict.MARGINAL
        return HostVerdict.FITS

    @property
    def shm_fits(self) -> bool | None:
        """Whether /dev/shm holds what the server puts there (None: its size is unknown or unbounded)."""
        shm = self.limits.shm
        if shm is None or shm.bytes is None:
            return None
        return self.shm_needed <= shm.bytes

    @property
    def fits(self) -> bool:
        return self.verdict is not HostVerdict.OOM_KILLED and self.shm_fits is not False

    @property
    def limit_that_fits(self) -> int:
        """The smallest limit that holds the peak with its band and the marginal headroom, rounded up to
        GiB."""
        need = self.peak_bytes + self.peak_band + MARGINAL_HEADROOM_BYTES
        return -(-need // GiB) * GiB

    @property
    def request_below_steady(self) -> bool:
        """A request under the memory held while serving: the pod is first in line for eviction."""
        request = self.limits.memory_request
        return request is not None and request < self.used_at(HostStep.SERVING)

    @property
    def fixes(self) -> tuple[HostFix, ...]:
        """The limit that fits and the shm volume first (they fix any cause), then the engine's own."""
        found: list[HostFix] = []
        limit = self.limits.memory_limit
        if limit is not None and self.verdict in (HostVerdict.OOM_KILLED, HostVerdict.MARGINAL):
            found.append(
                HostFix(
                    f"raise the memory limit to {self.limit_that_fits // GiB}Gi",
                    f"peak {self.peak_bytes / GiB:.1f} GiB (+-{self.peak_band / GiB:.1f}) at "
                    f"{self.peak_step.label}, limit {limit / GiB:.1f} GiB",
                )
            )
        if self.shm_fits is False:
            need_gib = max(1, -(-(self.shm_needed + 256 * MiB) // GiB))
            found.append(
                HostFix(
                    f"mount an emptyDir {{medium: Memory, sizeLimit: {need_gib}Gi}} at /dev/shm "
                    f"(docker: --shm-size {need_gib}g or --ipc=host)",
                    f"the server puts {self.shm_needed / MiB:.0f} MiB in /dev/shm; "
                    f"{(self.limits.shm.bytes or 0) / MiB if self.limits.shm else 0:.0f} MiB available",
                )
            )
        if self.verdict in (HostVerdict.OOM_KILLED, HostVerdict.MARGINAL) or self.shm_fits is False:
            found += self.engine_fixes
        return tuple(found)
