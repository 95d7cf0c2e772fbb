"""`oomguard plan --calibrate LOG`: the measured terms of an earlier start of the same deployment.

vLLM logs the weights it loaded at INFO, the CUDA-graph estimate at INFO (v0.21+), and the profiling
summary (activation, non-torch) at DEBUG; whatever the log holds replaces the estimate of that term.
"""

from __future__ import annotations

import re
from pathlib import Path

from oomguard.engines.vllm import log_format
from oomguard.errors import InputFormatError
from oomguard.units import GiB

_NUMBER = rf"(?P<v>{log_format.NUMBER})"
# The INFO lines `plan` itself predicts are read with log_format's patterns; the DEBUG profile terms with
# these (V1's "torch peak memory increase", V0's "PyTorch activation peak memory takes").
PATTERNS = {
    "weights": log_format.WEIGHTS,
    "activation": re.compile(
        r"(?:torch peak memory increase|PyTorch activation peak memory takes):? " + _NUMBER
    ),
    "non_torch": re.compile(r"(?:non-torch forward increase memory|non_torch_memory takes):? " + _NUMBER),
    "cuda_graph": log_format.CUDA_GRAPH_ESTIMATE,
}
MAX_LOG_BYTES = 256 << 20


def measured_terms_from_log(path: str) -> dict[str, int]:
    """The first value of each term in the log, in bytes. Unreadable or term-less logs are an error."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_LOG_BYTES)
    except OSError as err:
        raise InputFormatError(f"cannot read --calibrate log {path}: {err.strerror}") from None
    text = raw.decode("utf-8", errors="replace")
    found: dict[str, int] = {}
    for key, pattern in PATTERNS.items():
        match = pattern.search(text)
        if match:
            found[key] = int(float(match.group("v").replace(",", "")) * GiB)
    if not found:
        raise InputFormatError(
            f"{Path(path).name}: no vLLM memory figures found (expected 'Model loading took ... GiB' and, at "
            "DEBUG, "
            "'torch peak memory increase'); start vLLM with VLLM_LOGGING_LEVEL=DEBUG for the full profile"
        )
    return found
