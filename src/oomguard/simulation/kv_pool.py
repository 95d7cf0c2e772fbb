"""KV cache blocks as vLLM 0.33's V1 KV cache manager hands them out, one request at a time.

The mechanism followed (vLLM `v1/core/block_pool.py`, `single_type_kv_cache_manager.py`,
`kv_cache_coordinator.py`, `kv_cache_manager.py`):

- One pool of `num_gpu_blocks` blocks shared by every KV cache group; block 0 is the null block, never
  handed out, so `num_gpu_blocks - 1` are usable. A model with sliding-window and full-attention layers has
  one group per kind (more when the layer counts differ, see the planner); each group keeps its own block
  table per request, all drawn from the same pool.
- A request needs `cdiv(tokens, block_size)` blocks per group. Sliding-window groups replace the blocks that
  fell out of the window (`tokens - window + 1` tokens back) with the null block before each allocation and
  free them; chunked-local groups do the same for whole chunks behind the current one.
- Admission of a waiting request checks that the *whole* sequence would fit (`scheduler_reserve_full_isl`,
  on by default), with sliding-window / chunked-local groups capped at their recycling-aware per-request
  bound `cdiv(min(window - 1 + in_flight_tokens, max_model_len), block) + 1`.
- Prefix caching: every full block gets a hash chained over its tokens (here: an interned content key,
  the same for equal token prefixes). Freed blocks with a hash stay findable until the pool reuses them;
  the free queue hands out hash-less blocks first (most recently freed first) and evicts cached blocks in
  least-recently-freed order, a finished request's tail blocks first. A lookup returns the longest run of
  cached blocks from the start, at most `prompt - 1` tokens, so the last token is always recomputed.
  NOTE: a block past a request's shared prefix (the rest of its prompt, its output) gets a hash in vLLM too,
  but only two things can ever tell: where it waits in the free queue once freed, and a lookup by the same
  request after a preemption (recompute finds its own blocks). So in groups that keep every block until the
  request ends, such blocks are hashed when freed: findable (their own key) when the request is preempted;
  when it finished, they join the cached end of the free queue without a hash (no lookup could find theirs).
  Same pool, far fewer map updates.
- Reference counts matter only for blocks with a hash: only those can be shared (a lookup finds them). A
  hash-less block has exactly one holder, so handing one out or taking it back touches no count.

Everything here is bookkeeping over integers; there is no I/O and no printing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

NULL_BLOCK = 0  # vLLM: BlockPool pops block 0 as the null block placeholder at start-up
PRIVATE_KEY = 0  # a hash no lookup finds (shared keys are >= 1, a request's own keys < 0)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class KvGroupSpec:
    """One KV cache group, as far as the scheduler sees it: its kind, block size and window."""

    kind: str  # "full" | "sliding_window" | "chunked_local" | "mla" (MLA allocates like full attention)
    block_size: int
    sliding_window: int | None = None
    chunk_size: int | None = None

    def admission_cap_blocks(self, in_flight_tokens: int, max_model_len: int) -> int | None:
        """vLLM `SlidingWindowSpec.max_admission_blocks_per_request` / chunked-local counterpart; None for
        groups that keep every block until the request finishes."""
        if self.kind == "sliding_window" and self.sliding_window:
            return cdiv(min(self.sliding_window - 1 + in_flight_tokens, max_model_len), self.block_size) + 1
        if self.kind == "chunked_local" and self.chunk_size:
            return cdiv(min(self.chunk_size + in_flight_tokens, max_model_len), self.block_size)
        return None

    def skipped_tokens(self, num_computed: int) -> int:
        """Tokens no longer attended by the next token (vLLM `get_num_skipped_tokens`)."""
        if self.kind == "sliding_window" and self.sliding_window:
            return max(0, num_computed - self.sliding_window + 1)
        if self.kind == "chunked_local" and self.chunk_size:
            return (num_computed // self.chunk_size) * self.chunk_size
        return 0

    @property
    def recycles(self) -> bool:
        return self.skipped_tokens(1 << 40) > 0


class HashedRequest(Protocol):
    """What the pool needs to know about a request to hash its blocks."""

    rid: str
    prompt_tokens: int
    num_tokens: int  # prompt + generated so far
    num_computed: int
    shared_tokens: int  # leading tokens other requests may share; blocks past them are the request's own
    shared_prefix_boundary: int
    free_slots_upto: int  # written here: the sequence length it may reach before it needs this manager again
    num_preemptions: int  # 0: none of its own blocks was ever found again (so none has a hash while held)

    def block_key(self, index: int, block_size: int) -> int: ...


class CachedFreeQueue:
    """Free blocks that carry a hash in vLLM, least recently freed first (the back of vLLM's free queue).

    A list read from `head`: popping the oldest m blocks is one slice. A block taken out of the middle (a
    prefix hit on a free block, so a findable one) leaves its entry in place, marked dead and skipped when
    the front reaches it. Indices are absolute: `base` entries were dropped from the front. `findable`
    counts the live entries a lookup can find (the rest are finished requests' own blocks, module NOTE):
    while it is 0, evicting needs no look at the blocks."""

    __slots__ = ("base", "dead", "findable", "head", "items", "where")

    def __init__(self, num_blocks: int) -> None:
        self.items: list[int] = []
        self.base = 0
        self.head = 0  # first entry not yet popped, relative to `items`
        self.where = [-1] * num_blocks  # block with a findable hash -> absolute index of its entry
        self.dead: set[int] = set()  # absolute indices of entries whose block left early
        self.findable = 0

    def __len__(self) -> int:
        return len(self.items) - self.head - len(self.dead)

    def append_all(self, blocks: list[int], findable: list[int]) -> None:
        """Append `blocks` in order; `findable` are the positions in it of blocks a lookup can find."""
        if findable:
            where = self.where
            start = self.base + len(self.items)
            for i in findable:
                where[blocks[i]] = start + i
            self.findable += len(findable)
        self.items.extend(blocks)

    def remove(self, block: int) -> None:
        self.dead.add(self.where[block])
        self.findable -= 1

    def pop_oldest(self, m: int) -> list[int]:
        items = self.items
        h = self.head
        dead = self.dead
        if m == 1 and not dead:
            out = [items[h]]
            h += 1
        elif not dead:
            out = items[h : h + m]
            h += m
        else:
            out = []
            base = self.base
            while len(out) < m:
                if base + h in dead:
                    dead.discard(base + h)
                else:
                    out.append(items[h])
                h += 1
        if h > 4096 and 2 * h > len(items):
            del items[:h]
            self.base += h
            h = 0
        self.head = h
        return out


class BlockPool:
    """The free-block queue and the prefix-cache map of one KV pool (vLLM `BlockPool`)."""

    def __init__(self, num_blocks: int, num_groups: int, enable_caching: bool) -> None:
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.ref_cnt = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self.block_group = [0] * num_blocks
        # The free queue is "hash-less blocks, then cached blocks in LRU order": freed hash-less blocks are
        # prepended (reused first), freed cached blocks appended, so every hash-less block sits ahead of every
        # cached one. A stack (top = front of the queue) and a FIFO (`CachedFreeQueue`) keep that order.
        self.uncached_free: list[int] = list(range(num_blocks - 1, NULL_BLOCK, -1))
        self.cached_free = CachedFreeQueue(num_blocks)
        self.cache: list[dict[int, list[int]]] = [{} for _ in range(num_groups)]
        self.free_count = num_blocks - 1  # len(uncached_free) + len(cached_free), kept as they change

    @property
    def num_free(self) -> int:
        return self.free_count

    @property
    def num_used(self) -> int:
        """Blocks held by requests: what `vllm:kv_cache_usage_perc` multiplies by `num_blocks - 1`."""
        return self.num_blocks - 1 - self.num_free

    def get_cached(self, key: int, groups: Sequence[int]) -> list[int] | None:
        """The first cached block with this hash in every group, or None when any group misses."""
        if key == PRIVATE_KEY:
            return None
        found = []
        for gid in groups:
            blocks = self.cache[gid].get(key)
            if not blocks:
                return None
            found.append(blocks[0])
        return found

    def get_new_blocks(self, n: int) -> list[int]:
        """`n` hash-less blocks from the front of the free queue (hash-less ones first, then the least
        recently freed cached ones, whose hashes are dropped). No count changes: see the module docstring."""
        stack = self.uncached_free
        have = len(stack)
        self.free_count -= n
        if n <= have:
            if n == 1:  # a decode crossing into its next block: the common case
                return [stack.pop()]
            out = stack[have - n :][::-1]  # the top of the stack first
            del stack[have - n :]
            return out
        out = stack[::-1]
        stack.clear()
        queue = self.cached_free
        evicted = queue.pop_oldest(n - have)
        if queue.findable:
            hashes = self.block_hash
            for block in evicted:
                if hashes[block] is not None:  # findable: drop it from the lookup map
                    self._evict(block)
                    queue.findable -= 1
        out.extend(evicted)
        return out

    def _evict(self, block: int) -> None:
        key = self.block_hash[block]
        if key is None:
            return
        table = self.cache[self.block_group[block]]
        holders = table[key]
        holders.remove(block)
        if not holders:
            del table[key]
        self.block_hash[block] = None

    def touch(self, blocks: Sequence[int]) -> None:
        """A prefix hit takes a reference; a free cached block leaves the free queue."""
        for block in blocks:
            if block == NULL_BLOCK:
                continue
            if self.ref_cnt[block] == 0:
                self.cached_free.remove(block)
                self.free_count -= 1
            self.ref_cnt[block] += 1

    def free_blocks(self, ordered: Sequence[int]) -> None:
        """Release blocks, first-to-evict first (vLLM frees a request's blocks tail first)."""
        first: list[int] = []
        cached: list[int] = []
        findable: list[int] = []
        self._release(ordered, first, cached, findable)
        if first:
            self.uncached_free.extend(reversed(first))
        if cached:
            self.cached_free.append_all(cached, findable)
        self.free_count += len(first) + len(cached)

    def free_finished(self, blocks: list[int], lo: int, hi: int, refound: bool) -> None:
        """`free_blocks(blocks[::-1])` for a finished request whose full blocks `blocks[lo:hi]` are its own:
        those carry vLLM hashes no lookup can find, so they join the cached end of the queue without one
        (module NOTE). Only a block it found again after a preemption (`refound`: it was preempted) has a
        hash there."""
        first: list[int] = []
        cached: list[int] = []
        findable: list[int] = []
        if hi < len(blocks):
            self._release(blocks[hi:][::-1], first, cached, findable)
        own = blocks[lo:hi]
        own.reverse()
        if refound:
            hashes = self.block_hash
            ref_cnt = self.ref_cnt
            for block in own:
                if hashes[block] is None:
                    cached.append(block)
                else:
                    left = ref_cnt[block] = ref_cnt[block] - 1
                    if left == 0:
                        findable.append(len(cached))
                        cached.append(block)
        else:
            cached.extend(own)
        if lo:
            self._release(blocks[lo - 1 :: -1], first, cached, findable)
        if first:
            self.uncached_free.extend(reversed(first))
        if cached:
            self.cached_free.append_all(cached, findable)
        self.free_count += len(first) + len(cached)

    def _release(
        self, ordered: Sequence[int], first: list[int], cached: list[int], findable: list[int]
    ) -> None:
        """Sort released blocks into hash-less ones (`first`) and cached ones whose last holder let go
        (`cached`, `findable` their positions there)."""
        ref_cnt = self.ref_cnt
        hashes = self.block_hash
        for block in ordered:
            if block == NULL_BLOCK:
                continue
            key = hashes[block]
            if key is None:
                first.append(block)  # its only holder
                continue
            left = ref_cnt[block] = ref_cnt[block] - 1
            if left == 0:
                if key != PRIVATE_KEY:
                    findable.append(len(cached))
                cached.append(block)

    def cache_block(self, block: int, key: int, group: int) -> None:
        """Give a held, hash-less block (so its holder is the only one) its hash."""
        if self.block_hash[block] is not None:
            return
        self.block_hash[block] = key
        self.ref_cnt[block] = 1
        if key == PRIVATE_KEY:
            return
        self.block_group[block] = group
        self.cache[group].setdefault(key, []).append(block)


class GroupManager:
    """Block tables of one KV cache group (vLLM `SingleTypeKVCacheManager` and its subclasses)."""

    def __init__(self, spec: KvGroupSpec, gid: int, pool: BlockPool, cap_blocks: int | None) -> None:
        self.spec = spec
        self.gid = gid
        self.pool = pool
        self.block_size = spec.block_size
        self.cap_blocks = cap_blocks
        self.recycles = spec.recycles
        # Groups that keep every block until the request ends hash its own blocks lazily (module NOTE).
        self.lazy_own_hashes = pool.enable_caching and not spec.recycles
        self.req_blocks: dict[str, list[int]] = {}
        self.num_cached: dict[str, int] = {}

    def blocks_to_allocate(
        self,
        rid: str,
        num_tokens: int,
        new_computed: Sequence[int],
        total_computed: int,
        apply_cap: bool,
    ) -> int:
        required = cdiv(num_tokens, self.block_size)
        if apply_cap and self.cap_blocks is not None:
            required = min(required, self.cap_blocks)
        held = self.req_blocks.get(rid)
        num_held = len(held) if held else 0
        if rid in self.num_cached:  # a running request: no new prefix hits
            return max(required - num_held, 0)
        skipped_blocks = self.spec.skipped_tokens(total_computed) // self.block_size
        new_blocks = max(required - max(skipped_blocks, len(new_computed) + num_held), 0)
        skip_new = max(0, skipped_blocks - num_held)
        ref_cnt = self.pool.ref_cnt
        evictable = sum(1 for b in new_computed[skip_new:] if b != NULL_BLOCK and ref_cnt[b] == 0)
        return new_blocks + evictable

    def add_computed_blocks(self, rid: str, new_computed: Sequence[int], total_computed: int) -> None:
        """Adopt prefix-hit blocks (vLLM `add_local_computed_blocks`); out-of-window ones become null."""
        if rid in self.num_cached:
            return
        skipped = self.spec.skipped_tokens(total_computed) // self.block_size
        kept = list(new_computed[skipped:]) if skipped else list(new_computed)
        if self.pool.enable_caching:
            self.pool.touch(kept)
        blocks = [NULL_BLOCK] * skipped + kept
        self.req_blocks[rid] = blocks
        self.num_cached[rid] = len(blocks)

    def allocate_new_blocks(self, rid: str, num_tokens: int) -> None:
        blocks = self.req_blocks.get(rid)
        if blocks is None:
            blocks = self.req_blocks[rid] = []
        need = cdiv(num_tokens, self.block_size) - len(blocks)
        if need > 0:
            blocks.extend(self.pool.get_new_blocks(need))

    def remove_skipped_blocks(self, rid: str, num_computed: int) -> None:
        """Free the blocks that fell out of the window and put the null block in their place."""
        skipped = self.spec.skipped_tokens(num_computed) // self.block_size
        if skipped <= 0:
            return
        blocks = self.req_blocks.get(rid)
        if not blocks:
            return
        freed: list[int] = []
        for i in range(min(skipped, len(blocks)) - 1, -1, -1):
            if blocks[i] == NULL_BLOCK:
                break
            freed.append(blocks[i])
            blocks[i] = NULL_BLOCK
        if freed:
            self.pool.free_blocks(freed)

    def cache_blocks(self, request: HashedRequest, num_tokens: int) -> None:
        """Give every newly full block its hash (vLLM caches at allocation, up to the known tokens)."""
        rid = request.rid
        start = self.num_cached.get(rid, 0)
        end = num_tokens // self.block_size
        if start >= end:
            return
        blocks = self.req_blocks[rid]
        pool = self.pool
        wanted = self._sparse_retention(request, start, end) if self.recycles else None
        stop = min(end, len(blocks))
        if self.lazy_own_hashes:
            stop = min(stop, request.shared_tokens // self.block_size)
        for i in range(start, stop):
            block = blocks[i]
            if block != NULL_BLOCK and (wanted is None or i in wanted):
                pool.cache_block(block, request.block_key(i, self.block_size), self.gid)
        self.num_cached[rid] = end

    def _sparse_retention(self, request: HashedRequest, start: int, end: int) -> set[int] | None:
        """Sliding-window blocks worth a hash (vLLM `reachable_block_mask`, `prefix_cache_retention_interval`
        0, the default): only the window's worth of blocks ending at a boundary a later request can resume
        at: the prompt's last token (a resend) and a shared-prefix junction found at admission."""
        if self.spec.kind != "sliding_window" or not self.spec.sliding_window:
            return None  # chunked-local groups cache densely
        bs = self.block_size
        need = cdiv(self.spec.sliding_window - 1, bs)
        wanted: set[int] = set()
        for boundary in (request.prompt_tokens - 1, request.shared_prefix_boundary):
            if boundary <= 0:
                continue
            stop = (boundary // bs * bs) // bs
            wanted.update(range(max(start, stop - need), min(end, stop)))
        return wanted

    def next_hash_is_shared(self, request: HashedRequest) -> bool:
        """Whether the next block to fill gets its hash now (a shared block) rather than when freed."""
        if not self.lazy_own_hashes:
            return True
        return (self.num_cached[request.rid] + 1) * self.block_size <= request.shared_tokens

    def free(self, request: HashedRequest, findable: bool = False) -> None:
        """Release a request's blocks. `findable`: it was preempted and may look its own blocks up again."""
        rid = request.rid
        blocks = self.req_blocks.pop(rid, None)
        self.num_cached.pop(rid, None)
        if not blocks:
            return
        if self.lazy_own_hashes:
            # The hashes vLLM gave the request's own full blocks as they filled (see the module NOTE).
            pool = self.pool
            hashes = pool.block_hash
            bs = self.block_size
            lo = request.shared_tokens // bs
            hi = min(request.num_computed // bs, len(blocks))
            if findable:
                for i in range(lo, hi):
                    block = blocks[i]
                    if block != NULL_BLOCK and hashes[block] is None:
                        pool.cache_block(block, request.block_key(i, bs), self.gid)
            elif lo < hi:
                pool.free_finished(blocks, lo, hi, request.num_preemptions > 0)
                return
        self.pool.free_blocks(blocks[::-1])

    def held_blocks(self) -> int:
        return len({b for blocks in self.req_blocks.values() for b in blocks if b != NULL_BLOCK})


def longest_hit(
    spec: KvGroupSpec,
    request: HashedRequest,
    max_length: int,
    groups: Sequence[int],
    pool: BlockPool,
) -> tuple[list[list[int]], int]:
    """Longest cached prefix of `request` in these same-spec groups (vLLM `find_longest_cache_hit`)."""
    bs = spec.block_size
    max_blocks = max_length // bs
    if spec.kind == "sliding_window" and spec.sliding_window:
        # Right to left: a hit needs the cdiv(window - 1, block) blocks before the hit point, earlier blocks
        # may be missing (they are out of the window and become null blocks).
        need = cdiv(spec.sliding_window - 1, bs)
        computed = [[NULL_BLOCK] * max_blocks for _ in groups]
        run = 0
        for i in range(max_blocks - 1, -1, -1):
            cached = pool.get_cached(request.block_key(i, bs), groups)
            if cached:
                for col, block in zip(computed, cached):
                    col[i] = block
                run += 1
                if run >= need:
                    for col in computed:
                        del col[i + run :]
                    return computed, len(computed[0]) * bs
            else:
                run = 0
        for col in computed:
            del col[run:]
        return computed, len(computed[0]) * bs
    start = 0
    computed = [[] for _ in groups]
    if spec.kind == "chunked_local" and spec.chunk_size and max_length > 0:
        # Chunks behind the current one are out of reach anyway: counted as computed, null blocks.
        start = (max_length // spec.chunk_size * spec.chunk_size) // bs
        computed = [[NULL_BLOCK] * start for _ in groups]
    for i in range(start, max_blocks):
        cached = pool.get_cached(request.block_key(i, bs), groups)
        if not cached:
            break
        for col, block in zip(computed, cached):
            col.append(block)
    return computed, len(computed[0]) * bs if groups else 0


class KvCacheManager:
    """All groups of one pool, allocating for a request the way vLLM's `KVCacheManager.allocate_slots`
    does."""

    def __init__(
        self,
        groups: Sequence[KvGroupSpec],
        num_blocks: int,
        max_model_len: int,
        in_flight_tokens: int,
        enable_caching: bool,
    ) -> None:
        if not groups:
            raise ValueError("a KV pool needs at least one group")
        self.groups = tuple(groups)
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.pool = BlockPool(num_blocks, len(groups), enable_caching)
        self.managers = tuple(
            GroupManager(g, i, self.pool, g.admission_cap_blocks(in_flight_tokens, max_model_len))
            for i, g in enumerate(self.groups)
        )
        self.any_recycling = any(m.recycles for m in self.managers)
        # Prefix-cache lookups go through one representative per distinct spec, full attention first
        # (vLLM `HybridKVCacheCoordinator.verify_and_split_kv_cache_groups`).
        by_spec: dict[KvGroupSpec, list[int]] = {}
        for i, g in enumerate(self.groups):
            by_spec.setdefault(g, []).append(i)
        self.spec_groups = sorted(by_spec.items(), key=lambda item: item[0].kind not in ("full", "mla"))
        self.simple_hybrid = len(self.spec_groups) == 2 and self.spec_groups[0][0].kind in ("full", "mla")
        self.empty_hit: tuple[list[int], ...] = tuple([] for _ in self.groups)
        # Fast path for the common single full-attention group without prefix caching.
        self.single_full = len(self.groups) == 1 and not self.any_recycling
        self.block_size = self.groups[0].block_size

    @property
    def num_free(self) -> int:
        return self.pool.num_free

    @property
    def num_used(self) -> int:
        return self.pool.num_used

    def computed_blocks(self, request: HashedRequest) -> tuple[tuple[list[int], ...], int, int]:
        """Prefix-cache hit for a request about to be admitted: blocks per group, hit tokens, and the
        shared-prefix junction to pin (where full attention hit further than a sliding-window group, else
        0)."""
        if not self.enable_caching:
            return self.empty_hit, 0, 0
        max_len = request.num_tokens - 1  # the last token is always recomputed, for its logits
        pool = self.pool
        if len(self.spec_groups) == 1:
            spec, gids = self.spec_groups[0]
            cols, hit = longest_hit(spec, request, max_len, gids, pool)
            out: list[list[int]] = [[] for _ in self.groups]
            for gid, col in zip(gids, cols):
                out[gid] = col
            return tuple(out), hit, 0
        # Hybrid: each kind may only shorten the candidate; repeat until no kind shortens it.
        hit_len = max_len
        longest = 0
        per_group: dict[int, list[int]] = {}
        while True:
            current = hit_len
            for spec, gids in self.spec_groups:
                cols, new_len = longest_hit(spec, request, current, gids, pool)
                current = new_len
                longest = max(longest, current)
                for gid, col in zip(gids, cols):
                    per_group[gid] = col
            if current >= hit_len or self.simple_hybrid:
                hit_len = current
                break
            hit_len = current
        out = [[] for _ in self.groups]
        for gid, col in per_group.items():
            spec = self.groups[gid]
            if spec.kind in ("full", "mla"):
                col = col[: cdiv(hit_len, spec.block_size)]
            out[gid] = col
        uncached = longest - hit_len
        return tuple(out), hit_len, (hit_len + uncached) if uncached else 0

    def allocate_slots(
        self,
        request: HashedRequest,
        num_computed: int,
        num_new_tokens: int,
        hit_tokens: int = 0,
        hit_blocks: tuple[list[int], ...] | None = None,
        full_sequence_must_fit: bool = False,
    ) -> bool:
        """Give `request` slots for `num_new_tokens` more tokens; False (nothing changed) when the pool lacks
        the blocks. `num_computed` excludes a prefix hit being adopted now (`hit_tokens`)."""
        rid = request.rid
        if self.single_full and hit_blocks is None and not full_sequence_must_fit:
            # A running request on one full-attention group: only the tail can need a block.
            manager = self.managers[0]
            blocks = manager.req_blocks.get(rid)
            cached = manager.num_cached.get(rid)
            if blocks is not None and cached is not None:
                total = num_computed + num_new_tokens
                bs = self.block_size
                need = cdiv(min(total, self.max_model_len), bs) - len(blocks)
                if need > 0:
                    pool = self.pool
                    if need > pool.free_count:
                        return False
                    blocks.extend(pool.get_new_blocks(need))
                if self.enable_caching:
                    end = min(total, request.num_tokens) // bs
                    if end > cached:
                        if request.shared_tokens // bs <= cached:
                            # Only the request's own blocks filled: hashed when freed (module NOTE).
                            manager.num_cached[rid] = cached = end
                        else:
                            manager.cache_blocks(request, min(total, request.num_tokens))
                            cached = manager.num_cached[rid]
                    # Up to the next block boundary when that block's hash is a shared one
                    # (`_note_free_slots`).
                    upto = len(blocks) * bs
                    if (cached + 1) * bs <= request.shared_tokens:
                        upto = min(upto, (cached + 1) * bs - 1)
                    request.free_slots_upto = upto
                else:
                    request.free_slots_upto = len(blocks) * bs
                return True
        if self.single_full and hit_blocks is None and not self.enable_caching:
            manager = self.managers[0]
            blocks = manager.req_blocks.get(rid)
            total = num_computed + num_new_tokens
            if full_sequence_must_fit:
                full = min(request.num_tokens, self.max_model_len)
                need_full = cdiv(full, self.block_size) - (len(blocks) if blocks else 0)
                if need_full > self.pool.num_free:
                    return False
            need = cdiv(min(total, self.max_model_len), self.block_size) - (len(blocks) if blocks else 0)
            if need > 0:
                if need > self.pool.num_free:
                    return False
                if blocks is None:
                    blocks = manager.req_blocks[rid] = []
                    manager.num_cached[rid] = 0
                blocks.extend(self.pool.get_new_blocks(need))
            elif blocks is None:
                blocks = manager.req_blocks[rid] = []
                manager.num_cached[rid] = 0
            self._note_free_slots(request, manager, blocks)
            return True

        request.free_slots_upto = 0  # the general path: ask again next step
        hit = hit_blocks if hit_blocks is not None else self.empty_hit
        local_computed = num_computed + hit_tokens
        total_computed = min(local_computed, self.max_model_len)
        managers = self.managers
        if full_sequence_must_fit:
            full = min(request.num_tokens, self.max_model_len)
            need = 0
            for m in managers:
                need += m.blocks_to_allocate(rid, full, hit[m.gid], total_computed, True)
            if need > self.pool.num_free:
                return False
        main_tokens = total_computed + num_new_tokens
        slot_tokens = min(main_tokens, self.max_model_len)
        if self.any_recycling:
            for m in managers:
                if m.recycles:
                    m.remove_skipped_blocks(rid, total_computed)
        need = 0
        for m in managers:
            need += m.blocks_to_allocate(rid, slot_tokens, hit[m.gid], local_computed, False)
        if need > self.pool.num_free:
            return False
        if rid not in managers[0].num_cached:
            for m in managers:
                m.add_computed_blocks(rid, hit[m.gid], local_computed)
        for m in managers:
            m.allocate_new_blocks(rid, slot_tokens)
        if self.enable_caching:
            cache_upto = min(total_computed + num_new_tokens, request.num_tokens)
            for m in managers:
                m.cache_blocks(request, cache_upto)
        return True

    def _note_free_slots(self, request: HashedRequest, manager: GroupManager, blocks: list[int]) -> None:
        """Single full-attention group: up to what length the request needs neither a new block nor a new
        hash (the next block boundary with prefix caching), so the scheduler can skip asking."""
        upto = len(blocks) * self.block_size
        if self.enable_caching and manager.next_hash_is_shared(request):
            upto = min(upto, (manager.num_cached[request.rid] + 1) * self.block_size - 1)
        request.free_slots_upto = upto

    def new_blocks_needed(self, request: HashedRequest, total_tokens: int) -> int:
        """Blocks `allocate_slots` would take for a running request reaching `total_tokens` (single full
        group)."""
        blocks = self.managers[0].req_blocks.get(request.rid)
        held = len(blocks) if blocks else 0
        return max(0, cdiv(min(total_tokens, self.max_model_len), self.block_size) - held)

    def free(self, request: HashedRequest, findable: bool = False) -> None:
        """Release every block of a request: finished, or preempted (`findable`: its blocks stay findable)."""
        for m in self.managers:
            m.free(request, findable)

    def group_blocks(self) -> list[int]:
        return [m.held_blocks() for m in self.managers]
