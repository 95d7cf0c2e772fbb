"""`oomguard plan`: will this vLLM (or SGLang) command start, how much KV cache will it get, and if not, what
to change.

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

from oomguard.engines.vllm import cli_flags
from oomguard.engines.vllm.engine import DIRECT_SHORTHANDS, native_request
from oomguard.engines.vllm.engine import PLANNER as VLLM
from oomguard.engines.vllm.flags import OOMGUARD_KNOWN
from oomguard.engines.vllm.versions import NEWEST_KNOWN
from oomguard.errors import ConfigError, InputFormatError
from oomguard.hardware import find_gpu, parse_nvidia_smi
from oomguard.host.limits import given_limits
from oomguard.inputs import MAX_CONFIG_BYTES, read_bounded
from oomguard.kinds import Usage
from oomguard.planning.advise import fewest_gpus_search
from oomguard.planning.calibrate import measured_terms_from_log
from oomguard.planning.dispatch import engine_for, finish
from oomguard.render.plan_json import plan_to_dict
from oomguard.render.plan_markdown import render_plan_markdown
from oomguard.render.plan_text import render_plan
from oomguard.request import Request
from oomguard.result import PlanResult
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
    "--host-memory": True,
    "--shm-size": True,
    "--node-gpus": True,
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
    "--engine": True,
    "--help": False,
    "-h": False,
}

HELP = f"""usage: oomguard plan [MODEL] [options] [vLLM flags ...] [-- vllm serve MODEL [vLLM flags ...]]

{__doc__.strip().splitlines()[0]}

options:
  --gpu NAME              GPU as people or nvidia-smi name it: H100, h100-80gb, "NVIDIA A100-SXM4-40GB",
                          L4 ... (default: H100 80GB)
  --gpu-memory SIZE       the device total instead of a name, e.g. 79.19GiB (what CUDA reports)
  --nvidia-smi FILE       take the GPU, and memory other processes already use, from nvidia-smi output
  --other-processes SIZE  memory other processes hold on each GPU (e.g. 23.4GiB); a ledger line
  --safety SIZE           the margin a fit must keep (e.g. 1GiB); default: the summed bands of the estimates.
                          A plan that fits at the estimate but not with it is MARGINAL; fixes aim at it
  --vllm-version X.Y.Z    whose accounting to follow (default {NEWEST_KNOWN}, the newest known)
  --replicas-per-gpu N    engine instances sharing each GPU (co-located DP replicas); each needs its own KV
  --host-memory SIZE      the node's (container's) memory limit: the host ledger's verdict and the step it
                          dies at
  --shm-size SIZE         the container's /dev/shm size (Docker's default is 64 MiB)
  --node-gpus N           GPUs on the planned node, when one engine spans nodes (the host ledger is per node)
  --llm                   plan the offline LLM() class (its batch defaults) instead of `vllm serve`
  --at-length N           also report the concurrency at N tokens per request (repeatable)
  --fewest-gpus           find the smallest TP x PP that serves the model at this max_model_len
  --calibrate LOG         use the measured weights/activation/non-torch/graph terms from an earlier run's log
  --command "..."         the `vllm serve ...` command as one string (instead of after --)
  --engine NAME           vllm (default) or sglang; an SGLang launch command after -- selects it too
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
    vllm_version: str | None = None
    replicas_per_gpu: int = 1
    host_memory: str | None = None
    shm_size: str | None = None
    node_gpus: int | None = None
    usage: Usage = Usage.SERVE
    json: bool = False
    markdown: bool = False
    verbose: bool = False
    fixes: bool = True
    at_lengths: list[int] = field(default_factory=list)
    fewest_gpus: bool = False
    calibrate: str | None = None
    command: str | None = None
    engine: str | None = None
    help: bool = False


def split_arguments(argv: Sequence[str]) -> tuple[PlanOptions, list[str], list[str]]:
    """oomguard's options out of argv; the engine flags given directly, and the command after `--`."""
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
            rest.append(token)
            continue
        if OPTIONS[name] and not has_value:
            if i >= len(head):
                raise ConfigError(f"{name} needs a value")
            value, i = head[i], i + 1
        _set_option(options, name, value)
    return options, rest, tail


