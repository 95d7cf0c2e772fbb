"""Replay a workload through the scheduler model, step by step, and collect what each step cost.

The clock is either engine steps (the oracle's workloads: one step per `schedule()` call) or seconds, with
each step lasting what the `StepTimeModel` says for its shape. Requests whose prompt is at least
`max_model_len` are rejected at arrival (vLLM's input validation). A request the pool can never hold (its
whole sequence needs more blocks than exist) would hang vLLM's FCFS queue; here it is dropped and counted as
`unservable` so the rest of the trace still runs.

Per executed step the timeline keeps: time, duration, scheduled tokens, prefill/decode counts, the longest
prefill chunk, running/waiting, KV blocks in use, preemptions, admissions, finishes, and the step's activation
peak (`step_memory`). A step whose peak passes the headroom is an OOM event. Nothing here prints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from oomguard.simulate.scheduler import KeyInterner, Scheduler, SchedulerConfig, SimRequest
from oomguard.simulate.step_memory import ModelWidths, Row, StepMemoryOptions, StepShape, step_peak_bytes
from oomguard.simulate.step_time import StepTimeModel
from oomguard.simulate.workload import STEPS, Workload

SATURATED_KV_USAGE = 0.95  # "saturated": requests wait while the pool is at least this full


@dataclass(frozen=True)
class SimulationConfig:
    scheduler: SchedulerConfig
    widths: ModelWidths | None = None
    memory: StepMemoryOptions = StepMemoryOptions()
    headroom_bytes: int | None = None
    step_time: StepTimeModel | None = None
    record_chunks: bool = False
    max_steps: int | None = None


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

    COLUMNS = ("step", "time", "duration", "tokens", "num_prefills", "num_decodes", "max_prefill", "running",
               "waiting", "kv_blocks_used", "preempted", "admitted", "finished", "peak_bytes")

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


def simulate(workload: Workload, config: SimulationConfig, progress: ProgressFn | None = None) -> SimulationResult:
    cfg = config.scheduler
    sched = Scheduler(cfg)
    interner = KeyInterner() if cfg.enable_prefix_caching else None
    reqs = [SimRequest(r.rid, i, r.prompt_tokens, r.output_tokens, r.arrival, r.prefix_ids, interner)
            for i, r in enumerate(workload.requests)]
    by_clock_steps = workload.clock == STEPS
    step_time = config.step_time
    if not by_clock_steps and step_time is None:
        raise ValueError("a workload timed in seconds needs a step-time model")
    widths = config.widths
    mem_opts = config.memory
    headroom = config.headroom_bytes
    usable = cfg.num_gpu_blocks - 1
    max_len = cfg.max_model_len

    cols: dict[str, list] = {c: [] for c in Timeline.COLUMNS}
    c_step, c_time, c_dur, c_tok = cols["step"], cols["time"], cols["duration"], cols["tokens"]
    c_np, c_nd, c_mp, c_run = cols["num_prefills"], cols["num_decodes"], cols["max_prefill"], cols["running"]
    c_wait, c_kv, c_pre, c_adm = cols["waiting"], cols["kv_blocks_used"], cols["preempted"], cols["admitted"]
    c_fin, c_peak = cols["finished"], cols["peak_bytes"]
    chunks: list[tuple[tuple[str, int, int], ...]] = []
    ooms: list[OomEvent] = []
    notes: list[str] = []
    rejected = unservable = 0
    done: list[SimRequest] = []
    peak_value, peak_index, peak_rows = -1, None, None

    now = 0.0
    step = 0
    nxt = 0
    n = len(reqs)
    executed = 0
    next_progress = 0
    while True:
        while nxt < n and reqs[nxt].arrival <= now:
            request = reqs[nxt]
            nxt += 1
            if request.prompt_tokens >= max_len:
                rejected += 1  # vLLM InputProcessor: the prompt must be shorter than max_model_len
                continue
            sched.add_request(request)
        if not sched.has_unfinished():
            if nxt >= n:
                break
            now = reqs[nxt].arrival  # idle until the next arrival
            if by_clock_steps:
                step = int(now)
            continue

        plan = sched.schedule()
        scheduled = plan.scheduled
        if not scheduled:
            if not sched.running and sched.waiting:
                # Nothing runs and the head of the queue cannot be admitted: it never fits this pool.
                stuck = sched.waiting.popleft()
                unservable += 1
                if unservable == 1:
                    notes.append(f"request {stuck.rid} ({stuck.num_tokens:,} tokens) never fits the KV pool of "
                                 f"{usable:,} blocks; vLLM would hang on it. Dropped, and so is any other such request.")
            step += 1
            continue

        tokens = 0
        prefills = decodes = sampling = 0
        max_prefill = 0
        decode_ctx = 0
        prefill_attn = 0
        rows: list[tuple[int, int, bool, bool]] | None = [] if widths is not None else None
        for request, k, before in scheduled:
            tokens += k
            total = request.prompt_tokens + request.num_output
            samples = request.num_computed >= total
            if samples:
                sampling += 1
            if k == 1 and request.num_output > 0 and before == total - 1:
                decodes += 1
                decode_ctx += before
                is_decode = True
            else:
                prefills += 1
                max_prefill = max(max_prefill, k)
                prefill_attn += k * (before + k // 2)
                is_decode = False
            if rows is not None:
                rows.append((k, before, is_decode, samples))
        for request in plan.admitted:
            if request.first_scheduled is None:
                request.first_scheduled = now
        if by_clock_steps:
            duration = 1.0
        else:
            assert step_time is not None
            duration = step_time.step_seconds(tokens, decode_ctx, prefill_attn)
        peak = 0
        if widths is not None:
            peak = step_peak_bytes(tokens, prefills, max_prefill, decodes, sampling, widths, mem_opts)
            if peak > peak_value:
                peak_value, peak_index, peak_rows = peak, executed, rows
            if headroom is not None and peak > headroom:
                ooms.append(OomEvent(
                    step=step, time=now, peak_bytes=peak, headroom_bytes=headroom,
                    shape=_shape(rows), kv_usage=plan.kv_blocks_used / usable, kv_blocks_used=plan.kv_blocks_used,
                ))
        finished = sched.update_from_output(plan, now + duration)
        if finished:
            done.extend(finished)
        c_step.append(step)
        c_time.append(now)
        c_dur.append(duration)
        c_tok.append(tokens)
        c_np.append(prefills)
        c_nd.append(decodes)
        c_mp.append(max_prefill)
        c_run.append(plan.num_running)
        c_wait.append(plan.num_waiting)
        c_kv.append(plan.kv_blocks_used)
        c_pre.append(len(plan.preempted))
        c_adm.append(len(plan.admitted))
        c_fin.append(len(finished))
        c_peak.append(peak)
        if config.record_chunks:
            chunks.append(tuple((r.rid, k, before) for r, k, before in scheduled))
        executed += 1
        now += duration
        step += 1
        if progress is not None and executed >= next_progress:
            progress(now, executed, len(done), n)
            next_progress = executed + 2000
        if config.max_steps and executed >= config.max_steps:
            notes.append(f"stopped after --max-steps {config.max_steps}")
            break
    if progress is not None:
        progress(now, executed, len(done), n)

    arrived = sum(1 for r in reqs[:nxt])
    queue_times = tuple(r.first_scheduled - r.arrival for r in reqs if r.first_scheduled is not None)
    ttfts = tuple(r.first_token - r.arrival for r in done if r.first_token is not None)
    latencies = tuple(r.finished_at - r.arrival for r in done if r.finished_at is not None)
    stats = RequestStats(
        arrived=arrived, rejected_too_long=rejected, unservable=unservable, finished=len(done),
        queue_times=queue_times, ttfts=ttfts, latencies=latencies,
        output_tokens=sum(r.num_output for r in reqs), prompt_tokens=sum(r.prompt_tokens for r in reqs[:nxt]),
        prefix_hit_tokens=sched.prefix_hits, prefix_query_tokens=sched.prefix_queries,
    )
    if rejected:
        notes.append(f"{rejected} request(s) rejected: prompt >= max_model_len {max_len:,}")
    timeline = Timeline(**{c: tuple(v) for c, v in cols.items()}, chunks=tuple(chunks))
    return SimulationResult(
        config=config, workload_source=workload.source, clock=workload.clock, timeline=timeline,
        requests=stats, preemptions=sched.num_preemptions, oom_events=tuple(ooms),
        peak_step=peak_index, peak_shape=_shape(peak_rows) if peak_rows is not None else None,
        usable_blocks=usable, notes=tuple(notes),
    )


def _shape(rows: Sequence[tuple[int, int, bool, bool]] | None) -> StepShape:
    return StepShape(tuple(Row(k, ctx, dec, smp) for k, ctx, dec, smp in rows or ()))


# ---------------------------------------------------------------------------------------------------------
# Summary numbers (pure functions of a result)
# ---------------------------------------------------------------------------------------------------------


def weighted_percentile(values: Sequence[float], weights: Sequence[float] | None, q: float) -> float:
    """The q-quantile (0..1) of `values`, each counted `weights` times (all 1 when None)."""
    if not values:
        return math.nan
    if weights is None:
        ordered = sorted(values)
        k = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
        return ordered[k]
    pairs = sorted(zip(values, weights))
    total = sum(w for _, w in pairs)
    if total <= 0:
        return pairs[-1][0]
    target = q * total
    acc = 0.0
    for v, w in pairs:
        acc += w
        if acc >= target:
            return v
    return pairs[-1][0]


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
    usage = [b / usable for b in tl.kv_blocks_used]
    saturated = sum(d for d, w, b in zip(tl.duration, tl.waiting, tl.kv_blocks_used)
                    if w > 0 and b >= SATURATED_KV_USAGE * usable)
    sim_time = (tl.time[-1] + tl.duration[-1] - tl.time[0]) if len(tl) else 0.0
    busy = sum(tl.duration)
    rs = result.requests
    max_padding = 1.0
    if result.config.widths is not None:
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
        kv_usage_p50=weighted_percentile(usage, weights, 0.50),
        kv_usage_p99=weighted_percentile(usage, weights, 0.99),
        kv_usage_max=max(usage, default=0.0),
        time_saturated=saturated,
        simulated_time=sim_time,
        queue_p99=weighted_percentile(rs.queue_times, None, 0.99),
        ttft_p50=weighted_percentile(rs.ttfts, None, 0.50),
        ttft_p99=weighted_percentile(rs.ttfts, None, 0.99),
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
