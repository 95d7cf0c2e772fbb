"""`oomguard plan --json`: one JSON object; keys are stable (README, "JSON output"). Reads only the neutral
`PlanResult`; `engine` is {name, version, settings, defaults} for every engine, plus vLLM's first keys.

Contract: fits, kv_cache_tokens, num_gpu_blocks, max_concurrency, ranks[] (weights_gib,
activation_gib, non_torch_gib, cuda_graph_gib, comm_buffers_gib, kv_cache_gib, num_gpu_blocks; ranks[0] is the
rank vLLM's engine-level log lines describe), fixes, errors. Everything else is additive.
"""

from __future__ import annotations

from typing import Any

from oomguard.ledger import OTHER_PROCESSES, Estimate
from oomguard.render.host_json import host_to_dict
from oomguard.result import PlanResult, RankResult
from oomguard.units import GiB


def _gib(num_bytes: float) -> float:
    return round(num_bytes / GiB, 4)


# The engine whose JSON also carries its log lines under their first name, `vllm_log_lines`.
LEGACY_LOG_LINES_ENGINE = "vllm"


def _term(estimate: Estimate) -> dict[str, Any]:
    return {
        "gib": _gib(estimate.bytes),
        "kind": estimate.kind,
        "band_gib": _gib(estimate.band),
        "source": estimate.source,
    }


def _rank(rank: RankResult) -> dict[str, Any]:
    return {
        "label": rank.label,
        "pp_rank": rank.pp_rank,
        "layers": list(rank.layers),
        "ep_rank": rank.ep_rank,
        "budget_gib": _gib(rank.budget_bytes),
        "weights_gib": _gib(rank.weights.bytes),
        "activation_gib": _gib(rank.activation.bytes),
        "non_torch_gib": _gib(rank.non_torch.bytes),
        "cuda_graph_gib": _gib(rank.cuda_graphs.bytes),
        "comm_buffers_gib": _gib(rank.comm_buffers.bytes),
        "kv_cache_gib": _gib(rank.available_kv_bytes),
        "kv_cache_allocated_gib": _gib(rank.kv_cache_bytes),
        "cuda_context_gib": _gib(rank.context_bytes),
        "other_processes_gib": _gib(rank.gpu.bytes_of(OTHER_PROCESSES)),
        "num_gpu_blocks": rank.num_blocks,
        "bytes_per_block": rank.bytes_per_block,
        "gpu_used_gib": _gib(rank.gpu.used_bytes),
        "gpu_free_gib": _gib(rank.gpu.free_bytes),
        "terms": {
            "weights": _term(rank.weights),
            "activation": _term(rank.activation),
            "non_torch": _term(rank.non_torch),
            "comm_buffers": _term(rank.comm_buffers),
            "cuda_graph": _term(rank.cuda_graphs),
        },
    }


def plan_to_dict(plan: PlanResult) -> dict[str, Any]:
    engine = plan.engine
    try:
        dp = int(engine.setting("data_parallel_size"))
    except (KeyError, TypeError, ValueError):
        dp = 1
    result: dict[str, Any] = {
        "fits": plan.fits,
        "verdict": plan.verdict.value,
        "deployment": {
            "data_parallel_size": dp,
            "gpus": engine.total_gpus,
            "kv_cache_tokens": dp * plan.kv.tokens if plan.fits else 0,
            "max_concurrency": round(dp * plan.kv.max_concurrency, 4),
        },
        "fewest_gpus": (
            {"gpus": plan.fewest[0], "command": plan.fewest[1]} if plan.fewest is not None else None
        ),
        "margin_bytes": plan.margin.slack_bytes if plan.margin else None,
        "margin": (
            {
                "constraint": plan.margin.constraint,
                "rank": plan.margin.rank,
                "slack_bytes": plan.margin.slack_bytes,
                "band_bytes": plan.margin.band_bytes,
                "required_bytes": plan.margin.required_bytes,
            }
            if plan.margin
            else None
        ),
        "engine_name": engine.display_name,
        "failure": plan.failure,
        "errors": list(plan.errors),
        "warnings": list(plan.warnings),
        "notes": list(plan.notes),
        "kv_cache_tokens": plan.kv.tokens if plan.fits else 0,
        "num_gpu_blocks": plan.kv.num_blocks,
        "max_concurrency": round(plan.kv.max_concurrency, 4),
        "block_size": plan.kv.block_size,
        "bytes_per_block": plan.kv.bytes_per_block,
        "blocks_per_request": plan.kv.blocks_per_request,
        "kv_groups": [
            {
                "kind": g.kind,
                "num_layers": g.num_layers,
                "block_size": g.block_size,
                "sliding_window": g.sliding_window,
                "page_bytes": g.page_bytes,
                "padding_layers": g.padding_layers,
            }
            for g in plan.kv.groups
        ],
        "longest_max_model_len": plan.longest_request,
        "concurrency_at_length": {str(n): round(c, 4) for n, c in plan.concurrency_at_length},
        "ranks": [_rank(r) for r in plan.ranks],
        "fixes": [
            {
                "flags": dict(fix.flags),
                "summary": fix.summary,
                "cost": fix.cost,
                "command": fix.command,
                "kv_cache_tokens": fix.kv_cache_tokens,
                "max_concurrency": round(fix.max_concurrency, 4),
                "max_model_len": fix.max_model_len,
                "gpus": fix.gpus,
            }
            for fix in plan.fixes
        ],
        "log_lines": list(plan.log_lines),
        "model": {
            "name": plan.model.name,
            "architecture": plan.model.architecture,
            "params": plan.model.params,
            "dtype": plan.model.dtype,
            "quantization": plan.model.quantization,
            "max_position_embeddings": plan.model.max_position_embeddings,
            "weights_source": plan.model.weights_source,
        },
        "gpu": {
            "name": plan.gpu.name,
            "total_gib": _gib(plan.gpu.total_bytes),
            "total_bytes": plan.gpu.total_bytes,
            "total_source": plan.gpu.total_source,
            "total_kind": plan.gpu.total_kind,
        },
        "engine": {
            **engine.legacy_json,
            "name": engine.name,
            "version": engine.version,
            "settings": {s.name: s.value for s in engine.settings},
            "defaults": dict(engine.defaults),
            "unknown_flags": list(engine.unknown_flags),
        },
    }
    if engine.name == LEGACY_LOG_LINES_ENGINE:
        result["vllm_log_lines"] = result["log_lines"]  # the name the contract first gave them
    if plan.host is not None:
        result["host"] = host_to_dict(plan.host)
    return result
