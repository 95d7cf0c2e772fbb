"""What changes between vLLM versions, as one table.

Each behaviour names the version it starts at and the source (PR, merge date) behind it. Merge dates map to
releases within about one minor version; where the release is inferred
from a date the comment says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from oomguard.errors import ConfigError
from oomguard.units import GiB

NEWEST_KNOWN = "0.33.0"
OLDEST_KNOWN = "0.6.0"


@dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int
    patch: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+|x))?")


@lru_cache(maxsize=256)
def parse_version(text: str) -> Version:
    """'0.19.0', 'v0.10.1.dev101+gbda9d0535', '0.22.x', '0.15.2rc1' -> Version (pre-release tags ignored)."""
    match = _VERSION.match(str(text))
    if not match:
        raise ConfigError(f"cannot read vLLM version {text!r} (expected e.g. 0.19.0)")
    patch = match.group(3)
    return Version(int(match.group(1)), int(match.group(2)), 0 if patch in (None, "x") else int(patch))


def V(text: str) -> Version:
    return parse_version(text)


@dataclass(frozen=True)
class Behaviour:
    """The accounting rules of one vLLM version (see the table of `behaviour_for`)."""

    version: Version
    engine: str  # "v1" or "v0"
    default_gpu_memory_utilization: float
    cuda_graphs_in_budget: bool  # the CUDA-graph estimate is subtracted from the KV budget
    init_snapshot_after_nccl: bool  # NCCL/custom all-reduce init buffers are baseline, not charged
    charges_whole_process: bool  # old formula: T*u - torch peak (incl. weights) - all non-torch in use
    sampler_logit_copies: float  # fp32 [rows x vocab] copies alive at the sampler warm-up peak
    kv_tokens_report: str  # "blocks" | "per_group" | "concurrency"
    capacity_log_one_line: bool
    null_block_in_fit_check: bool
    sliding_window_uses_in_flight: bool
    v2_model_runner_default: bool
    batch_default_tier_160gib: bool
    capture_ceiling_1024_sm100: bool
    triton_topk_sampler: bool
    log_gib_format: str  # "%.2f" or "round" (str(round(x, 2)))
    hybrid_kv_cache_manager: bool  # KV groups per attention kind (sliding window, full) share one pool
    fine_capture_grid: bool  # CUDA-graph sizes step by 8 to 256, then by 16 (before: by 8 throughout)
    non_torch_single_gpu_bytes: int  # cuBLAS workspaces and kernels at TP = PP = 1
    deepep_ll_tokens_follow_mnbt: bool  # DeepEP low-latency buffers sized by max_num_batched_tokens
    batched_dp_moe_defaults: bool  # DeepEP-LL / NIXL EP with DP: max_num_batched_tokens defaults to 256
    flashinfer_mla_default_sm100: bool  # MLA on SM100 defaults to FLASHINFER_MLA (block 32)
    partial_prefill_threshold_default: bool  # max_num_partial_prefills > 1 sets the threshold to 4% of L
    error_docs_link: bool  # KV errors end with the "conserving memory" docs link
    error_text_2026_05: bool  # "model's" (not "models's") and the CPU-backend parentheticals
    api_servers_follow_dp: bool  # `vllm serve` starts one API server per DP rank by default
    runner_token_mask: bool  # the V1 runner keeps a bool mask beside the int32 token ids (prompt embeddings)

    def gib_text(self, num_bytes: float) -> str:
        """GiB as this version's log and error lines print them (PR #31865: str(round(x, 2)) from ~0.14)."""
        value = num_bytes / GiB
        return str(round(value, 2)) if self.log_gib_format == "round" else f"{value:.2f}"


# Estimated fp32 logit copies alive at the sampler warm-up peak (rows x vocab x 4 B each), per sampler era:
# - FlashInfer's top-k/top-p kernel, on by default while flashinfer was installed, until PR #26859
#   (2025-10-15, first in 0.11.1) disabled it: ~4.2 (one v0.11.0 run, Mistral-Small-3.2; wide band);
# - PyTorch's sort-based path (0.11.1-0.16): ~9.7 (sorted values, int64 indices, probabilities, cumulative
#   sums, masks), fitted on the llm-d v0.15/v0.16 runs;
# - the Triton top-k/top-p kernel (2026-02-17, first in 0.17): ~3.85, fitted across 14 models of the llm-d
#   v0.17-v0.19 sweep (vocab 32k-262k, 1024 rows). FlashInfer's kernel is on by default again from PR #40376
#   (2026-04-20, ~0.21); no measurement after that, so the Triton figure is kept.
FLASHINFER_SAMPLER_COPIES = 4.2
SORT_SAMPLER_COPIES = 9.7
TRITON_SAMPLER_COPIES = 3.85


def _sampler_copies(v: Version) -> float:
    if v < V("0.11.1"):
        return FLASHINFER_SAMPLER_COPIES
    if v < V("0.17.0"):
        return SORT_SAMPLER_COPIES
    return TRITON_SAMPLER_COPIES


