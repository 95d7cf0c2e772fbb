"""Replay a workload through the scheduler model, step by step, and collect what each step cost.

The clock is either engine steps (the oracle's workloads: one step per `schedule()` call) or seconds, with
each step lasting what the `StepTimeModel` says for its shape. Requests whose prompt is at least
`max_model_len` are rejected at arrival (vLLM's input validation). A request the pool can never hold (its
whole sequence needs more blocks than exist) would hang vLLM's FCFS queue; here it is dropped and counted as
`unservable` so the rest of the trace still runs.

Per executed step the timeline keeps: time, duration, scheduled tokens, prefill/decode counts, the longest
prefill chunk, running/waiting, KV blocks in use, preemptions, admissions, finishes, and the step's activation
peak (`step_memory`). A step whose peak passes the headroom is an OOM event. Nothing here prints.

Most steps of a long trace repeat the one before: every running request decodes one token, nothing arrives,
finishes, is admitted or preempted. After such a step the loop hands the next ones to
`Scheduler.decode_run`, which advances them without re-scheduling every request and replays only the KV
events (a request needing a new block) in vLLM's order; the timeline still gets one row per step, identical
to step-by-step scheduling (`fast_forward=False` does that, for checking). The run stops before an arrival,
a finish, a step whose new blocks would not fit, an OOM step, or `max_steps`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from oomguard.simulate.scheduler import KeyInterner, Scheduler, SchedulerConfig, SimRequest, StepPlan
from oomguard.simulate.step_memory import ActivationModel, Row, StepMemoryOptions, StepShape, step_peak_bytes
from oomguard.simulate.step_time import StepTimeModel
from oomguard.simulate.workload import STEPS, Workload

SATURATED_KV_USAGE = 0.95  # "saturated": requests wait while the pool is at least this full


@dataclass(frozen=True)
class SimulationConfig:
    scheduler: SchedulerConfig
    activation: ActivationModel | None = None  # None: no step memory (the scheduler alone)
    memory: StepMemoryOptions = field(default_factory=StepMemoryOptions)
    headroom_bytes: int | None = None
    step_time: StepTimeModel | None = None
    record_chunks: bool = False
    max_steps: int | None = None
    fast_forward: bool = True  # advance runs of identical decode steps together (same timeline)
    stop_at_first_oom: bool = False  # a fix search only needs to know that a setting fails


@dataclass(frozen=True)
class OomEvent:
    step: int
    time: float
    peak_bytes: int
    headroom_bytes: int
    shape: StepShape
    kv_usage: float
    kv_blocks_used: int


@dataclass(frozen=True)
class Timeline:
    """One entry per executed step, as columns."""

    step: tuple[int, ...]
    time: tuple[float, ...]
    duration: tuple[float, ...]
    tokens: tuple[int, ...]
    num_prefills: tuple[int, ...]
    num_decodes: tuple[int, ...]
    max_prefill: tuple[int, ...]
    running: tuple[int, ...]
    waiting: tuple[int, ...]
    kv_blocks_used: tuple[int, ...]
    preempted: tuple[int, ...]
    admitted: tuple[int, ...]
    finished: tuple[int, ...]
    peak_bytes: tuple[int, ...]
    chunks: tuple[tuple[tuple[str, int, int], ...], ...] = ()

    COLUMNS = (
        "step",
        "time",
        "duration",
        "tokens",
        "num_prefills",
        "num_decodes",
        "max_prefill",
        "running",
        "waiting",
        "kv_blocks_used",
        "preempted",
        "admitted",
        "finished",
        "peak_bytes",
    )

    def __len__(self) -> int:
        return len(self.step)


@dataclass(frozen=True)
class RequestStats:
    arrived: int
    rejected_too_long: int
    unservable: int
    finished: int
    queue_times: tuple[float, ...]  # arrival -> first scheduled
    ttfts: tuple[float, ...]  # arrival -> first token
    latencies: tuple[float, ...]  # arrival -> finished
    output_tokens: int
    prompt_tokens: int
    prefix_hit_tokens: int
    prefix_query_tokens: int


@dataclass(frozen=True)
class SimulationResult:
    config: SimulationConfig
    workload_source: str
    clock: str
    timeline: Timeline
    requests: RequestStats
    preemptions: int
    oom_events: tuple[OomEvent, ...]
    peak_step: int | None  # index into the timeline of the highest activation peak
    peak_shape: StepShape | None
    usable_blocks: int
    notes: tuple[str, ...] = field(default=())

    @property
    def steps(self) -> int:
        return len(self.timeline)


ProgressFn = Callable[[float, int, int, int], None]  # (clock, steps, requests done, requests total)
PROGRESS_EVERY_STEPS = 2000


def simulate(
    workload: Workload, config: SimulationConfig, progress: ProgressFn | None = None
) -> SimulationResult:
    """Replay `workload` step by step (see the module docstring). Runs of identical decode steps go through
    `Scheduler.decode_run` unless `config.fast_forward` is off; the timeline is the same either way."""
    cfg = config.scheduler
    sched = Scheduler(cfg)
    interner = KeyInterner() if cfg.enable_prefix_caching else None
    reqs = [
        SimRequest(r.rid, i, r.prompt_tokens, r.output_tokens, r.arrival, r.prefix_ids, interner)
        for i, r in enumerate(workload.requests)
    ]
    by_clock_steps = workload.clock == STEPS
    step_time = config.step_time
    if not by_clock_steps and step_time is None:
        raise ValueError("a workload timed in seconds needs a step-time model")
    activation = config.activation
    mem_opts = config.memory
    headroom = config.headroom_bytes
    usable = cfg.num_gpu_blocks - 1
    max_len = cfg.max_model_len
    record_chunks = config.record_chunks
    max_steps = config.max_steps or 0

    c_step: list[int] = []
    c_time: list[float] = []
    c_dur: list[float] = []
    c_tok: list[int] = []
    c_np: list[int] = []
    c_nd: list[int] = []
    c_mp: list[int] = []
    c_run: list[int] = []
    c_wait: list[int] = []
    c_kv: list[int] = []
    c_pre: list[int] = []
    c_adm: list[int] = []
    c_fin: list[int] = []
    c_peak: list[int] = []
    chunks: list[tuple[tuple[str, int, int], ...]] = []
    ooms: list[OomEvent] = []
    notes: list[str] = []
    rejected = unservable = 0
    finished_count = 0
    peak_value, peak_index = -1, None
    peak_rows: tuple[Row, ...] | None = None

    now = 0.0
    step = 0
    nxt = 0
    n = len(reqs)
    executed = 0
    next_progress = 0
    steady = False  # the last step decoded every running request and changed nothing else
    stop = False
    while True:
        arrived = False
        while nxt < n and reqs[nxt].arrival <= now:
            request = reqs[nxt]
            nxt += 1
            if request.prompt_tokens >= max_len:
                rejected += 1  # vLLM InputProcessor: the prompt must be shorter than max_model_len
                continue
            sched.add_request(request)
            arrived = True
        if not sched.has_unfinished():
            if nxt >= n:
                break
            now = reqs[nxt].arrival  # idle until the next arrival
            if by_clock_steps:
                step = int(now)
            continue

        if steady and not arrived and config.fast_forward:
            # Identical decode steps until an arrival, a finish, or a pool too short for the next blocks.
            limit = max_steps - executed if max_steps else 1 << 62
            drun = sched.decode_run(limit)
            num = drun.num_requests if drun is not None else 0
            peak = step_peak_bytes(num, 0, 0, num, num, activation, mem_opts) if activation is not None else 0
            if drun is not None and (headroom is None or peak <= headroom):
                base = [(r.rid, r.num_computed) for r in drun.requests] if record_chunks else []
                first = executed
                while nxt >= n or reqs[nxt].arrival > now:
                    context = drun.decode_context
                    if not drun.advance():
                        break
                    if by_clock_steps:
                        duration = 1.0
                    else:
                        assert step_time is not None
                        duration = step_time.step_seconds(num, context, 0)
                    c_step.append(step)
                    c_time.append(now)
                    c_dur.append(duration)
                    c_kv.append(sched.kv.num_used)
                    if record_chunks:
                        j = drun.steps - 1
                        chunks.append(tuple((rid, 1, before + j) for rid, before in base))
                    now += duration
                    step += 1
                    executed += 1
                drun.close()
                k = executed - first
                if k:
                    for column, value in (
                        (c_tok, num),
                        (c_np, 0),
                        (c_nd, num),
                        (c_mp, 0),
                        (c_run, num),
                        (c_wait, len(sched.waiting)),
                        (c_pre, 0),
                        (c_adm, 0),
                        (c_fin, 0),
                        (c_peak, peak),
                    ):
                        column.extend([value] * k)
                    if progress is not None and executed >= next_progress:
                        progress(now, executed, finished_count, n)
                        next_progress = executed + PROGRESS_EVERY_STEPS
                    if max_steps and executed >= max_steps:
                        notes.append(f"stopped after --max-steps {max_steps}")
                        break
                    continue  # an arrival may be due before the next step

        plan = sched.schedule()
        decodes = plan.decodes
        rows_chunks = plan.chunks
        if not decodes and not rows_chunks:
            steady = False
            if not sched.running and sched.waiting:
                # Nothing runs and the head of the queue cannot be admitted: it never fits this pool.
                stuck = sched.waiting.popleft()
                unservable += 1
                if unservable == 1:
                    notes.append(
                        f"request {stuck.rid} ({stuck.num_tokens:,} tokens) never fits the KV pool of "
                        f"{usable:,} blocks; vLLM would hang on it. Dropped, and so is any other such "
                        "request."
                    )
            step += 1
            continue

        tokens = plan.tokens
        num_decodes = len(decodes)
        sampling = num_decodes
        prefills = max_prefill = prefill_attn = 0
        for request, k, before in rows_chunks:
            prefills += 1
            max_prefill = max(max_prefill, k)
            prefill_attn += k * (before + k // 2)
            if before + k >= request.num_tokens:
                sampling += 1
        for request in plan.admitted:
            if request.first_scheduled is None:
                request.first_scheduled = now
        if by_clock_steps:
            duration = 1.0
        else:
            assert step_time is not None
            duration = step_time.step_seconds(tokens, plan.decode_context, prefill_attn)
        peak = 0
        if activation is not None:
            peak = step_peak_bytes(tokens, prefills, max_prefill, num_decodes, sampling, activation, mem_opts)
            over = headroom is not None and peak > headroom
            if peak > peak_value or over:
                rows = _rows(plan)
                if peak > peak_value:
                    peak_value, peak_index, peak_rows = peak, executed, rows
                if over:
                    assert headroom is not None
                    ooms.append(
                        OomEvent(
                            step=step,
                            time=now,
                            peak_bytes=peak,
                            headroom_bytes=headroom,
                            shape=StepShape(rows),
                            kv_usage=plan.kv_blocks_used / usable,
                            kv_blocks_used=plan.kv_blocks_used,
                        )
                    )
                    if config.stop_at_first_oom:
                        stop = True
        if record_chunks:
            chunks.append(tuple((r.rid, k, before) for r, k, before in plan.scheduled))
        finished = sched.update_from_output(plan, now + duration)
        finished_count += len(finished)
        steady = (
            not rows_chunks
            and not finished
            and not plan.admitted
            and not plan.preempted
            and num_decodes == plan.num_running
        )
        c_step.append(step)
        c_time.append(now)
        c_dur.append(duration)
        c_tok.append(tokens)
        c_np.append(prefills)
        c_nd.append(num_decodes)
        c_mp.append(max_prefill)
        c_run.append(plan.num_running)
        c_wait.append(plan.num_waiting)
        c_kv.append(plan.kv_blocks_used)
        c_pre.append(len(plan.preempted))
        c_adm.append(len(plan.admitted))
        c_fin.append(len(finished))
        c_peak.append(peak)
        executed += 1
        now += duration
        step += 1
        if progress is not None and executed >= next_progress:
            progress(now, executed, finished_count, n)
            next_progress = executed + PROGRESS_EVERY_STEPS
        if max_steps and executed >= max_steps:
            notes.append(f"stopped after --max-steps {max_steps}")
            break
        if stop:
            notes.append(f"stopped at the first OOM step ({step - 1})")
            break
    if progress is not None:
        progress(now, executed, finished_count, n)

    done = [r for r in reqs if r.finished_at is not None]
    queue_times = tuple(r.first_scheduled - r.arrival for r in reqs if r.first_scheduled is not None)
    ttfts = tuple(r.first_token - r.arrival for r in done if r.first_token is not None)
    latencies = tuple(r.finished_at - r.arrival for r in done if r.finished_at is not None)
    stats = RequestStats(
        arrived=nxt,
        rejected_too_long=rejected,
        unservable=unservable,
        finished=len(done),
        queue_times=queue_times,
        ttfts=ttfts,
        latencies=latencies,
        output_tokens=sum(r.num_output for r in reqs),
        prompt_tokens=sum(r.prompt_tokens for r in reqs[:nxt]),
        prefix_hit_tokens=sched.prefix_hits,
        prefix_query_tokens=sched.prefix_queries,
    )
    if rejected:
        notes.append(f"{rejected} request(s) rejected: prompt >= max_model_len {max_len:,}")
    timeline = Timeline(
        step=tuple(c_step),
        time=tuple(c_time),
        duration=tuple(c_dur),
        tokens=tuple(c_tok),
        num_prefills=tuple(c_np),
        num_decodes=tuple(c_nd),
        max_prefill=tuple(c_mp),
        running=tuple(c_run),
        waiting=tuple(c_wait),
        kv_blocks_used=tuple(c_kv),
        preempted=tuple(c_pre),
        admitted=tuple(c_adm),
        finished=tuple(c_fin),
        peak_bytes=tuple(c_peak),
        chunks=tuple(chunks),
    )
    return SimulationResult(
        config=config,
        workload_source=workload.source,
        clock=workload.clock,
        timeline=timeline,
        requests=stats,
        preemptions=sched.num_preemptions,
        oom_events=tuple(ooms),
        peak_step=peak_index,
        peak_shape=StepShape(peak_rows) if peak_rows is not None else None,
        usable_blocks=usable,
        notes=tuple(notes),
    )


def _rows(plan: StepPlan) -> tuple[Row, ...]:
    """The step's shape, row by row (built only for steps that set a new peak or pass the headroom)."""
    rows = [Row(k, before, False, before + k >= request.num_tokens) for request, k, before in plan.chunks]
    rows.extend(Row(1, request.num_computed - 1, True, True) for request in plan.decodes)
    return tuple(rows)


