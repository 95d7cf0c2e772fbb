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

Runs of identical decode steps can be advanced together (`decode_run`, `DecodeRun`) with the same result.

Not modelled (off by default or not reachable from a trace): speculative decoding, KV connectors, encoder
inputs, LoRA limits, priority scheduling, Mamba alignment, async scheduling's output placeholders (async only
changes the sliding-window reserve here, through `in_flight_tokens`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from oomguard.simulate.kv_pool import KvCacheManager, KvGroupSpec
from oomguard.simulate.step_time import StepTimeModel

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

    @property
    def scheduled(self) -> list[tuple[SimRequest, int, int]]:
        """Every row as (request, tokens, num_computed before): chunks, then decodes."""
        return self.chunks + [(r, 1, r.num_computed - 1) for r in self.decodes]


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

        # 1. Running requests, in order.
        i = 0
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
        )

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
        any_finished = False
        for request in plan.decodes:
            request.num_output += 1
            request.num_tokens += 1
            if request.num_tokens >= request.stop_tokens:
                request.status = FINISHED
                any_finished = True
        for request, _, _ in plan.chunks:
            if request.num_computed < request.num_tokens:
                continue  # a partial prefill chunk: the runner discards its sample
            request.num_output += 1
            request.num_tokens += 1
            if request.first_token is None:
                request.first_token = now
            if request.num_tokens >= request.stop_tokens:
                request.status = FINISHED
                any_finished = True
        if not any_finished:
            return []
        finished = [r for r in self.running if r.status == FINISHED]
        self.running = [r for r in self.running if r.status != FINISHED]
        for request in finished:
            request.finished_at = now
            self.kv.free(request)
        return finished

    def decode_run(self, max_steps: int) -> DecodeRun | None:
        """When every running request is decoding (one token to compute, at least one generated), the next
        steps repeat the last one until something happens; see `DecodeRun`. The caller knows whether the
        waiting queue can change that (it is empty, or its head was refused and the pool only shrinks).
        None when a run cannot be followed exactly here (a pool with more than one group or with sliding
        windows, a request whose next block gets a shared hash), when the token budget does not cover every
        request, or when the very next step ends a request."""
        kv = self.kv
        running = self.running
        if not kv.single_full or not running or max_steps < 1:
            return None
        if len(running) > self.config.max_num_batched_tokens:
            return None
        newest = running[-1]  # the likeliest still in its prefill: checked before walking every request
        if newest.num_tokens - newest.num_computed != 1:
            return None
        return DecodeRun.start(self, max_steps)


