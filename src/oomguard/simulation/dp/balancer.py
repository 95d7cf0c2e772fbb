"""Which data-parallel rank gets the next request: vLLM's own rule, round robin, and an llm-d style router.

Every balancer sees the ranks the way its real counterpart does, through a `RankView` per rank: the
(waiting, running, KV usage) counts the rank last published (stale, see `STATS_INTERVAL_S`), plus what the
router itself knows exactly (its requests still in flight on each rank). The simulator fills the views; a
balancer only decides, so each rule can be checked on hand-built states.

- `VllmBalancer` is vLLM 0.33's internal DP load balancer, `DPLBAsyncMPClient.get_core_engine_for_request`
  in vllm/v1/engine/core_client.py (vLLM v0.33.0):

      score = max(client_count x in_flight, waiting + running)
      if waiting: score += waiting x 6 x max(0, kv_cache_usage - 0.5)

  the lowest score wins, scanning from a start index that rotates by one after every choice (ties go to
  the first scanned); the chosen rank's waiting count is then bumped locally by `client_count` until the
  next stats publish overwrites it. The counts come from the DP coordinator (vllm/v1/engine/coordinator.py,
  `min_stats_update_interval_ms = 100`), which re-publishes the engines' latest counts at most every 100 ms,
  so the front-end routes on counts up to 100 ms old.
- `VllmLegacyBalancer` is the rule before vLLM PR #49204 (https://github.com/vllm-project/vllm/pull/49204):
  score = waiting x 4 + running over the same stale counts with the same local bump, the rotating tie-break
  of PR #47420 (https://github.com/vllm-project/vllm/pull/47420) included.
- `RoundRobinBalancer`: rank i, i+1, ... regardless of load (a Kubernetes Service,
`--data-parallel-external-lb`
  behind a plain proxy).
- `KvAwareBalancer`: the llm-d inference scheduler's default profile (Gateway API Inference Extension EPP):
  a weighted sum of the prefix-cache scorer (weight 3: the fraction of the request's prefix blocks the router
  has already sent to that rank, longest-prefix match, `prefix/plugin.go`) and the queue scorer (weight 2:
  (max_waiting - waiting) / (max_waiting - min_waiting), 1.0 when all are equal, `scorer/queue.go`); the
  highest total wins, ties broken at random (seeded, so a run is reproducible). Its metrics are scraped
  every `KV_AWARE_SCRAPE_S`.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

STATS_INTERVAL_S = 0.1  # vLLM DPCoordinator: min_stats_update_interval_ms = 100
KV_AWARE_SCRAPE_S = 0.05  # GIE EPP: refreshMetricsInterval 50 ms
# vLLM 0.33 `get_core_engine_for_request`: waiting requests cost up to 3x more as KV usage goes 50% -> 100%.
KV_PENALTY_START = 0.5
KV_PENALTY_SLOPE = 6.0
LEGACY_WAITING_WEIGHT = 4  # before vLLM PR #49204: waiting * 4 + running
PREFIX_SCORER_WEIGHT = 3.0  # llm-d default scheduling profile: prefix-cache-scorer weight 3
QUEUE_SCORER_WEIGHT = 2.0  # llm-d default scheduling profile: queue-scorer weight 2
PREFIX_LRU_BLOCKS_PER_RANK = 31250  # GIE prefix plugin: DefaultLRUCapacityPerServer
KV_AWARE_SEED = 0


class BalancerKind(Enum):
    VLLM = "vllm"
    VLLM_LEGACY = "vllm-legacy"
    ROUND_ROBIN = "round-robin"
    KV_AWARE = "kv-aware"

    @classmethod
    def parse(cls, text: str) -> BalancerKind:
        key = text.strip().lower().replace("_", "-")
        for kind in cls:
            if kind.value == key:
                return kind
        raise ValueError(f"unknown balancer {text!r} (choose from {', '.join(k.value for k in cls)})")


@dataclass
class RankView:
    """What a balancer knows of one rank when it chooses: the published (stale) counts and its own exact
    in-flight count."""

    waiting: float  # the rank's waiting requests as last published (+ local bumps since, for vLLM's rule)
    running: float
    kv_usage: float  # 0..1
    in_flight: int = 0  # requests this router sent to the rank that have not finished


class Balancer:
    """Chooses a rank index for a request; `stats_interval_s` is how stale the published counts are."""

    kind: BalancerKind
    stats_interval_s: float = STATS_INTERVAL_S

    @property
    def rule(self) -> str:
        raise NotImplementedError

    def choose(self, views: Sequence[RankView], prefix_ids: tuple[int, ...] = ()) -> int:
        raise NotImplementedError

    def published(self, views: list[RankView]) -> None:
        """A fresh stats publish arrived (the simulator replaced the views' counts)."""


class VllmBalancer(Balancer):
    """vLLM v0.33.0, vllm/v1/engine/core_client.py, `DPLBAsyncMPClient.get_core_engine_for_request`."""

    kind = BalancerKind.VLLM

    def __init__(self, num_ranks: int, client_count: int = 1, client_index: int = 0) -> None:
        self.client_count = client_count
        # `eng_start_index = (len(self.core_engines) * self.client_index) // client_count`
        self.start = (num_ranks * client_index) // client_count

    @property
    def rule(self) -> str:
        return (
            "vLLM 0.33 internal DP load balancer: lowest max(in-flight, waiting + running) + waiting x 6 x "
            f"max(0, KV usage - 0.5), on counts published every {self.stats_interval_s * 1e3:.0f} ms"
        )

    def score(self, view: RankView) -> float:
        score = max(float(self.client_count * view.in_flight), view.waiting + view.running)
        if view.waiting:
            score += view.waiting * KV_PENALTY_SLOPE * max(0.0, view.kv_usage - KV_PENALTY_START)
        return score

    def choose(self, views: Sequence[RankView], prefix_ids: tuple[int, ...] = ()) -> int:
        n = len(views)
        best_score = float("inf")
        best = 0
        for i in range(n):
            idx = (self.start + i) % n
            score = self.score(views[idx])
            if score < best_score:  # strict: ties go to the first scanned
                best_score, best = score, idx
        views[best].waiting += self.client_count  # "Increment local waiting count ..."
        self.start = (self.start + 1) % n  # rotate the scan start (PR #47420)
        return best


class VllmLegacyBalancer(VllmBalancer):
    """Before vLLM PR #49204: `score = waiting * 4 + running` over the coordinator's counts."""

    kind = BalancerKind.VLLM_LEGACY

    @property
    def rule(self) -> str:
        return (
            "vLLM internal DP load balancer before PR #49204: lowest waiting x 4 + running, on counts "
            f"published every {self.stats_interval_s * 1e3:.0f} ms"
        )

    def score(self, view: RankView) -> float:
        return view.waiting * LEGACY_WAITING_WEIGHT + view.running


class RoundRobinBalancer(Balancer):
    kind = BalancerKind.ROUND_ROBIN

    def __init__(self) -> None:
        self.next = 0

    @property
    def rule(self) -> str:
        return "round robin: rank 0, 1, 2, ... regardless of load"

    def choose(self, views: Sequence[RankView], prefix_ids: tuple[int, ...] = ()) -> int:
        chosen = self.next % len(views)
        self.next = chosen + 1
        return chosen


class KvAwareBalancer(Balancer):
    """llm-d / GIE EPP default profile: 3 x prefix-cache score + 2 x queue score, highest wins."""

    kind = BalancerKind.KV_AWARE
    stats_interval_s = KV_AWARE_SCRAPE_S

    def __init__(self, num_ranks: int, seed: int = KV_AWARE_SEED) -> None:
        # Per rank, the prefix blocks the router sent there, least recently used first (the GIE indexer).
        self.index: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(num_ranks)]
        self.rng = random.Random(seed)

    @property
    def rule(self) -> str:
        return (
            f"llm-d KV-aware router: highest {PREFIX_SCORER_WEIGHT:g} x prefix-cache match fraction + "
            f"{QUEUE_SCORER_WEIGHT:g} x queue score (fewest waiting), metrics scraped every "
            f"{self.stats_interval_s * 1e3:.0f} ms, random tie-break"
        )

    def prefix_match(self, rank: int, prefix_ids: tuple[int, ...]) -> int:
        """Leading prefix blocks of the request the router has already routed to `rank`."""
        blocks = self.index[rank]
        n = 0
        for block in prefix_ids:
            if block not in blocks:
                break
            n += 1
        return n

    def scores(self, views: Sequence[RankView], prefix_ids: tuple[int, ...]) -> list[float]:
        lo = min(v.waiting for v in views)
        hi = max(v.waiting for v in views)
        total = len(prefix_ids)
        out = []
        for rank, view in enumerate(views):
            queue = 1.0 if hi == lo else (hi - view.waiting) / (hi - lo)
            prefix = self.prefix_match(rank, prefix_ids) / total if total else 0.0
            out.append(PREFIX_SCORER_WEIGHT * prefix + QUEUE_SCORER_WEIGHT * queue)
        return out

    def choose(self, views: Sequence[RankView], prefix_ids: tuple[int, ...] = ()) -> int:
        scores = self.scores(views, prefix_ids)
        top = max(scores)
        tied = [i for i, s in enumerate(scores) if s == top]
        chosen = tied[0] if len(tied) == 1 else self.rng.choice(tied)
        blocks = self.index[chosen]
        for block in prefix_ids:  # PreRequest: remember what the chosen rank now caches
            blocks[block] = None
            blocks.move_to_end(block)
        while len(blocks) > PREFIX_LRU_BLOCKS_PER_RANK:
            blocks.popitem(last=False)
        return chosen


def make_balancer(kind: BalancerKind, num_ranks: int, client_count: int = 1) -> Balancer:
    if kind is BalancerKind.VLLM:
        return VllmBalancer(num_ranks, client_count)
    if kind is BalancerKind.VLLM_LEGACY:
        return VllmLegacyBalancer(num_ranks, client_count)
    if kind is BalancerKind.ROUND_ROBIN:
        return RoundRobinBalancer()
    return KvAwareBalancer(num_ranks)
