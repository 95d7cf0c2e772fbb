"""`vllm serve MODEL --flag value ...` and `--config file.yaml`, as users type them, -> ServeArgs.

Only what the user wrote is recorded here (typed, under vLLM's field names); defaults are resolved later,
per version and GPU, in `config.py`. The command is read by the shared tokenizer (`engines/flag_tokens.py`);
this module is vLLM's table of flags. Names are read as vLLM's parser reads them (`cli_flags.py`: underscores,
unique prefixes). Flags vLLM has that change no memory figure are kept and listed; flags vLLM itself would
refuse are recorded in `refused` (the planner turns them into vLLM's "unrecognized arguments" error).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from oomguard.engines.flag_tokens import (
    EngineArgs,
    at_least_one,
    read_bool,
    read_float,
    read_fraction,
    read_int,
    read_json,
    read_str,
    split_command,
    take_env,
    tokenize,
)
from oomguard.engines.vllm import cli_flags
from oomguard.errors import ConfigError
from oomguard.inputs import MAX_ENGINE_CONFIG_BYTES, read_text_bounded
from oomguard.units import parse_bytes
from oomguard.yaml_input import load_yaml

Parser = Callable[[str, str], Any]


_HUMAN = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmMgG]?)\s*$")


def human_int(flag: str, text: str) -> int:
    """vLLM's human-readable integers: '32k' = 32,000, '32K' = 32,768 (lowercase decimal, uppercase
    binary)."""
    match = _HUMAN.match(text)
    if not match:
        return read_int(flag, text)
    if not match.group(2) and match.group(1).isdigit():
        return int(match.group(1))  # exact, however long (float() would round 10**23)
    number, suffix = float(match.group(1)), match.group(2)
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}[suffix]
    value = number * scale
    if value != int(value):
        raise ConfigError(f"{flag} expects an integer, got {text!r}")
    return int(value)


def _max_model_len(flag: str, text: str) -> int | str:
    if text.strip().lower() in ("auto", "-1"):
        return "auto"
    value = human_int(flag, text)
    if value <= 0:
        raise ConfigError(f"{flag} must be positive or 'auto', got {text!r}")
    return value


def _memory_bytes(flag: str, text: str) -> int:
    # vLLM reads --kv-cache-memory-bytes as a human-readable int of bytes ('4.5e9', '8G', '8GiB').
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise ConfigError(f"{flag} expects a number of bytes, got {text!r}")
        return int(value)
    match = _HUMAN.match(text)
    if match and match.group(2):
        return human_int(flag, text)
    return parse_bytes(text, bare_unit=1)


def _compilation(flag: str, text: str) -> Any:
    # `-O 3`, `-O3`, `-O.cudagraph_mode=FULL` or a JSON object.
    stripped = text.strip()
    if stripped.isdigit():
        return {"level": int(stripped)}
    return read_json(flag, text)


@dataclass(frozen=True)
class FlagSpec:
    field: str
    parse: Parser | None  # None: a boolean switch
    names: tuple[str, ...]


def _flag(field_name: str, parse: Parser | None, *extra: str) -> FlagSpec:
    return FlagSpec(field_name, parse, ("--" + field_name.replace("_", "-"),) + extra)


# The memory-relevant flags of `vllm serve`, spelled as vLLM spells them (EngineArgs.add_cli_args).
MEMORY_FLAGS: tuple[FlagSpec, ...] = (
    _flag("model", read_str),
    _flag("tensor_parallel_size", read_int, "-tp"),
    _flag("pipeline_parallel_size", read_int, "-pp"),
    _flag("data_parallel_size", read_int, "-dp"),
    _flag("data_parallel_size_local", read_int, "-dpl"),
    _flag("decode_context_parallel_size", read_int, "-dcp"),
    _flag("enable_expert_parallel", None, "-ep"),
    _flag("all2all_backend", read_str),
    _flag("enable_eplb", None),
    _flag("num_redundant_experts", read_int),
    _flag("eplb_config", read_json),
    _flag("gpu_memory_utilization", read_fraction, "--device-memory-utilization"),
    _flag("kv_cache_memory_bytes", _memory_bytes, "--kv-cache-memory"),
    _flag("max_model_len", _max_model_len),
    _flag("max_num_seqs", at_least_one(read_int)),
    _flag("max_num_batched_tokens", at_least_one(human_int)),
    _flag("block_size", read_int),
    _flag("kv_cache_dtype", read_str),
    _flag("dtype", read_str),
    _flag("quantization", read_str, "-q"),
    _flag("enforce_eager", None),
    _flag("compilation_config", _compilation, "-O", "-cc"),
    _flag("cuda_graph_sizes", read_str),
    _flag("max_seq_len_to_capture", read_int),
    _flag("enable_prefix_caching", None),
    _flag("enable_chunked_prefill", None),
    _flag("long_prefill_token_threshold", read_int),
    _flag("max_num_partial_prefills", read_int),
    _flag("max_long_partial_prefills", read_int),
    _flag("async_scheduling", None),
    _flag("cpu_offload_gb", read_float),
    _flag("swap_space", read_float),
    _flag("enable_lora", None),
    _flag("max_loras", read_int),
    _flag("max_lora_rank", read_int),
    _flag("max_cpu_loras", read_int),
    _flag("speculative_config", read_json),
    _flag("num_speculative_tokens", read_int),
    _flag("speculative_model", read_str),
    _flag("limit_mm_per_prompt", read_json),
    _flag("skip_mm_profiling", None),
    _flag("mm_encoder_tp_mode", read_str),
    _flag("num_gpu_blocks_override", at_least_one(read_int)),
    _flag("disable_hybrid_kv_cache_manager", None),
    _flag("performance_mode", read_str),
    _flag("hf_overrides", read_json),
    _flag("attention_backend", read_str),
    _flag("disable_custom_all_reduce", None),
    _flag("load_format", read_str),
    _flag("max_num_active_seqs", read_int),
    _flag("mamba_cache_mode", read_str),
    _flag("mamba_ssm_cache_dtype", read_str),
    # Host memory (processes, loading, host buffers): read by engines/vllm/host.py.
    _flag("api_server_count", read_int, "-asc"),
    _flag("headless", None),
    _flag("distributed_executor_backend", read_str),
    _flag("data_parallel_backend", read_str, "-dpb"),
    _flag("data_parallel_external_lb", None, "-dpe"),
    _flag("data_parallel_hybrid_lb", None, "-dph"),
    _flag("data_parallel_rank", read_int, "-dpn"),
    _flag("data_parallel_start_rank", read_int, "-dpr"),
    _flag("safetensors_load_strategy", read_str),
    _flag("model_loader_extra_config", read_json),
    _flag("max_parallel_loading_workers", read_int),
    _flag("kv_offloading_size", read_float),
    _flag("kv_offloading_backend", read_str),
    _flag("enable_sleep_mode", None),
    _flag("mm_processor_cache_gb", read_float),
    _flag("mm_processor_cache_type", read_str),
)

# Options that vLLM's YAML takes as a list besides the JSON-valued ones (`cuda-graph-sizes: [1, 2, 4]`).
LIST_VALUED_FIELDS = frozenset({"cuda_graph_sizes"})

# Flags that change no memory figure: accepted without comment (value-taking ones listed with True).
IGNORED_FLAGS: dict[str, bool] = {
    "--host": True,
    "--port": True,
    "--api-key": True,
    "--served-model-name": True,
    "--chat-template": True,
    "--tool-call-parser": True,
    "--reasoning-parser": True,
    "--uvicorn-log-level": True,
    "--tokenizer": True,
    "--revision": True,
    "--tokenizer-revision": True,
    "--code-revision": True,
    "--download-dir": True,
    "--seed": True,
    "--root-path": True,
    "--middleware": True,
    "--ssl-keyfile": True,
    "--ssl-certfile": True,
    "--allowed-origins": True,
    "--tokenizer-mode": True,
    "--config-format": True,
    "--generation-config": True,
    "--override-generation-config": True,
    "--log-level": True,
    "--worker-cls": True,
    "--response-role": True,
    "--lora-modules": True,
    "--chat-template-content-format": True,
    "--data-parallel-address": True,
    "--data-parallel-rpc-port": True,
    "--nnodes": True,
    "--node-rank": True,
    "--master-addr": True,
    "--master-port": True,
    "--mm-processor-kwargs": True,
    "--guided-decoding-backend": True,
    "--structured-outputs-config": True,
    "--kv-transfer-config": True,
    "--default-chat-template-kwargs": True,
    "--max-logprobs": True,
    "--logprobs-mode": True,
    "--otlp-traces-endpoint": True,
    "--hf-token": True,
    "--trust-remote-code": False,
    "--enable-auto-tool-choice": False,
    "--disable-log-requests": False,
    "--disable-log-stats": False,
    "--enable-log-requests": False,
    "--disable-frontend-multiprocessing": False,
    "--enable-prompt-tokens-details": False,
    "--enable-server-load-tracking": False,
    "--disable-fastapi-docs": False,
    "--enable-request-id-headers": False,
    "--enable-force-include-usage": False,
    "--no-enable-log-requests": False,
}

_BY_NAME: dict[str, FlagSpec] = {name: spec for spec in MEMORY_FLAGS for name in spec.names}
# Every flag name oomguard's tables know, some from versions before 0.33 (--speculative-model).
OOMGUARD_KNOWN = frozenset(_BY_NAME) | frozenset(IGNORED_FLAGS)
# Environment a printed command keeps (what changes memory); a manifest's other env (tokens, keys) never is.
PRINTED_ENV_PREFIXES = ("VLLM_", "PYTORCH_", "NCCL_", "CUDA_", "NVSHMEM_")
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")


@dataclass(frozen=True)
class ServeArgs(EngineArgs):
    """What the user's command sets explicitly, under vLLM's field names."""

    refused: tuple[str, ...] = ()  # what vLLM's own parser would refuse, as its error says it
    legacy_flags: tuple[str, ...] = ()  # flags of older vLLM versions that 0.33's parser no longer has

    def merged_with(self, other: ServeArgs) -> ServeArgs:
        """`other` over this one (values, env); unknown, refused and legacy flags of both."""
        return replace(
            super().merged_with(other),
            refused=self.refused + other.refused,
            legacy_flags=self.legacy_flags + other.legacy_flags,
        )

    def to_argv(self) -> list[str]:
        """The command back as `vllm serve` flags (used to print fixes as commands), with its env prefix."""
        argv = [
            f"{key}={shlex.quote(value)}"
            for key, value in self.env.items()
            if key.startswith(PRINTED_ENV_PREFIXES) and not any(s in key for s in SECRET_WORDS)
        ]
        argv += ["vllm", "serve", self.model or "MODEL"]
        for name, value in self.values.items():
            if name == "model":
                continue
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                argv.append(flag if value else "--no-" + flag[2:])
            elif isinstance(value, (dict, list)):
                argv += [flag, shlex.quote(json.dumps(value, separators=(",", ":")))]
            else:
                argv += [flag, str(value)]
        return argv


def _strip_launcher(argv: list[str]) -> list[str]:
    """Drop the launcher words before the flags: `vllm serve M`, `python -m
    vllm.entrypoints.openai.api_server`,
    `docker run ... vllm/vllm-openai`."""
    for j, word in enumerate(argv):
        if word == "serve" and j > 0 and Path(argv[j - 1]).name == "vllm":
            return argv[j + 1 :]
        if word.startswith("vllm.entrypoints"):
            return argv[j + 1 :]
        if "vllm-openai" in word or word.startswith("vllm/vllm"):
            return argv[j + 1 :]
    if argv[:1] == ["vllm"]:
        return argv[1:]
    if argv[:1] == ["serve"]:
        return argv[1:]
    return argv


def _negated(name: str) -> bool:
    return name.startswith("--no-") and ("--" + name[5:]) in _BY_NAME


def _dotted_parent(name: str) -> FlagSpec | None:
    """vLLM's dotted sub-options: --compilation-config.cudagraph_mode FULL, -O.mode=3."""
    head, dot, _ = name.partition(".")
    parent = _BY_NAME.get(head)
    return parent if dot and parent is not None and parent.parse is not None else None


