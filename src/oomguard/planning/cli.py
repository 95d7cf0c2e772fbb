"""`oomguard plan`: will this vLLM command start, how much KV cache will it get, and if not, what to change.

    oomguard plan meta-llama/Llama-3.1-8B-Instruct --gpu H100 --max-model-len 32768
    oomguard plan --gpu H100 -- vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4 --max-model-len 131072
    oomguard plan --gpu-memory 79.19GiB --json -- vllm serve ./my-model --config serve.yaml

oomguard's own options are listed below; every other flag is read as a `vllm serve` flag, spelled as vLLM
spells it (`--tp/--pp/--dp/--ep` are accepted as shorthands).
"""

from __future__ import annotations

import difflib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from oomguard.engines.vllm import cli_flags
from oomguard.engines.vllm.flags import OOMGUARD_KNOWN, ServeArgs, parse_serve_command
from oomguard.engines.vllm.versions import NEWEST_KNOWN
from oomguard.errors import ConfigError, InputFormatError
from oomguard.hardware import find_gpu, parse_nvidia_smi
from oomguard.kinds import Usage
from oomguard.planning.advise import fewest_gpus_search
from oomguard.planning.calibrate import measured_terms_from_log
from oomguard.planning.planner import PlanRequest, plan
from oomguard.planning.report import PlanReport, build_report
from oomguard.render.plan_json import plan_to_dict
from oomguard.render.plan_markdown import render_plan_markdown
from oomguard.render.plan_text import render_plan
from oomguard.units import parse_bytes

# oomguard's options and whether they take a value.
OPTIONS: dict[str, bool] = {
    "--gpu": True,
    "--gpu-memory": True,
    "--nvidia-smi": True,
    "--other-processes": True,
    "--safety": True,
    "--vllm-version": True,
    "--replicas-per-gpu": True,
    "--llm": False,
    "--json": False,
    "--markdown": False,
    "--verbose": False,
    "-v": False,
    "--no-fixes": False,
    "--at-length": True,
    "--fewest-gpus": False,
    "--calibrate": True,
    "--command": True,
    "--help": False,
    "-h": False,
}
SHORTHANDS = {"--tp": "-tp", "--pp": "-pp", "--dp": "-dp", "--ep": "--enable-expert-parallel"}

HELP = f"""usage: oomguard plan [MODEL] [options] [vLLM flags ...] [-- vllm serve MODEL [vLLM flags ...]]

{__doc__.strip().splitlines()[0]}

options:
  --gpu NAME              GPU as people or nvidia-smi name it: H100, h100-80gb, "NVIDIA A100-SXM4-40GB", L4 ...
                          (default: H100 80GB)
  --gpu-memory SIZE       the device total instead of a name, e.g. 79.19GiB (what CUDA reports)
  --nvidia-smi FILE       take the GPU, and memory other processes already use, from nvidia-smi output
  --other-processes SIZE  memory other processes hold on each GPU (e.g. 23.4GiB); a ledger line
  --safety SIZE           the margin a fit must keep (e.g. 1GiB); default: the summed bands of the estimates.
                          A plan that fits at the estimate but not with it is MARGINAL; fixes aim at it
  --vllm-version X.Y.Z    whose accounting to follow (default {NEWEST_KNOWN}, the newest known)
  --replicas-per-gpu N    engine instances sharing each GPU (co-located DP replicas); each needs its own KV
  --llm                   plan the offline LLM() class (its batch defaults) instead of `vllm serve`
  --at-length N           also report the concurrency at N tokens per request (repeatable)
  --fewest-gpus           find the smallest TP x PP that serves the model at this max_model_len
  --calibrate LOG         use the measured weights/activation/non-torch/graph terms from an earlier run's log
  --command "..."         the `vllm serve ...` command as one string (instead of after --)
  --json                  one JSON object (keys documented in the README)
  --markdown              a Markdown report to paste into an issue
  --verbose, -v           every rank's ledger and why each setting has its value
  --no-fixes              skip the search for fixes

exit codes: 0 fits, 1 does not fit, 2 bad input
"""