def _refuse_mistyped_option(name: str) -> None:
    """`--gpus A10G`: neither a vLLM flag nor one of ours, but close to ours -> an error, not a note under a
    plan for the default GPU."""
    if not name.startswith("--") or name in OPTIONS or name in DIRECT_SHORTHANDS:
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
    "--host-memory": ("host_memory", lambda _n, v: v),
    "--shm-size": ("shm_size", lambda _n, v: v),
    "--node-gpus": ("node_gpus", _count),
    "--calibrate": ("calibrate", lambda _n, v: v),
    "--command": ("command", lambda _n, v: v),
    "--engine": ("engine", lambda _n, v: v),
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
    """--gpu / --gpu-memory, completed from --nvidia-smi output: (gpu, gpu_memory, bytes other processes
    use)."""
    gpu, gpu_memory, used_by_others = options.gpu, options.gpu_memory, 0
    if options.nvidia_smi:
        raw = read_bounded(
            options.nvidia_smi, limit=MAX_CONFIG_BYTES, what="nvidia-smi output", error=InputFormatError
        )
        text = raw.decode("utf-8", "replace")
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


def request_from(options: PlanOptions, direct: list[str], tail: list[str]) -> Request:
    """The neutral request: the engine flags given directly, then the command (after `--` or --command)."""
    gpu, gpu_memory, _ = gpu_from_options(options)
    used_by_others, others_source = other_processes_from_options(options)
    measured = measured_terms_from_log(options.calibrate) if options.calibrate else {}
    command: list[str] | str | None = tail or None
    if options.command:
        command = options.command
    elif tail and len(tail) == 1 and " " in tail[0]:
        command = tail[0]  # the whole command quoted as one word
    return Request(
        command=command,
        engine=options.engine,
        direct_args=tuple(direct),
        gpu=gpu,
        gpu_memory=gpu_memory,
        engine_version=options.vllm_version,
        replicas_per_gpu=options.replicas_per_gpu,
        usage=options.usage,
        measured=measured,
        used_by_other_processes=used_by_others,
        other_processes_source=others_source,
        safety_bytes=parse_bytes(options.safety) if options.safety is not None else None,
        host=given_limits(options.host_memory, options.shm_size)
        if options.host_memory or options.shm_size
        else None,
        local_gpus=options.node_gpus,
    )


def main(argv: Sequence[str]) -> int:
    options, direct, tail = split_arguments(argv)
    if options.help:
        print(HELP)
        return 0
    request = request_from(options, direct, tail)
    engine = engine_for(request)
    at_lengths = tuple(options.at_lengths)
    if options.fewest_gpus:
        if engine.name != VLLM.name:
            raise ConfigError(
                f"--fewest-gpus is vLLM-only for now (this is an {engine.display_name} command)"
            )
        found = fewest_gpus_search(native_request(request))
        if found is None:
            raise ConfigError(
                "no TP x PP up to 64 GPUs (with FP8 weights where the GPU runs them) serves this model at "
                "this "
                "max_model_len on this GPU with margin"
            )
        result = replace(
            finish(VLLM, found.plan, fixes=options.fixes, at_lengths=at_lengths),
            fewest=(found.gpus, found.command()),
        )
    else:
        result = finish(engine, engine.plan(request), fixes=options.fixes, at_lengths=at_lengths)
    return emit(result, options)


def emit(result: PlanResult, options: PlanOptions) -> int:
    """Print the result in the format asked for; the exit code is the verdict (0 fits, 1 does not)."""
    if options.json:
        print(json.dumps(plan_to_dict(result), indent=2))
    elif options.markdown:
        sys.stdout.write(render_plan_markdown(result))
    else:
        sys.stdout.write(render_plan(result, sys.stdout, verbose=options.verbose))
    host_fits = result.host is None or result.host.fits
    return 0 if result.fits and host_fits else 1
