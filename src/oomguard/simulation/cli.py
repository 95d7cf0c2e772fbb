"""`oomguard simulate TRACE --model M --gpu G [vLLM flags | -- vllm serve ...]`: replay traffic, find the OOM
step.

The KV pool (blocks, block size, groups), the step headroom and the activation costs come from the planner
for the same model, GPU and flags. `--num-gpu-blocks-override N` fixes the pool instead (as vLLM's flag does);
then a local model directory's config.json gives the KV groups directly, which is how the scheduler oracle's
scenarios are replayed. Scheduler flags given explicitly win over the planner's resolved defaults.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from oomguard.errors import ConfigError, InputFormatError, shown
from oomguard.simulation import workload as wl
from oomguard.simulation.fix_search import FixSearch, StepFlag, search_step_fixes
from oomguard.simulation.html_report import render_html
from oomguard.simulation.parallel import parallel_map
from oomguard.simulation.report import (
    summary_dict,
    summary_text,
    sweep_table,
    write_png,
    write_timeline,
)
from oomguard.simulation.run import ProgressFn, SimulationResult, Summary, simulate, summarize
from oomguard.simulation.setup import Setup, SetupOptions, setup_of
from oomguard.simulation.step_cli import dtype_bytes, positive_int, width_flags
from oomguard.simulation.step_memory import (
    DEFAULT_TENSORS_ALIVE,
)
from oomguard.units import parse_bytes

if TYPE_CHECKING:
    from oomguard.engines.vllm.flags import ServeArgs


EXIT_CODES = """exit codes:
  0  clean: no step passes the headroom, every request fits the pool and max_model_len
  1  a step passes the headroom (an OOM), a request never fits the KV pool, or a prompt is
     at least max_model_len (with --sweep: no value is clean)
  2  bad input (an unknown flag, an unreadable trace, a deployment that does not start)"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)  # one line and exit 2, like every other bad input


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="oomguard simulate",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Replay a traffic trace through vLLM 0.33's V1 scheduler; find the step that would OOM. "
        "vLLM flags (--max-num-batched-tokens, --max-num-seqs, --max-model-len, --block-size, "
        "--enable-prefix-caching, --long-prefill-token-threshold, --num-gpu-blocks-override, "
        "--tensor-parallel-size, ...) are accepted as vLLM spells them, or after `-- vllm serve MODEL`.",
    )
    p.add_argument(
        "trace",
        nargs="?",
        help="Azure CSV, Mooncake JSONL, a scheduler-replay JSONL (id, prompt_tokens, output_tokens, "
        "arrival_step), or a generic CSV/JSONL",
    )
    p.add_argument(
        "--synthetic",
        help="instead of a trace: poisson:rate=R,duration=S[,prompt=DIST,output=DIST,seed=N], "
        "bursty:... (plus burst=F,burst_s=S,period_s=S) or agentic[:sessions=N,turns=N]",
    )
    p.add_argument("--model", help="model id or local directory with config.json")
    p.add_argument("--gpu", help="GPU name (H100, H200, A100-80GB, ...); default H100")
    p.add_argument("--gpu-memory", help="device memory instead of a GPU name (e.g. 79.19GiB)")
    p.add_argument(
        "--hidden-size", type=positive_int, help="activation width for step memory (overrides the model's)"
    )
    p.add_argument("--intermediate-size", type=positive_int)
    p.add_argument("--vocab-size", type=positive_int)
    p.add_argument("--dtype", help="activation dtype (bfloat16, float16, float32)")
    p.add_argument(
        "--layout",
        choices=("packed", "padded"),
        default="packed",
        help="packed (varlen) activations, or padded to the longest prefill chunk (the padded mixed-length "
        "prefill OOM)",
    )
    p.add_argument(
        "--tensors-alive",
        type=positive_int,
        default=DEFAULT_TENSORS_ALIVE,
        help=f"intermediates of the step's widest layer alive at once (default {DEFAULT_TENSORS_ALIVE})",
    )
    p.add_argument("--headroom", help="memory a step's activations may use (default: from the planner)")
    p.add_argument("--step-time", help="A,B,C: ms per step, ms per token, ms per 1k decode-context tokens")
    p.add_argument("--rate-scale", type=float, default=1.0, help="arrivals this many times as fast")
    p.add_argument("--window", help="START:END seconds (or steps) of the trace to replay")
    p.add_argument(
        "--skip-bad-rows", action="store_true", help="skip malformed rows (and count them) instead of failing"
    )
    p.add_argument(
        "--sweep", help="FLAG=V1,V2,...: simulate each value side by side (vLLM field or flag name)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--timeline", help="write the per-step timeline (.csv, or .parquet with pyarrow)")
    p.add_argument("--plot", help="write a PNG of KV usage and step memory (needs matplotlib)")
    p.add_argument("--html", help="write a self-contained HTML page")
    p.add_argument(
        "--no-fix-search",
        action="store_true",
        help="on an OOM, do not search max_num_batched_tokens / long_prefill_token_threshold / max_num_seqs "
        "for the largest clean value",
    )
    p.add_argument(
        "--balancer",
        help="data parallel: vllm (vLLM's own DP balancer, the default), vllm-legacy, round-robin or "
        "kv-aware",
    )
    p.add_argument(
        "--replicas-per-gpu", type=positive_int, default=1, help="engines (DP ranks) sharing one GPU"
    )
    p.add_argument("--progress", action="store_true", help="progress on stderr (default: only on a terminal)")
    p.add_argument("--max-steps", type=int, help="stop after this many steps")
    return p


