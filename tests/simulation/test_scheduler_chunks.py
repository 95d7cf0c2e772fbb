"""Per-request chunk sizes, step by step, against the oracle's recorded prefill chunks."""

from __future__ import annotations

import json
from pathlib import Path

from oomguard.simulation.kv_pool import KvGroupSpec
from oomguard.simulation.run import SimulationConfig, simulate
from oomguard.simulation.scheduler import SchedulerConfig
from oomguard.simulation.workload import read_workload


def test_seed002_prefill_chunks_per_request_match_vllm(shared_data: Path) -> None:
    ref = shared_data / "scheduler_reference" / "seed002_mixed"
    cfg = SchedulerConfig(32768, 64, 163840, 30000, (KvGroupSpec("full", 16),), enable_prefix_caching=False)
    result = simulate(read_workload(ref / "workload.jsonl"), SimulationConfig(cfg, record_chunks=True))
    oracle = [json.loads(line) for line in (ref / "timeline.jsonl").read_text().splitlines()]
    oracle = [o for o in oracle if o["executed"]]
    for chunks, theirs in zip(result.timeline.chunks, oracle):
        ours = sorted(
            (rid, n, before)
            for rid, n, before in chunks
            if [rid] and (rid, n) and rid not in theirs["decode"]
        )
        assert ours == sorted(tuple(p) for p in theirs["prefill"])
        assert sorted(rid for rid, _, _ in chunks if rid in theirs["decode"]) == sorted(theirs["decode"])
