"""Each DP balancer's choice on hand-built rank states, as its real counterpart would choose."""

from __future__ import annotations

import pytest

from oomguard.simulation.dp.balancer import (
    BalancerKind,
    KvAwareBalancer,
    RankView,
    RoundRobinBalancer,
    VllmBalancer,
    VllmLegacyBalancer,
)


def _views(*counts: tuple[float, float, float]) -> list[RankView]:
    return [RankView(w, r, kv) for w, r, kv in counts]


def test_vllm_picks_the_fewest_waiting_plus_running() -> None:
    views = _views((0, 9, 0.2), (0, 4, 0.2), (2, 4, 0.2), (0, 7, 0.2))
    assert VllmBalancer(4).choose(views) == 1


def test_vllm_penalises_waiting_on_a_full_pool_but_not_below_half() -> None:
    # Rank 0: 3 waiting + 2 running on a 90% full pool = 5 + 3 x 6 x 0.4 = 12.2; rank 1: 8 running, no queue.
    full = _views((3, 2, 0.9), (0, 8, 0.3))
    assert VllmBalancer(2).choose(full) == 1
    # The same queue at 40% KV usage costs nothing extra: 5 < 8.
    light = _views((3, 2, 0.4), (0, 8, 0.3))
    assert VllmBalancer(2).choose(light) == 0


def test_vllm_in_flight_floor_outweighs_a_stale_snapshot() -> None:
    # The snapshot says rank 0 is empty, but this client already has 6 requests in flight there.
    views = _views((0, 0, 0.0), (0, 3, 0.1))
    views[0].in_flight = 6
    assert VllmBalancer(2).choose(views) == 1


def test_vllm_bumps_the_chosen_rank_locally_and_rotates_ties() -> None:
    balancer = VllmBalancer(3)
    views = _views((0, 0, 0.0), (0, 0, 0.0), (0, 0, 0.0))
    first = balancer.choose(views)
    assert first == 0 and views[0].waiting == 1  # `current_counts[eng_index][0] += self.client_count`
    # A burst between two stats publishes spreads round robin over the bumped counts.
    assert [balancer.choose(views) for _ in range(2)] == [1, 2]


def test_vllm_scan_start_of_each_api_server() -> None:
    # eng_start_index = num_engines x client_index // client_count: API server 2 of 4 starts at rank 2.
    balancer = VllmBalancer(4, client_count=4, client_index=2)
    views = _views((0, 0, 0.0), (0, 0, 0.0), (0, 0, 0.0), (0, 0, 0.0))
    assert balancer.choose(views) == 2
    assert views[2].waiting == 4  # bumped by the client count


def test_vllm_legacy_weights_waiting_four_times() -> None:
    # 1 waiting + 1 running = 5 against 4 running = 4: the legacy rule avoids the queue.
    views = _views((1, 1, 0.0), (0, 4, 0.0))
    assert VllmLegacyBalancer(2).choose(views) == 1
    # vLLM 0.33 sees 2 < 4 and picks the rank with the queue.
    assert VllmBalancer(2).choose(_views((1, 1, 0.0), (0, 4, 0.0))) == 0


def test_round_robin_ignores_load() -> None:
    balancer = RoundRobinBalancer()
    views = _views((50, 50, 1.0), (0, 0, 0.0), (0, 0, 0.0))
    assert [balancer.choose(views) for _ in range(5)] == [0, 1, 2, 0, 1]


def test_kv_aware_follows_the_prefix_then_the_queue() -> None:
    balancer = KvAwareBalancer(3)
    idle = _views((0, 0, 0.0), (0, 0, 0.0), (0, 0, 0.0))
    home = balancer.choose(idle, (11, 12, 13, 14))
    # The same conversation comes back: 3 x 1.0 (all 4 blocks) + 2 x queue beats an empty queue elsewhere.
    views = _views((0, 0, 0.0), (0, 0, 0.0), (0, 0, 0.0))
    views[home].waiting = 2
    others = [k for k in range(3) if k != home]
    views[others[0]].waiting = 1
    assert balancer.choose(views, (11, 12, 13, 14, 15)) == home
    # A request sharing one block of four (3 x 0.25 = 0.75) loses to a queue two shorter (2 x 1.0).
    assert balancer.scores(views, (11, 99, 98, 97))[home] == pytest.approx(3 * 0.25 + 0.0)
    assert balancer.choose(views, (11, 99, 98, 97)) == others[1]


def test_kv_aware_queue_score_is_min_max_normalised() -> None:
    balancer = KvAwareBalancer(3)
    views = _views((4, 0, 0.0), (2, 0, 0.0), (0, 0, 0.0))
    assert balancer.scores(views, ()) == [0.0, 1.0, 2.0]  # 2 x (4 - w) / (4 - 0)


def test_balancer_names_parse() -> None:
    assert BalancerKind.parse("round_robin") is BalancerKind.ROUND_ROBIN
    with pytest.raises(ValueError, match="unknown balancer"):
        BalancerKind.parse("p2c")
