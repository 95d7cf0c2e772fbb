"""`oomguard plan` for SGLang: the same options and renderers as the vLLM path, the SGLang planner behind them.

oomguard plan --gpu H100 -- python -m sglang.launch_server --model-path M --tp 2 --mem-fraction-static 0.85
oomguard plan --engine sglang M --tp 2 --context-length 32768
"""

from __future__ import annotations

from collections.abc import Sequence

from oomguard.engines.sglang.flags import LaunchArgs, is_sglang_command, parse_launch_command
from oomguard.errors import ConfigError
from oomguard.kinds import Usage
from oomguard.planning.cli import HELP, OPTIONS, PlanOptions, _set_option, emit, gpu_from_options
from oomguard.planning.sglang_planner import SglangRequest, build_sglang_report, plan_sglang

ENGINE_OPTION = "--engine"


def wants_sglang(argv: Sequence[str]) -> bool:
    """`--engine sglang`, or a command (after `--` or in --command) whose launcher is SGLang's."""
    items = list(argv)
    for i, token in enumerate(items):
        if token == ENGINE_OPTION and i + 1 < len(items) and items[i + 1].lower() == "sglang":
            return True
        if token.lower() == f"{ENGINE_OPTION}=sglang":
            return True
        if token == "--command" and i + 1 < len(items):
            return is_sglang_command(items[i + 1].split())
        if token.startswith("--command="):
            return is_sglang_command(token.partition("=")[2].split())
    if "--" in items:
        return is_sglang_command(items[items.index("--") + 1 :])
    return False


def _split(argv: Sequence[str]) -> tuple[PlanOptions, list[str], list[str]]:
    """oomguard's options, the direct SGLang flags, and the command after `--` (SGLang spells --tp itself)."""
    head, tail = list(argv), []
    if "--" in head:
        cut = head.index("--")
        head, tail = head[:cut], head[cut + 1 :]
    options, direct = PlanOptions(), []
    i = 0
    while i < len(head):
        token = head[i]
        i += 1
        name, has_value, value = token.partition("=")
        if name == ENGINE_OPTION:
            if not has_value:
                i += 1
            continue
        if name not in OPTIONS:
            direct.append(token)
            continue
        if OPTIONS[name] and not has_value:
            if i >= len(head):
                raise ConfigError(f"{name} needs a value")
            value, i = head[i], i + 1
        _set_option(options, name, value)
    return options, direct, tail


def launch_args_from(options: PlanOptions, direct: list[str], tail: list[str]) -> LaunchArgs:
    """Merge `oomguard plan M --flags` with the command after `--` / --command (the command wins)."""
    base = parse_launch_command(["sglang", "serve", *direct]) if direct else LaunchArgs(None, {})
    command: Sequence[str] | str = options.command if options.command else tail
    if not command:
        return base
    given = parse_launch_command(command)
    values = dict(base.values)
    values.update(given.values)
    return LaunchArgs(
        given.model or base.model, values, {**base.env, **given.env}, base.unknown_flags + given.unknown_flags
    )


def main(argv: Sequence[str]) -> int:
    options, direct, tail = _split(argv)
    if options.help:
        print(HELP)
        return 0
    if (
        options.fewest_gpus
        or options.calibrate
        or options.usage != Usage.SERVE
        or options.replicas_per_gpu != 1
    ):
        raise ConfigError("--fewest-gpus, --calibrate, --llm and --replicas-per-gpu are vLLM-only for now")
    gpu, gpu_memory, others = gpu_from_options(options)
    request = SglangRequest(
        args=launch_args_from(options, direct, tail),
        gpu=gpu,
        gpu_memory=gpu_memory,
        used_by_other_processes=others,
    )
    result = plan_sglang(request)
    report = build_sglang_report(result, fixes=options.fixes, at_lengths=tuple(options.at_lengths))
    return emit(report, options)
