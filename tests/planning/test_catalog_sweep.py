"""Every bundled model plans under common layouts without an internal error: it fits, does not fit with
vLLM's error, or is refused with a one-line user error."""

from __future__ import annotations

import pytest

from oomguard.engines.vllm.engine import PLANNER as VLLM
from oomguard.errors import OomguardError
from oomguard.models.resolve import catalog_ids
from oomguard.planning import PlanRequest, plan
from oomguard.planning.fix_search import search_fixes

LAYOUTS = [
    {},
    {"tensor_parallel_size": 8},
    {"tensor_parallel_size": 2, "pipeline_parallel_size": 2, "kv_cache_dtype": "fp8"},
    {"data_parallel_size": 4, "enable_expert_parallel": True, "max_model_len": 8192},
    {"max_model_len": "auto", "gpu_memory_utilization": 0.5},
]


@pytest.mark.parametrize("model", catalog_ids())
def test_every_catalog_model_plans(model: str) -> None:
    planned = 0
    for flags in LAYOUTS:
        try:
            result = plan(PlanRequest(model=model, gpu="H200", flags=flags))
        except OomguardError as err:
            assert "\n" not in str(err)
            continue
        planned += 1
        assert result.kv.bytes_per_block > 0
        assert result.fits == (not result.errors)
        if not result.fits:
            assert all(fix.plan.fits for fix in search_fixes(VLLM, result, limit=2))
        else:
            assert result.kv.num_gpu_blocks > 0 and result.kv.kv_cache_tokens > 0
    assert planned > 0
