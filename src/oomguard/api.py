"""The Python API: `oomguard.plan`, `oomguard.diagnose`, `oomguard.simulate`, each the same path as its
command
and each with `.to_dict()` equal to the command's `--json`.

    import oomguard
    p = oomguard.plan("vllm serve Qwen/Qwen3-8B --max-model-len 32768", gpu="H100")
    p.fits, p.verdict, p.ranks, p.fixes(), p.to_dict()
"""

from __future__ import annotations

import difflib
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

from oomguard.api_fields import check_count
from oomguard.errors import InputFormatError, UnknownOptionError, shown
from oomguard.host.ledger import HostLedger
from oomguard.host.limits import given_limits
from oomguard.kinds import Failure, Usage, Verdict
from oomguard.planning.calibrate import measured_terms_from_log
from oomguard.planning.dispatch import engine_for, finish
from oomguard.render.plan_json import plan_to_dict
from oomguard.request import Request
from oomguard.result import EngineInfo, FixResult, KvSummary, PlanResult, RankResult

# plan()'s own keywords besides the engine's settings.
PLAN_OPTIONS = (
    "model",
    "gpu",
    "gpu_memory",
    "engine",
    "version",
    "replicas_per_gpu",
    "llm",
    "calibrate",
    "host_memory",
    "shm_size",
    "node_gpus",
)
# A string this long, or with a line break, is evidence text rather than a path.
LONGEST_PATH = 4096


