"""One reader per model family, registered by config.json `model_type` (see base.family)."""

from oomguard.models.families import gemma, llama, moe  # noqa: F401  (importing registers the readers)
from oomguard.models.families.base import FAMILY_READERS

__all__ = ["FAMILY_READERS"]
