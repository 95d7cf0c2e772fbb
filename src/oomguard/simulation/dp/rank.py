"""One data-parallel rank: the single-engine scheduler with its own KV pool, stepped from outside.

`oomguard.simulation.run.simulate` owns its clock and its arrivals. A DP rank does not: the balancer hands
it requests one at a time, and it must be advanced exactly up to the moment of each hand-off (every step
that starts before the request arrives, none after), so that the request joins the rank's waiting queue at
the step boundary where vLLM's engine would pick it up. `RankEngine` is that loop body, resumable:

- `advance_to(t)` runs the rank's own steps (independent DP ranks: dense models, each engine on its own
  clock) that start before `t`, runs of identical decode steps together (`DecodeCohort.run_until`); the
  decoding requests stay one cohort across calls, so cutting a run at an arrival elsewhere costs nothing.
- `begin_step` / `end_step` run one step whose start and length the caller sets (lockstep DP ranks: MoE
  models step together, see `dp.run`); `begin_step` returns None when the rank has nothing to schedule.
  The scheduler's decode cohort makes each such step cost what is not a plain decode.

Per step the rank records the same timeline columns as the single-engine simulator, so each rank's result
is a `SimulationResult` that every single-engine summary and renderer reads as it is.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oomguard.simulation.run import (
    OomEvent,
    RequestStats,
    SimulationConfig,
    SimulationResult,
    Timeline,
    append_step,
    decode_step_peak,
    is_steady,
    record_decode_run,
    step_rows,
)
from oomguard.simulation.scheduler import Scheduler, SimRequest, StepPlan
from oomguard.simulation.step_memory import Row, StepShape, step_peak_bytes

DUMMY_ROWS = (Row(1, 0, True, False),)  # vLLM's dummy batch: one token, nothing sampled


@dataclass(frozen=True)
class StepLoad:
    """What one rank's step schedules, for the lockstep memory model and the step time."""

    tokens: int
    prefills: int
    max_prefill: int
    decodes: int
    sampling: int
    decode_context: int
    prefill_attention: int


