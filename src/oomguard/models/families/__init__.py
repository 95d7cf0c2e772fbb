"""One reader per model family, registered by config.json `model_type` (see base.family)."""

from oomguard.models.families import llama  # noqa: F401  (registers its readers)
from oomguard.models.families.base import FAMILY_READERS

__all__ = ["FAMILY_READERS"]
