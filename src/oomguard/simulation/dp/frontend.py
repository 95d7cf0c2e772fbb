"""The front-end(s) that route requests to DP ranks, each with the stale view its balancer works from.

vLLM runs `--api-server-count` API servers (default: the DP size with the internal balancer, vLLM v0.33.0
vllm/entrypoints/cli/serve.py), each with its own `DPLBAsyncMPClient`: its own copy of the counts (refreshed
when the coordinator publishes, then bumped locally per request it routes), its own exact in-flight count
per rank, and a scan start of `num_ranks x client_index // client_count`. Connections reach the API servers
through one port shared with SO_REUSEPORT, which the kernel spreads by connection hash: here, uniformly at
random with a fixed seed. An external router (round robin, the llm-d scheduler) is a single client.

With `--data-parallel-hybrid-lb` each node's API servers balance over that node's ranks only
(`--data-parallel-size-local` of them; vLLM's client manages `local_engines_only`), and a load balancer in
front of the nodes spreads requests over them, here round robin.

A publish happens on the interval's grid (`Balancer.stats_interval_s`) when any rank's counts changed since
the last one, as vLLM's coordinator does (it re-sends unchanged counts only every 5 s, which changes nothing).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from oomguard.simulation.dp.balancer import Balancer, BalancerKind, RankView, VllmBalancer, make_balancer
from oomguard.simulation.dp.rank import RankEngine

CLIENT_SEED = 0


class Frontend:
    """Routes each request: picks a node group (round robin; one group unless hybrid), a client (API server)
    in it, refreshes the views if a publish is due, asks the client's balancer. `clients` per group is 1 for
    external routers."""

    def __init__(
        self, kind: BalancerKind, num_ranks: int, clients: int, by_steps: bool, ranks_per_group: int = 0
    ) -> None:
        if kind not in (BalancerKind.VLLM, BalancerKind.VLLM_LEGACY):
            clients = 1
        size = ranks_per_group if 0 < ranks_per_group < num_ranks else num_ranks
        self.groups = [list(range(s, min(s + size, num_ranks))) for s in range(0, num_ranks, size)]
        self.balancers: list[list[Balancer]] = []
        self.views: list[list[list[RankView]]] = []  # group -> client -> the group's ranks
        self.in_flight: list[list[list[int]]] = []
        for group in self.groups:
            n = len(group)
            balancers = []
            for c in range(clients):
                balancer = make_balancer(kind, n, clients)
                if isinstance(balancer, VllmBalancer):
                    balancer.start = (n * c) // clients
                balancers.append(balancer)
            self.balancers.append(balancers)
            self.views.append([[RankView(0, 0, 0.0) for _ in range(n)] for _ in range(clients)])
            self.in_flight.append([[0] * n for _ in range(clients)])
        self.interval = 1.0 if by_steps else self.balancers[0][0].stats_interval_s
        self.last_tick = -math.inf
        self.last_counts: list[tuple[int, int, float]] = []
        self.client_of: dict[int, tuple[int, int]] = {}  # request index -> (group, client) that routed it
        self.finish_seen = [0] * num_ranks
        self.next_group = 0
        self.rng = random.Random(CLIENT_SEED)

    @property
    def rule(self) -> str:
        rule = self.balancers[0][0].rule
        clients = len(self.balancers[0])
        if clients > 1:
            rule += f"; {clients} API servers, each with its own view"
        if len(self.groups) > 1:
            rule += (
                f"; hybrid: {len(self.groups)} nodes of {len(self.groups[0])} ranks, each balancing its own, "
                "round robin over the nodes"
            )
        return rule

    def route(self, index: int, at: float, prefix_ids: tuple[int, ...], ranks: Sequence[RankEngine]) -> int:
        """The rank for request `index` arriving at `at`; every rank has run its steps that start before
        `at`."""
        self._publish(at, ranks)
        self._account_finishes(at, ranks)
        g = self.next_group
        self.next_group = (g + 1) % len(self.groups)
        clients = self.balancers[g]
        c = 0 if len(clients) == 1 else self.rng.randrange(len(clients))
        views = self.views[g][c]
        flights = self.in_flight[g][c]
        for k, view in enumerate(views):
            view.in_flight = flights[k]
        chosen = clients[c].choose(views, prefix_ids)
        flights[chosen] += 1
        self.client_of[index] = (g, c)
        return self.groups[g][chosen]

    def _publish(self, at: float, ranks: Sequence[RankEngine]) -> None:
        tick = math.floor(at / self.interval) * self.interval
        if tick <= self.last_tick:
            return
        self.last_tick = tick
        counts = [rank.published(tick) for rank in ranks]
        if counts == self.last_counts:
            return  # unchanged: the coordinator does not re-publish, local bumps stay
        self.last_counts = counts
        for group, client_views in zip(self.groups, self.views):
            for views in client_views:
                for view, k in zip(views, group):
                    view.waiting, view.running, view.kv_usage = counts[k]

    def _account_finishes(self, at: float, ranks: Sequence[RankEngine]) -> None:
        """Each client learns of its finished requests as their outputs stream back (exact, not stale)."""
        for k, rank in enumerate(ranks):
            seen = self.finish_seen[k]
            times = rank.finish_times
            done = rank.finished
            while seen < len(times) and times[seen] <= at:
                owner = self.client_of.get(done[seen].index)
                if owner is not None:
                    g, c = owner
                    self.in_flight[g][c][self.groups[g].index(k)] -= 1
                seen += 1
            self.finish_seen[k] = seen