# ---------------------------------------------------------------------------------------------------------
# Summary numbers (pure functions of a result)
# ---------------------------------------------------------------------------------------------------------


def weighted_percentiles(
    values: Sequence[float], weights: Sequence[float] | None, qs: Sequence[float]
) -> tuple[float, ...]:
    """The q-quantiles (each q in 0..1) of `values`, each value counted `weights` times (all 1 when None):
    the smallest value whose cumulative weight reaches q x the total."""
    if not values:
        return tuple(math.nan for _ in qs)
    if weights is None:
        ordered = sorted(values)
        n = len(ordered)
        return tuple(ordered[min(n - 1, max(0, math.ceil(q * n) - 1))] for q in qs)
    # A timeline has few distinct values and many steps: add up the weight per value, then sort those.
    per_value: dict[float, float] = {}
    for v, w in zip(values, weights):
        per_value[v] = per_value.get(v, 0.0) + w
    ordered = sorted(per_value)
    total = math.fsum(per_value.values())
    out: list[float] = []
    for q in qs:
        if total <= 0:
            out.append(ordered[-1])
            continue
        target = q * total
        acc = 0.0
        chosen = ordered[-1]
        for v in ordered:
            acc += per_value[v]
            if acc >= target:
                chosen = v
                break
        out.append(chosen)
    return tuple(out)


