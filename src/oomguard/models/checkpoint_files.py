"""Which weight files a checkpoint holds and how big each is: what decides the host memory of loading.

Read as vLLM's default loader picks them (vLLM v0.33, model_executor/model_loader/default_loader.py,
`_prepare_weights`): with `--load-format auto` the first of `*.safetensors`, `*.bin`, `*.pt` that matches any
file wins; with safetensors, the shards named by `model.safetensors.index.json` (so a
`consolidated.safetensors`
beside them is not loaded twice). Only file sizes are read, never the weights.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from oomguard.models.safetensors import INDEX_NAME

# transformers' save_pretrained default `max_shard_size` ("5GB" since v4.35; "10GB" before): the shard size
# assumed when only the checkpoint's total is known.
ASSUMED_SHARD_BYTES = 5 * 10**9


class WeightFormat(Enum):
    SAFETENSORS = "safetensors"
    PYTORCH_BIN = "bin"  # pytorch_model-*.bin: pickled state dicts
    PYTORCH_PT = "pt"

    @property
    def mapped(self) -> bool:
        """safetensors shards are memory-mapped; .bin/.pt shards are unpickled whole into memory."""
        return self is WeightFormat.SAFETENSORS


_PATTERNS = (
    (WeightFormat.SAFETENSORS, "*.safetensors"),
    (WeightFormat.PYTORCH_BIN, "*.bin"),
    (WeightFormat.PYTORCH_PT, "*.pt"),
)


@dataclass(frozen=True)
class CheckpointFiles:
    """The weight files one worker reads: their format and sizes (bytes, largest first)."""

    format: WeightFormat
    shard_bytes: tuple[int, ...]
    source: str  # where the sizes come from
    exact: bool  # sizes read from the files (else assumed from a total)

    @property
    def total_bytes(self) -> int:
        return sum(self.shard_bytes)

    @property
    def largest_shard_bytes(self) -> int:
        return max(self.shard_bytes, default=0)

    @property
    def num_shards(self) -> int:
        return len(self.shard_bytes)

    def largest(self, count: int) -> int:
        """The bytes of the `count` largest shards together."""
        return sum(self.shard_bytes[: max(0, count)])


def read_checkpoint_files(directory: Path, load_format: str = "auto") -> CheckpointFiles | None:
    """The weight files of a local model directory, picked as vLLM picks them; None when it holds none."""
    wanted = {
        "safetensors": (WeightFormat.SAFETENSORS,),
        "pt": (WeightFormat.PYTORCH_PT,),
        "npcache": (WeightFormat.PYTORCH_BIN,),
    }.get(load_format, tuple(f for f, _ in _PATTERNS))
    for weight_format, pattern in _PATTERNS:
        if weight_format not in wanted:
            continue
        files = sorted(p for p in directory.glob(pattern) if p.is_file())
        if weight_format is WeightFormat.SAFETENSORS:
            files = _indexed_shards(directory, files)
        if files:
            sizes = tuple(sorted((p.stat().st_size for p in files), reverse=True))
            return CheckpointFiles(
                weight_format, sizes, f"{len(files)} {pattern} file(s) in {directory}", True
            )
    return None


def _indexed_shards(directory: Path, files: list[Path]) -> list[Path]:
    """vLLM's filter_duplicate_safetensors_files: keep the shards the index names, when there is an index."""
    index = directory / INDEX_NAME
    if not index.is_file():
        return files
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map") or {}
    except (OSError, ValueError, AttributeError):
        return files
    names = {str(v) for v in weight_map.values()} if isinstance(weight_map, dict) else set()
    return [p for p in files if p.name in names] or files


def assumed_checkpoint_files(
    total_bytes: int, weight_format: WeightFormat = WeightFormat.SAFETENSORS, source: str = ""
) -> CheckpointFiles:
    """A checkpoint known only by its total: shards of transformers' default size, the last one smaller."""
    full, rest = divmod(max(0, total_bytes), ASSUMED_SHARD_BYTES)
    sizes = (ASSUMED_SHARD_BYTES,) * full + ((rest,) if rest else ())
    why = source or "checkpoint total"
    return CheckpointFiles(
        weight_format,
        sizes or (0,),
        f"{why}, in shards of {ASSUMED_SHARD_BYTES / 1e9:.0f} GB (assumed)",
        False,
    )
