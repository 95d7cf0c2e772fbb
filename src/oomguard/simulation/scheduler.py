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

Decoding requests are followed as a cohort (`DecodeCohort`): the same steps with per-step work only for block
boundaries, finishes and what is not decoding; runs of identical decode steps advance together.

Not modelled (off by default or not reachable from a trace): speculative decoding, KV connectors, encoder
inputs, LoRA limits, priority scheduling, Mamba alignment, async scheduling's output placeholders (async only
changes the sliding-window reserve here, through `in_flight_tokens`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from oomguard.simulation.kv_pool import KvCacheManager, KvGroupSpec
from oomguard.simulation.step_time import StepTimeModel

WAITING, RUNNING, PREEMPTED, FINISHED = 0, 1, 2, 3
PREFIX_BLOCK_TOKENS = 512  # Mooncake `hash_ids` and the oracle's `prefix_hash_ids`: one id per 512 tokens
OWN_KEY_INDEX_BITS = 40  # a request's own block keys: -(request index << 40 + block index + 1), all distinct


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

    def shared(self, content: tuple[int, ...]) -> int:
        key = self._ids.get(content)
        if key is None:
            key = self._ids[content] = len(self._ids) + 1  # >= 1: never PRIVATE_KEY
        return key


class SimRequest:
    """One request's scheduling state (vLLM `Request`, the fields the scheduler reads)."""

    __slots__ = (
        "_interner",
        "_keys",
        "arrival",
        "finished_at",
        "first_scheduled",
        "first_token",
        "free_slots_upto",
        "index",
        "max_tokens",
        "num_computed",
        "num_output",
        "num_preemptions",
        "num_tokens",
        "prefix_hit_tokens",
        "prefix_ids",
        "prompt_tokens",
        "rid",
        "shared_prefix_boundary",
        "shared_tokens",
        "status",
        "stop_tokens",
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
        self.num_tokens = prompt_tokens  # prompt + generated so far (vLLM `Request.num_tokens`)
        # It finishes at max_tokens generated; `Scheduler.add_request` also caps it at max_model_len.
        self.stop_tokens = prompt_tokens + max_tokens
        self.status = WAITING
        self.num_preemptions = 0
        self.first_scheduled: float | None = None
        self.first_token: float | None = None
        self.finished_at: float | None = None
        self._keys: list[int] = []
        self._interner = interner
        self.prefix_hit_tokens = 0
        self.shared_prefix_boundary = 0
        self.free_slots_upto = 0
        # Tokens another request may share: the prompt's part covered by prefix ids (512 tokens per id).
        self.shared_tokens = min(prompt_tokens, PREFIX_BLOCK_TOKENS * len(prefix_ids))

    def block_key(self, index: int, block_size: int) -> int:
        """Content key of block `index`: equal for two requests whose tokens agree up to the block's end.

        Tokens come from `prefix_ids` (512 tokens per id, Mooncake) up to min(prompt, 512 x ids); a block
        reaching past that (the rest of the prompt, every generated token) is the request's own: its key is
        unique to (request, block), so only the request itself, recomputing after a preemption, finds it."""
        if (index + 1) * block_size > self.shared_tokens:
            return -((self.index << OWN_KEY_INDEX_BITS) + index + 1)
        keys = self._keys
        interner = self._interner
        if interner is None:
            raise RuntimeError("prefix caching needs a key interner")
        while len(keys) <= index:
            i = len(keys)
            start, end = i * block_size, (i + 1) * block_size
            parent = keys[i - 1] if i else 0
            first_id = self.prefix_ids[start // PREFIX_BLOCK_TOKENS]
            last_id = self.prefix_ids[(end - 1) // PREFIX_BLOCK_TOKENS]
            keys.append(interner.shared((parent, first_id, last_id, start % PREFIX_BLOCK_TOKENS, block_size)))
        return keys[index]


@dataclass
class StepPlan:
    """What one `schedule()` call decided, before the model step ran.

    A decode row is one token at the end of a request that has generated before; every other row (a prompt
    chunk, a recompute after preemption) is a chunk. Both lists keep the order the scheduler visited them."""

    decodes: list[SimRequest]
    chunks: list[tuple[SimRequest, int, int]]  # (request, tokens, num_computed before this step)
    preempted: list[SimRequest]
    admitted: list[SimRequest]
    num_running: int
    num_waiting: int
    kv_blocks_used: int
    tokens: int  # scheduled tokens in all
    decode_context: int  # tokens the decode rows attend to (their num_computed before the step), summed
    cohort: DecodeCohort | None = None  # decoded this step as a cohort, ahead of `decodes` (running order)
    cohort_decodes: int = 0

    @property
    def num_decodes(self) -> int:
        return self.cohort_decodes + len(self.decodes)

    def decode_rows(self) -> list[tuple[SimRequest, int]]:
        """Every decode row as (request, num_computed before this step), in running order. Valid until
        `update_from_output` runs."""
        rows = self.cohort.rows_before_last_step() if self.cohort is not None and self.cohort_decodes else []
        rows.extend((r, r.num_computed - 1) for r in self.decodes)
        return rows

    @property
    def scheduled(self) -> list[tuple[SimRequest, int, int]]:
        """Every row as (request, tokens, num_computed before): chunks, then decodes."""
        return self.chunks + [(r, 1, before) for r, before in self.decode_rows()]


class Scheduler:
    """The V1 scheduler loop over a `KvCacheManager`; see the module docstring for the mechanism."""

    def __init__(self, config: SchedulerConfig, cohorts: bool = False) -> None:
        """`cohorts`: follow decoding requests as a `DecodeCohort` (same steps, far less work per step)."""
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
        self.cohort = DecodeCohort(self.kv) if cohorts and self.kv.single_full else None

    def add_request(self, request: SimRequest) -> None:
        # Finished at max_tokens generated or at max_model_len tokens in all, whichever comes first.
        request.stop_tokens = min(request.prompt_tokens + request.max_tokens, self.config.max_model_len)
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
        decodes: list[SimRequest] = []
        chunks: list[tuple[SimRequest, int, int]] = []
        preempted: list[SimRequest] = []
        admitted: list[SimRequest] = []
        decode_context = 0

        # 0. The decode cohort, the head of the running list: one token each, its new blocks by phase.
        i = in_cohort = 0
        cohort = self.cohort
        if cohort is not None:
            i = in_cohort = self._step_cohort(cohort, preempted)
            if in_cohort:
                budget -= in_cohort
                decode_context = cohort.context_before

        # 1. Running requests, in order.
        decode_upto = max_len - 1  # a decode needs max_model_len - num_computed - 1 >= 1
        while i < len(running) and budget > 0:
            request = running[i]
            computed = request.num_computed
            n = request.num_tokens - computed
            if n == 1 and computed < decode_upto:
                # The common case, a decode: one token, no cap applies (written out: it runs per request).
                if computed >= request.free_slots_upto and not self._allocate_or_preempt(
                    request, computed, 1, preempted
                ):
                    break
                request.num_computed = computed + 1
                if request.num_output:
                    decodes.append(request)
                    decode_context += computed
                else:
                    chunks.append((request, 1, computed))
                budget -= 1
                i += 1
                continue
            if 0 < threshold < n:
                n = threshold
            n = min(n, budget)
            n = min(n, max_len - computed - 1)
            if n <= 0:
                i += 1
                continue
            total = computed + n
            # Most decodes stay inside their last block: nothing for the KV manager to do.
            if total > request.free_slots_upto and not self._allocate_or_preempt(
                request, computed, n, preempted
            ):
                break
            request.num_computed = total
            if n == 1 and total == request.num_tokens and request.num_output:
                decodes.append(request)
                decode_context += computed
            else:
                chunks.append((request, n, computed))
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
                    request,
                    0,
                    n,
                    hit_tokens,
                    hit_blocks if hit_tokens else None,
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
                request.num_computed = hit_tokens + n
                running.append(request)
                admitted.append(request)
                if n == 1 and hit_tokens + 1 == request.num_tokens and request.num_output:
                    decodes.append(request)
                    decode_context += hit_tokens
                else:
                    chunks.append((request, n, hit_tokens))
                budget -= n

        return StepPlan(
            decodes,
            chunks,
            preempted,
            admitted,
            len(running),
            len(self.waiting),
            kv.num_used,
            cfg.max_num_batched_tokens - budget,
            decode_context,
            cohort,
            in_cohort,
        )

    def _step_cohort(self, cohort: DecodeCohort, preempted: list[SimRequest]) -> int:
        """Grow the cohort by the decoding requests right behind it, then run its step (preempting from the
        back of the running list when its new blocks do not fit, as vLLM's running pass does); the members
        decoded."""
        running = self.running
        n = cohort.size
        limit = min(len(running), self.config.max_num_batched_tokens)
        while n < limit and cohort.join(running[n]):
            n += 1
        if not n:
            return 0

        def preempt_back() -> SimRequest:
            victim = running.pop()
            if len(running) < cohort.size:
                cohort.drop_last(victim)
            self._preempt(victim)
            preempted.append(victim)
            return victim

        cohort.step(preempt_back)
        return cohort.size

    def dissolve_cohort(self) -> None:
        """Bring every cohort member's fields up to date and empty the cohort (before reading them)."""
        if self.cohort is not None:
            self.cohort.dissolve()

    def _allocate_or_preempt(
        self, request: SimRequest, computed: int, n: int, preempted: list[SimRequest]
    ) -> bool:
        """Allocate slots, preempting from the back of the running list until they fit; False when the request
        had to preempt itself."""
        kv = self.kv
        while not kv.allocate_slots(request, computed, n):
            victim = self.running.pop()
            self._preempt(victim)
            preempted.append(victim)
            if victim is request:
                return False
        return True

    def _preempt(self, request: SimRequest) -> None:
        self.kv.free(request, findable=True)
        request.status = PREEMPTED
        request.num_computed = 0
        request.free_slots_upto = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    def update_from_output(self, plan: StepPlan, now: float) -> list[SimRequest]:
        """The model step ran: sample one token for every request whose tokens are all computed. Finished
        requests leave in running order (the order they were scheduled in), freeing their blocks."""
        finished: list[SimRequest] = []
        if plan.cohort is not None and plan.cohort_decodes:
            finished = plan.cohort.finish_last_step()  # the head of the running list, in its order
        for request in plan.decodes:
            request.num_output += 1
            request.num_tokens += 1
            if request.num_tokens >= request.stop_tokens:
                request.status = FINISHED
                finished.append(request)
        for request, _, _ in plan.chunks:
            if request.num_computed < request.num_tokens:
                continue  # a partial prefill chunk: the runner discards its sample
            request.num_output += 1
            request.num_tokens += 1
            if request.first_token is None:
                request.first_token = now
            if request.num_tokens >= request.stop_tokens:
                request.status = FINISHED
                finished.append(request)
        if finished:
            self._remove_finished(finished, now)
        return finished

    def finish_cohort_step(self, now: float) -> list[SimRequest]:
        """After a `DecodeCohort.run_until` that ran through a finishing step: what `update_from_output`
        does for it (the members that reached their stop leave, in running order, freeing their blocks)."""
        assert self.cohort is not None
        finished = self.cohort.finish_last_step()
        if finished:
            self._remove_finished(finished, now)
        return finished

    def _remove_finished(self, finished: list[SimRequest], now: float) -> None:
        """Take the FINISHED requests out of the running list and free their blocks, in running order (the
        order vLLM frees them in, which sets the free queue's order); `finished` is put in that order."""
        running = self.running
        if len(finished) <= 8:  # the usual case: find them, rather than rebuild the list
            where = sorted(running.index(r) for r in finished)
            finished[:] = [running[i] for i in where]
            for i in reversed(where):
                del running[i]
        else:
            finished[:] = [r for r in running if r.status == FINISHED]
            running[:] = [r for r in running if r.status != FINISHED]
        for request in finished:
            request.finished_at = now
            self.kv.free(request)

    def decode_run_ready(self) -> bool:
        """Every running request is in the cohort: the next steps are identical decode steps until an
        arrival, a finish or a pool too short (`DecodeCohort.run_until`), if the waiting queue cannot change
        that (the caller knows: it is empty, or its head was refused and the pool only shrinks)."""
        cohort = self.cohort
        if cohort is None or not self.running:
            return False
        running = self.running
        if len(running) > self.config.max_num_batched_tokens:
            return False
        n = cohort.size
        while n < len(running) and cohort.join(running[n]):
            n += 1
        return n == len(running)


class DecodeCohort:
    """The decoding requests at the head of the running list, followed together: vLLM schedules each of them
    one token per step, in order, and only two things differ between steps: which of them cross a block
    boundary (and take one new block from the free queue, in running order) and which finish.

    A member whose last block has `free` free slots when it joins crosses at cohort step `steps + free + 1`
    and every `block_size` steps after, so the members fall into `block_size` phases and step j's new blocks
    go to phase `j mod block_size`, in running order: the same blocks, in the same order, as step-by-step
    `allocate_slots` calls. A member finishes at the step its token count reaches its stop. A step whose new
    blocks would not fit the free pool dissolves the cohort (`schedule` then preempts as vLLM does).

    Members' fields (`num_computed`, `num_output`, `num_tokens`, `free_slots_upto`, the KV manager's hashed
    count) lag by the steps since they joined; they are brought up to date when a member finishes and when
    the cohort dissolves (`Scheduler.dissolve_cohort`, before anyone reads them). Exact only where a decode's
    block boundary needs nothing but a block (one full-attention group, and the block being filled is the
    request's own, hashed when freed: `kv_pool` module NOTE); `join` refuses any other request.
    """

    def __init__(self, kv: KvCacheManager) -> None:
        self.kv = kv
        self.block_size = kv.block_size
        self.steps = 0  # cohort steps run so far (a global count; members remember when they joined)
        self.size = 0  # live members: running[:size]
        self.context = 0  # tokens the members' next decodes attend to, summed
        self.context_before = 0  # the same, before the last step
        self._reset()

    def _reset(self) -> None:
        self.members: list[SimRequest] = []  # slot -> request, in running order (finished ones stay)
        self.live: list[bool] = []
        self.tables: list[list[int]] = []  # slot -> the KV manager's own block list, extended in place
        self.joined: list[int] = []  # slot -> `steps` when its fields were last brought up to date
        self.held: list[int] = []  # slot -> blocks when it joined
        self.phase_of: list[int] = []
        self.phases: list[list[int]] = [[] for _ in range(self.block_size)]  # phase -> live slots
        self.finishes: dict[int, list[int]] = {}  # cohort step -> slots finishing at it
        self.size = 0
        self.context = 0

    def join(self, request: SimRequest) -> bool:
        """Take `request` in (it is the running request right behind the cohort); False when it is not a
        decode the phase rule follows exactly."""
        computed = request.num_computed
        tokens = request.num_tokens
        if tokens - computed != 1 or not request.num_output:
            return False  # a prefill chunk or a 1-token chunk that samples: not a decode
        kv = self.kv
        bs = self.block_size
        blocks = kv.managers[0].req_blocks.get(request.rid)
        if blocks is None:
            return False
        upto = len(blocks) * bs
        free = upto - computed
        # free_slots_upto 0: admitted through the general path, its first decode asks the manager again,
        # which takes a block exactly when the last one is full, as the phase rule does.
        if request.free_slots_upto not in (upto, 0) or not 0 <= free < bs:
            return False
        if kv.enable_caching and request.shared_tokens // bs > kv.managers[0].num_cached.get(request.rid, 0):
            return False  # its next full block gets a shared hash when it fills
        slot = len(self.members)
        steps = self.steps
        phase = (steps + free + 1) % bs
        self.members.append(request)
        self.live.append(True)
        self.tables.append(blocks)
        self.joined.append(steps)
        self.held.append(len(blocks))
        self.phase_of.append(phase)
        self.phases[phase].append(slot)
        self.finishes.setdefault(steps + request.stop_tokens - tokens, []).append(slot)
        self.size += 1
        self.context += computed
        return True

    def step(self, preempt_back: Callable[[], SimRequest]) -> None:
        """One step inside `schedule`: the members' new blocks. When they do not fit, the members take theirs
        one by one in running order, and the first one short of a block preempts from the back of the
        running list (`preempt_back`, which drops a member victim from the cohort) until it fits or it was
        itself the victim: the blocks and victims vLLM's running pass gives."""
        j = self.steps + 1
        due = self.phases[j % self.block_size]
        if due:
            pool = self.kv.pool
            m = len(due)
            tables = self.tables
            if m <= pool.free_count:
                for slot, block in zip(due, pool.get_new_blocks(m)):
                    tables[slot].append(block)
            else:
                members = self.members
                live = self.live
                for slot in list(due):
                    if not live[slot]:
                        continue  # preempted by a member before it
                    while not pool.free_count:
                        if preempt_back() is members[slot]:
                            break
                    if live[slot]:
                        tables[slot].extend(pool.get_new_blocks(1))
        self.steps = j
        self.context_before = self.context
        self.context += self.size

    def drop_last(self, request: SimRequest) -> None:
        """`request`, the last live member, leaves before this step (preempted): its fields brought up to
        date, as they were before the step."""
        slot = len(self.members) - 1
        while not self.live[slot]:
            slot -= 1
        assert self.members[slot] is request
        self._sync(slot)
        self.live[slot] = False
        self.phases[self.phase_of[slot]].remove(slot)
        self.finishes[self.steps + request.stop_tokens - request.num_tokens].remove(slot)
        self.size -= 1
        self.context -= request.num_computed

    def rows_before_last_step(self) -> list[tuple[SimRequest, int]]:
        """(member, num_computed before the last step) for the members that decoded in it."""
        return self.rows_after(self.steps - 1)

    def rows_after(self, steps: int) -> list[tuple[SimRequest, int]]:
        """(member, num_computed after cohort step `steps`) for every live member."""
        return [
            (r, r.num_computed + steps - joined)
            for r, joined, live in zip(self.members, self.joined, self.live)
            if live
        ]

    def finish_last_step(self) -> list[SimRequest]:
        """After the model step: members whose stop was reached are brought up to date and marked FINISHED
        (`update_from_output` removes and frees them); they are returned in running order."""
        slots = self.finishes.pop(self.steps, None)
        if not slots:
            return []
        done = []
        for slot in sorted(slots):
            request = self._sync(slot)
            done.append(request)
            request.status = FINISHED
            self.live[slot] = False
            self.phases[self.phase_of[slot]].remove(slot)
            self.size -= 1
            self.context -= request.num_computed
        if not self.size:
            self._reset()
        elif len(self.members) > 64 and len(self.members) > 4 * self.size:
            self.dissolve()  # mostly finished slots: the live ones rejoin at the next step, renumbered
        return done

    def _sync(self, slot: int) -> SimRequest:
        request = self.members[slot]
        d = self.steps - self.joined[slot]
        if d:
            request.num_computed += d
            request.num_output += d
            request.num_tokens += d
            self.joined[slot] = self.steps
        return request

    def run_until(
        self,
        now: float,
        end: float,
        step_time: StepTimeModel | None,
        max_steps: int,
        times: list[float],
        durations: list[float],
        kv_used: list[int],
        through_finish: bool = False,
    ) -> int:
        """Steps with nothing but the members' decodes (the caller knows there is nothing else), while they
        start before `end` (the clock at `now`), at most `max_steps`, and stopping before a step whose blocks
        do not fit and before a finishing step (`through_finish`: after it; the caller then runs
        `Scheduler.finish_cohort_step`); the steps run. Appends each step's start, duration (`step_time` for
        the decode shape; 1 when None, a step clock) and KV blocks in use after it to the three lists."""
        num = self.size
        if not num:
            return 0
        phases = self.phases
        num_phases = len(phases)
        tables = self.tables
        pool = self.kv.pool
        used = pool.num_used
        context = self.context
        j = self.steps
        last = min(min(self.finishes) - (0 if through_finish else 1), j + max_steps)
        base = per_context = no_attention = 0.0
        if step_time is not None:
            # step_seconds(num, context, 0), term by term in its own order: the same float every step.
            base = step_time.per_step_s + step_time.per_token_s * num
            per_context = step_time.per_context_token_s
            no_attention = step_time.per_prefill_attention_s * 0
        add_time, add_duration, add_used = times.append, durations.append, kv_used.append
        first = j
        while now < end and j < last:
            due = phases[(j + 1) % num_phases]
            if due:
                m = len(due)
                if m > pool.free_count:
                    break  # schedule() will preempt at this step
                if m == 1:
                    tables[due[0]].append(pool.get_new_blocks(1)[0])
                else:
                    for slot, block in zip(due, pool.get_new_blocks(m)):
                        tables[slot].append(block)
                used += m
            j += 1
            duration = 1.0 if step_time is None else base + per_context * context + no_attention
            add_time(now)
            add_duration(duration)
            add_used(used)
            now += duration
            context += num
        if j > first:
            self.steps = j
            self.context_before = context - num
            self.context = context
        return j - first

    def dissolve(self) -> None:
        """Bring every member's fields to the present (what `allocate_slots` and `update_from_output` would
        have written step by step) and empty the cohort."""
        if not self.members:
            return
        kv = self.kv
        bs = self.block_size
        num_cached = kv.managers[0].num_cached if kv.enable_caching else None
        for slot, live in enumerate(self.live):
            if not live:
                continue
            request = self._sync(slot)
            blocks = self.tables[slot]
            request.free_slots_upto = len(blocks) * bs
            if len(blocks) != self.held[slot] and num_cached is not None:
                # The last new block was taken at a block's first token: the one before it is full.
                num_cached[request.rid] = max(num_cached[request.rid], len(blocks) - 1)
        self._reset()
