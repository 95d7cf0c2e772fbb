"""`oomguard simulate TRACE ... -- vllm serve M -dp 4 [--enable-expert-parallel]`: the data-parallel path.

Taken when the command has `--data-parallel-size` > 1, when `--balancer` is given, or when the sweep is over
`balancer` or `data_parallel_size`. Each rank is the single-engine setup that `simulate.cli.build_setup`
builds
from the planner (the planner sizes one rank's pool; co-located replicas through `--replicas-per-gpu`); the
front-end follows vLLM's own flags: `--api-server-count` (`-asc`; default the DP size, as vLLM 0.33's
`vllm serve` defaults it with its internal balancer), `--data-parallel-external-lb` (no internal balancer:
round robin unless `--balancer` names another) and `--data-parallel-hybrid-lb` with
`--data-parallel-size-local`
(each node balances its own ranks). MoE models step in lockstep; with `--enable-expert-parallel`
their MoE layers gather every rank's tokens.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oomguard.errors import ConfigError, InputFormatError
from oomguard.simulation import workload as wl
from oomguard.simulation.dp.balancer import BalancerKind
from oomguard.simulation.dp.ep import LockstepMemory, lockstep_memory
from oomguard.simulation.dp.report import dp_dict, dp_html, dp_sweep_table, dp_text, summaries_of
from oomguard.simulation.dp.run import DpConfig, DpResult, simulate_dp
from oomguard.simulation.run import Summary

DP_SWEEPS = ("balancer", "data_parallel_size")


@dataclass(frozen=True)
class FrontendFlags:
    """The `vllm serve` flags that shape the front-end, read from the user's command."""

    api_server_count: int | None
    external_lb: bool
    hybrid_lb: bool


def frontend_flags(vllm_argv: list[str]) -> FrontendFlags:
    count: int | None = None
    external = hybrid = False
    i = 0
    while i < len(vllm_argv):
        word = vllm_argv[i]
        name, eq, value = word.partition("=")
        if name in ("--api-server-count", "-asc"):
            if not eq:
                i += 1
                value = vllm_argv[i] if i < len(vllm_argv) else ""
            try:
                count = int(value)
            except ValueError:
                raise ConfigError(f"--api-server-count expects an integer, got {value!r}") from None
            if count < 1:
                raise ConfigError(f"--api-server-count must be >= 1 for a served deployment, got {count}")
        elif name in ("--data-parallel-external-lb", "--data-parallel-rank", "-dpn"):
            external = True
        elif name in ("--data-parallel-hybrid-lb", "--data-parallel-start-rank", "-dpr"):
            hybrid = True  # vLLM serve: a start rank without another mode means hybrid
        i += 1
    if external and hybrid:
        raise ConfigError(
            "vLLM refuses more than one data parallel load balancing mode: "
            "--data-parallel-external-lb (or --data-parallel-rank) with --data-parallel-hybrid-lb"
        )
    return FrontendFlags(count, external, hybrid)


def _sweep_name(args: argparse.Namespace) -> str | None:
    if not args.sweep:
        return None
    return str(args.sweep.partition("=")[0].strip().lstrip("-").replace("-", "_"))


def wants_dp(args: argparse.Namespace, vllm_argv: list[str]) -> bool:
    """Whether this invocation is a data-parallel simulation (see the module docstring)."""
    from oomguard.simulation.cli import _serve_args

    if getattr(args, "balancer", None) or _sweep_name(args) in DP_SWEEPS:
        return True
    return int(_serve_args(args.model, vllm_argv).values.get("data_parallel_size", 1) or 1) > 1


def _balancer(args: argparse.Namespace, flags: FrontendFlags) -> BalancerKind:
    if getattr(args, "balancer", None):
        try:
            return BalancerKind.parse(args.balancer)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    return BalancerKind.ROUND_ROBIN if flags.external_lb else BalancerKind.VLLM