def _canonical(name: str) -> str:
    """The flag vLLM's parser reads `name` as (a unique prefix is its flag); unchanged when it is unknown."""
    if name in _BY_NAME or name in IGNORED_FLAGS or "." in name or name == "--config":
        return name
    try:
        return cli_flags.resolve(name, OOMGUARD_KNOWN)
    except cli_flags.RefusedFlagError:
        return name


def _takes_value(name: str) -> bool | None:
    """The table's answer for the shared tokenizer: True takes a value, False is a switch, None unknown."""
    name = _canonical(name)
    if name == "--config":
        return True
    spec = _BY_NAME.get("--" + name[5:] if _negated(name) else name)
    if spec is not None:
        return spec.parse is not None
    if _dotted_parent(name) is not None:
        return True
    if name in IGNORED_FLAGS:
        return IGNORED_FLAGS[name]
    return cli_flags.takes_value(name)


def parse_serve_command(command: Sequence[str] | str) -> ServeArgs:
    """Parse the user's own `vllm serve ...` command (a string as pasted, or an argv list)."""
    env, argv = take_env(split_command(command))
    # `-O3` style: a digit glued to the short compilation flag.
    words = [f"-O={w[2:]}" if re.match(r"^-O\d$", w) else w for w in _strip_launcher(argv)]
    values: dict[str, Any] = {}
    unknown: list[str] = []
    refused: list[str] = []
    legacy: list[str] = []
    model: str | None = None
    config_files: list[str] = []
    for token in tokenize(words, _takes_value):
        name, text = _canonical(token.name), token.value
        if token.positional:
            if model is None:
                model = name
            else:
                refused.append(name)
            continue
        if "." not in name and name != "--config":
            try:
                cli_flags.resolve(name, OOMGUARD_KNOWN)
            except cli_flags.RefusedFlagError as err:
                why = f" ({err.message.partition(': ')[2]})" if "ambiguous" in err.message else ""
                refused.append(token.raw + why)
                continue
            if name in OOMGUARD_KNOWN and name not in cli_flags.vllm_flags() and not _negated_switch(name):
                legacy.append(name)
        modelled = _BY_NAME.get("--" + name[5:] if _negated(name) else name)
        if name != "--config" and _dotted_parent(name) is None and modelled is None:
            if name not in IGNORED_FLAGS:
                unknown.append(token.raw)  # a vLLM flag that changes no modelled figure: kept and listed
            continue
        if name == "--config":
            config_files.append(text or "")
        elif (parent := _dotted_parent(name)) is not None and name not in _BY_NAME:
            sub = name.partition(".")[2]
            merged = dict(values.get(parent.field) or {})
            merged[sub] = read_json(name, text or "") if (text or "")[:1] in "[{" else _scalar(text or "")
            values[parent.field] = merged
        else:
            negated = _negated(name)
            spec = _BY_NAME.get("--" + name[5:] if negated else name)
            if spec is None:
                continue  # a flag that changes no memory figure
            if spec.parse is None:
                values[spec.field] = (read_bool(name, text) if text is not None else True) != negated
            else:
                values[spec.field] = spec.parse(name, text or "")
    if "model" in values and model is None:
        model = values.pop("model")
    else:
        values.pop("model", None)
    for path in config_files:
        file_values = load_config_yaml(path)
        for key, value in file_values.values.items():
            values.setdefault(key, value)  # the command line wins over the file, as in vLLM
        if model is None:
            model = file_values.model
        unknown += file_values.unknown_flags
        refused += file_values.refused
        legacy += file_values.legacy_flags
    return ServeArgs(model, values, env, tuple(unknown), tuple(refused), tuple(legacy))


