"""Data-parallel simulation: one scheduler and pool per rank, the front-end, MoE ranks in lockstep."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from oomguard.planning import PlanRequest
from oomguard.simulation.cli import main as simulate_main
from oomguard.simulation.dp.balancer import BalancerKind
from oomguard.simulation.dp.ep import lockstep_memory
from oomguard.simulation.dp.run import DpConfig, simulate_dp
from oomguard.simulation.kv_pool import KvGroupSpec
from oomguard.simulation.model_facts import binding_rank, from_planner
from oomguard.simulation.run import SimulationConfig, simulate
from oomguard.simulation.scheduler import SchedulerConfig
from oomguard.simulation.step_memory import ActivationModel, ModelWidths
from oomguard.simulation.step_time import StepTimeModel
from oomguard.simulation.trace_columns import TraceRequest
from oomguard.simulation.workload import SECONDS, Workload, read_workload, scale_rate, window

AZURE = "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"


def _config(blocks: int) -> SimulationConfig:
    sched = SchedulerConfig(2048, 64, 32768, blocks, (KvGroupSpec("full", 16),), enable_prefix_caching=False)
    return SimulationConfig(
        sched,
        activation=ActivationModel.from_widths(ModelWidths(4096, 2, 14336, 128256)),
        step_time=StepTimeModel.from_coefficients("8,0.05,0.01"),
    )


def _azure(shared_data: Path, end: float, rate: float) -> Workload:
    return scale_rate(window(read_workload(shared_data / AZURE), 0, end), rate)


def test_one_rank_is_the_single_engine_simulation(shared_data: Path) -> None:
    workload = _azure(shared_data, 120, 2.0)
    config = _config(1100)
    single = simulate(workload, config)
    assert single.preemptions > 0  # a tight pool: preemptions inside decode runs too
    rank = simulate_dp(workload, DpConfig(config, 1)).ranks[0]
    assert rank.timeline == single.timeline
    assert rank.preemptions == single.preemptions
    assert rank.requests.ttfts == single.requests.ttfts


def test_each_rank_owns_its_pool_and_round_robin_splits_evenly(shared_data: Path) -> None:
    workload = _azure(shared_data, 120, 4.0)
    result = simulate_dp(workload, DpConfig(_config(1100), 4, BalancerKind.ROUND_ROBIN))
    assert max(result.routed) - min(result.routed) <= 1
    assert sum(r.requests.finished for r in result.ranks) == sum(result.routed) == len(workload.requests)
    for rank in result.ranks:
        assert max(rank.timeline.kv_blocks_used) <= rank.usable_blocks
    # Four pools of 1,100 blocks hold what one could not: fewer preemptions than one engine with one pool.
    single = simulate(workload, _config(1100))
    assert sum(r.preemptions for r in result.ranks) < single.preemptions


def test_vllm_balancer_spreads_long_requests_that_round_robin_piles_on_one_rank() -> None:
    # Long and short requests alternate: round robin sends every long one to rank 0; vLLM's rule sees rank 0's
    # running count grow and sends the next ones to rank 1.
    requests = tuple(TraceRequest(f"r{i}", 0.05 * i, 1000, 400 if i % 2 == 0 else 4) for i in range(200))
    workload = Workload(requests, SECONDS, "alternating long and short")
    config = _config(4000)
    vllm = simulate_dp(workload, DpConfig(config, 2, BalancerKind.VLLM))
    rr = simulate_dp(workload, DpConfig(config, 2, BalancerKind.ROUND_ROBIN))
    assert "vLLM 0.33" in vllm.rule
    assert rr.routed == (100, 100)
    assert max(rr.ranks[1].timeline.kv_blocks_used) < max(rr.ranks[0].timeline.kv_blocks_used) / 5
    assert vllm.imbalance.time_above < rr.imbalance.time_above / 2


@pytest.fixture(scope="module")
def moe_plan():  # type: ignore[no-untyped-def]
    request = PlanRequest.from_argv(
        "vllm serve Qwen/Qwen3-30B-A3B -dp 4 --enable-expert-parallel --max-model-len 8192", gpu="H200"
    )
    return from_planner(request)


def test_lockstep_memory_at_the_profile_shape_is_the_planners(moe_plan) -> None:  # type: ignore[no-untyped-def]
    _, _, plan = moe_plan
    rank, activation, _ = binding_rank(plan)
    memory = lockstep_memory(plan, rank, activation)
    tokens = plan.engine.max_num_batched_tokens
    assert memory.gathers_all_ranks
    # Every rank at max_num_batched_tokens, gathered from 4 ranks: the planner's forward peak.
    planner = int(activation.forward_bytes_per_token * tokens) + activation.fixed_bytes
    assert memory.peak_bytes(tokens, 4 * tokens, 0) == pytest.approx(planner, rel=1e-6)
    # A quiet rank (one dummy token) still gathers the others' prefills.
    alone = memory.peak_bytes(1, 1, 0)
    assert memory.peak_bytes(1, 3 * tokens + 1, 0) > alone + 2 * tokens * memory.hidden_bytes_per_token


def test_lockstep_ranks_step_together_and_an_idle_rank_can_pass_its_headroom(moe_plan) -> None:  # type: ignore[no-untyped-def]
    pool, _, plan = moe_plan
    rank, activation, _ = binding_rank(plan)
    memory = replace(lockstep_memory(plan, rank, activation), max_graph_tokens=0)
    sched = SchedulerConfig(8192, 64, 8192, 4000, pool.groups)
    # Headroom for a rank's own 8k-token prefill, not for the MoE layer gathering three such prefills.
    own = memory.peak_bytes(8000, 8000, 1)
    engine = SimulationConfig(
        sched,
        activation=activation,
        headroom_bytes=own,
        step_time=StepTimeModel.from_coefficients("5,0.02,0"),
    )
    from oomguard.simulation.trace_columns import TraceRequest
    from oomguard.simulation.workload import SECONDS

    # Three long prompts at once on three ranks, the fourth rank idle.
    requests = tuple(TraceRequest(f"r{i}", 0.0, 8000, 4) for i in range(3))
    workload = Workload(requests, SECONDS, "hand-built")
    result = simulate_dp(
        workload,
        DpConfig(engine, 4, BalancerKind.ROUND_ROBIN, lockstep=True, lockstep_memory=memory),
    )
    lengths = {len(r.timeline) for r in result.ranks}
    assert len(lengths) == 1  # every rank took every step of the wave
    idle = result.ranks[3]
    assert result.routed[3] == 0 and max(idle.timeline.tokens) == 0
    assert idle.oom_events and idle.oom_events[0].step == 0  # the dummy rank gathered 24,001 tokens
    assert result.first_oom is not None and result.first_oom.step == 0
    assert result.max_dispatch_bytes == int((3 * 8000 + 1) * memory.dispatch_bytes_per_token)


def test_cli_dp_json_has_a_rank_each_and_names_the_rule(
    shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = simulate_main(
        [
            str(shared_data / AZURE),
            "--model",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--gpu",
            "H100",
            "--window",
            "0:60",
            "--json",
            "--",
            "vllm",
            "serve",
            "meta-llama/Llama-3.1-8B-Instruct",
            "-dp",
            "2",
            "--max-model-len",
            "16384",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["data_parallel_size"] == 2 and len(data["ranks"]) == 2
    assert data["balancer"] == "vllm" and "vLLM 0.33" in data["balancer_rule"]
    assert data["api_servers"] == 2  # vLLM 0.33 defaults --api-server-count to the DP size
    assert sum(r["routed"] for r in data["ranks"]) == data["requests"]
    assert set(data["ranks"][0]["series"]) == {"time", "kv_usage", "running", "waiting", "preemptions"}
    assert 0 <= data["imbalance"]["time_above"]


def test_hybrid_lb_balances_each_nodes_ranks_and_round_robins_the_nodes() -> None:
    from oomguard.simulation.dp.frontend import Frontend
    from oomguard.simulation.dp.rank import RankEngine

    ranks = [RankEngine(k, _config(100), False) for k in range(4)]
    frontend = Frontend(BalancerKind.VLLM, 4, 1, False, ranks_per_group=2)
    # Node 0 holds ranks 0-1, node 1 ranks 2-3; within a node vLLM's rule (local bump, rotating start).
    assert [frontend.route(i, 0.0, (), ranks) for i in range(4)] == [0, 2, 1, 3]
    assert "hybrid: 2 nodes of 2 ranks" in frontend.rule


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:  # type: ignore[type-arg]
    assert simulate_main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_co_located_ranks_get_the_pool_the_planner_gives_a_shared_gpu(
    shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = [
        str(shared_data / AZURE),
        "--model",
        "Qwen/Qwen3-8B",
        "--gpu",
        "H100",
        "--window",
        "0:20",
        "--json",
    ]
    alone = _cli_json(
        capsys, *common, "--", "vllm", "serve", "Qwen/Qwen3-8B", "-dp", "2", "--max-model-len", "8192"
    )
    shared = _cli_json(
        capsys,
        *common,
        "--replicas-per-gpu",
        "2",
        "--",
        "vllm",
        "serve",
        "Qwen/Qwen3-8B",
        "-dp",
        "2",
        "--max-model-len",
        "8192",
        "--gpu-memory-utilization",
        "0.45",
    )
    assert len(shared["ranks"]) == 2
    assert shared["ranks"][0]["usable_blocks"] < alone["ranks"][0]["usable_blocks"] / 2


def test_html_page_draws_a_line_per_rank(shared_data: Path, tmp_path: Path) -> None:
    page = tmp_path / "dp.html"
    code = simulate_main(
        [
            str(shared_data / AZURE),
            "--model",
            "Qwen/Qwen3-8B",
            "--gpu",
            "H100",
            "--window",
            "0:20",
            "--balancer",
            "round-robin",
            "--html",
            str(page),
            "--",
            "vllm",
            "serve",
            "Qwen/Qwen3-8B",
            "-dp",
            "3",
            "--max-model-len",
            "8192",
        ]
    )
    assert code == 0
    text = page.read_text()
    for chart in ("chart-kv_blocks_used", "chart-running", "chart-waiting"):
        body = text.split(f'id="{chart}"', 1)[1].split("</svg>", 1)[0]
        assert [body.count(f'data-rank="{k}"') for k in range(3)] == [1, 1, 1]
    assert 'id="chart-imbalance"' in text and "round robin" in text


def test_sweep_over_balancers_gives_a_row_each(shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(shared_data / AZURE), "--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--window", "0:20"]
    argv += ["--sweep", "balancer=vllm,round-robin,kv-aware", "--json"]
    argv += ["--", "vllm", "serve", "Qwen/Qwen3-8B", "-dp", "2", "--max-model-len", "8192"]
    assert simulate_main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert [run["balancer"] for run in data["runs"]] == ["vllm", "round-robin", "kv-aware"]
    assert all(len(run["ranks"]) == 2 for run in data["runs"])
    assert data["runs"][1]["api_servers"] == 1 and data["runs"][0]["api_servers"] == 2


def test_round_robin_ranks_are_single_engines_on_the_split_trace(shared_data: Path) -> None:
    # Each rank of a round-robin deployment sees requests k, k+4, ...: exactly a single engine on that slice.
    workload = _azure(shared_data, 90, 6.0)
    config = _config(900)
    result = simulate_dp(workload, DpConfig(config, 4, BalancerKind.ROUND_ROBIN))
    for k, rank in enumerate(result.ranks):
        alone = simulate(Workload(workload.requests[k::4], workload.clock, workload.source), config)
        assert rank.timeline == alone.timeline
    assert sum(r.preemptions for r in result.ranks) > 0


def test_independent_ranks_advance_decode_runs_through_finishes_as_step_by_step(shared_data: Path) -> None:
    # Each rank's decode runs are cut at every arrival on any rank and carry on through its own finishes;
    # the per-rank timelines, the routing and the finish times are those of scheduling every step.
    workload = _azure(shared_data, 240, 2.0)
    results = [
        simulate_dp(workload, DpConfig(replace(_config(1500), fast_forward=ff), 3, BalancerKind.VLLM))
        for ff in (True, False)
    ]
    fast, slow = results
    assert fast.routed == slow.routed
    assert sum(sum(r.timeline.finished) for r in fast.ranks) > 50
    for a, b in zip(fast.ranks, slow.ranks):
        assert a.timeline == b.timeline
        assert a.requests == b.requests
