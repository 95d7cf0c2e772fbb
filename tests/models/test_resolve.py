"""resolve_model: local directories, the bundled catalog, the Hub fallback and one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from oomguard.errors import ConfigError, UnknownModelError
from oomguard.models.resolve import resolve_model


@pytest.fixture()
def qwen3_dir(shared_data: Path, tmp_path: Path) -> Path:
    target = tmp_path / "Qwen3-14B"
    shutil.copytree(shared_data / "models" / "configs" / "Qwen" / "Qwen3-14B", target)
    return target


def test_local_directory_with_config_json_resolves(qwen3_dir: Path) -> None:
    spec = resolve_model(str(qwen3_dir))
    assert spec.model_type == "qwen3"
    assert spec.num_hidden_layers == 40
    assert spec.weights_source == "config.json"


def test_path_to_config_json_file_resolves(qwen3_dir: Path) -> None:
    assert (
        resolve_model(str(qwen3_dir / "config.json")).num_params == resolve_model(str(qwen3_dir)).num_params
    )


def test_dtype_flag_overrides_checkpoint_dtype(qwen3_dir: Path) -> None:
    assert resolve_model(str(qwen3_dir)).dtype == "bfloat16"
    assert resolve_model(str(qwen3_dir), dtype="half").dtype == "float16"


def test_repeated_resolution_is_cached(qwen3_dir: Path) -> None:
    assert resolve_model(str(qwen3_dir)) is resolve_model(str(qwen3_dir))


def test_edited_config_is_reread(qwen3_dir: Path) -> None:
    before = resolve_model(str(qwen3_dir))
    config = json.loads((qwen3_dir / "config.json").read_text())
    config["num_hidden_layers"] = 2
    (qwen3_dir / "config.json").write_text(json.dumps(config))
    assert resolve_model(str(qwen3_dir)).num_hidden_layers == 2 != before.num_hidden_layers


@pytest.mark.parametrize("content", [b'{"model_type": "llama",', b"", b"\xff\xfe\x00garbage", b"[1, 2]"])
def test_malformed_config_json_is_a_one_line_config_error(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(ConfigError) as err:
        resolve_model(str(tmp_path))
    assert "config.json" in str(err.value) and "\n" not in str(err.value)


def test_config_missing_a_required_key_names_it(qwen3_dir: Path) -> None:
    config = json.loads((qwen3_dir / "config.json").read_text())
    del config["hidden_size"]
    (qwen3_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="hidden_size"):
        resolve_model(str(qwen3_dir))


def test_unsupported_model_type_lists_supported_ones(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(ConfigError, match="not supported.*llama"):
        resolve_model(str(tmp_path))


def test_directory_without_config_json_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(UnknownModelError, match="config.json"):
        resolve_model(str(tmp_path))


def test_unknown_model_offline_says_how_to_pass_a_local_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UnknownModelError) as err:
        resolve_model("nobody-at-all/no-such-model-7B")
    message = str(err.value)
    assert "offline" in message and "config.json" in message and "\n" not in message
