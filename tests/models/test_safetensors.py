"""Safetensors headers: exact bytes from files written by the real `safetensors` library, hostile headers
rejected in one line, and stored tensors matched to the ModelSpec inventory."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from oomguard.errors import InputFormatError
from oomguard.models.resolve import resolve_model
from oomguard.models.safetensors import read_header, read_local_checkpoint
from oomguard.models.spec import Role
from oomguard.models.weights import RankPlacement, checkpoint_weight_bytes, rank_weight_bytes

save_file = pytest.importorskip("safetensors.numpy").save_file

# A real, tiny Llama-shaped config: every tensor can be written in a few KiB.
TINY = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 100,
    "max_position_embeddings": 256,
    "torch_dtype": "bfloat16",
}


def tiny_dir(tmp_path: Path, dtype: type = np.float16, extra: dict[str, np.ndarray] | None = None) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    spec = resolve_model(str(tmp_path / "config.json"), trust_local_safetensors=False)
    tensors = {t.name: np.zeros(t.shape, dtype=dtype) for t in spec.tensors}
    tensors.update(extra or {})
    half = len(tensors) // 2
    names = sorted(tensors)
    save_file({n: tensors[n] for n in names[:half]}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({n: tensors[n] for n in names[half:]}, str(tmp_path / "model-00002-of-00002.safetensors"))
    return tmp_path


def framed(header: bytes) -> bytes:
    return struct.pack("<Q", len(header)) + header


def test_header_gives_exact_dtype_shape_and_bytes(tmp_path: Path) -> None:
    path = tmp_path / "one.safetensors"
    save_file({"w": np.zeros((3, 5), dtype=np.float32), "b": np.zeros((7,), dtype=np.int8)}, str(path))
    tensors = {t.name: t for t in read_header(path)}
    assert (tensors["w"].dtype, tensors["w"].shape, tensors["w"].nbytes) == ("F32", (3, 5), 60)
    assert tensors["b"].nbytes == 7


def test_headers_only_copy_is_enough(tmp_path: Path) -> None:
    path = tmp_path / "one.safetensors"
    save_file({"w": np.zeros((256, 256), dtype=np.float16)}, str(path))
    (length,) = struct.unpack("<Q", path.read_bytes()[:8])
    path.write_bytes(path.read_bytes()[: 8 + length])
    assert read_header(path)[0].nbytes == 256 * 256 * 2


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"\x01\x02", "shorter than the 8-byte"),
        (struct.pack("<Q", 1 << 40), "exceeds"),
        (struct.pack("<Q", 100) + b"{}", "truncated"),
        (struct.pack("<Q", 4) + b"\xff\xfe\xfd\xfc", "not UTF-8"),
        (struct.pack("<Q", 5) + b"[1,2]", "not a JSON object"),
        (framed(b'{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}'), "do not hold"),
        (framed(b'{"x":{"dtype":"Q9","shape":[4],"data_offsets":[0,8]}}'), "unknown dtype"),
        (framed(b'{"x":{"dtype":"F32","shape":[-4],"data_offsets":[0,8]}}'), "invalid shape"),
        (framed(b'{"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}'), "invalid data_offsets"),
    ],
)
def test_hostile_or_truncated_headers_are_one_line_errors(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(InputFormatError, match=problem) as err:
        read_header(path)
    assert "\n" not in str(err.value) and "bad.safetensors" in str(err.value)


def test_local_checkpoint_bytes_replace_config_estimates(tmp_path: Path) -> None:
    directory = tiny_dir(tmp_path)
    spec = resolve_model(str(directory))
    on_disk = read_local_checkpoint(directory)
    assert on_disk is not None and spec.weights_source == "safetensors headers"
    assert spec.checkpoint_bytes == on_disk.total_bytes
    assert all(t.stored_bytes is not None for t in spec.tensors)
    assert checkpoint_weight_bytes(spec).total == on_disk.total_bytes


def test_stored_tensors_outside_the_inventory_are_kept_not_lost(tmp_path: Path) -> None:
    extra = {"model.layers.2.eh_proj.weight": np.zeros((64, 128), dtype=np.float16)}
    spec = resolve_model(str(tiny_dir(tmp_path, extra=extra)))
    kept = [t for t in spec.tensors if t.name == "model.layers.2.eh_proj.weight"]
    assert kept and kept[0].role == Role.MTP and kept[0].stored_bytes == 64 * 128 * 2
    assert any("outside the modelled inventory" in note for note in spec.notes)


def test_float32_checkpoint_is_loaded_in_bfloat16(tmp_path: Path) -> None:
    spec = resolve_model(str(tiny_dir(tmp_path, dtype=np.float32)))
    assert spec.dtype == "bfloat16"
    assert spec.checkpoint_bytes == 2 * checkpoint_weight_bytes(spec).total


def test_rank_bytes_pad_the_vocab_to_a_multiple_of_64(tmp_path: Path) -> None:
    spec = resolve_model(str(tiny_dir(tmp_path)))
    on_rank = rank_weight_bytes(spec, RankPlacement())
    assert (
        on_rank.of(Role.EMBEDDING) == 128 * 64 * 2
        and checkpoint_weight_bytes(spec).of(Role.EMBEDDING) == 100 * 64 * 2
    )


def test_index_alone_gives_the_total(tmp_path: Path, shared_data: Path) -> None:
    shutil.copy(shared_data / "models" / "configs" / "Qwen" / "Qwen3-14B" / "config.json", tmp_path)
    index = {"metadata": {"total_size": 29_536_614_400}, "weight_map": {"lm_head.weight": "a.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    spec = resolve_model(str(tmp_path))
    assert spec.checkpoint_bytes == 29_536_614_400 and spec.weights_source == "safetensors index total_size"


def test_malformed_index_is_a_one_line_error(tmp_path: Path, shared_data: Path) -> None:
    shutil.copy(shared_data / "models" / "configs" / "Qwen" / "Qwen3-14B" / "config.json", tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": ')
    with pytest.raises(InputFormatError, match="index"):
        resolve_model(str(tmp_path))
