"""`vllm serve MODEL --flag value ...` and `--config file.yaml`, as users type them, -> ServeArgs.

Only what the user wrote is recorded here (typed, under vLLM's field names); defaults are resolved later,
per version and GPU, in `config.py`. Names are read as vLLM's parser reads them (`cli_flags.py`: underscores,
unique prefixes). Flags vLLM has that change no memory figure are kept and listed; flags vLLM itself would
refuse are recorded in `refused` (the planner turns them into vLLM's "unrecognized arguments" error).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oomguard.engines.vllm import cli_flags
from oomguard.errors import ConfigError
from oomguard.units import parse_bytes
from oomguard.yaml_input import load_yaml

Parser = Callable[[str, str], Any]


def _int(flag: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{flag} expects an integer, got {text!r}") from None
        if not math.isfinite(value) or value != int(value):
            raise ConfigError(f"{flag} expects an integer, got {text!r}") from None
        return int(value)


def _float(flag: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{flag} expects a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{flag} expects a finite number, got {text!r}")
    return value


_HUMAN = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmMgG]?)\s*$")


def human_int(flag: str, text: str) -> int:
    """vLLM's human-readable integers: '32k' = 32,000, '32K' = 32,768 (lowercase decimal, uppercase binary)."""
    match = _HUMAN.match(text)
    if not match:
        return _int(flag, text)
    if not match.group(2) and match.group(1).isdigit():
        return int(match.group(1))  # exact, however long (float() would round 10**23)
    number, suffix = float(match.group(1)), match.group(2)
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}[suffix]
    value = number * scale
    if value != int(value):
        raise ConfigError(f"{flag} expects an integer, got {text!r}")
    return int(value)


def _at_least_one(parse: Callable[[str, str], int]) -> Callable[[str, str], int]:
    """Counts a scheduler cannot run with zero or fewer of (sequences, batched tokens)."""

    def checked(flag: str, text: str) -> int:
        value = parse(flag, text)
        if value < 1:
            raise ConfigError(f"{flag} must be >= 1, got {text!r}")
        return value

    return checked


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


def _fraction(flag: str, text: str) -> float:
    value = _float(flag, text)
    if not 0 < value <= 1:
        raise ConfigError(f"{flag} must be in (0, 1], got {text!r}")
    return value


