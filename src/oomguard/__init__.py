"""oomguard: will this LLM deployment run out of memory, why did it, and is it about to?

    import oomguard
    p = oomguard.plan("vllm serve Qwen/Qwen3-8B --max-model-len 32768", gpu="H100")
    p.fits, p.verdict, p.ranks, p.fixes(), p.to_dict()          # to_dict() == `oomguard plan --json`
    d = oomguard.diagnose("server.log")                          # paths, or the log text itself
    s = oomguard.simulate("trace.jsonl", model="Qwen/Qwen3-8B", gpu="H100")

The names below load on first use, so `import oomguard` stays cheap for the commands that need none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oomguard.api import DiagnosisReport, PlanReport, SimulationReport, diagnose, plan, simulate
    from oomguard.errors import (
        ConfigError,
        InputFormatError,
        OomguardError,
        UnknownGpuError,
        UnknownModelError,
        UnknownOptionError,
    )
    from oomguard.kinds import Failure, Provenance, Verdict
    from oomguard.request import Request
    from oomguard.result import EngineInfo, FixResult, KvSummary, PlanResult, RankResult, Setting

__version__ = "0.1.0"

_HOMES = {
    "plan": "oomguard.api",
    "diagnose": "oomguard.api",
    "simulate": "oomguard.api",
    "PlanReport": "oomguard.api",
    "DiagnosisReport": "oomguard.api",
    "SimulationReport": "oomguard.api",
    "OomguardError": "oomguard.errors",
    "ConfigError": "oomguard.errors",
    "InputFormatError": "oomguard.errors",
    "UnknownGpuError": "oomguard.errors",
    "UnknownModelError": "oomguard.errors",
    "UnknownOptionError": "oomguard.errors",
    "Failure": "oomguard.kinds",
    "Provenance": "oomguard.kinds",
    "Verdict": "oomguard.kinds",
    "Request": "oomguard.request",
    "EngineInfo": "oomguard.result",
    "FixResult": "oomguard.result",
    "KvSummary": "oomguard.result",
    "PlanResult": "oomguard.result",
    "RankResult": "oomguard.result",
    "Setting": "oomguard.result",
}

__all__ = [
    "ConfigError",
    "DiagnosisReport",
    "EngineInfo",
    "Failure",
    "FixResult",
    "InputFormatError",
    "KvSummary",
    "OomguardError",
    "PlanReport",
    "PlanResult",
    "Provenance",
    "RankResult",
    "Request",
    "Setting",
    "SimulationReport",
    "UnknownGpuError",
    "UnknownModelError",
    "UnknownOptionError",
    "Verdict",
    "__version__",
    "diagnose",
    "plan",
    "simulate",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'oomguard' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
