"""Exact tensor bytes from safetensors headers, never their data.

A `.safetensors` file starts with an unsigned little-endian 64-bit header length N, then N bytes of JSON:
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}. Reading those N bytes gives
every tensor's stored dtype and exact size. `model.safetensors.index.json` maps tensor names to shard files
and carries `metadata.total_size`. A headers-only copy of a shard (the first 8 + N bytes) is accepted.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from oomguard.errors import InputFormatError
from oomguard.inputs import loads_json
from oomguard.models.spec import ModelSpec, Role, Split, TensorSpec

# safetensors' own reader refuses headers above 100 MB (safetensors/src/tensor.rs MAX_HEADER_SIZE).
MAX_HEADER_BYTES = 100_000_000
INDEX_NAME = "model.safetensors.index.json"

# Bits per element of each safetensors dtype code (safetensors/src/tensor.rs Dtype).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "F64": 64,
    "I64": 64,
    "U64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "C64": 64,
}
FLOAT_DTYPES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}


@dataclass(frozen=True)
class StoredTensor:
    name: str
    dtype: str  # safetensors code: BF16, F8_E4M3, U8, I32 ...
    shape: tuple[int, ...]
    nbytes: int


@dataclass(frozen=True)
class Checkpoint:
    """What the checkpoint stores: every tensor (when headers were read) or only names and a total (index)."""

    tensors: tuple[StoredTensor, ...]
    total_bytes: int
    source: str  # "safetensors headers", "safetensors index total_size", "hub metadata"
    names: tuple[str, ...] = ()  # from the index when headers are missing


def _bad(path: Path | str, problem: str) -> InputFormatError:
    return InputFormatError(f"{path}: not a valid safetensors file: {problem}")


def parse_header(raw: bytes, path: Path | str) -> list[StoredTensor]:
    """The JSON header (without its 8-byte length) -> tensors, validated against hostile values."""
    try:
        header = loads_json(raw.decode("utf-8"), f"{path}: safetensors header", InputFormatError)
    except UnicodeDecodeError:
        raise _bad(path, "header is not UTF-8") from None
    if not isinstance(header, dict):
        raise _bad(path, "header is not a JSON object")
    tensors = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise _bad(path, f"entry {name!r} is not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in DTYPE_BITS:
            raise _bad(path, f"tensor {name!r} has unknown dtype {dtype!r}")
        if not (
            isinstance(shape, list)
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        ):
            raise _bad(path, f"tensor {name!r} has an invalid shape {shape!r}")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
            and offsets[0] <= offsets[1]
        ):
            raise _bad(path, f"tensor {name!r} has invalid data_offsets {offsets!r}")
        numel = 1
        for d in shape:
            numel *= d
        nbytes = offsets[1] - offsets[0]
        if nbytes * 8 != numel * DTYPE_BITS[dtype]:
            raise _bad(path, f"tensor {name!r}: {nbytes} bytes do not hold {shape} x {dtype}")
        tensors.append(StoredTensor(str(name), str(dtype), tuple(shape), nbytes))
    return tensors


def read_header(path: Path) -> list[StoredTensor]:
    """Read only the header of one .safetensors file (or a headers-only copy of it)."""
    try:
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise _bad(path, f"only {len(prefix)} bytes, shorter than the 8-byte header length")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES:
                raise _bad(path, f"header length {length} exceeds the {MAX_HEADER_BYTES}-byte limit")
            raw = handle.read(length)
    except OSError as err:
        raise InputFormatError(f"{path}: cannot read ({err.strerror})") from None
    if len(raw) < length:
        raise _bad(path, f"truncated: header says {length} bytes, file has {len(raw)} after the length")
    return parse_header(raw, path)


def read_index(path: Path) -> tuple[dict[str, str], int | None]:
    """model.safetensors.index.json -> (weight_map, metadata.total_size)."""
    try:
        data = loads_json(path.read_bytes(), f"{path}: safetensors index", InputFormatError)
    except UnicodeDecodeError:
        raise InputFormatError(f"{path}: not a valid safetensors index (malformed JSON)") from None
    except OSError as err:
        raise InputFormatError(f"{path}: cannot read ({err.strerror})") from None
    if not isinstance(data, dict) or not isinstance(data.get("weight_map"), dict):
        raise InputFormatError(f"{path}: not a valid safetensors index (no 'weight_map' object)")
    total = (data.get("metadata") or {}).get("total_size") if isinstance(data.get("metadata"), dict) else None
    if total is not None and (isinstance(total, bool) or not isinstance(total, (int, float)) or total < 0):
        raise InputFormatError(f"{path}: 'metadata.total_size' must be a non-negative number, got {total!r}")
    weight_map = {str(k): str(v) for k, v in data["weight_map"].items()}
    return weight_map, int(total) if total is not None else None


def read_local_checkpoint(directory: Path) -> Checkpoint | None:
    """Headers of every *.safetensors in the directory, else the index's names and total_size, else None.

    NOTE: Mistral repos also ship `consolidated.safetensors` (the same weights in Mistral's layout); when the
    index or model-*.safetensors shards exist it is ignored so bytes are not counted twice."""
    files = sorted(p for p in directory.glob("*.safetensors") if p.is_file())
    index_path = directory / INDEX_NAME
    weight_map: dict[str, str] = {}
    total: int | None = None
    if index_path.is_file():
        weight_map, total = read_index(index_path)
    if any(not f.name.startswith("consolidated") for f in files):
        files = [f for f in files if not f.name.startswith("consolidated")]
    if files:
        if weight_map:
            wanted = set(weight_map.values())
            files = [f for f in files if f.name in wanted] or files
        tensors: list[StoredTensor] = []
        for f in files:
            tensors.extend(read_header(f))
        return Checkpoint(tuple(tensors), sum(t.nbytes for t in tensors), "safetensors headers")
    if weight_map and total is not None:
        return Checkpoint((), total, "safetensors index total_size", names=tuple(weight_map))
    return None


def checkpoint_from_hub(repo_id: str) -> Checkpoint | None:
    """Tensor dtypes/shapes from the Hub's safetensors metadata (HTTP range reads of the headers only)."""
    try:
        import huggingface_hub

        meta = huggingface_hub.get_safetensors_metadata(repo_id)
    except Exception:  # noqa: BLE001 - optional and best effort: the config alone still plans
        return None
    tensors: list[StoredTensor] = []
    for file_meta in meta.files_metadata.values():
        for name, info in file_meta.tensors.items():
            begin, end = info.data_offsets
            tensors.append(StoredTensor(name, str(info.dtype), tuple(info.shape), int(end - begin)))
    if not tensors:
        return None
    return Checkpoint(tuple(tensors), sum(t.nbytes for t in tensors), "hub safetensors metadata")


# ---------------------------------------------------------------------------------------------------------
# Matching stored tensors to the ModelSpec inventory
# ---------------------------------------------------------------------------------------------------------

_EXPERT_INDEX = re.compile(r"\.experts\.(\d+)\.")
# Suffixes quantized formats store beside (or instead of) `.weight`: they belong to the same logical weight.
_QUANT_SUFFIXES = (
    "qweight",
    "qzeros",
    "scales",
    "g_idx",
    "weight_scale",
    "weight_scale_inv",
    "input_scale",
    "weight_packed",
    "weight_shape",
    "weight_zero_point",
    "weight_global_scale",
    "input_global_scale",
    "weight_scale_2",
    "SCB",
    "weight_format",
    "output_scale",
    "k_scale",
    "v_scale",
)
_MTP_NAME = re.compile(r"(^|\.)mtp(\.|_)")
_VISION_NAME = re.compile(r"vision|visual|multi_modal_projector|mm_projector|image_newline|patch_embed")
_LAYER_NAME = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _logical_names(stored: str) -> Iterable[str]:
    """Candidate inventory names for one stored tensor name, most specific first."""
    name = _EXPERT_INDEX.sub(".experts.*.", stored)
    yield name
    module, _, leaf = name.rpartition(".")
    if leaf in _QUANT_SUFFIXES:
        yield f"{module}.weight"
    if ".weight." in name:  # bitsandbytes: q_proj.weight.absmax, .quant_state.*
        yield name.split(".weight.", 1)[0] + ".weight"
    for suffix in ("_blocks", "_scales"):  # gpt-oss MXFP4: gate_up_proj_blocks / _scales
        if name.endswith(suffix):
            yield name[: -len(suffix)]


def _guess_role(name: str, num_layers: int) -> Role:
    if _MTP_NAME.search(name):
        return Role.MTP
    layer = _LAYER_NAME.search(name)
    if layer is not None and int(layer.group(1)) >= num_layers and not _VISION_NAME.search(name):
        return Role.MTP  # DeepSeek-V3 layer 61, GLM-4.5 layer 92: the MTP block
    if _VISION_NAME.search(name):
        return Role.VISION
    if "lm_head" in name:
        return Role.LM_HEAD
    if "embed" in name:
        return Role.EMBEDDING
    if "norm" in name:
        return Role.NORM
    return Role.MLP if "mlp" in name else Role.ATTENTION


def apply_checkpoint(spec: ModelSpec, checkpoint: Checkpoint) -> ModelSpec:
    """Attach exact stored bytes to the inventory; stored tensors the family does not model are kept as extra
    inventory entries (role guessed from the name, replicated) so no byte of the checkpoint is lost."""
    if not checkpoint.tensors:
        return replace(spec, checkpoint_bytes=checkpoint.total_bytes, weights_source=checkpoint.source)
    by_name = {t.name: i for i, t in enumerate(spec.tensors)}
    stored_bytes: dict[int, int] = {}
    stored_dtype: dict[int, str] = {}
    extras: list[TensorSpec] = []
    for tensor in checkpoint.tensors:
        match = next((by_name[n] for n in _logical_names(tensor.name) if n in by_name), None)
        if match is None:
            role = _guess_role(tensor.name, spec.num_hidden_layers)
            layer = _LAYER_NAME.search(tensor.name)
            extras.append(
                TensorSpec(
                    name=tensor.name,
                    shape=tensor.shape,
                    role=role,
                    split=Split.REPLICATED,
                    layer=int(layer.group(1)) if layer and role != Role.VISION else None,
                    quantizable=False,
                    dtype=FLOAT_DTYPES.get(tensor.dtype, tensor.dtype),
                    stored_bytes=tensor.nbytes,
                )
            )
            continue
        stored_bytes[match] = stored_bytes.get(match, 0) + tensor.nbytes
        if match not in stored_dtype or tensor.name.endswith(
            (".weight", ".qweight", "_blocks", ".weight_packed")
        ):
            stored_dtype[match] = FLOAT_DTYPES.get(tensor.dtype, tensor.dtype)
    tensors = [
        replace(t, stored_bytes=stored_bytes[i], dtype=stored_dtype[i]) if i in stored_bytes else t
        for i, t in enumerate(spec.tensors)
    ]
    missing = len(spec.tensors) - len(stored_bytes)
    notes = list(spec.notes)
    if missing:
        notes.append(
            f"{missing} tensors expected from config.json are not in the checkpoint; computed instead"
        )
    if extras:
        notes.append(
            f"{len(extras)} stored tensors outside the modelled inventory kept as-is "
            f"({sum(t.stored_bytes or 0 for t in extras)} bytes)"
        )
    return replace(
        spec,
        tensors=tuple(tensors) + tuple(extras),
        checkpoint_bytes=checkpoint.total_bytes,
        weights_source=checkpoint.source,
        notes=tuple(notes),
    )