def _unknown(name: str, known: Iterable[str], where: str) -> UnknownOptionError:
    close = difflib.get_close_matches(name, list(known), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return UnknownOptionError(f"{where}() got an unknown keyword {name!r}{hint}")


# ---------------------------------------------------------------------------------------------------------
# plan
# ---------------------------------------------------------------------------------------------------------


@dataclass
class PlanReport:
    """One planned deployment. `fixes()` searches on first use (it re-plans each candidate)."""

    result: PlanResult
    _engine: Any = field(repr=False)
    _native: Any = field(repr=False)
    _at_lengths: tuple[int, ...] = ()
    _with_fixes: PlanResult | None = field(default=None, repr=False)

    @property
    def fits(self) -> bool:
        return self.result.fits

    @property
    def verdict(self) -> Verdict:
        return self.result.verdict

    @property
    def failure(self) -> Failure | None:
        return self.result.failure

    @property
    def errors(self) -> tuple[str, ...]:
        return self.result.errors

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.result.warnings

    @property
    def ranks(self) -> tuple[RankResult, ...]:
        return self.result.ranks

    @property
    def kv(self) -> KvSummary:
        return self.result.kv

    @property
    def engine(self) -> EngineInfo:
        return self.result.engine

    @property
    def host(self) -> HostLedger | None:
        """The node's host-memory ledger (its verdict against `host_memory`, the step it dies at, fixes)."""
        return self.result.host

    def _searched(self) -> PlanResult:
        if self._with_fixes is None:
            self._with_fixes = finish(self._engine, self._native, fixes=True, at_lengths=self._at_lengths)
        return self._with_fixes

    def fixes(self) -> tuple[FixResult, ...]:
        """Verified flag changes that make it start (or leave it headroom), cheapest first; () when it fits
        cleanly."""
        return self._searched().fixes

    def to_dict(self) -> dict[str, Any]:
        """The object `oomguard plan --json` prints."""
        loaded: dict[str, Any] = json.loads(json.dumps(plan_to_dict(self._searched())))
        return loaded


def plan(
    command: str | Sequence[str] | None = None,
    *,
    model: str | None = None,
    gpu: str | None = None,
    gpu_memory: int | str | None = None,
    engine: str | None = None,
    version: str | None = None,
    replicas_per_gpu: int = 1,
    llm: bool = False,
    calibrate: str | PathLike[str] | None = None,
    at_lengths: Sequence[int] = (),
    used_by_other_processes: int = 0,
    host_memory: int | str | None = None,
    shm_size: int | str | None = None,
    node_gpus: int | None = None,
    **settings: Any,
) -> PlanReport:
    """Plan a deployment: its launch command (`vllm serve ...`, `python -m sglang.launch_server ...`) and/or
    the model and the engine's own settings as keywords (`max_model_len=32768`, `mem_fraction_static=0.85`).
    Raises OomguardError subclasses for bad input (UnknownOptionError, also a TypeError, for a keyword that is
    neither an option here nor one of the engine's settings). `host_memory` (the node's memory limit, "64GiB"
    or
    bytes), `shm_size` and `node_gpus` shape the host-memory ledger (`.host`)."""
    request = Request(
        command=command,
        model=model,
        engine=engine,
        flags=dict(settings),
        gpu=gpu,
        gpu_memory=gpu_memory,
        engine_version=version,
        replicas_per_gpu=replicas_per_gpu,
        usage=Usage.LLM if llm else Usage.SERVE,
        measured=measured_terms_from_log(str(calibrate)) if calibrate else {},
        used_by_other_processes=used_by_other_processes,
        host=given_limits(
            None if host_memory is None else str(host_memory) + ("B" if isinstance(host_memory, int) else ""),
            None if shm_size is None else str(shm_size) + ("B" if isinstance(shm_size, int) else ""),
        )
        if host_memory is not None or shm_size is not None
        else None,
        local_gpus=node_gpus,
    )
    for length in at_lengths:
        check_count(length, "at_lengths")
    planner = engine_for(request)
    for name in settings:
        if not planner.knows_setting(name):
            raise _unknown(name, (*PLAN_OPTIONS, *planner.setting_names()), "plan")
    native = planner.plan(request)
    lengths = tuple(int(n) for n in at_lengths)
    return PlanReport(finish(planner, native, fixes=False, at_lengths=lengths), planner, native, lengths)


# ---------------------------------------------------------------------------------------------------------
# diagnose
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiagnosisReport:
    """The ranked causes of an OOM, with their evidence and fixes."""

    diagnosis: Any  # oomguard.diagnosis.diagnosis.Diagnosis

    @property
    def causes(self) -> tuple[Any, ...]:
        causes: tuple[Any, ...] = self.diagnosis.causes
        return causes

    @property
    def top(self) -> str | None:
        """The most likely cause's class (e.g. "kv-cache-insufficient-at-startup")."""
        return str(self.causes[0].cls) if self.causes else None

    def to_dict(self) -> dict[str, Any]:
        """The object `oomguard diagnose --json` prints."""
        from oomguard.diagnosis.render import render_json

        loaded: dict[str, Any] = json.loads(render_json(self.diagnosis))
        return loaded


def _is_path(item: str | PathLike[str]) -> bool:
    text = str(item)
    if "\n" in text or len(text) >= LONGEST_PATH:
        return False
    try:
        return Path(text).exists()
    except (OSError, ValueError):  # a one-line log longer than a file name (ENAMETOOLONG), a NUL in it
        return False


def diagnose(evidence: str | PathLike[str] | Sequence[str | PathLike[str]]) -> DiagnosisReport:
    """Diagnose from files, directories and archives (a path or a list of them), or from the text itself (a
    log excerpt, a traceback)."""
    from oomguard.diagnosis.diagnosis import diagnose as run_diagnosis
    from oomguard.diagnosis.evidence import Evidence
    from oomguard.diagnosis.read import read_evidence, read_one, require_evidence

    if not isinstance(evidence, (str, PathLike, Sequence)):
        raise InputFormatError(f"evidence must be a path, a text or a list of them, got {shown(evidence)}")
    items = [evidence] if isinstance(evidence, (str, PathLike)) else list(evidence)
    for item in items:
        if not isinstance(item, (str, PathLike)):
            raise InputFormatError(f"evidence items must be paths or texts, got {shown(item)}")
    paths = [str(i) for i in items if _is_path(i)]
    found = read_evidence(paths) if paths else Evidence()
    for n, text in enumerate(str(i) for i in items if not _is_path(i)):
        found.documents.append(read_one(f"<text {n + 1}>", io.BytesIO(text.encode()), found))
    require_evidence(found)
    return DiagnosisReport(run_diagnosis(found))


# ---------------------------------------------------------------------------------------------------------
# simulate
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimulationReport:
    """A traffic replay through the scheduler: OOM events, peaks, KV usage, preemptions."""

    result: Any  # oomguard.simulation.run.SimulationResult
    summary: Any  # oomguard.simulation.run.Summary
    setup: Mapping[str, Any]

    @property
    def oom(self) -> bool:
        return bool(self.summary.oom_events)

    def to_dict(self) -> dict[str, Any]:
        """The object `oomguard simulate --json` prints."""
        from oomguard.simulation.report import summary_dict

        loaded: dict[str, Any] = json.loads(
            json.dumps(summary_dict(self.result, self.summary, dict(self.setup)))
        )
        return loaded


def simulate(workload: str | PathLike[str] | None = None, **options: Any) -> SimulationReport:
    """Replay a trace (a file) or `synthetic="poisson:rate=2"` through vLLM's scheduler; keywords are the
    command's options and vLLM's settings by name (`model="Qwen/Qwen3-8B", gpu="H100", max_num_seqs=64`)."""
    from oomguard.engines.vllm.flags import is_known_flag
    from oomguard.simulation import cli as sim

    own = sim._parser()._option_string_actions  # the command's own options (argparse's table)
    argv = [str(workload)] if workload is not None else []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if flag not in own and not is_known_flag(flag):
            raise _unknown(
                name, [o.lstrip("-").replace("-", "_") for o in own if o.startswith("--")], "simulate"
            )
        if value is True:
            argv.append(flag)
        elif value is not False and value is not None:
            argv += [flag, str(value)]
    args, vllm_argv = sim.split_argv(argv)
    loaded = sim.load_workload(args)
    setup = sim.build_setup(args, vllm_argv)
    result, summary = sim.run_one(loaded, setup, progress=False)
    return SimulationReport(result, summary, dict(setup.facts, skipped_rows=loaded.skipped_rows))


__all__ = [
    "DiagnosisReport",
    "PlanReport",
    "SimulationReport",
    "diagnose",
    "plan",
    "simulate",
]