class DecodeRun:
    """A run of identical decode steps, advanced without re-running the scheduler for every request.

    In such a step every running request decodes one token, in the same order; the waiting queue's head stays
    refused (the pool only shrinks), and nothing finishes (the run stops before the first finishing step).
    What differs from step to step is only where a request crosses a block boundary: it takes one new block
    from the free queue, in running order within the step. A request whose last block has `free` free slots
    crosses at step `free + 1` and then every `block_size` steps, so the requests fall into `block_size`
    phases, and step j's new blocks go to phase `j mod block_size`, in running order: the same blocks, in
    the same order, as step-by-step `allocate_slots` calls. A step whose new blocks would not fit the free
    pool is left to `schedule()` (it preempts). Request fields are brought up to date at `close`.

    Exact only where a decode's block boundary needs nothing but a block (one full-attention group, and the
    block being filled is the request's own, so its hash is given when freed: `kv_pool` module NOTE);
    `start` returns None otherwise.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        max_steps: int,
        tables: list[list[int]],
        phases: list[list[int]],
        decode_context: int,
    ) -> None:
        self.kv = scheduler.kv
        self.requests = list(scheduler.running)
        self.max_steps = max_steps
        self.steps = 0
        self._tables = tables  # each request's block list (the KV manager's own, extended in place)
        self._phases = phases  # phase -> positions (running order) that take a new block in that phase
        self._held = [len(t) for t in tables]  # blocks before the run
        self.decode_context = decode_context  # tokens the decodes of the next step attend to
        self._closed = False
        self.blocks_used = self.kv.num_used  # KV blocks in use after the last step advanced

    @classmethod
    def start(cls, scheduler: Scheduler, max_steps: int) -> DecodeRun | None:
        kv = scheduler.kv
        manager = kv.managers[0]
        bs = kv.block_size
        caching = kv.enable_caching
        req_blocks = manager.req_blocks
        num_cached = manager.num_cached
        tables: list[list[int]] = []
        phases: list[list[int]] = [[] for _ in range(bs)]
        context = 0
        last = max_steps  # steps j = 1.. that finish nobody: request r finishes at j = stop - num_tokens
        for pos, request in enumerate(scheduler.running):
            computed = request.num_computed
            tokens = request.num_tokens
            if tokens - computed != 1 or not request.num_output:
                return None  # a prefill chunk or a 1-token chunk that samples: not a decode
            if request.stop_tokens - tokens <= last:
                last = request.stop_tokens - tokens - 1
                if last < 1:
                    return None
            blocks = req_blocks.get(request.rid)
            if blocks is None:
                return None
            upto = len(blocks) * bs
            free = upto - computed
            # free_slots_upto 0: admitted through the general path, its first decode asks the manager again,
            # which takes a block exactly when the last one is full, as the phase rule does.
            if request.free_slots_upto not in (upto, 0) or not 0 <= free < bs:
                return None
            if caching and request.shared_tokens // bs > num_cached.get(request.rid, 0):
                return None  # its next full block gets a shared hash when it fills
            phases[(free + 1) % bs].append(pos)
            tables.append(blocks)
            context += computed
        return cls(scheduler, last, tables, phases, context)

    @property
    def num_requests(self) -> int:
        return len(self.requests)

    def advance(self) -> bool:
        """Run the next step's KV events; False (nothing changed) when the run must end before this step."""
        if self.steps >= self.max_steps or self._closed:
            return False
        j = self.steps + 1
        due = self._phases[j % len(self._phases)]
        if due:
            pool = self.kv.pool
            if len(due) > len(pool.uncached_free) + len(pool.cached_free):
                return False  # schedule() will preempt at this step
            tables = self._tables
            for pos, block in zip(due, pool.get_new_blocks(len(due))):
                tables[pos].append(block)
            self.blocks_used += len(due)
        self.steps = j
        self.decode_context += len(self.requests)
        return True

    def run_until(
        self, now: float, end: float, step_time: StepTimeModel | None
    ) -> tuple[list[float], list[float], list[int]]:
        """`advance` step after step while steps start before `end` (the clock at `now`): each step's start,
        duration (`step_time` for the decode shape; 1 when None, a step clock) and KV blocks in use."""
        times: list[float] = []
        durations: list[float] = []
        kv_used: list[int] = []
        num = len(self.requests)
        phases = self._phases
        num_phases = len(phases)
        tables = self._tables
        pool = self.kv.pool
        used = self.blocks_used
        context = self.decode_context
        j = self.steps
        last = self.max_steps if not self._closed else j
        if step_time is not None:
            # step_seconds(num, context, 0), term by term in its own order: the same float every step.
            base = step_time.per_step_s + step_time.per_token_s * num
            per_context = step_time.per_context_token_s
            no_attention = step_time.per_prefill_attention_s * 0
        while now < end and j < last:
            due = phases[(j + 1) % num_phases]
            if due:
                m = len(due)
                if m > len(pool.uncached_free) + len(pool.cached_free):
                    break  # schedule() will preempt at this step
                for pos, block in zip(due, pool.get_new_blocks(m)):
                    tables[pos].append(block)
                used += m
            j += 1
            duration = 1.0 if step_time is None else base + per_context * context + no_attention
            times.append(now)
            durations.append(duration)
            kv_used.append(used)
            now += duration
            context += num
        self.steps = j
        self.blocks_used = used
        self.decode_context = context
        return times, durations, kv_used

    def close(self) -> None:
        """Bring every request's fields to the end of the run (what `allocate_slots` and `update_from_output`
        would have written step by step)."""
        d = self.steps
        if self._closed or not d:
            return
        self._closed = True
        kv = self.kv
        bs = kv.block_size
        num_cached = kv.managers[0].num_cached if kv.enable_caching else None
        for request, blocks, held in zip(self.requests, self._tables, self._held):
            request.num_computed += d
            request.num_output += d
            request.num_tokens += d
            request.free_slots_upto = len(blocks) * bs
            if len(blocks) != held and num_cached is not None:
                # The last new block was taken at a block's first token: the one before it is full.
                num_cached[request.rid] = max(num_cached[request.rid], len(blocks) - 1)