@dataclass(frozen=True)
class Summary:
    steps: int
    preemptions: int
    max_kv_blocks_used: int
    max_running: int
    usable_blocks: int
    kv_usage_p50: float
    kv_usage_p99: float
    kv_usage_max: float
    time_saturated: float
    simulated_time: float
    queue_p99: float
    ttft_p50: float
    ttft_p99: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    max_padding_ratio: float
    peak_bytes: int
    peak_step: int | None
    peak_shape: str | None
    oom_events: int
    first_oom_time: float | None
    prefix_hit_rate: float | None
    requests: int
    finished: int
    rejected: int
    unservable: int
    clock: str


def summarize(result: SimulationResult) -> Summary:
    tl = result.timeline
    usable = result.usable_blocks
    weights = tl.duration if result.clock != STEPS else None
    kv_p50, kv_p99 = (b / usable for b in weighted_percentiles(tl.kv_blocks_used, weights, (0.50, 0.99)))
    ttft_p50, ttft_p99 = weighted_percentiles(result.requests.ttfts, None, (0.50, 0.99))
    saturated = sum(
        d
        for d, w, b in zip(tl.duration, tl.waiting, tl.kv_blocks_used)
        if w > 0 and b >= SATURATED_KV_USAGE * usable
    )
    sim_time = (tl.time[-1] + tl.duration[-1] - tl.time[0]) if len(tl) else 0.0
    busy = sum(tl.duration)
    rs = result.requests
    max_padding = 1.0
    if result.config.activation is not None:
        for k in range(len(tl)):
            p = tl.num_prefills[k]
            if p > 1:
                # padded rows / real rows of the prefill part, from the step's columns
                real = tl.tokens[k] - tl.num_decodes[k]
                if real > 0:
                    max_padding = max(max_padding, p * tl.max_prefill[k] / real)
    peak_idx = result.peak_step
    return Summary(
        steps=len(tl),
        preemptions=result.preemptions,
        max_kv_blocks_used=max(tl.kv_blocks_used, default=0),
        max_running=max(tl.running, default=0),
        usable_blocks=usable,
        kv_usage_p50=kv_p50,
        kv_usage_p99=kv_p99,
        kv_usage_max=max(tl.kv_blocks_used, default=0) / usable,
        time_saturated=saturated,
        simulated_time=sim_time,
        queue_p99=weighted_percentiles(rs.queue_times, None, (0.99,))[0],
        ttft_p50=ttft_p50,
        ttft_p99=ttft_p99,
        output_tokens_per_s=rs.output_tokens / busy if busy else 0.0,
        total_tokens_per_s=sum(tl.tokens) / busy if busy else 0.0,
        max_padding_ratio=max_padding,
        peak_bytes=tl.peak_bytes[peak_idx] if peak_idx is not None else 0,
        peak_step=tl.step[peak_idx] if peak_idx is not None else None,
        peak_shape=result.peak_shape.describe() if result.peak_shape is not None else None,
        oom_events=len(result.oom_events),
        first_oom_time=result.oom_events[0].time if result.oom_events else None,
        prefix_hit_rate=(rs.prefix_hit_tokens / rs.prefix_query_tokens) if rs.prefix_query_tokens else None,
        requests=rs.arrived,
        finished=rs.finished,
        rejected=rs.rejected_too_long,
        unservable=rs.unservable,
        clock=result.clock,
    )