@dataclass
class PlanOptions:
    gpu: str | None = None
    gpu_memory: str | None = None
    nvidia_smi: str | None = None
    other_processes: str | None = None
    safety: str | None = None
    vllm_version: str = NEWEST_KNOWN
    replicas_per_gpu: int = 1
    usage: Usage = Usage.SERVE
    json: bool = False
    markdown: bool = False
    verbose: bool = False
    fixes: bool = True
    at_lengths: list[int] = field(default_factory=list)
    fewest_gpus: bool = False
    calibrate: str | None = None
    command: str | None = None
    help: bool = False


def split_arguments(argv: Sequence[str]) -> tuple[PlanOptions, list[str]]:
    """oomguard's options out of argv; everything else (the model and vLLM flags) is returned in order."""
    options = PlanOptions()
    rest: list[str] = []
    head, tail = list(argv), []
    if "--" in head:
        cut = head.index("--")
        head, tail = head[:cut], head[cut + 1 :]
    i = 0
    while i < len(head):
        token = head[i]
        i += 1
        name, has_value, value = token.partition("=")
        _refuse_mistyped_option(name)
        if name not in OPTIONS:
            rest.append(
                SHORTHANDS.get(name, name) + (f"={value}" if has_value else "")
                if name in SHORTHANDS
                else token
            )
            continue
        if OPTIONS[name] and not has_value:
            if i >= len(head):
                raise ConfigError(f"{name} needs a value")
            value, i = head[i], i + 1
        _set_option(options, name, value)
    if tail:
        rest += ["--"] + tail
    return options, rest


def _refuse_mistyped_option(name: str) -> None:
    """`--gpus A10G`: neither a vLLM flag nor one of ours, but close to ours -> an error, not a note under a
    plan for the default GPU."""
    if not name.startswith("--") or name in OPTIONS or name in SHORTHANDS:
        return
    flag = cli_flags.normalize(name)
    try:
        cli_flags.resolve(flag, OOMGUARD_KNOWN)
    except cli_flags.RefusedFlagError:
        close = difflib.get_close_matches(name, [o for o in OPTIONS if o.startswith("--")], n=1, cutoff=0.75)
        if close:
            raise ConfigError(
                f"unknown option {name}: did you mean oomguard's {close[0]}? (see oomguard plan --help)"
            ) from None


