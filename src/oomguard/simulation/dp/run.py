"""Replay a workload through a data-parallel deployment: a front-end routes, each rank schedules its own pool.

Dense models (vLLM v0.33.0, vllm/v1/engine/core.py: "Non-MoE DP ranks are completely independent"): each rank
is its own engine on its own clock. Before each arrival every rank runs the steps that start before it, the
front-end routes the request on the counts the ranks last published, and the chosen rank queues it.

MoE models (`DPEngineCoreProc`): the ranks step together while any of them has work (a wave); a rank with
nothing to schedule runs a one-token dummy batch, and the step lasts as long as the slowest rank's batch.
Arrivals are routed at step boundaries. With expert parallelism each rank's MoE layers see the tokens of all
ranks that step (`ep.LockstepMemory`), so a rank's peak can pass its headroom on a step where it alone is
quiet; the first such step is found.

After the run: per rank, the single-engine result; across ranks, the KV usage imbalance (`oomguard.imbalance`:
each rank's usage over the trailing 5 minutes, as watch and rules compare them) sampled on a uniform grid of
`IMBALANCE_SAMPLES` points, and which rank saturated, preempted or passed its headroom first.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import compress

from oomguard.imbalance import (
    IMBALANCE_MIN_MEAN_KV,
    IMBALANCE_WARN,
    IMBALANCE_WINDOW_S,
    imbalance,
    time_above,
)
from oomguard.simulation.dp.balancer import BalancerKind
from oomguard.simulation.dp.ep import DUMMY_BATCH_TOKENS, LockstepMemory
from oomguard.simulation.dp.frontend import Frontend
from oomguard.simulation.dp.rank import RankEngine, StepLoad
from oomguard.simulation.run import SATURATED_KV_USAGE, SimulationConfig, SimulationResult
from oomguard.simulation.scheduler import KeyInterner, SimRequest
from oomguard.simulation.workload import STEPS, Workload

IMBALANCE_SAMPLES = 20_000  # points of the imbalance series over the simulated span


@dataclass(frozen=True)
class DpConfig:
    engine: SimulationConfig  # every rank's scheduler, pool and step memory (the planner sizes one rank)
    data_parallel_size: int
    balancer: BalancerKind = BalancerKind.VLLM
    api_servers: int = 1  # vLLM front-end clients (--api-server-count) per node group; external routers: 1
    ranks_per_node: int = (
        0  # hybrid LB: each node balances its own ranks (--data-parallel-size-local); 0: all
    )
    lockstep: bool = False  # MoE: the ranks step together
    lockstep_memory: LockstepMemory | None = None  # the EP-aware step peak (lockstep only)

    def __post_init__(self) -> None:
        if self.data_parallel_size < 1:
            raise ValueError("data_parallel_size must be >= 1")
        if self.api_servers < 1:
            raise ValueError("api_servers must be >= 1")


@dataclass(frozen=True)
class RankEvent:
    rank: int
    time: float
    step: int


@dataclass(frozen=True)
class ImbalanceSeries:
    """KV usage imbalance across the ranks at evenly spaced times, as watch and rules judge it: each rank's
    usage averaged over the trailing `window`, then (max - min) / mean over the ranks; 0 where that mean is
    under `min_mean` (nearly idle ranks are not judged)."""

    times: tuple[float, ...]
    values: tuple[float, ...]
    sample_s: float  # the time each sample stands for
    threshold: float = IMBALANCE_WARN
    min_mean: float = IMBALANCE_MIN_MEAN_KV
    window: float = IMBALANCE_WINDOW_S  # seconds, or steps on a step clock

    @property
    def time_above(self) -> float:
        return time_above(self.values, [self.sample_s] * len(self.values), self.threshold)

    @property
    def max(self) -> float:
        return max(self.values, default=0.0)


@dataclass(frozen=True)
class DpResult:
    config: DpConfig
    rule: str
    workload_source: str
    clock: str
    ranks: tuple[SimulationResult, ...]
    routed: tuple[int, ...]  # requests each rank received
    rejected: int
    imbalance: ImbalanceSeries
    first_saturated: RankEvent | None  # requests waiting on a >= 95% full pool
    first_preemption: RankEvent | None
    first_oom: RankEvent | None
    max_dispatch_bytes: int = 0  # lockstep EP: the largest dispatch buffer of a step
    max_dispatch_step: int | None = None
    notes: tuple[str, ...] = field(default=())


def simulate_dp(workload: Workload, config: DpConfig) -> DpResult:
    """Replay `workload` through `config.data_parallel_size` ranks (see the module docstring)."""
    engine = config.engine
    by_steps = workload.clock == STEPS
    if not by_steps and engine.step_time is None:
        raise ValueError("a workload timed in seconds needs a step-time model")
    cfg = engine.scheduler
    interner = KeyInterner() if cfg.enable_prefix_caching else None
    reqs = [
        SimRequest(r.rid, i, r.prompt_tokens, r.output_tokens, r.arrival, r.prefix_ids, interner)
        for i, r in enumerate(workload.requests)
    ]
    n = config.data_parallel_size
    ranks = [RankEngine(k, engine, by_steps) for k in range(n)]
    frontend = Frontend(config.balancer, n, config.api_servers, by_steps, config.ranks_per_node)
    routed = [0] * n
    if config.lockstep:
        rejected, dispatch = _lockstep(reqs, ranks, frontend, routed, config, cfg.max_model_len)
    else:
        rejected = _independent(reqs, ranks, frontend, routed, cfg.max_model_len)
        dispatch = (0, None)
    results = tuple(
        rank.result(workload.source, workload.clock, routed[k], 0) for k, rank in enumerate(ranks)
    )
    notes = [note for rank in ranks for note in rank.notes]
    if rejected:
        notes.append(f"{rejected} request(s) rejected: prompt >= max_model_len {cfg.max_model_len:,}")
    return DpResult(
        config=config,
        rule=frontend.rule,
        workload_source=workload.source,
        clock=workload.clock,
        ranks=results,
        routed=tuple(routed),
        rejected=rejected,
        imbalance=kv_imbalance(results),
        first_saturated=_first(results, _saturated_steps),
        first_preemption=_first(results, lambda r: compress(range(len(r.timeline)), r.timeline.preempted)),
        first_oom=_first(results, lambda r: (r.timeline.step.index(e.step) for e in r.oom_events[:1])),
        max_dispatch_bytes=dispatch[0],
        max_dispatch_step=dispatch[1],
        notes=tuple(notes),
    )


def _independent(
    reqs: list[SimRequest], ranks: list[RankEngine], frontend: Frontend, routed: list[int], max_len: int
) -> int:
    rejected = 0
    for request in reqs:
        at = request.arrival
        if request.prompt_tokens >= max_len:
            rejected += 1  # vLLM InputProcessor, before any engine sees it
            continue
        for rank in ranks:
            rank.advance_to(at)
        k = frontend.route(request.index, at, request.prefix_ids, ranks)
        routed[k] += 1
        ranks[k].add(request, at)
    for rank in ranks:
        rank.advance_to(math.inf)
    return rejected


def _lockstep(
    reqs: list[SimRequest],
    ranks: list[RankEngine],
    frontend: Frontend,
    routed: list[int],
    config: DpConfig,
    max_len: int,
) -> tuple[int, tuple[int, int | None]]:
    """MoE DP: waves of steps taken by every rank together; returns (rejected, (max dispatch bytes, step))."""
    memory = config.lockstep_memory
    engine = config.engine
    max_steps = engine.max_steps or 0
    rejected = 0
    nxt = 0
    now = 0.0
    step = 0
    executed = 0
    max_dispatch, max_dispatch_step = 0, None
    dummy = StepLoad(DUMMY_BATCH_TOKENS, 0, 0, DUMMY_BATCH_TOKENS, 0, 0, 0)
    while True:
        while nxt < len(reqs) and reqs[nxt].arrival <= now:
            request = reqs[nxt]
            nxt += 1
            if request.prompt_tokens >= max_len:
                rejected += 1
                continue
            k = frontend.route(request.index, now, request.prefix_ids, ranks)
            routed[k] += 1
            ranks[k].add(request, now)
        if not any(rank.busy() for rank in ranks):
            if nxt >= len(reqs):
                break
            now = reqs[nxt].arrival  # the wave ended: every engine pauses until the next request
            if engine.step_time is None:
                step = int(now)
            continue
        loads: list[StepLoad | None] = []
        for rank in ranks:
            rank.now, rank.step = now, step
            loads.append(rank.begin_step())
        if all(load is None for load in loads):
            step += 1
            continue
        batches = [load if load is not None else dummy for load in loads]
        duration = max(ranks[0].step_seconds(b) for b in batches)
        padded_to, gathered = (
            memory.gathered_tokens([b.tokens for b in batches]) if memory is not None else (None, 0)
        )
        for rank, load, batch in zip(ranks, loads, batches):
            peak = None
            if memory is not None:
                own = padded_to if padded_to is not None else batch.tokens
                peak = memory.peak_bytes(own, gathered, batch.sampling)
            if load is None:
                rank.idle_step(now, duration, peak or 0)
            else:
                rank.end_step(now, duration, peak)
        if memory is not None:
            dispatch = memory.dispatch_bytes(gathered)
            if dispatch > max_dispatch:
                max_dispatch, max_dispatch_step = dispatch, step
        now += duration
        step += 1
        executed += 1
        if max_steps and executed >= max_steps:
            break
    return rejected, (max_dispatch, max_dispatch_step)


# ---------------------------------------------------------------------------------------------------------
# Across ranks (pure functions of the ranks' results)
# ---------------------------------------------------------------------------------------------------------


def kv_usage_at(result: SimulationResult, times: Sequence[float]) -> list[float]:
    """The rank's KV usage at each of the ascending `times`: that of the step running then, 0 when idle
    (an idle rank holds no request; cached prefix blocks are free in vLLM's usage)."""
    tl = result.timeline
    usable = result.usable_blocks
    out = []
    starts, durations, used = tl.time, tl.duration, tl.kv_blocks_used
    for t in times:
        i = bisect_right(starts, t) - 1  # the last step started by `t`
        if i >= 0 and t < starts[i] + durations[i]:
            out.append(used[i] / usable)
        else:
            out.append(0.0)
    return out


def kv_imbalance(
    results: Sequence[SimulationResult], samples: int = IMBALANCE_SAMPLES, window: float = IMBALANCE_WINDOW_S
) -> ImbalanceSeries:
    """The ranks' KV usage imbalance (see `ImbalanceSeries`) on `samples` points over the simulated span."""
    starts = [r.timeline.time[0] for r in results if len(r.timeline)]
    ends = [r.timeline.time[-1] + r.timeline.duration[-1] for r in results if len(r.timeline)]
    if not starts or len(results) < 2:
        return ImbalanceSeries((), (), 0.0, window=window)
    t0, t1 = min(starts), max(ends)
    count = samples if t1 > t0 else 1
    dt = (t1 - t0) / count if t1 > t0 else 1.0
    times = [t0 + (j + 0.5) * dt for j in range(count)]
    width = max(1, round(window / dt))
    averaged = []
    for result in results:
        usage = kv_usage_at(result, times)
        acc = [0.0]
        for u in usage:
            acc.append(acc[-1] + u)
        averaged.append([(acc[j + 1] - acc[max(0, j + 1 - width)]) / min(j + 1, width) for j in range(count)])
    floor = IMBALANCE_MIN_MEAN_KV * len(results)
    values = tuple(imbalance(column) if sum(column) >= floor else 0.0 for column in zip(*averaged))
    return ImbalanceSeries(tuple(times), values, dt, window=window)


def _saturated_steps(result: SimulationResult) -> list[int]:
    tl = result.timeline
    limit = SATURATED_KV_USAGE * result.usable_blocks
    used = tl.kv_blocks_used
    for i in compress(range(len(tl)), tl.waiting):  # the steps with requests waiting
        if used[i] >= limit:
            return [i]
    return []


def _first(
    results: Sequence[SimulationResult], steps_of: Callable[[SimulationResult], Iterable[int]]
) -> RankEvent | None:
    """The earliest (time, rank) event over the ranks; `steps_of(result)` yields timeline indices."""
    best: RankEvent | None = None
    for k, result in enumerate(results):
        for i in steps_of(result):
            event = RankEvent(k, result.timeline.time[i], result.timeline.step[i])
            if best is None or event.time < best.time:
                best = event
            break
    return best
