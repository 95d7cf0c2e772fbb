"""Replay a workload through the scheduler model, step by step, and collect what each step cost.

The clock is either engine steps (the oracle's workloads: one step per `schedule()` call) or seconds, with
each step lasting what the `StepTimeModel` says for its shape. Requests whose prompt is at least
`max_model_len` are rejected at arrival (vLLM's input validation). A request the pool can never hold (its
whole sequence needs more blocks than exist) would hang vLLM's FCFS queue; here it is dropped and counted as
`unservable` so the rest of the trace still runs.

Per executed step the timeline keeps: time, duration, scheduled tokens, prefill/decode counts, the longest
prefill chunk, running/waiting, KV blocks in use, preemptions, admissions, finishes, and the step's activation
peak (`step_memory`). A step whose peak passes the headroom is an OOM event. Nothing here prints.

Most of a step's requests are plain decodes. With `fast_forward` (the default) the scheduler follows them
as a `DecodeCohort`: per step it only touches the ones that cross a block boundary or finish, and whatever
else runs. When every running request is in the cohort and the waiting queue cannot change that (it is
empty, or its head was just refused and the pool only shrinks), the loop advances the identical steps up to
the next arrival, finish, step whose new blocks would not fit, OOM step or `max_steps` in one call
(`DecodeCohort.run_until`). The timeline still gets one row per step, identical to step-by-step scheduling
(`fast_forward=False` schedules every request every step, for checking).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import compress
from typing import Any

from oomguard.simulation.scheduler import KeyInterner, Scheduler, SchedulerConfig, SimRequest, StepPlan
from oomguard.simulation.step_memory import (
    ActivationModel,
    Row,
    StepMemoryOptions,
    StepShape,
    step_peak_bytes,
)
from oomguard.simulation.step_time import StepTimeModel
from oomguard.simulation.workload import STEPS, Workload

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
    replay = _Replay(workload, config, progress)
    replay.run()
    return replay.result()


class _Replay:
    """One replay's state: the scheduler, the clock, the arrival cursor and the timeline columns. `run` is
    the loop; each phase of a step is its own method."""

    def __init__(self, workload: Workload, config: SimulationConfig, progress: ProgressFn | None) -> None:
        cfg = config.scheduler
        self.workload = workload
        self.config = config
        self.progress = progress
        self.sched = Scheduler(cfg, cohorts=config.fast_forward)
        self.interner = KeyInterner() if cfg.enable_prefix_caching else None
        # A request's scheduling state is made when it arrives: a trace of millions of rows stays in the
        # workload's columns until then (and a --max-steps run never makes the rest).
        self.trace = workload.requests
        self.arrivals = workload.arrivals
        self.reqs: list[SimRequest] = []  # the arrived ones, in arrival order
        self.by_steps = workload.clock == STEPS
        if not self.by_steps and config.step_time is None:
            raise ValueError("a workload timed in seconds needs a step-time model")
        self.usable = cfg.num_gpu_blocks - 1
        self.max_steps = config.max_steps or 0
        self.cols: dict[str, list[Any]] = {c: [] for c in Timeline.COLUMNS}
        self.chunks: list[tuple[tuple[str, int, int], ...]] = []
        self.ooms: list[OomEvent] = []
        self.notes: list[str] = []
        self.rejected = self.unservable = self.finished_count = 0
        self.peak_value = -1
        self.peak_index: int | None = None  # into the timeline
        self.peak_rows: tuple[Row, ...] | None = None
        self.now = 0.0
        self.step = 0
        self.nxt = 0  # index of the next request to arrive
        self.executed = 0
        self.next_progress = 0
        self.steady = False  # the last step decoded every running request and changed nothing else
        self.stop_run = False  # the last decode segment could not go on (not for a finish)
        self._decode_peaks: dict[int, int] = {}  # decode-only steps: requests -> activation peak
        self.stop = False

    # ----- the loop -------------------------------------------------------------------------------------

    def run(self) -> None:
        sched = self.sched
        arrivals = self.arrivals
        n = len(arrivals)
        fast_forward = self.config.fast_forward
        while True:
            arrived = self._take_arrivals()
            if not sched.has_unfinished():
                if self.nxt >= n:
                    break
                self.now = arrivals[self.nxt]  # idle until the next arrival
                if self.by_steps:
                    self.step = int(self.now)
                continue
            # A decode run may start after a steady step, or whenever the queue is empty: nothing can be
            # admitted before the next arrival, and `decode_run` checks that every request is decoding.
            if fast_forward and not arrived and (self.steady or not sched.waiting) and self._decode_run():
                if self._stop_after_step():
                    break
                continue  # an arrival may be due before the next step
            plan = sched.schedule()
            if not plan.num_decodes and not plan.chunks:
                self._nothing_scheduled()
                continue
            self._record_step(plan)
            if self._stop_after_step():
                break
        if self.progress is not None:
            self.progress(self.now, self.executed, self.finished_count, n)

    def _take_arrivals(self) -> bool:
        """Queue every request that has arrived by now; True when one joined the waiting queue."""
        arrivals = self.arrivals
        n = len(arrivals)
        max_len = self.config.scheduler.max_model_len
        arrived = False
        while self.nxt < n and arrivals[self.nxt] <= self.now:
            r = self.trace[self.nxt]
            request = SimRequest(
                r.rid, self.nxt, r.prompt_tokens, r.output_tokens, r.arrival, r.prefix_ids, self.interner
            )
            self.reqs.append(request)
            self.nxt += 1
            if request.prompt_tokens >= max_len:
                self.rejected += 1  # vLLM InputProcessor: the prompt must be shorter than max_model_len
                continue
            self.sched.add_request(request)
            arrived = True
        return arrived

    def _stop_after_step(self) -> bool:
        """Report progress; True when `max_steps` or the first OOM ends the replay."""
        if self.progress is not None and self.executed >= self.next_progress:
            self.progress(self.now, self.executed, self.finished_count, len(self.arrivals))
            self.next_progress = self.executed + PROGRESS_EVERY_STEPS
        if self.max_steps and self.executed >= self.max_steps:
            self.notes.append(f"stopped after --max-steps {self.max_steps}")
            return True
        if self.stop:
            self.notes.append(f"stopped at the first OOM step ({self.step - 1})")
            return True
        return False

    # ----- a run of decode steps ------------------------------------------------------------------------

    def _decode_run(self) -> int:
        """Advance identical decode steps until an arrival, a pool too short for the next blocks, or
        `max_steps`, through the steps where members finish (while the waiting queue is empty: a finish
        frees blocks its head may take); the steps executed (0: none could be, schedule this step)."""
        sched = self.sched
        next_arrival = self.arrivals[self.nxt] if self.nxt < len(self.arrivals) else math.inf
        done = 0
        while True:
            k = self._decode_segment(next_arrival)
            done += k
            if not k or self.stop_run or sched.waiting or self.now >= next_arrival:
                break
            if self.max_steps and self.executed >= self.max_steps:
                break
        if not done:
            self.steady = False
        return done

    def _decode_segment(self, next_arrival: float) -> int:
        """One run of decode steps of the same requests, up to and through a finishing step; sets
        `stop_run` when it could not go on for a reason other than a finish."""
        config = self.config
        sched = self.sched
        self.stop_run = True
        if not sched.decode_run_ready():
            return 0
        cohort = sched.cohort
        assert cohort is not None
        num = cohort.size
        activation = config.activation
        peak = 0
        if activation is not None:
            peak = decode_step_peak(self._decode_peaks, num, activation, config.memory)
            if config.headroom_bytes is not None and peak > config.headroom_bytes:
                return 0  # an OOM step: scheduled on its own, so it is recorded
        rows = cohort.rows_after(cohort.steps) if peak > self.peak_value or config.record_chunks else []
        limit = self.max_steps - self.executed if self.max_steps else 1 << 62
        step_time = None if self.by_steps else config.step_time  # by steps: every step lasts 1
        cols = self.cols
        times, durations = cols["time"], cols["duration"]
        k = cohort.run_until(
            self.now, next_arrival, step_time, limit, times, durations, cols["kv_blocks_used"], True
        )
        if not k:
            return 0
        if peak > self.peak_value:
            self.peak_value, self.peak_index = peak, self.executed
            self.peak_rows = tuple(Row(1, before, True, True) for _, before in rows)
        if config.record_chunks:
            rids = [r.rid for r, _ in rows]
            self.chunks.extend(tuple(zip(rids, [1] * num, [b + j for _, b in rows])) for j in range(k))
        record_decode_run(cols, self.step, k, num, len(sched.waiting), peak)
        self.now = times[-1] + durations[-1]
        self.step += k
        self.executed += k
        if cohort.steps in cohort.finishes:  # the last step finished members: update_from_output's part
            finished = sched.finish_cohort_step(self.now)
            self.cols["finished"][-1] = len(finished)
            self.finished_count += len(finished)
            self.stop_run = False
            self.steady = False  # blocks came back: the waiting queue's head may fit now
        return k

    # ----- one scheduled step ---------------------------------------------------------------------------

    def _nothing_scheduled(self) -> None:
        """A step that scheduled nothing: when nothing runs, the head of the queue never fits this pool."""
        sched = self.sched
        self.steady = False
        if not sched.running and sched.waiting:
            stuck = sched.waiting.popleft()
            self.unservable += 1
            if self.unservable == 1:
                self.notes.append(
                    f"request {stuck.rid} ({stuck.num_tokens:,} tokens) never fits the KV pool of "
                    f"{self.usable:,} blocks; vLLM would hang on it. Dropped, and so is any other such "
                    "request."
                )
        self.step += 1

    def _record_step(self, plan: StepPlan) -> None:
        """Time the scheduled step, judge its memory, run it (`update_from_output`) and record its row."""
        config = self.config
        now = self.now
        tokens = plan.tokens
        num_decodes = plan.num_decodes
        sampling = num_decodes
        prefills = max_prefill = prefill_attn = 0
        for request, k, before in plan.chunks:
            prefills += 1
            max_prefill = max(max_prefill, k)
            prefill_attn += k * (before + k // 2)
            if before + k >= request.num_tokens:
                sampling += 1
        for request in plan.admitted:
            if request.first_scheduled is None:
                request.first_scheduled = now
        if self.by_steps:
            duration = 1.0
        else:
            assert config.step_time is not None
            duration = config.step_time.step_seconds(tokens, plan.decode_context, prefill_attn)
        peak = 0
        if config.activation is not None:
            peak = step_peak_bytes(
                tokens, prefills, max_prefill, num_decodes, sampling, config.activation, config.memory
            )
            self._judge_peak(plan, peak)
        if config.record_chunks:
            self.chunks.append(tuple((r.rid, k, before) for r, k, before in plan.scheduled))
        finished = self.sched.update_from_output(plan, now + duration)
        self.finished_count += len(finished)
        self.steady = is_steady(plan, finished, num_decodes)
        append_step(
            self.cols,
            self.step,
            now,
            duration,
            plan,
            finished,
            peak,
            tokens=tokens,
            num_prefills=prefills,
            num_decodes=num_decodes,
            max_prefill=max_prefill,
        )
        self.executed += 1
        self.now = now + duration
        self.step += 1

    def _judge_peak(self, plan: StepPlan, peak: int) -> None:
        """Keep the highest peak's shape; record an OOM event when the peak passes the headroom."""
        headroom = self.config.headroom_bytes
        over = headroom is not None and peak > headroom
        if peak <= self.peak_value and not over:
            return
        rows = step_rows(plan)
        if peak > self.peak_value:
            self.peak_value, self.peak_index, self.peak_rows = peak, self.executed, rows
        if over:
            assert headroom is not None
            self.ooms.append(
                OomEvent(
                    step=self.step,
                    time=self.now,
                    peak_bytes=peak,
                    headroom_bytes=headroom,
                    shape=StepShape(rows),
                    kv_usage=plan.kv_blocks_used / self.usable,
                    kv_blocks_used=plan.kv_blocks_used,
                )
            )
            if self.config.stop_at_first_oom:
                self.stop = True

    # ----- the result -----------------------------------------------------------------------------------

    def result(self) -> SimulationResult:
        self.sched.dissolve_cohort()
        reqs = self.reqs
        nxt = self.nxt
        done = [r for r in reqs if r.finished_at is not None]
        stats = RequestStats(
            arrived=nxt,
            rejected_too_long=self.rejected,
            unservable=self.unservable,
            finished=len(done),
            queue_times=tuple(r.first_scheduled - r.arrival for r in reqs if r.first_scheduled is not None),
            ttfts=tuple(r.first_token - r.arrival for r in done if r.first_token is not None),
            latencies=tuple(r.finished_at - r.arrival for r in done if r.finished_at is not None),
            output_tokens=sum(r.num_output for r in reqs),
            prompt_tokens=sum(r.prompt_tokens for r in reqs),  # the arrived ones
            prefix_hit_tokens=self.sched.prefix_hits,
            prefix_query_tokens=self.sched.prefix_queries,
        )
        notes = list(self.notes)
        if self.rejected:
            notes.append(
                f"{self.rejected} request(s) rejected: prompt >= max_model_len "
                f"{self.config.scheduler.max_model_len:,}"
            )
        timeline = Timeline(**{c: tuple(self.cols[c]) for c in Timeline.COLUMNS}, chunks=tuple(self.chunks))
        return SimulationResult(
            config=self.config,
            workload_source=self.workload.source,
            clock=self.workload.clock,
            timeline=timeline,
            requests=stats,
            preemptions=self.sched.num_preemptions,
            oom_events=tuple(self.ooms),
            peak_step=self.peak_index,
            peak_shape=StepShape(self.peak_rows) if self.peak_rows is not None else None,
            usable_blocks=self.usable,
            notes=tuple(notes),
        )