def dp_config(
    args: argparse.Namespace, vllm_argv: list[str], overrides: dict[str, Any], balancer: BalancerKind
) -> tuple[DpConfig, dict[str, Any]]:
    from oomguard.simulation.cli import build_setup

    setup = build_setup(args, vllm_argv, overrides)
    plan = setup.plan
    dp = int(overrides.get("data_parallel_size") or 0)
    lockstep = False
    memory: LockstepMemory | None = None
    if plan is not None:
        from oomguard.simulation.model_facts import binding_rank

        dp = dp or int(plan.engine.data_parallel_size)
        lockstep = plan.model.moe is not None and dp > 1
        if lockstep:
            rank, activation, _ = binding_rank(plan)
            memory = lockstep_memory(plan, rank, activation)
    else:
        from oomguard.simulation.cli import _serve_args

        dp = dp or int(_serve_args(args.model, vllm_argv).values.get("data_parallel_size", 1) or 1)
    flags = frontend_flags(vllm_argv)
    external = flags.external_lb or balancer in (BalancerKind.ROUND_ROBIN, BalancerKind.KV_AWARE)
    local = 0
    if flags.hybrid_lb and not external:
        from oomguard.simulation.cli import _serve_args

        local = int(_serve_args(args.model, vllm_argv).values.get("data_parallel_size_local") or 0)
        if not 0 < local <= dp:
            raise ConfigError(
                "--data-parallel-hybrid-lb needs --data-parallel-size-local between 1 and the DP size"
            )
    # vLLM serve's default --api-server-count: 1 with an external LB, the node's ranks with hybrid, else the
    # DP size
    api_servers = 1 if external else (flags.api_server_count or local or dp)
    try:
        config = DpConfig(
            setup.config,
            dp,
            balancer=balancer,
            api_servers=api_servers,
            lockstep=lockstep,
            lockstep_memory=memory,
            ranks_per_node=local,
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None
    info = dict(setup.facts, data_parallel_size=dp, balancer=balancer.value, api_servers=api_servers)
    return config, info


def run_dp(args: argparse.Namespace, vllm_argv: list[str], workload: wl.Workload) -> int:
    flags = frontend_flags(vllm_argv)
    balancer = _balancer(args, flags)
    if args.sweep:
        return _sweep(args, vllm_argv, workload, balancer)
    config, info = dp_config(args, vllm_argv, {}, balancer)
    result, summaries = _simulate(workload, config)
    info["skipped_rows"] = workload.skipped_rows
    written = _write(args, result, summaries, info)
    if args.json:
        print(json.dumps(dp_dict(result, summaries, info), indent=1))
    else:
        print(dp_text(result, summaries, info))
        for line in written:
            print(line)
    return 1 if _failed(result, summaries) else 0


def _simulate(workload: wl.Workload, config: DpConfig) -> tuple[DpResult, list[Summary]]:
    if workload.clock == wl.SECONDS and config.engine.step_time is None:
        raise ConfigError(
            "a trace timed in seconds needs a step-time model: give --model, or --step-time A,B,C"
        )
    result = simulate_dp(workload, config)
    return result, summaries_of(result)


def _failed(result: DpResult, summaries: list[Summary]) -> bool:
    """Exit 1 as for one engine: a rank passed its headroom, a request never fit, a prompt was too long."""
    return bool(result.rejected or any(s.oom_events or s.unservable for s in summaries))


def _write(
    args: argparse.Namespace, result: DpResult, summaries: list[Summary], info: dict[str, Any]
) -> list[str]:
    written = []
    try:
        if args.timeline:
            from oomguard.simulation.report import write_timeline

            base = Path(args.timeline)
            for k, rank in enumerate(result.ranks):
                path = base.with_name(f"{base.stem}.rank{k}{base.suffix}")
                written.append(write_timeline(rank.timeline, path, rank.usable_blocks))
        if args.html:
            Path(args.html).write_text(dp_html(result, summaries, info), encoding="utf-8")
            written.append(f"html: {args.html}")
    except OSError as err:
        raise InputFormatError(f"cannot write output: {err}") from None
    if args.json:
        import sys

        for line in written:
            print(line, file=sys.stderr)
    return written


def _flag_value(name: str, value: str) -> Any:
    """A swept vLLM flag's value, parsed as vLLM parses it (a one-line error when it is not one)."""
    from oomguard.engines.vllm.flags import parse_serve_command

    if name == "data_parallel_size":
        try:
            size = int(value)
        except ValueError:
            raise ConfigError(f"data_parallel_size values must be integers, got {value!r}") from None
        if size < 1:
            raise ConfigError(f"data_parallel_size must be >= 1, got {size}")
        return size
    typed = parse_serve_command(["vllm", "serve", "--" + name.replace("_", "-"), value]).values
    return typed.get(name, value)


def _sweep(
    args: argparse.Namespace, vllm_argv: list[str], workload: wl.Workload, balancer: BalancerKind
) -> int:
    name, _, raw = args.sweep.partition("=")
    name = name.strip().lstrip("-").replace("-", "_")
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if not name or not values:
        raise ConfigError("--sweep wants FLAG=V1,V2,... e.g. balancer=vllm,round-robin,kv-aware")
    rows: list[tuple[str, DpResult, list[Summary]]] = []
    for value in values:
        if name == "balancer":
            try:
                kind = BalancerKind.parse(value)
            except ValueError as err:
                raise ConfigError(str(err)) from None
            config, _ = dp_config(args, vllm_argv, {}, kind)
        else:
            config, _ = dp_config(args, vllm_argv, {name: _flag_value(name, value)}, balancer)
        result, summaries = _simulate(workload, config)
        rows.append((value, result, summaries))
    if args.json:
        print(
            json.dumps(
                {"flag": name, "runs": [dict(dp_dict(r, s, {}), value=v) for v, r, s in rows]},
                indent=1,
            )
        )
    else:
        print(dp_sweep_table(name, rows))
    return 1 if all(_failed(r, s) for _, r, s in rows) else 0
