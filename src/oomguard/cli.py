"""The `oomguard` command: dispatch to one subcommand, turn user errors into one line and an exit code.

Each subcommand lives in its own module with a `main(argv) -> int`; only the chosen one is imported,
so `oomguard plan` does not pay for the simulator's or the watcher's imports.

Exit codes: 0 ok / fits, 1 does not fit (plan, check) or findings (watch --once), 2 bad input.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from oomguard import __version__
from oomguard.errors import OomguardError, one_line


@dataclass(frozen=True)
class Command:
    module: str
    summary: str


COMMANDS: dict[str, Command] = {
    "plan": Command(
        "oomguard.planning.cli", "per-GPU memory ledger of a vLLM deployment; fit or not, and the fix"
    ),
    "check": Command(
        "oomguard.planning.check_cli", "CI guard: fail when a command, YAML or k8s manifest would not start"
    ),
    "simulate": Command(
        "oomguard.simulation.cli", "replay a traffic trace through vLLM's scheduler; find the step that OOMs"
    ),
    "step": Command(
        "oomguard.simulation.step_cli",
        "memory of one batch shape (packed vs padded activations, EP, sampler)",
    ),
    "diagnose": Command(
        "oomguard.diagnosis.cli", "root cause and fix from logs, tracebacks, nvidia-smi, dmesg, kubectl"
    ),
    "watch": Command("oomguard.watch.cli", "watch live /metrics, NVML or Prometheus; alert before an OOM"),
    "rules": Command(
        "oomguard.watch.rules_cli", "Prometheus alerting and recording rules for the watch detectors"
    ),
}

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


def _overview() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [
        f"oomguard {__version__}: will this vLLM deployment run out of memory, why did it, is it about to?",
        "",
        "usage: oomguard COMMAND [options]    (oomguard COMMAND --help for its options)",
        "",
        "commands:",
    ]
    lines += [f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()]
    lines += [
        "",
        "example: oomguard plan -- vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768 --gpu "  # noqa: ISC004
        "H100",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        # No command is a usage error (as argparse treats a missing required argument): usage on stderr, 2.
        print(_overview(), file=sys.stderr)
        return EXIT_BAD_INPUT
    if args[0] in ("-h", "--help", "help"):
        print(_overview())
        return 0
    if args[0] in ("-V", "--version"):
        print(f"oomguard {__version__}")
        return 0
    name, rest = args[0], args[1:]
    command = COMMANDS.get(name)
    if command is None:
        print(
            f"oomguard: error: unknown command {name!r}; choose from {', '.join(COMMANDS)}", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    try:
        module = importlib.import_module(command.module)
        return int(module.main(rest))
    except OomguardError as err:
        print(f"oomguard {name}: error: {one_line(str(err))}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"oomguard {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `oomguard ... | head` closed the pipe: not an error of ours or the user's.
        sys.stderr.close()
        return 0
    except Exception as err:
        if os.environ.get("OOMGUARD_DEBUG"):
            raise
        print(
            f"oomguard {name}: internal error: {type(err).__name__}: {one_line(str(err))} "
            "(please report it; set OOMGUARD_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