def _negated_switch(name: str) -> bool:
    return name.startswith("--no-") and ("--" + name[5:]) in cli_flags.vllm_flags()


def _scalar(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def args_from_mapping(mapping: Mapping[str, Any], *, where: str, strict: bool = False) -> ServeArgs:
    """YAML / JSON / Python kwargs (`tensor_parallel_size: 2`, `tensor-parallel-size: 2`) -> ServeArgs.
    `strict`: the keys are a `vllm serve --config` file's, refused as vLLM's parser refuses unknown flags."""
    values: dict[str, Any] = {}
    unknown: list[str] = []
    refused: list[str] = []
    legacy: list[str] = []
    model = None
    for raw_key, raw_value in mapping.items():
        key = str(raw_key).strip().lstrip("-").replace("-", "_")
        if key == "model" or key == "model_tag":
            model = str(raw_value)
            continue
        flag = "--" + key.replace("_", "-")
        if strict and flag not in cli_flags.vllm_flags():
            # vLLM's --config turns every key into `--key value`: its parser refuses what it does not know.
            if flag in OOMGUARD_KNOWN:
                legacy.append(flag)
            else:
                refused.append(f"{key}: {raw_value}{cli_flags.hint(flag)} (in {where})")
                continue
        spec = _BY_NAME.get(flag)
        if spec is None:
            if flag not in IGNORED_FLAGS:
                unknown.append(f"{key}: {raw_value}")
            continue
        if spec.parse is None:
            values[spec.field] = raw_value if isinstance(raw_value, bool) else read_bool(key, str(raw_value))
        elif isinstance(raw_value, (dict, list)):
            if spec.parse not in (read_json, _compilation) and spec.field not in LIST_VALUED_FIELDS:
                raise ConfigError(
                    f"{where or 'options'}: {key} expects a single value, got a "
                    f"{'mapping' if isinstance(raw_value, dict) else 'list'}"
                )
            values[spec.field] = raw_value
        elif raw_value is None:
            continue
        else:
            values[spec.field] = spec.parse("--" + key.replace("_", "-"), str(raw_value))
    if where and not isinstance(mapping, Mapping):
        raise ConfigError(f"{where}: expected a mapping of vLLM options")
    return ServeArgs(model, values, {}, tuple(unknown), tuple(refused), tuple(legacy))


def load_config_yaml(path: str) -> ServeArgs:
    """vLLM's `--config` file: a YAML mapping of option names to values."""
    # refused by size before parsing: a 9 MB YAML costs seconds and gigabytes to parse
    text = read_text_bounded(path, limit=MAX_ENGINE_CONFIG_BYTES, what="config file", error=ConfigError)
    data = load_yaml(text, path, ConfigError)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of vLLM options, got {type(data).__name__}")
    return args_from_mapping(data, where=path, strict=True)


def is_known_flag(flag: str) -> bool:
    """`--max-model-len`, `-tp`, `--port` ...: a flag `vllm serve` takes (modelled or known to change no
    memory)."""
    return flag in _BY_NAME or flag in IGNORED_FLAGS or flag == "--config"


def is_known_field(name: str) -> bool:
    """`max_model_len`, `tensor_parallel_size` ...: a vLLM engine argument by its field name."""
    return is_known_flag("--" + name.replace("_", "-"))