def _json(flag: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        # vLLM also accepts dotted `key=value` lists for some dict flags; keep the raw text.
        return text


def _str(flag: str, text: str) -> str:
    return text


def _compilation(flag: str, text: str) -> Any:
    # `-O 3`, `-O3`, `-O.cudagraph_mode=FULL` or a JSON object.
    stripped = text.strip()
    if stripped.isdigit():
        return {"level": int(stripped)}
    return _json(flag, text)


@dataclass(frozen=True)
class FlagSpec:
    field: str
    parse: Parser | None  # None: a boolean switch
    names: tuple[str, ...]


def _flag(field_name: str, parse: Parser | None, *extra: str) -> FlagSpec:
    return FlagSpec(field_name, parse, ("--" + field_name.replace("_", "-"),) + extra)


# The memory-relevant flags of `vllm serve`, spelled as vLLM spells them (EngineArgs.add_cli_args).
MEMORY_FLAGS: tuple[FlagSpec, ...] = (
    _flag("model", _str),
    _flag("tensor_parallel_size", _int, "-tp"),
    _flag("pipeline_parallel_size", _int, "-pp"),
    _flag("data_parallel_size", _int, "-dp"),
    _flag("data_parallel_size_local", _int, "-dpl"),
    _flag("decode_context_parallel_size", _int, "-dcp"),
    _flag("enable_expert_parallel", None, "-ep"),
    _flag("all2all_backend", _str),
    _flag("enable_eplb", None),
    _flag("num_redundant_experts", _int),
    _flag("eplb_config", _json),
    _flag("gpu_memory_utilization", _fraction, "--device-memory-utilization"),
    _flag("kv_cache_memory_bytes", _memory_bytes, "--kv-cache-memory"),
    _flag("max_model_len", _max_model_len),
    _flag("max_num_seqs", _at_least_one(_int)),
    _flag("max_num_batched_tokens", _at_least_one(human_int)),
    _flag("block_size", _int),
    _flag("kv_cache_dtype", _str),
    _flag("dtype", _str),
    _flag("quantization", _str, "-q"),
    _flag("enforce_eager", None),
    _flag("compilation_config", _compilation, "-O", "-cc"),
    _flag("cuda_graph_sizes", _str),
    _flag("max_seq_len_to_capture", _int),
    _flag("enable_prefix_caching", None),
    _flag("enable_chunked_prefill", None),
    _flag("long_prefill_token_threshold", _int),
    _flag("max_num_partial_prefills", _int),
    _flag("max_long_partial_prefills", _int),
    _flag("async_scheduling", None),
    _flag("cpu_offload_gb", _float),
    _flag("swap_space", _float),
    _flag("enable_lora", None),
    _flag("max_loras", _int),
    _flag("max_lora_rank", _int),
    _flag("max_cpu_loras", _int),
    _flag("speculative_config", _json),
    _flag("num_speculative_tokens", _int),
    _flag("speculative_model", _str),
    _flag("limit_mm_per_prompt", _json),
    _flag("skip_mm_profiling", None),
    _flag("mm_encoder_tp_mode", _str),
    _flag("num_gpu_blocks_override", _at_least_one(_int)),
    _flag("disable_hybrid_kv_cache_manager", None),
    _flag("performance_mode", _str),
    _flag("hf_overrides", _json),
    _flag("attention_backend", _str),
    _flag("disable_custom_all_reduce", None),
    _flag("load_format", _str),
    _flag("max_num_active_seqs", _int),
    _flag("mamba_cache_mode", _str),
    _flag("mamba_ssm_cache_dtype", _str),
    # Host memory (processes, loading, host buffers): read by engines/vllm/host.py.
    _flag("api_server_count", _int, "-asc"),
    _flag("headless", None),
    _flag("distributed_executor_backend", _str),
    _flag("data_parallel_backend", _str, "-dpb"),
    _flag("data_parallel_external_lb", None, "-dpe"),
    _flag("data_parallel_hybrid_lb", None, "-dph"),
    _flag("data_parallel_rank", _int, "-dpn"),
    _flag("data_parallel_start_rank", _int, "-dpr"),
    _flag("safetensors_load_strategy", _str),
    _flag("model_loader_extra_config", _json),
    _flag("max_parallel_loading_workers", _int),
    _flag("kv_offloading_size", _float),
    _flag("kv_offloading_backend", _str),
    _flag("enable_sleep_mode", None),
    _flag("mm_processor_cache_gb", _float),
    _flag("mm_processor_cache_type", _str),
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
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")
# Environment a printed command keeps (what changes memory); a manifest's other env (tokens, keys) never is.
PRINTED_ENV_PREFIXES = ("VLLM_", "PYTORCH_", "NCCL_", "CUDA_", "NVSHMEM_")
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")


@dataclass(frozen=True)
class ServeArgs:
    """What the user's command sets explicitly, under vLLM's field names."""

    model: str | None
    values: Mapping[str, Any]
    env: Mapping[str, str] = field(default_factory=dict)
    unknown_flags: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()  # what vLLM's own parser would refuse, as its error says it
    legacy_flags: tuple[str, ...] = ()  # flags of older vLLM versions that 0.33's parser no longer has

    def merged_with(self, other: ServeArgs) -> ServeArgs:
        """`other` over this one (values, env); unknown, refused and legacy flags of both."""
        values = dict(self.values)
        values.update(other.values)
        return ServeArgs(
            other.model or self.model,
            values,
            {**self.env, **other.env},
            self.unknown_flags + other.unknown_flags,
            self.refused + other.refused,
            self.legacy_flags + other.legacy_flags,
        )

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def with_values(self, **changes: Any) -> ServeArgs:
        merged = dict(self.values)
        merged.update(changes)
        return ServeArgs(self.model, merged, self.env, self.unknown_flags, self.refused, self.legacy_flags)

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


def _strip_launcher(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """Drop env assignments and the launcher words before the flags:
    `VAR=1 vllm serve M`, `python -m vllm.entrypoints.openai.api_server`, `docker run ... vllm/vllm-openai`."""
    env: dict[str, str] = {}
    i = 0
    while i < len(argv) and _ENV.match(argv[i]):
        key, _, value = argv[i].partition("=")
        env[key] = value
        i += 1
    rest = argv[i:]
    for j, word in enumerate(rest):
        if word == "serve" and j > 0 and Path(rest[j - 1]).name == "vllm":
            return rest[j + 1 :], env
        if word.startswith("vllm.entrypoints"):
            return rest[j + 1 :], env
        if "vllm-openai" in word or word.startswith("vllm/vllm"):
            return rest[j + 1 :], env
    if rest[:1] == ["vllm"]:
        return rest[1:], env
    if rest[:1] == ["serve"]:
        return rest[1:], env
    return rest, env


def parse_serve_command(command: Sequence[str] | str) -> ServeArgs:
    """Parse the user's own `vllm serve ...` command (a string as pasted, or an argv list)."""
    if isinstance(command, str):
        try:
            argv = shlex.split(command.replace("\\\n", " "))
        except ValueError as err:
            raise ConfigError(f"cannot split the command line: {err}") from None
    else:
        argv = [a for a in command if a not in ("\\", "\n")]
    tokens, env = _strip_launcher(argv)
    values: dict[str, Any] = {}
    unknown: list[str] = []
    refused: list[str] = []
    legacy: list[str] = []
    model: str | None = None
    config_files: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("-") or token in ("-",):
            if model is None:
                model = token
            else:
                refused.append(token)
            continue
        name, has_inline, inline = token.partition("=")
        name = cli_flags.normalize(name)
        # `-O3` style (digit glued to a short flag)
        if not has_inline and re.match(r"^-O\d$", name):
            name, inline, has_inline = "-O", name[2:], "="
        if name == "--config":
            if not has_inline:
                if i >= len(tokens):
                    raise ConfigError("--config needs a YAML file")
                inline, i = tokens[i], i + 1
            config_files.append(inline)
            continue
        if name not in _BY_NAME and name not in IGNORED_FLAGS and "." not in name:
            try:
                name = cli_flags.resolve(name, OOMGUARD_KNOWN)
            except cli_flags.RefusedFlagError as err:
                takes = not has_inline and i < len(tokens) and not tokens[i].startswith("-")
                why = f" ({err.message.partition(': ')[2]})" if "ambiguous" in err.message else ""
                refused.append((f"{token} {tokens[i]}" if takes else token) + why)
                i += 1 if takes else 0
                continue
        if name in OOMGUARD_KNOWN and name not in cli_flags.vllm_flags() and not _negated_switch(name):
            legacy.append(name)
        negated = name.startswith("--no-") and ("--" + name[5:]) in _BY_NAME
        spec = _BY_NAME.get("--" + name[5:] if negated else name)
        if spec is None:
            # vLLM's dotted sub-options: --compilation-config.cudagraph_mode FULL, -O.mode=3
            head, dot, sub = name.partition(".")
            parent = _BY_NAME.get(head)
            if dot and parent is not None and parent.parse is not None:
                if not has_inline:
                    if i >= len(tokens):
                        raise ConfigError(f"{token} needs a value")
                    inline, i = tokens[i], i + 1
                merged = dict(values.get(parent.field) or {})
                merged[sub] = _json(name, inline) if inline[:1] in "[{" else _scalar(inline)
                values[parent.field] = merged
                continue
            takes_value = IGNORED_FLAGS.get(name)
            if takes_value is None:
                # A vLLM flag that changes no modelled figure: kept and listed.
                unknown.append(token)
                takes_value = bool(cli_flags.takes_value(name)) and not has_inline and i < len(tokens)
                if takes_value:
                    unknown[-1] = f"{token} {tokens[i]}"
            if takes_value and not has_inline:
                i += 1
            continue
        if spec.parse is None:
            if has_inline:
                values[spec.field] = _bool(name, inline) != negated
            else:
                values[spec.field] = not negated
            continue
        if not has_inline:
            if i >= len(tokens):
                raise ConfigError(f"{name} needs a value")
            inline, i = tokens[i], i + 1
        values[spec.field] = spec.parse(name, inline)
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


def _bool(flag: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{flag} expects true or false, got {text!r}")


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
            values[spec.field] = raw_value if isinstance(raw_value, bool) else _bool(key, str(raw_value))
        elif isinstance(raw_value, (dict, list)):
            if spec.parse not in (_json, _compilation) and spec.field not in LIST_VALUED_FIELDS:
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
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read config file {path}: {err}") from None
    data = load_yaml(text, path, ConfigError)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of vLLM options, got {type(data).__name__}")
    return args_from_mapping(data, where=path, strict=True)
