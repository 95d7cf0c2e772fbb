"""One reader per model family, registered by config.json `model_type` (see base.family)."""

from oomguard.models.families import (  # noqa: F401  (importing registers the readers)
    cohere,
    deepseek,
    gemma,
    gemma4,
    gpt_oss,
    hybrid,
    internlm,
    layernorm,
    llama,
    llama4,
    mamba_hybrid,
    moe,
    multimodal,
    phi,
)
from oomguard.models.families.base import FAMILY_READERS

__all__ = ["FAMILY_READERS"]
