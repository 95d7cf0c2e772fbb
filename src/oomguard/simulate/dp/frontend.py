"""The front-end(s) that route requests to DP ranks, each with the stale view its balancer works from.

vLLM runs `--api-server-count` API servers (default: the DP size with the internal balancer, vLLM v0.33.0
vllm/entrypoints/cli/serve.py), each with its own `DPLBAsyncMPClient`: its own copy of the counts (refreshed
when the coordinator publishes, then bumped locally per request it routes), its own exact in-flight count
per rank, and a scan start of `num_ranks x client_index // client_count`. Connections reach the API servers
through one port shared with SO_REUSEPORT, which the kernel spreads by connection hash: here, uniformly at
random with a fixed seed. An external router (round robin, the llm-d scheduler) is a single client.

A publish happens on the interval's grid (`Balancer.stats_interval_s`) when any rank's counts changed since
the last one, as vLLM's coordinator does (it re-sends unchanged counts only every 5 s, which changes nothing).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from oomguard.simulate.dp.balancer import Balancer, BalancerKind, RankView, VllmBalancer, make_balancer
from oomguard.simulate.dp.rank import RankEngine

CLIENT_SEED = 0


class Frontend:
    """Routes each request: picks a client (API server), refreshes its view if a publish is due, asks its
    balancer. `clients` is 1 for external routers."""

    def __init__(self, kind: BalancerKind, num_ranks: int, clients: int, by_steps: bool) -> None:
        if kind not in (BalancerKind.VLLM, BalancerKind.VLLM_LEGACY):
            clients = 1
        self.kind = kind
        self.balancers: list[Balancer] = []
        for c in range(clients):
            balancer = make_balancer(kind, num_ranks, clients)
            if isinstance(balancer, VllmBalancer):
                balancer.start = (num_ranks * c) // clients
            self.balancers.append(balancer)
        self.views = [[RankView(0, 0, 0.0) for _ in range(num_ranks)] for _ in range(clients)]
        self.in_flight = [[0] * num_ranks for _ in range(clients)]
        self.interval = 1.0 if by_steps else self.balancers[0].stats_interval_s
        self.last_tick = -math.inf
        self.last_counts: list[tuple[int, int, float]] = []
        self.client_of: dict[int, int] = {}  # request index -> client that routed it
        self.finish_seen = [0] * num_ranks
        self.rng = random.Random(CLIENT_SEED)

    @property
    def rule(self) -> str:
        rule = self.balancers[0].rule
        if len(self.balancers) > 1:
            rule += f"; {len(self.balancers)} API servers, each with its own view"
        return rule

    def route(self, index: int, at: float, prefix_ids: tuple[int, ...], ranks: Sequence[RankEngine]) -> int:
        """The rank for request `index` arriving at `at`; every rank has run its steps that start before `at`."""
        self._publish(at, ranks)
        self._account_finishes(at, ranks)
        c = 0 if len(self.balancers) == 1 else self.rng.randrange(len(self.balancers))
        views = self.views[c]
        flights = self.in_flight[c]
        for k, view in enumerate(views):
            view.in_flight = flights[k]
        chosen = self.balancers[c].choose(views, prefix_ids)
        flights[chosen] += 1
        self.client_of[index] = c
        return chosen

    def _publish(self, at: float, ranks: Sequence[RankEngine]) -> None:
        tick = math.floor(at / self.interval) * self.interval
        if tick <= self.last_tick:
            return
        self.last_tick = tick
        counts = [rank.published(tick) for rank in ranks]
        if counts == self.last_counts:
            return  # unchanged: the coordinator does not re-publish, local bumps stay
        self.last_counts = counts
        for views in self.views:
            for view, (waiting, running, kv) in zip(views, counts):
                view.waiting, view.running, view.kv_usage = waiting, running, kv

    def _account_finishes(self, at: float, ranks: Sequence[RankEngine]) -> None:
        """Each client learns of its finished requests as their outputs stream back (exact, not stale)."""
        for k, rank in enumerate(ranks):
            seen = self.finish_seen[k]
            times = rank.finish_times
            done = rank.finished
            while seen < len(times) and times[seen] <= at:
                c = self.client_of.get(done[seen].index)
                if c is not None:
                    self.in_flight[c][k] -= 1
                seen += 1
            self.finish_seen[k] = seen