def decode_step_peak(
    cache: dict[int, int], num: int, activation: ActivationModel, memory: StepMemoryOptions
) -> int:
    """The activation peak of a step of `num` decodes (memoized per size: decode runs repeat it)."""
    peak = cache.get(num, -1)
    if peak < 0:
        peak = cache[num] = step_peak_bytes(num, 0, 0, num, num, activation, memory)
    return peak


def record_decode_run(
    cols: dict[str, list[Any]], first_step: int, k: int, num: int, waiting: int, peak: int
) -> None:
    """Complete the timeline rows of a run of `k` identical decode steps of `num` requests (its times,
    durations and KV blocks are in already: `DecodeCohort.run_until` appends them)."""
    cols["step"].extend(range(first_step, first_step + k))
    for name, value in (
        ("tokens", num),
        ("num_prefills", 0),
        ("num_decodes", num),
        ("max_prefill", 0),
        ("running", num),
        ("waiting", waiting),
        ("preempted", 0),
        ("admitted", 0),
        ("finished", 0),
        ("peak_bytes", peak),
    ):
        cols[name].extend([value] * k)


def step_rows(plan: StepPlan) -> tuple[Row, ...]:
    """The step's shape, row by row (built only for steps that set a new peak or pass the headroom)."""
    rows = [Row(k, before, False, before + k >= request.num_tokens) for request, k, before in plan.chunks]
    rows.extend(Row(1, before, True, True) for _, before in plan.decode_rows())
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
    get = per_value.get
    for v, w in zip(values, weights):
        per_value[v] = get(v, 0.0) + w
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
    # Only the steps with requests waiting (`compress` skips the rest in C), in order: the same sum.
    limit = SATURATED_KV_USAGE * usable
    saturated = sum(d for d, b in compress(zip(tl.duration, tl.kv_blocks_used), tl.waiting) if b >= limit)
    sim_time = (tl.time[-1] + tl.duration[-1] - tl.time[0]) if len(tl) else 0.0
    busy = sum(tl.duration)
    rs = result.requests
    max_padding = 1.0
    if result.config.activation is not None:
        for k in compress(range(len(tl)), map((1).__lt__, tl.num_prefills)):  # steps with 2+ prefills
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