class RankEngine:
    """A DP rank's scheduler, clock and timeline (see the module docstring)."""

    def __init__(self, index: int, config: SimulationConfig, by_steps: bool) -> None:
        self.index = index
        self.config = config
        self.sched = Scheduler(config.scheduler, cohorts=config.fast_forward)
        self.by_steps = by_steps
        self.now = 0.0
        self.step = 0
        self.usable = config.scheduler.num_gpu_blocks - 1
        self.cols: dict[str, list[Any]] = {c: [] for c in Timeline.COLUMNS}
        cols = self.cols
        self._published_cols = tuple(
            cols[c] for c in ("time", "kv_blocks_used", "waiting", "running", "duration", "finished")
        )
        self.ooms: list[OomEvent] = []
        self.notes: list[str] = []
        self.peak_value = -1
        self.peak_index: int | None = None
        self.peak_rows: tuple[Row, ...] | None = None
        self.requests: list[SimRequest] = []
        self.finish_times: list[float] = []  # in the order requests finished
        self.finished: list[SimRequest] = []
        self.unservable = 0
        self.steady = False
        self._decode_peaks: dict[int, int] = {}  # decode-only steps: requests -> activation peak
        self._pending: StepPlan | None = None
        # The peak of the decode run cut at the last `advance_to` bound, while nothing else happened since:
        # the next call resumes it without checking it again (other ranks' arrivals cut runs often).
        self._resume_peak: int | None = None

    # ----- requests -------------------------------------------------------------------------------------

    def add(self, request: SimRequest, at: float) -> None:
        """The balancer chose this rank for `request` at time `at` (the rank has run every step before)."""
        if not self.sched.has_unfinished():
            self.now = max(self.now, at)
            if self.by_steps:
                self.step = int(self.now)
        self.sched.add_request(request)
        self.requests.append(request)
        self.steady = False
        self._resume_peak = None

    def busy(self) -> bool:
        return self.sched.has_unfinished()

    def in_flight(self, at: float) -> int:
        """Requests given to this rank that had not finished by `at`."""
        return len(self.requests) - bisect_right(self.finish_times, at)

    def published(self, at: float) -> tuple[int, int, float]:
        """(waiting, running, KV usage) as the rank last published them before `at`: the counts of the last
        step that started at or before `at` (vLLM publishes at every step start), or the idle state after
        it."""
        times, kv_used, waiting, running, durations, finished = self._published_cols
        i = bisect_right(times, at) - 1
        if i < 0:
            return 0, 0, 0.0
        if times[i] + durations[i] <= at:  # published again after the step: finished ones gone
            return int(waiting[i]), int(running[i]) - int(finished[i]), kv_used[i] / self.usable
        return int(waiting[i]), int(running[i]), kv_used[i] / self.usable

    # ----- independent stepping -------------------------------------------------------------------------

    def advance_to(self, t: float) -> None:
        """Run every step of this rank that starts before `t`."""
        if self._resume_peak is not None and self.now < t:
            self._advance_run(t)  # the decode run cut at the last bound goes on
        while self.now < t and self.sched.has_unfinished():
            # As in `run.simulate`: after a steady step, or whenever the queue is empty.
            may_run = self.config.fast_forward and (self.steady or not self.sched.waiting)
            if may_run and self._advance_run(t):
                continue
            load = self.begin_step()
            if load is None:
                self.step += 1
                continue
            self.end_step(self.now, self.step_seconds(load))

    def step_seconds(self, load: StepLoad) -> float:
        if self.by_steps:
            return 1.0
        step_time = self.config.step_time
        assert step_time is not None, "a workload timed in seconds needs a step-time model"
        return step_time.step_seconds(load.tokens, load.decode_context, load.prefill_attention)

    def _advance_run(self, t: float) -> bool:
        """Run the identical decode steps that start before `t` (`DecodeCohort.run_until`), through the steps
        where members finish while the waiting queue is empty (as `run.simulate` does); False when none
        could run here."""
        ran = False
        while True:
            k, finished = self._advance_segment(t)
            ran = ran or k > 0
            if not finished or self.sched.waiting or self.now >= t:
                break
        if not ran:
            self.steady = False
        return ran

    def _advance_segment(self, t: float) -> tuple[int, bool]:
        """One run of decode steps of the same requests, up to and through a finishing step: the steps run,
        and whether the last one finished members."""
        sched = self.sched
        cohort = sched.cohort
        peak = self._resume_peak
        self._resume_peak = None
        rows: list[tuple[SimRequest, int]] = []
        if peak is None:
            if not sched.decode_run_ready():
                return 0, False
            assert cohort is not None
            peak = 0
            act = self.config.activation
            if act is not None:
                peak = decode_step_peak(self._decode_peaks, cohort.size, act, self.config.memory)
                headroom = self.config.headroom_bytes
                if headroom is not None and peak > headroom:
                    return 0, False
            if peak > self.peak_value:
                rows = cohort.rows_after(cohort.steps)
        assert cohort is not None
        num = cohort.size
        max_steps = self.config.max_steps
        limit = 1 << 62 if not max_steps else max(0, max_steps - self.executed)
        step_time = None if self.by_steps else self.config.step_time
        cols = self.cols
        times, durations = cols["time"], cols["duration"]
        k = cohort.run_until(self.now, t, step_time, limit, times, durations, cols["kv_blocks_used"], True)
        if not k:
            return 0, False
        if peak > self.peak_value:
            self.peak_value, self.peak_index = peak, self.executed
            self.peak_rows = tuple(Row(1, before, True, True) for _, before in rows)
        record_decode_run(cols, self.step, k, num, len(sched.waiting), peak)
        self.now = times[-1] + durations[-1]
        self.step += k
        if cohort.steps not in cohort.finishes:
            if self.now >= t:
                self._resume_peak = peak  # cut by the bound alone: the same run goes on next time
            return k, False
        finished = sched.finish_cohort_step(self.now)  # update_from_output's part of the last step
        self.cols["finished"][-1] = len(finished)
        for request in finished:
            self.finish_times.append(self.now)
            self.finished.append(request)
        self.steady = False  # blocks came back: the waiting queue's head may fit now
        return k, True

    @property
    def executed(self) -> int:
        return len(self.cols["time"])

    # ----- one step -------------------------------------------------------------------------------------

    def begin_step(self) -> StepLoad | None:
        """Schedule the next step at `self.now`; None when nothing could be scheduled (a request that never
        fits the pool is dropped, as the single-engine simulator does)."""
        sched = self.sched
        self._resume_peak = None
        plan = sched.schedule()
        if not plan.num_decodes and not plan.chunks:
            self.steady = False
            if not sched.running and sched.waiting:
                stuck = sched.waiting.popleft()
                self.unservable += 1
                if self.unservable == 1:
                    self.notes.append(
                        f"rank {self.index}: request {stuck.rid} ({stuck.num_tokens:,} tokens) never fits "
                        "the KV "
                        f"pool of {self.usable:,} blocks; vLLM would hang on it. Dropped, and so is any "
                        "other."
                    )
            return None
        self._pending = plan
        prefills = max_prefill = prefill_attn = 0
        sampling = plan.num_decodes
        for request, k, before in plan.chunks:
            prefills += 1
            max_prefill = max(max_prefill, k)
            prefill_attn += k * (before + k // 2)
            if before + k >= request.num_tokens:
                sampling += 1
        for request in plan.admitted:
            if request.first_scheduled is None:
                request.first_scheduled = self.now
        return StepLoad(
            plan.tokens, prefills, max_prefill, plan.num_decodes, sampling, plan.decode_context, prefill_attn
        )

    def end_step(
        self, start: float, duration: float, peak: int | None = None, load: StepLoad | None = None
    ) -> None:
        """The step scheduled by `begin_step` ran from `start` for `duration`; `peak` is its activation peak
        when the caller computed it (lockstep EP), else it is the rank's own."""
        plan = self._pending
        assert plan is not None, "end_step without begin_step"
        self._pending = None
        self.now = start
        if peak is None:
            peak = self._own_peak(plan)
        self._judge(start, peak, lambda: step_rows(plan), plan.kv_blocks_used)
        finished = self.sched.update_from_output(plan, start + duration)
        for request in finished:
            self.finish_times.append(start + duration)
            self.finished.append(request)
        self.steady = is_steady(plan, finished, plan.num_decodes)
        append_step(
            self.cols,
            self.step,
            start,
            duration,
            plan,
            finished,
            peak,
            tokens=plan.tokens,
            num_prefills=len(plan.chunks),
            num_decodes=plan.num_decodes,
            max_prefill=max((k for _, k, _ in plan.chunks), default=0),
        )
        self.now = start + duration
        self.step += 1

    def idle_step(self, start: float, duration: float, peak: int) -> None:
        """A lockstep step in which this rank had nothing to schedule: vLLM runs a dummy batch (one token) so
        that the collectives complete. Recorded as a step with no requests."""
        self._judge(start, peak, lambda: DUMMY_ROWS, self.sched.kv.num_used)
        cols = self.cols
        for name, value in (
            ("step", self.step),
            ("time", start),
            ("duration", duration),
            ("tokens", 0),
            ("num_prefills", 0),
            ("num_decodes", 0),
            ("max_prefill", 0),
            ("running", len(self.sched.running)),
            ("waiting", len(self.sched.waiting)),
            ("kv_blocks_used", self.sched.kv.num_used),
            ("preempted", 0),
            ("admitted", 0),
            ("finished", 0),
            ("peak_bytes", peak),
        ):
            cols[name].append(value)
        self.now = start + duration
        self.step += 1

    def _judge(self, start: float, peak: int, rows_of: Callable[[], tuple[Row, ...]], kv_used: int) -> None:
        """Keep the highest peak's shape; record an OOM event when the peak passes the headroom."""
        headroom = self.config.headroom_bytes
        over = headroom is not None and peak > headroom
        if peak <= self.peak_value and not over:
            return
        rows = rows_of()
        if peak > self.peak_value:
            self.peak_value, self.peak_index, self.peak_rows = peak, self.executed, rows
        if over:
            assert headroom is not None
            self.ooms.append(
                OomEvent(
                    step=self.step,
                    time=start,
                    peak_bytes=peak,
                    headroom_bytes=headroom,
                    shape=StepShape(rows),
                    kv_usage=kv_used / self.usable,
                    kv_blocks_used=kv_used,
                )
            )

    def _own_peak(self, plan: StepPlan) -> int:
        act = self.config.activation
        if act is None:
            return 0
        sampling = plan.num_decodes
        max_prefill = 0
        for request, k, before in plan.chunks:
            max_prefill = max(max_prefill, k)
            if before + k >= request.num_tokens:
                sampling += 1
        return step_peak_bytes(
            plan.tokens, len(plan.chunks), max_prefill, plan.num_decodes, sampling, act, self.config.memory
        )

    # ----- result ---------------------------------------------------------------------------------------

    def result(self, source: str, clock: str, arrived: int, rejected: int) -> SimulationResult:
        self.sched.dissolve_cohort()
        reqs = self.requests
        done = [r for r in reqs if r.finished_at is not None]
        stats = RequestStats(
            arrived=arrived,
            rejected_too_long=rejected,
            unservable=self.unservable,
            finished=len(done),
            queue_times=tuple(r.first_scheduled - r.arrival for r in reqs if r.first_scheduled is not None),
            ttfts=tuple(r.first_token - r.arrival for r in done if r.first_token is not None),
            latencies=tuple(r.finished_at - r.arrival for r in done if r.finished_at is not None),
            output_tokens=sum(r.num_output for r in reqs),
            prompt_tokens=sum(r.prompt_tokens for r in reqs),
            prefix_hit_tokens=self.sched.prefix_hits,
            prefix_query_tokens=self.sched.prefix_queries,
        )
        timeline = Timeline(**{c: tuple(self.cols[c]) for c in Timeline.COLUMNS})
        return SimulationResult(
            config=self.config,
            workload_source=source,
            clock=clock,
            timeline=timeline,
            requests=stats,
            preemptions=self.sched.num_preemptions,
            oom_events=tuple(self.ooms),
            peak_step=self.peak_index,
            peak_shape=StepShape(self.peak_rows) if self.peak_rows is not None else None,
            usable_blocks=self.usable,
            notes=tuple(self.notes),
        )