def _count(name: str, text: str) -> int:
    try:
        return int(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise ConfigError(f"{name} expects a whole number, got {text!r}") from None


# option -> (field of PlanOptions, how its value is read); switches carry the value they set.
_SETTERS: dict[str, tuple[str, Callable[[str, str], object]]] = {
    "--gpu": ("gpu", lambda _n, v: v),
    "--gpu-memory": ("gpu_memory", lambda _n, v: v),
    "--nvidia-smi": ("nvidia_smi", lambda _n, v: v),
    "--other-processes": ("other_processes", lambda _n, v: v),
    "--safety": ("safety", lambda _n, v: v),
    "--vllm-version": ("vllm_version", lambda _n, v: v),
    "--replicas-per-gpu": ("replicas_per_gpu", _count),
    "--calibrate": ("calibrate", lambda _n, v: v),
    "--command": ("command", lambda _n, v: v),
    "--llm": ("usage", lambda _n, _v: Usage.LLM),
    "--json": ("json", lambda _n, _v: True),
    "--markdown": ("markdown", lambda _n, _v: True),
    "--verbose": ("verbose", lambda _n, _v: True),
    "-v": ("verbose", lambda _n, _v: True),
    "--no-fixes": ("fixes", lambda _n, _v: False),
    "--fewest-gpus": ("fewest_gpus", lambda _n, _v: True),
    "--help": ("help", lambda _n, _v: True),
    "-h": ("help", lambda _n, _v: True),
}


def _set_option(options: PlanOptions, name: str, value: str) -> None:
    if name == "--at-length":
        options.at_lengths.append(_count(name, value))
        return
    field_name, read = _SETTERS[name]
    setattr(options, field_name, read(name, value))


def serve_args_from(options: PlanOptions, rest: list[str]) -> ServeArgs:
    """Merge `oomguard plan MODEL --flags` with `-- vllm serve ...` / --command (the command wins)."""
    direct, command = rest, []
    if "--" in rest:
        cut = rest.index("--")
        direct, command = rest[:cut], rest[cut + 1 :]
    base = parse_serve_command(["vllm", "serve", *direct]) if direct else ServeArgs(None, {})
    if options.command:
        command = [options.command]
    if not command:
        return base
    given = parse_serve_command(command[0] if len(command) == 1 and " " in command[0] else command)
    return base.merged_with(given)


def other_processes_from_options(options: PlanOptions) -> tuple[int, str]:
    """--other-processes SIZE (wins), else nvidia-smi's memory.used: (bytes, where the number comes from)."""
    if options.other_processes is not None:
        used = parse_bytes(options.other_processes)
        if used < 0:
            raise ConfigError(f"--other-processes must not be negative, got {options.other_processes!r}")
        return used, "--other-processes: given by the user"
    _gpu, _memory, used = gpu_from_options(options)
    return used, f"nvidia-smi memory.used in {options.nvidia_smi}, before vLLM starts"


def gpu_from_options(options: PlanOptions) -> tuple[str | None, str | None, int]:
    """--gpu / --gpu-memory, completed from --nvidia-smi output: (gpu, gpu_memory, bytes other processes use)."""
    gpu, gpu_memory, used_by_others = options.gpu, options.gpu_memory, 0
    if options.nvidia_smi:
        try:
            text = Path(options.nvidia_smi).read_text(encoding="utf-8", errors="replace")
        except OSError as err:
            raise InputFormatError(f"cannot read {options.nvidia_smi}: {err.strerror}") from None
        readings = parse_nvidia_smi(text)
        if not readings:
            raise InputFormatError(f"{options.nvidia_smi}: no GPU found in this nvidia-smi output")
        first = readings[0]
        if gpu is None and gpu_memory is None:
            try:
                gpu = find_gpu(first.name).key
            except ConfigError:
                gpu_memory = str(first.memory_total_bytes) + "B" if first.memory_total_bytes else None
                gpu = first.name
        used_by_others = first.memory_used_bytes or 0
    return gpu, gpu_memory, used_by_others


def request_from(options: PlanOptions, args: ServeArgs) -> PlanRequest:
    gpu, gpu_memory, _ = gpu_from_options(options)
    used_by_others, others_source = other_processes_from_options(options)
    measured = measured_terms_from_log(options.calibrate) if options.calibrate else {}
    return PlanRequest(
        args=args,
        gpu=gpu,
        gpu_memory=gpu_memory,
        vllm_version=options.vllm_version,
        replicas_per_gpu=options.replicas_per_gpu,
        usage=options.usage,
        measured=measured,
        used_by_other_processes=used_by_others,
        other_processes_source=others_source,
        safety_bytes=parse_bytes(options.safety) if options.safety is not None else None,
    )


def main(argv: Sequence[str]) -> int:
    from oomguard.planning import sglang_cli  # SGLang commands (or --engine sglang) go to the SGLang planner

    if sglang_cli.wants_sglang(argv):
        return sglang_cli.main(argv)
    options, rest = split_arguments(argv)
    if options.help:
        print(HELP)
        return 0
    args = serve_args_from(options, rest)
    request = request_from(options, args)
    fewest = None
    if options.fewest_gpus:
        fewest = fewest_gpus_search(request)
        if fewest is None:
            raise ConfigError(
                "no TP x PP up to 64 GPUs (with FP8 weights where the GPU runs them) serves this model at this "
                "max_model_len on this GPU with margin"
            )
        result = fewest.plan
    else:
        result = plan(request)
    report = build_report(result, fixes=options.fixes, at_lengths=tuple(options.at_lengths))
    if fewest is not None:
        report = replace(report, fewest=(fewest.gpus, fewest.command()))
    return emit(report, options)


def emit(report: PlanReport, options: PlanOptions) -> int:
    """Print the report in the format asked for; the exit code is the verdict (0 fits, 1 does not)."""
    if options.json:
        print(json.dumps(plan_to_dict(report), indent=2))
    elif options.markdown:
        sys.stdout.write(render_plan_markdown(report))
    else:
        sys.stdout.write(render_plan(report, sys.stdout, verbose=options.verbose))
    return 0 if report.fits else 1
