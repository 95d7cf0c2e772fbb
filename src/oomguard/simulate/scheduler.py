"""vLLM 0.33's V1 scheduler (`vllm/v1/core/sched/scheduler.py`, synchronous `Scheduler`), as prose in code.

There is no prefill phase and no decode phase: every request has `num_computed` tokens and `num_tokens`
(prompt + generated so far), and each step the scheduler hands out tokens so that `num_computed` catches up.
One step (`schedule`):

1. Token budget = `max_num_batched_tokens`. A `long_prefill_token_threshold` > 0 caps one request's chunk,
   but only when more than one request is running or waiting (alone, a long prompt starves nobody).
2. RUNNING requests first, in admission order. Each gets `min(num_tokens - num_computed, threshold, budget,
   max_model_len - num_computed - 1)` tokens: a decode gets 1, a prefill the rest of its prompt or what the
   budget allows (chunked prefill). Its KV slots are allocated; when the pool is short, the request at the
   *back* of the running list is preempted by recompute (its blocks freed, `num_computed` reset to 0, put at
   the *front* of the waiting queue) and the allocation retried; a request that has to preempt itself ends
   the running pass.
3. WAITING requests next, in order, only if nothing was preempted this step, while budget is left and fewer
   than `max_num_seqs` requests run. A prefix-cache hit (full blocks, at most `num_tokens - 1` tokens) is
   adopted; the rest is scheduled like a prefill. Admission needs the pool to hold the whole sequence
   (`scheduler_reserve_full_isl`); a request that does not fit stops the waiting pass (FCFS, no skipping).
4. After the model step (`update_from_output`): every request whose scheduled tokens reached `num_tokens`
   samples one token (a partial prefill chunk samples nothing). A request stops at `max_tokens` generated
   tokens or at `max_model_len` total tokens; its blocks go back to the pool before the next step.

Not modelled (off by default or not reachable from a trace): speculative decoding, KV connectors, encoder
inputs, LoRA limits, priority scheduling, Mamba alignment, async scheduling's output placeholders (async only
changes the sliding-window reserve here, through `in_flight_tokens`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from oomguard.simulate.kv_pool import KvCacheManager, KvGroupSpec

WAITING, RUNNING, PREEMPTED, FINISHED = 0, 1, 2, 3
PREFIX_BLOCK_TOKENS = 512  # Mooncake `hash_ids` and the oracle's `prefix_hash_ids`: one id per 512 tokens


@dataclass(frozen=True)
class SchedulerConfig:
    """The vLLM flags the scheduler reads (vLLM field names)."""

    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    num_gpu_blocks: int
    kv_groups: tuple[KvGroupSpec, ...]
    enable_prefix_caching: bool = True
    long_prefill_token_threshold: int = 0
    async_scheduling: bool = False
    pipeline_parallel_size: int = 1
    scheduler_reserve_full_isl: bool = True

    def __post_init__(self) -> None:
        for name in ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "num_gpu_blocks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.num_gpu_blocks < 2:
            raise ValueError("num_gpu_blocks must be >= 2 (block 0 is the null block)")

    @property
    def max_concurrent_batches(self) -> int:
        """vLLM `VllmConfig.max_concurrent_batches` (V2 model runner, the 0.33 default)."""
        if self.async_scheduling:
            return self.pipeline_parallel_size + 1
        return self.pipeline_parallel_size

    @property
    def in_flight_tokens(self) -> int:
        """vLLM `max_in_flight_tokens`: what sliding-window groups reserve beyond their window."""
        return self.max_concurrent_batches * self.max_num_batched_tokens


class KeyInterner:
    """Turns chained block contents into small ints, so equal token prefixes get equal block hashes."""

    def __init__(self) -> None:
        self._ids: dict[tuple[int, ...], int] = {}
        self._next_private = -1

    def shared(self, content: tuple[int, ...]) -> int:
        key = self._ids.get(content)
        if key is None:
            key = self._ids[content] = len(self._ids) + 1
        return key

    def private(self) -> int:
        """A key no other block will ever have (tokens private to one request)."""
        self._next_private -= 1
        return self._next_private


class SimRequest:
    """One request's scheduling state (vLLM `Request`, the fields the scheduler reads)."""

    __slots__ = (
        "_interner",
        "_keys",
        "arrival",
        "finished_at",
        "first_scheduled",
        "first_token",
        "index",
        "max_tokens",
        "num_computed",
        "num_output",
        "num_preemptions",
        "prefix_hit_tokens",
        "prefix_ids",
        "prompt_tokens",
        "rid",
        "shared_prefix_boundary",
        "status",
    )

    def __init__(
        self,
        rid: str,
        index: int,
        prompt_tokens: int,
        max_tokens: int,
        arrival: float,
        prefix_ids: tuple[int, ...] = (),
        interner: KeyInterner | None = None,
    ) -> None:
        self.rid = rid
        self.index = index
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.arrival = arrival
        self.prefix_ids = prefix_ids
        self.num_computed = 0
        self.num_output = 0
        self.status = WAITING
        self.num_preemptions = 0
        self.first_scheduled: float | None = None
        self.first_token: float | None = None
        self.finished_at: float | None = None
        self._keys: list[int] = []
        self._interner = interner
        self.prefix_hit_tokens = 0
        self.shared_prefix_boundary = 0

    @property
    def num_tokens(self) -> int:
        return self.prompt_tokens + self.num_output

    def block_key(self, index: int, block_size: int) -> int:
        """Content key of block `index`: equal for two requests whose tokens agree up to the block's end.

        Tokens come from `prefix_ids` (512 tokens per id, Mooncake) up to min(prompt, 512 x ids); the rest
        of the prompt and every generated token are private to the request."""
        keys = self._keys
        while len(keys) <= index:
            i = len(keys)
            start, end = i * block_size, (i + 1) * block_size
            shared_end = min(self.prompt_tokens, PREFIX_BLOCK_TOKENS * len(self.prefix_ids))
            interner = self._interner
            if interner is None:
                raise RuntimeError("prefix caching needs a key interner")
            if end <= shared_end and (i == 0 or keys[i - 1] > 0):
                parent = keys[i - 1] if i else 0
                first_id = self.prefix_ids[start // PREFIX_BLOCK_TOKENS]
                last_id = self.prefix_ids[(end - 1) // PREFIX_BLOCK_TOKENS]
                keys.append(interner.shared((parent, first_id, last_id, start % PREFIX_BLOCK_TOKENS, block_size)))
            else:
                keys.append(interner.private())
        return keys[index]


@dataclass
class StepPlan:
    """What one `schedule()` call decided, before the model step ran."""

    scheduled: list[tuple[SimRequest, int, int]]  # (request, tokens, num_computed before this step)
    preempted: list[SimRequest]
    admitted: list[SimRequest]
    num_running: int
    num_waiting: int
    kv_blocks_used: int

    @property
    def total_tokens(self) -> int:
        return sum(n for _, n, _ in self.scheduled)


class Scheduler:
    """The V1 scheduler loop over a `KvCacheManager`; see the module docstring for the mechanism."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.kv = KvCacheManager(
            config.kv_groups,
            config.num_gpu_blocks,
            config.max_model_len,
            config.in_flight_tokens,
            config.enable_prefix_caching,
        )
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.num_preemptions = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.on_finish: Callable[[SimRequest], None] | None = None

    def add_request(self, request: SimRequest) -> None:
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting) or bool(self.running)

    def schedule(self) -> StepPlan:
        cfg = self.config
        kv = self.kv
        max_len = cfg.max_model_len
        budget = cfg.max_num_batched_tokens
        running = self.running
        threshold = cfg.long_prefill_token_threshold if len(running) + len(self.waiting) > 1 else 0
        scheduled: list[tuple[SimRequest, int, int]] = []
        preempted: list[SimRequest] = []
        admitted: list[SimRequest] = []

        # 1. Running requests, in order.
        i = 0
        while i < len(running) and budget > 0:
            request = running[i]
            computed = request.num_computed
            n = request.prompt_tokens + request.num_output - computed
            if 0 < threshold < n:
                n = threshold
            n = min(n, budget)
            n = min(n, max_len - computed - 1)
            if n <= 0:
                i += 1
                continue
            while True:
                if kv.allocate_slots(request, computed, n):
                    ok = True
                    break
                ok = False
                victim = running.pop()
                self._preempt(victim)
                preempted.append(victim)
                if victim is request:
                    break
            if not ok:
                break
            scheduled.append((request, n, computed))
            budget -= n
            i += 1

        # 2. Waiting requests, only when nobody was preempted.
        if not preempted:
            waiting = self.waiting
            while budget > 0 and waiting and len(running) < cfg.max_num_seqs:
                request = waiting[0]
                hit_blocks, hit_tokens, request.shared_prefix_boundary = kv.computed_blocks(request)
                n = request.num_tokens - hit_tokens
                if 0 < threshold < n:
                    n = threshold
                n = min(n, budget)
                if not kv.allocate_slots(
                    request, 0, n, hit_tokens, hit_blocks if hit_tokens else None,
                    full_sequence_must_fit=cfg.scheduler_reserve_full_isl,
                ):
                    break
                waiting.popleft()
                if cfg.enable_prefix_caching:
                    self.prefix_queries += request.num_tokens
                    self.prefix_hits += hit_tokens
                    if request.num_preemptions == 0:
                        request.prefix_hit_tokens = hit_tokens
                request.status = RUNNING
                request.num_computed = hit_tokens
                running.append(request)
                admitted.append(request)
                scheduled.append((request, n, hit_tokens))
                budget -= n

        for request, n, _ in scheduled:
            request.num_computed += n
        return StepPlan(scheduled, preempted, admitted, len(running), len(self.waiting), kv.num_used)

    def _preempt(self, request: SimRequest) -> None:
        self.kv.free(request.rid)
        request.status = PREEMPTED
        request.num_computed = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    def update_from_output(self, plan: StepPlan, now: float) -> list[SimRequest]:
        """The model step ran: sample one token for every request whose tokens are all computed."""
        max_len = self.config.max_model_len
        finished: list[SimRequest] = []
        for request, _, _ in plan.scheduled:
            if request.num_computed < request.prompt_tokens + request.num_output:
                continue  # a partial prefill chunk: the runner discards its sample
            request.num_output += 1
            if request.first_token is None:
                request.first_token = now
            if request.num_output >= request.max_tokens or request.prompt_tokens + request.num_output >= max_len:
                finished.append(request)
        if finished:
            done = set(id(r) for r in finished)
            self.running = [r for r in self.running if id(r) not in done]
            for request in finished:
                request.status = FINISHED
                request.finished_at = now
                self.kv.free(request.rid)
        return finished