def is_steady(plan: StepPlan, finished: Sequence[object], num_decodes: int) -> bool:
    """A step in which nothing but decoding happened: the next ones can be fast-forwarded as a decode run."""
    return (
        not plan.chunks
        and not finished
        and not plan.admitted
        and not plan.preempted
        and num_decodes == plan.num_running
    )


def append_step(
    cols: dict[str, list[Any]],
    step: int,
    start: float,
    duration: float,
    plan: StepPlan,
    finished: Sequence[object],
    peak: int,
    *,
    tokens: int,
    num_prefills: int,
    num_decodes: int,
    max_prefill: int,
) -> None:
    """One executed step's row of the timeline's columns (the single-engine replay and every DP rank)."""
    for name, value in (
        ("step", step),
        ("time", start),
        ("duration", duration),
        ("tokens", tokens),
        ("num_prefills", num_prefills),
        ("num_decodes", num_decodes),
        ("max_prefill", max_prefill),
        ("running", plan.num_running),
        ("waiting", plan.num_waiting),
        ("kv_blocks_used", plan.kv_blocks_used),
        ("preempted", len(plan.preempted)),
        ("admitted", len(plan.admitted)),
        ("finished", len(finished)),
        ("peak_bytes", peak),
    ):
        cols[name].append(value)
