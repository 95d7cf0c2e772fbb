"""Which engine plans a request, and the one path from a neutral request to a neutral result:
the engine's own plan, the fix search when it does not start (or starts with a warning), the result."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from oomguard.engines.base import EnginePlanner
from oomguard.engines.sglang.engine import PLANNER as SGLANG
from oomguard.engines.vllm.engine import PLANNER as VLLM
from oomguard.errors import ConfigError
from oomguard.kinds import Verdict
from oomguard.planning.fix_search import search_fixes
from oomguard.request import Request
from oomguard.result import PlanResult

# Every engine oomguard plans, by its folder name under engines/; vLLM is the default.
ENGINES: dict[str, EnginePlanner[Any]] = {VLLM.name: VLLM, SGLANG.name: SGLANG}
DEFAULT_ENGINE = VLLM.name


def command_words(command: object) -> list[str]:
    if isinstance(command, str):
        return command.split()
    if isinstance(command, (list, tuple)):
        return [str(word) for word in command]
    return []


def engine_named(name: str) -> EnginePlanner[Any]:
    try:
        return ENGINES[name.strip().lower()]
    except KeyError:
        raise ConfigError(f"unknown engine {name!r}: choose one of {', '.join(sorted(ENGINES))}") from None


def engine_for(request: Request) -> EnginePlanner[Any]:
    """`engine=` when given, else the engine whose launcher the command uses (vLLM by default)."""
    if request.engine:
        return engine_named(request.engine)
    words = command_words(request.command)
    for engine in ENGINES.values():
        if engine.name != DEFAULT_ENGINE and engine.is_command(words):
            return engine
    return ENGINES[DEFAULT_ENGINE]


def finish(
    engine: EnginePlanner[Any], native: Any, *, fixes: bool = True, at_lengths: tuple[int, ...] = ()
) -> PlanResult:
    """An engine's plan as the neutral result, with fixes searched when it does not start cleanly."""
    bare = engine.to_result(native, (), at_lengths)
    if not fixes or (bare.verdict == Verdict.FITS and not bare.warnings):
        return bare
    return replace(bare, fixes=tuple(f.result for f in search_fixes(engine, native)))


def plan_result(request: Request, *, fixes: bool = True, at_lengths: tuple[int, ...] = ()) -> PlanResult:
    """Plan any engine's deployment. Raises OomguardError subclasses for bad input; never prints."""
    engine = engine_for(request)
    return finish(engine, engine.plan(request), fixes=fixes, at_lengths=at_lengths)