@lru_cache(maxsize=64)
def behaviour_for(version_text: str) -> Behaviour:
    v = parse_version(version_text)
    if v < V(OLDEST_KNOWN):
        raise ConfigError(f"vLLM {v} is older than the oldest version oomguard models ({OLDEST_KNOWN})")
    if v > V(NEWEST_KNOWN):
        # Newer than we know: behave like the newest known version; the renderer says so.
        v_rules = V(NEWEST_KNOWN)
    else:
        v_rules = v
    return Behaviour(
        version=v,
        # V1 became the default engine in 0.8.0; V0 was removed in 0.11.
        engine="v1" if v_rules >= V("0.8.0") else "v0",
        # PR #38284 (2026-04-21, v0.21.0): default utilization 0.90 -> 0.92, CG estimate applied.
        default_gpu_memory_utilization=0.92 if v_rules >= V("0.21.0") else 0.9,
        cuda_graphs_in_budget=v_rules >= V("0.21.0"),
        # PR #25359 (2025-09-23, v0.11.0): init snapshot after NCCL init.
        init_snapshot_after_nccl=v_rules >= V("0.11.0"),
        # PR #10511 (2024-12-16, V0 0.6.5): per-instance accounting; V1 adopted it in 0.9.1 (#18974/#19312).
        charges_whole_process=v_rules < V("0.6.5") or V("0.8.0") <= v_rules < V("0.9.1"),
        sampler_logit_copies=_sampler_copies(v_rules),
        # V1 <= 0.9.0: blocks*B; 2025-06 -> 2026-04: per-group; PR #41069 (2026-04-28, v0.21): concurrency*L.
        kv_tokens_report=(
            "blocks" if v_rules < V("0.9.1") else "per_group" if v_rules < V("0.21.0") else "concurrency"
        ),
        # One capacity line (merge date not recorded; first seen in the v0.23 logs).
        capacity_log_one_line=v_rules >= V("0.23.0"),
        # PR #47272 (2026-07-01, ~v0.26): null block reserved in the fit check and auto-fit.
        null_block_in_fit_check=v_rules >= V("0.26.0"),
        # PR #47728 (2026-07, v0.26): sliding-window reserve uses in-flight tokens.
        sliding_window_uses_in_flight=v_rules >= V("0.26.0"),
        # PR #53183 (2026-08-26, ~v0.30): V2 runner default for all models.
        v2_model_runner_default=v_rules >= V("0.30.0"),
        # After v0.22 (release inferred): >=160 GiB tier, 1024 capture ceiling on SM100.
        batch_default_tier_160gib=v_rules >= V("0.26.0"),
        capture_ceiling_1024_sm100=v_rules >= V("0.26.0"),
        triton_topk_sampler=v_rules >= V("0.17.0"),
        # PR #31865 (2026-01-08, ~v0.14): GiB printed as str(round(x, 2)).
        log_gib_format="round" if v_rules >= V("0.14.0") else "%.2f",
        # The hybrid KV cache manager (v0.10.0).
        hybrid_kv_cache_manager=v_rules >= V("0.10.0"),
        # The capture-size grid of CompilationConfig (v0.11.1).
        fine_capture_grid=v_rules >= V("0.11.1"),
        # Non-torch memory at TP = PP = 1: 0.13 GiB up to v0.17, 0.25 GiB from v0.18 (startup logs).
        non_torch_single_gpu_bytes=int((0.25 if v_rules >= V("0.18.0") else 0.13) * GiB),
        # DeepEP low-latency buffers follow max_num_batched_tokens from v0.22.
        deepep_ll_tokens_follow_mnbt=v_rules >= V("0.22.0"),
        # Batched-DP MoE defaults (after v0.22; release inferred).
        batched_dp_moe_defaults=v_rules >= V("0.26.0"),
        flashinfer_mla_default_sm100=v_rules >= V("0.26.0"),
        # The 4%-of-max_model_len long-prefill threshold with partial prefills, dropped in v0.33.
        partial_prefill_threshold_default=v_rules < V("0.33.0"),
        # The docs link at the end of KV errors (v0.13).
        error_docs_link=v_rules >= V("0.13.0"),
        # 2026-05-15 (v0.22): "model's" and the CPU-backend parentheticals in the KV errors.
        error_text_2026_05=v_rules >= V("0.22.0"),
        # The DP-sized API-server default and the prompt-embeddings token mask (~0.11 era).
        api_servers_follow_dp=v_rules >= V("0.11.0"),
        runner_token_mask=v_rules >= V("0.11.0"),
    )


def behaviour_or_newest(version_text: str | None) -> Behaviour:
    """The rules of a version read from a log or a manifest; the newest known when it is missing or unreadable
    (a log without a version is most likely from a recent server)."""
    if version_text:
        try:
            version = parse_version(version_text)
        except ConfigError:
            return behaviour_for(NEWEST_KNOWN)
        return behaviour_for(str(max(version, V(OLDEST_KNOWN))))
    return behaviour_for(NEWEST_KNOWN)