def _vllm_flag_takes_value(name: str) -> bool | None:
    """Whether a `vllm serve` flag consumes the next word (None: a flag oomguard does not know)."""
    from oomguard.engines.vllm.flags import IGNORED_FLAGS, MEMORY_FLAGS

    if name == "--config" or re.fullmatch(r"-O\d", name):
        return name == "--config"
    head = name.partition(".")[0]  # dotted sub-options: --compilation-config.cudagraph_mode FULL
    for spec in MEMORY_FLAGS:
        if name in spec.names or head in spec.names:
            return spec.parse is not None
        if spec.parse is None and name.startswith("--no-") and "--" + name[5:] in spec.names:
            return False
    return IGNORED_FLAGS.get(name)


def split_argv(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Our options and the trace, apart from the vLLM flags (given inline, or after `--`).

    A vLLM flag's value is taken with the flag, so `--max-num-seqs 64 trace.csv` reads the trace as the
    trace, not 64; a flag oomguard does not know must be written `--flag=value` or after `--`. The words after
    `--` (`vllm serve MODEL ...`) come first, so the flags given before `--` override the pasted command's."""
    parser = _parser()
    own_options = parser._option_string_actions  # option string -> argparse action (nargs 0: a switch)
    own: list[str] = []
    vllm: list[str] = []
    command: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if word == "--":
            command = argv[i:]
            break
        if not word.startswith("-") or word == "-":
            own.append(word)
            continue
        name, eq, _ = word.partition("=")
        action = own_options.get(name)
        if action is not None:
            own.append(word)
            if not eq and action.nargs != 0 and i < len(argv):
                own.append(argv[i])
                i += 1
            continue
        takes_value = _vllm_flag_takes_value(name)
        if takes_value is None and not eq:
            raise ConfigError(
                f"unknown option {word}: neither an `oomguard simulate` option nor a vLLM flag "
                f"oomguard knows; write it as {name}=VALUE, or put vLLM flags after `--`"
            )
        vllm.append(word)
        if takes_value and not eq:
            if i >= len(argv):
                raise ConfigError(f"{name} needs a value")
            vllm.append(argv[i])
            i += 1
    return parser.parse_args(own), command + vllm


def _serve_args(model: str | None, vllm_argv: list[str]) -> ServeArgs:
    from oomguard.engines.vllm.flags import parse_serve_command

    words = list(vllm_argv)
    if not words or words[0].startswith(
        "-"
    ):  # flags only; otherwise the user's own command, launcher and all
        words = ["vllm", "serve"] + ([model] if model else []) + words
    return parse_serve_command(words)


def build_setup(
    args: argparse.Namespace, vllm_argv: list[str], overrides: dict[str, Any] | None = None
) -> Setup:
    """The deployment `simulate` runs (simulation/setup.py), from this command's options and vLLM's flags
    (with `overrides`, e.g. a sweep's value)."""
    serve = _serve_args(args.model, vllm_argv)
    if overrides:
        serve = serve.with_values(**overrides)
    serve = replace(serve, model=args.model or serve.model)
    try:
        options = SetupOptions(
            gpu=args.gpu,
            gpu_memory=args.gpu_memory,
            replicas_per_gpu=args.replicas_per_gpu,
            headroom_bytes=parse_bytes(args.headroom) if args.headroom else None,
            step_time_coefficients=args.step_time,
            layout=args.layout,
            tensors_alive=args.tensors_alive,
            max_steps=args.max_steps,
            widths=_widths(args),
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return setup_of(serve, options)


def _widths(args: argparse.Namespace) -> dict[str, Any]:
    """Model widths and dtype given as flags (over the model's)."""
    widths: dict[str, Any] = width_flags(args)
    if args.dtype:
        widths["dtype_bytes"] = dtype_bytes(args.dtype)
    return widths


def _parse_kv(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        if "=" not in part:
            raise ConfigError(f"expected key=value, got {part!r} in {text!r}")
        k, v = part.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def load_workload(args: argparse.Namespace) -> wl.Workload:
    if args.synthetic and args.trace:
        raise ConfigError("give a trace file or --synthetic, not both")
    if args.synthetic:
        kind, _, rest = args.synthetic.partition(":")
        try:
            opts = _parse_kv(rest) if rest else {}
            prompt = wl.LengthDist.parse(opts.pop("prompt", "lognormal:1000:0.8"))
            output = wl.LengthDist.parse(opts.pop("output", "lognormal:200:0.8"))
            seed = int(opts.pop("seed", "0"))
            if kind == "poisson":
                workload = wl.poisson(
                    float(opts.pop("rate")), float(opts.pop("duration", "600")), prompt, output, seed
                )
            elif kind == "bursty":
                workload = wl.bursty(
                    float(opts.pop("rate")),
                    float(opts.pop("duration", "600")),
                    prompt,
                    output,
                    float(opts.pop("burst", "10")),
                    float(opts.pop("burst_s", "5")),
                    float(opts.pop("period_s", "60")),
                    seed,
                )
            elif kind == "agentic":
                workload = wl.agentic(
                    int(opts.pop("sessions", "7")),
                    int(opts.pop("turns", "20")),
                    long_prompt=int(opts.pop("long_prompt", "153853")),
                    seed=seed,
                )
            else:
                raise ConfigError(f"unknown --synthetic kind {kind!r} (poisson, bursty, agentic)")
        except KeyError as err:
            raise ConfigError(f"--synthetic {kind} needs {err.args[0]}=...") from None
        except ValueError as err:
            raise ConfigError(f"--synthetic: {err}") from None
        if opts:
            raise ConfigError(f"--synthetic {kind}: unknown option(s) {', '.join(opts)}")
    elif args.trace:
        workload = wl.read_workload(args.trace, skip_bad_rows=args.skip_bad_rows)
    else:
        raise ConfigError("give a trace file (or --synthetic ...)")
    try:
        if args.window:
            lo, _, hi = args.window.partition(":")
            workload = wl.window(workload, float(lo) if lo else None, float(hi) if hi else None)
        if args.rate_scale != 1.0:
            workload = wl.scale_rate(workload, args.rate_scale)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return workload


def _progress_fn(enabled: bool) -> ProgressFn | None:
    if not enabled:
        return None

    def report(clock: float, steps: int, done: int, total: int) -> None:
        print(
            f"\r  simulated {clock:,.1f}, {steps:,} steps, {done:,}/{total:,} requests done",
            end="",
            file=sys.stderr,
            flush=True,
        )

    return report


def run_one(workload: wl.Workload, setup: Setup, progress: bool) -> tuple[SimulationResult, Summary]:
    if workload.clock == wl.SECONDS and setup.config.step_time is None:
        raise ConfigError(
            "a trace timed in seconds needs a step-time model: give --model, or --step-time A,B,C"
        )
    result = simulate(workload, setup.config, _progress_fn(progress))
    if progress:
        print(file=sys.stderr)
    return result, summarize(result)


def main(argv: list[str]) -> int:
    args, vllm_argv = split_argv(argv)
    progress = args.progress or (sys.stderr.isatty() and not args.json)
    workload = load_workload(args)
    if workload.skipped_rows and not args.json:
        print(f"skipped {workload.skipped_rows} bad row(s) of {workload.source}", file=sys.stderr)
    from oomguard.simulation.dp import cli as dp_cli  # one KV pool per DP rank, a balancer in front

    if dp_cli.wants_dp(args, vllm_argv):
        return dp_cli.run_dp(args, vllm_argv, workload)
    if args.sweep:
        return _sweep(args, vllm_argv, workload, progress)
    setup = build_setup(args, vllm_argv)
    result, summary = run_one(workload, setup, progress)
    fixes = None
    if summary.oom_events and not args.no_fix_search:
        fixes = _search_fixes(args, vllm_argv, workload, setup, summary, progress)
    info = dict(setup.facts, skipped_rows=workload.skipped_rows)
    written = _write_outputs(args, result, summary, info, fixes)
    if args.json:
        print(json.dumps(summary_dict(result, summary, info, fixes), indent=1))
    else:
        print(summary_text(result, summary, info, fixes))
        for line in written:
            print(line)
    return 1 if failed(summary) else 0


def failed(summary: Summary) -> bool:
    """Exit 1: a step passed the headroom, a request never fit the pool, or a prompt was too long."""
    return bool(summary.oom_events or summary.unservable or summary.rejected)


def _search_fixes(
    args: argparse.Namespace,
    vllm_argv: list[str],
    workload: wl.Workload,
    setup: Setup,
    summary: Summary,
    progress: bool,
) -> FixSearch:
    sched = setup.config.scheduler
    current = {
        StepFlag.MAX_NUM_BATCHED_TOKENS: sched.max_num_batched_tokens,
        StepFlag.LONG_PREFILL_TOKEN_THRESHOLD: sched.long_prefill_token_threshold
        or sched.max_num_batched_tokens,
        StepFlag.MAX_NUM_SEQS: sched.max_num_seqs,
    }
    if progress:
        print("  searching the step flags for a clean setting...", file=sys.stderr)
    return search_step_fixes(
        workload,
        lambda overrides: build_setup(args, vllm_argv, overrides).config,
        summary,
        current,
        sched.max_model_len,
    )


def _write_outputs(
    args: argparse.Namespace,
    result: SimulationResult,
    summary: Summary,
    info: dict[str, Any],
    fixes: FixSearch | None,
) -> list[str]:
    written = []
    try:
        if args.timeline:
            written.append(write_timeline(result.timeline, Path(args.timeline), result.usable_blocks))
        if args.plot:
            written.append(write_png(result, Path(args.plot)))
        if args.html:
            Path(args.html).write_text(render_html(result, summary, info, fixes), encoding="utf-8")
            written.append(f"html: {args.html}")
    except OSError as err:
        raise InputFormatError(f"cannot write output: {err}") from None
    if args.json:
        for line in written:
            print(line, file=sys.stderr)
    return written


def _sweep(args: argparse.Namespace, vllm_argv: list[str], workload: wl.Workload, progress: bool) -> int:
    flag, _, raw = args.sweep.partition("=")
    name = flag.strip().lstrip("-").replace("-", "_")
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if not name or not values:
        raise ConfigError("--sweep wants FLAG=V1,V2,... e.g. max_num_batched_tokens=8192,16384,32768")
    setups = [build_setup(args, vllm_argv, {name: _sweep_value(name, value)}) for value in values]
    if progress:
        print(f"  simulating {len(values)} values in parallel processes...", file=sys.stderr)

    def one(setup: Setup) -> tuple[Summary, dict[str, Any], bool]:
        result, summary = run_one(workload, setup, False)
        # a run that served nothing (every request longer than the value) is not safe, only empty
        safe = (
            summary.oom_events == 0
            and result.config.headroom_bytes is not None
            and summary.unservable == 0
            and summary.finished > 0
        )
        return summary, summary_dict(result, summary, setup.facts), safe

    runs = parallel_map(one, setups)
    rows = [(value, summary, safe) for value, (summary, _, safe) in zip(values, runs)]
    results = [r for _, r, _ in runs]
    safe_values = [v for v, _, ok in rows if ok]
    try:
        safest = max(safe_values, key=float) if safe_values else None
    except ValueError:
        safest = safe_values[-1] if safe_values else None
    if args.json:
        print(
            json.dumps(
                {
                    "flag": name,
                    "largest_safe": safest,
                    "runs": [dict(r, value=v) for (v, _, _), r in zip(rows, results)],
                },
                indent=1,
            )
        )
    else:
        print(sweep_table(name, rows, safest))
    return 0 if safest is not None else 1


def _sweep_value(name: str, value: str) -> Any:
    """A swept value as vLLM parses the flag's value; a one-line error when the name is no vLLM setting the
    simulation reads (a silently ignored name would give identical rows, all "safe") or the value is not
    one of the flag's."""
    from oomguard.engines.vllm.flags import parse_serve_command

    flag = "--" + name.replace("_", "-")
    if value.lower() in ("true", "false"):
        switch = parse_serve_command(["vllm", "serve", flag])
        if isinstance(switch.values.get(name), bool):
            return value.lower() == "true"
    parsed = parse_serve_command(["vllm", "serve", flag, value])
    if parsed.refused:
        raise ConfigError(f"--sweep {name}: vLLM would refuse {shown(parsed.refused[0])}")
    if name not in parsed.values:
        raise ConfigError(
            f"--sweep {name}: not a vLLM setting the simulation reads; sweep an engine field such as "
            "max_num_seqs, max_num_batched_tokens, max_model_len, gpu_memory_utilization or block_size "
            "(run simulate once per --model or --gpu)"
        )
    if parsed.model is not None:  # the value was left over: the flag takes none
        raise ConfigError(f"--sweep {name}: {shown(value)} is not true or false")
    return parsed.values[name]
