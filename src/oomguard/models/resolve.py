"""Model id or path -> ModelSpec: a local directory, the bundled catalog, then the Hugging Face Hub.

Order (first that answers wins):
  1. a local directory holding config.json (or a path to a config.json); safetensors files, their index or
     headers-only copies beside it give exact tensor bytes;
  2. the bundled catalog `catalog/models.jsonl` (config.json facts of popular models, offline);
  3. the Hugging Face Hub through `huggingface_hub` (a dependency), unless HF_HUB_OFFLINE is set:
     config.json and safetensors metadata only, cached on disk by huggingface_hub itself.
Results are cached per (model, dtype, quantization) so sweeps of thousands of plans do not re-read anything.
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import os
import re
import socket
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from oomguard.errors import ConfigError, OomguardError, UnknownModelError
from oomguard.inputs import loads_json
from oomguard.models.hf_config import spec_from_config
from oomguard.models.safetensors import apply_checkpoint, checkpoint_from_hub, read_local_checkpoint
from oomguard.models.spec import ModelSpec

CATALOG_PATH = Path(__file__).with_name("catalog") / "models.jsonl"
HUB_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf://")
HUB_ENDPOINT = "https://huggingface.co"
HUB_CONNECT_TIMEOUT_S = 2.0
MAX_CONFIG_BYTES = 16 << 20  # a real config.json is a few KiB; refuse anything absurd before parsing


@dataclass(frozen=True)
class CatalogEntry:
    id: str
    aliases: tuple[str, ...]
    config: Mapping[str, Any]
    safetensors_total_size: int | None


def _strip_prefix(text: str) -> str:
    name = text.strip()
    for prefix in HUB_PREFIXES:
        if name.lower().startswith(prefix):
            name = name[len(prefix) :]
    return name.strip("/")


def _normalize(text: str) -> str:
    return _strip_prefix(text).lower()


@functools.lru_cache(maxsize=4)
def load_catalog(path: Path = CATALOG_PATH) -> dict[str, CatalogEntry]:
    """Bundled catalog, indexed by lower-case id and alias. A bad line is skipped, not fatal."""
    index: dict[str, CatalogEntry] = {}
    if not path.is_file():
        return index
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                total = record.get("safetensors_total_size")
                if isinstance(total, Mapping):
                    total = total.get("bytes")
                entry = CatalogEntry(
                    id=str(record["id"]),
                    aliases=tuple(str(a) for a in record.get("aliases") or ()),
                    config=record["config"],
                    safetensors_total_size=int(total) if isinstance(total, int) else None,
                )
            except (ValueError, KeyError, TypeError):
                continue
            if not isinstance(entry.config, Mapping):
                continue
            for key in (entry.id, *entry.aliases):
                index.setdefault(_normalize(key), entry)
    return index


def catalog_ids() -> list[str]:
    return sorted({entry.id for entry in load_catalog().values()})


# Parts of a checkpoint's name that leave its architecture and size as they were: tuning and chat variants,
# quantization and file formats, release dates and revisions ("DeepSeek-V3-0324", "Qwen3-30B-A3B-GPTQ-Int4",
# "Meta-Llama-3-70B-Instruct-AWQ", "...-Q4_K_M"). A part outside these ("-multimodal", "-Coder") names
# another model.
_SAME_MODEL_PART = re.compile(
    r"(instruct|chat|it|base|hf|sft|dpo|rlhf|demo|awq|gptq|int4|int8|int|fp8|fp16|bf16|fp4|nvfp4|mxfp4|"
    r"w4a16|w8a8|w8a16|w4a8|w4a4|gguf|ggml|exl2|exl3|mlx|bnb|nf4|\d+bit|dynamic|quantized|i?q\d\w*|k|m|s|l|"
    r"xs|xl|v\d+(\.\d+)*|\d{4}|\d{6}|\d+bpw\w*)"
)


@functools.lru_cache(maxsize=4)
def _by_first_letters(path: Path = CATALOG_PATH) -> dict[str, list[tuple[str, CatalogEntry]]]:
    """The catalog's names (an id's last part, an alias) by their first three letters."""
    index: dict[str, list[tuple[str, CatalogEntry]]] = {}
    for key, entry in load_catalog(path).items():
        tail = key.rsplit("/", 1)[-1]
        index.setdefault(tail[:3], []).append((tail, entry))
    return index


# A model in huggingface_hub's cache: ".../hub/models--Qwen--Qwen3-8B/snapshots/<revision>".
_HUB_CACHE_DIR = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)")


def hub_cache_parts(parts: list[str]) -> list[str]:
    """A path's parts, with a Hugging Face cache directory read as the 'org/name' it holds (what follows it,
    snapshots/<revision>, is no name)."""
    for i, part in enumerate(parts):
        m = _HUB_CACHE_DIR.fullmatch(part)
        if m:
            return [*parts[:i], m.group("org"), m.group("name")]
    return parts


@functools.lru_cache(maxsize=1024)
def catalog_match(text: str) -> CatalogEntry | None:
    """The catalog model a checkpoint's name or path is a copy of, as reports write it: 'org/name', a local
    path ending in the model's directory ('/data/models/Qwen/Qwen3-8B/'), or a renamed or quantized copy whose
    name extends a catalog name by parts that keep the architecture and size (`_SAME_MODEL_PART`); the
    longest such catalog name wins. None when no catalog model is named."""
    catalog = load_catalog()
    parts = hub_cache_parts(
        [p for p in _strip_prefix(text).replace("\\", "/").split("/") if p and p not in (".", "..", "~")]
    )
    if not parts:
        return None
    for candidate in ("/".join(parts[-2:]), parts[-1]):
        entry = catalog.get(candidate.lower())
        if entry is not None:
            return entry
    # A model file's name; an ollama tag ("qwen3:4b") names the model with a colon.
    name = re.sub(r"\.(gguf|ggml|bin|safetensors)$", "", parts[-1].lower()).replace(":", "-")
    if name in catalog:
        return catalog[name]
    best: tuple[int, CatalogEntry] | None = None
    for tail, entry in _by_first_letters().get(name[:3], ()):
        if len(name) <= len(tail) or not name.startswith(tail) or name[len(tail)] not in "-_":
            continue
        rest = [p for p in re.split(r"[-_]", name[len(tail) + 1 :]) if p]
        if (
            rest
            and all(_SAME_MODEL_PART.fullmatch(p) for p in rest)
            and (best is None or len(tail) > best[0])
        ):
            best = (len(tail), entry)
    return best[1] if best else None


def read_config_file(path: Path) -> dict[str, Any]:
    """config.json -> dict; anything unreadable is a one-line ConfigError naming the file."""
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: {size} bytes is far too large for a config.json")
        data = loads_json(path.read_bytes(), str(path), ConfigError)  # depth and numbers bounded
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text, so not a config.json") from None
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"{path}: malformed JSON at line {err.lineno} column {err.colno}: {err.msg}"
        ) from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: config.json must hold a JSON object, got {type(data).__name__}")
    return data


def _local_config(text: str) -> Path | None:
    path = Path(os.path.expanduser(text))
    if path.is_dir():
        candidate = path / "config.json"
        if candidate.is_file():
            return candidate
        raise UnknownModelError(
            f"{path} is a directory without config.json; put the model's config.json there"
        )
    if path.is_file() and path.name.endswith(".json"):
        return path
    return None


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


@functools.lru_cache(maxsize=1)
def _hub_reachable() -> bool:
    """One TCP connect to the Hub endpoint: huggingface_hub itself retries for ~20 s before giving up."""
    host = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT", HUB_ENDPOINT)).hostname or ""
    try:
        with socket.create_connection((host, 443), timeout=HUB_CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def _from_hub(repo_id: str) -> tuple[dict[str, Any], Any] | None:
    """config.json (and safetensors metadata) from the Hub, or None when offline / not installed / not
    found."""
    if _hub_offline() or repo_id.count("/") != 1:
        return None
    try:
        import huggingface_hub  # deferred: only models outside the catalog need it
    except ImportError:
        return None
    if not _hub_reachable():
        return None
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)  # its retry chatter is not for our users
    try:
        path = huggingface_hub.hf_hub_download(repo_id, "config.json", etag_timeout=5)
    except Exception:  # noqa: BLE001 - any Hub failure (network, 404, gated) means "not resolvable here"
        return None
    config = read_config_file(Path(path))
    return config, checkpoint_from_hub(repo_id)


def _unknown(text: str) -> UnknownModelError:
    ids = catalog_ids()
    lowered = {i.lower(): i for i in ids}
    wanted = _normalize(text)
    close = difflib.get_close_matches(wanted, list(lowered), n=3, cutoff=0.5)
    if not close:
        tail = wanted.rsplit("/", 1)[-1]
        close = difflib.get_close_matches(tail, [i.rsplit("/", 1)[-1] for i in lowered], n=3, cutoff=0.5)
        close = [i for i in lowered if i.rsplit("/", 1)[-1] in close]
    hint = f"; close matches: {', '.join(lowered[c] for c in close)}" if close else ""
    where = "the Hub is offline (HF_HUB_OFFLINE)" if _hub_offline() else "the Hub could not be reached"
    return UnknownModelError(
        f"unknown model {text!r}: not a local directory, not in the bundled catalog, and {where}{hint}; "
        f"pass a local directory that holds the model's config.json instead"
    )


def resolve_model(
    text: str,
    *,
    dtype: str | None = None,
    quantization: str | None = None,
    trust_local_safetensors: bool = True,
) -> ModelSpec:
    """Id or path -> ModelSpec (cached). Raises UnknownModelError / ConfigError with a one-line message."""
    if not isinstance(text, str) or not text.strip():
        raise UnknownModelError(
            "no model given: pass a Hugging Face id or a local directory with config.json"
        )
    config_path = _local_config(text)
    stamp = config_path.stat().st_mtime_ns if config_path is not None else 0
    return _resolve_cached(text, dtype, quantization, trust_local_safetensors, stamp)


@functools.lru_cache(maxsize=1024)
def _resolve_cached(
    text: str, dtype: str | None, quantization: str | None, trust_local_safetensors: bool, stamp: int
) -> ModelSpec:
    config_path = _local_config(text)
    if config_path is not None:
        name = str(config_path.parent if config_path.name == "config.json" else config_path)
        spec = spec_from_config(
            read_config_file(config_path), name=name, dtype=dtype, quantization=quantization
        )
        if trust_local_safetensors:
            checkpoint = read_local_checkpoint(config_path.parent)
            if checkpoint is not None:
                spec = apply_checkpoint(spec, checkpoint)
        return spec
    entry = load_catalog().get(_normalize(text))
    if entry is not None:
        try:
            spec = spec_from_config(entry.config, name=entry.id, dtype=dtype, quantization=quantization)
        except OomguardError as err:
            raise ConfigError(f"bundled catalog entry {entry.id}: {err}") from None
        if entry.safetensors_total_size:
            spec = replace(
                spec, checkpoint_bytes=entry.safetensors_total_size, weights_source="catalog total_size"
            )
        return spec
    hub = _from_hub(_strip_prefix(text))
    if hub is not None:
        config, checkpoint = hub
        spec = spec_from_config(config, name=text, dtype=dtype, quantization=quantization)
        return apply_checkpoint(spec, checkpoint) if checkpoint is not None else spec
    raise _unknown(text)
