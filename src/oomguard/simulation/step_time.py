"""How long one engine step takes: a simple roofline, documented so its numbers can be checked.

    step_s = overhead + weights_bytes / (bandwidth x bw_eff)              read every weight once per step
           + 2 x active_params x tokens / (peak_flops x mfu)              the matmuls of the scheduled tokens
           + decode_context x kv_bytes_per_token / (bandwidth x bw_eff)   decodes read their whole KV
           + 4 x layers x hidden x sum(chunk x (context + chunk/2)) / (peak_flops x mfu)   prefill attention

`overhead` (scheduler, launch, sampling: 2 ms), `bw_eff` (0.8 of peak HBM bandwidth) and `mfu` (0.5 of peak
dense bf16 FLOPs) are the assumptions; each coefficient can be given instead (`--step-time A,B,C`: ms per
step,
ms per token, ms per 1,000 decode-context tokens). The GPU figures are the vendors' data-sheet peaks (dense,
no sparsity), per GPU; with tensor parallelism each rank holds 1/TP of the weights and does 1/TP of the work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

OVERHEAD_S = 0.002  # CPU scheduling + kernel launches + sampling per step (assumption)
BANDWIDTH_EFFICIENCY = 0.8  # achievable fraction of peak HBM bandwidth (assumption)
MFU = 0.5  # achievable fraction of peak dense FLOPs in prefill (assumption)

# (HBM bytes/s, dense bf16 FLOP/s) from NVIDIA / AMD data sheets.
GPU_PEAKS: dict[str, tuple[float, float]] = {
    "h200": (4.8e12, 989e12),  # H200 SXM: 4.8 TB/s, 989 TFLOPS bf16 dense
    "h100": (3.35e12, 989e12),  # H100 SXM: 3.35 TB/s, 989 TFLOPS bf16 dense
    "h20": (4.0e12, 148e12),  # H20: 4.0 TB/s, 148 TFLOPS bf16 dense
    "b200": (8.0e12, 2250e12),  # B200: 8 TB/s, 2.25 PFLOPS bf16 dense
    "a100": (2.0e12, 312e12),  # A100 80GB SXM: 2.0 TB/s, 312 TFLOPS bf16 dense
    "l40s": (0.864e12, 362e12),  # L40S: 864 GB/s, 362 TFLOPS bf16 dense
    "l4": (0.3e12, 121e12),  # L4: 300 GB/s, 121 TFLOPS bf16 dense
    "a10": (0.6e12, 125e12),  # A10: 600 GB/s, 125 TFLOPS bf16 dense
    "mi300x": (5.3e12, 1307e12),  # MI300X: 5.3 TB/s, 1307 TFLOPS bf16 dense
}
DEFAULT_GPU = "h100"


def gpu_peaks(name: str | None) -> tuple[str, float, float]:
    """(matched key, bytes/s, FLOP/s) for a GPU name; H100 when unknown or not given."""
    text = (name or DEFAULT_GPU).lower().replace(" ", "").replace("-", "")
    for key in sorted(GPU_PEAKS, key=len, reverse=True):
        if key in text:
            return key, *GPU_PEAKS[key]
    return DEFAULT_GPU, *GPU_PEAKS[DEFAULT_GPU]


@dataclass(frozen=True)
class StepTimeModel:
    """step_s = per_step_s + per_token_s x tokens + per_context_token_s x decode context + per_attn_s x
    prefill attention."""

    per_step_s: float
    per_token_s: float
    per_context_token_s: float
    per_prefill_attention_s: float
    source: str

    def step_seconds(self, tokens: int, decode_context: int, prefill_attention: int) -> float:
        return (
            self.per_step_s
            + self.per_token_s * tokens
            + self.per_context_token_s * decode_context
            + self.per_prefill_attention_s * prefill_attention
        )

    @classmethod
    def from_hardware(
        cls,
        gpu: str | None,
        weights_bytes: float,
        active_params: float,
        kv_bytes_per_token: float,
        num_layers: int,
        hidden_size: int,
        tensor_parallel_size: int = 1,
    ) -> StepTimeModel:
        key, bandwidth, flops = gpu_peaks(gpu)
        tp = max(1, tensor_parallel_size)
        bw = bandwidth * BANDWIDTH_EFFICIENCY
        fl = flops * MFU
        return cls(
            per_step_s=OVERHEAD_S + weights_bytes / tp / bw,
            per_token_s=2 * active_params / tp / fl,
            per_context_token_s=kv_bytes_per_token / tp / bw,
            per_prefill_attention_s=4 * num_layers * hidden_size / tp / fl,
            source=f"roofline on {key} (TP {tp}): {bandwidth / 1e12:g} TB/s x {BANDWIDTH_EFFICIENCY}, "
            f"{flops / 1e12:g} TFLOPS x {MFU}, +{OVERHEAD_S * 1e3:g} ms/step",
        )

    @classmethod
    def from_coefficients(cls, text: str) -> StepTimeModel:
        """'A,B,C': ms per step, ms per token, ms per 1,000 decode-context tokens."""
        try:
            a, b, c = (float(x) for x in text.split(","))
        except ValueError:
            raise ValueError(
                f"--step-time wants A,B,C (ms/step, ms/token, ms per 1k context tokens), not {text!r}"
            ) from None
        if not all(math.isfinite(x) and x >= 0 for x in (a, b, c)):
            raise ValueError(f"--step-time coefficients must be finite and >= 0, not {text!r}")
        return cls(a / 1e3, b / 1e3, c / 1e6, 0.0, f"given: {a:g} ms + {b:g} ms/token + {c:g} ms/1k context")
