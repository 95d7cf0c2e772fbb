"""How a checkpoint stores its linear weights: `quantization_config` -> Quantization, and the bytes one weight
matrix costs under it (packed weights plus the scales, zero points and indices the format keeps beside them).

Layouts are the ones the checkpoints store (and vLLM loads, repacked at the same size):
  FP8 block (DeepSeek-V3, Qwen3-FP8): e4m3 weight + one fp32 `weight_scale_inv` per 128x128 block.
  FP8 per tensor / `--quantization fp8`: e4m3 weight + one fp32 scale (+ one input scale when static).
  compressed-tensors: int8/fp8 weight + one scale per output channel in model dtype (w8a8);
      `weight_packed` int32 (8 nibbles) + one scale per group + `weight_shape` (w4a16);
      nvfp4: 2 nibbles per uint8 + one fp8 scale per 16 + fp32 global scales.
  AWQ: qweight int32 [in, out/8], qzeros int32 [in/g, out/8], scales fp16 [in/g, out].
  GPTQ: qweight int32 [in·bits/32, out], qzeros int32 [in/g, out·bits/32], scales fp16 [in/g, out], g_idx
  int32 [in].
  bitsandbytes 4-bit: 2 nibbles per uint8 + fp32 absmax per 64 (nested: uint8 absmax + fp32 per 256 of them).
  MXFP4 (gpt-oss): `_blocks` uint8, 2 nibbles each, + `_scales` one uint8 exponent per 32 weights.
  NVFP4 (modelopt): 2 nibbles per uint8 + fp8 scale per 16 + fp32 `weight_scale_2` and `input_scale`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from typing import Any

from oomguard.errors import ConfigError
from oomguard.models.spec import Quantization

FP32_BYTES = 4
FP16_BYTES = 2
INT32_BYTES = 4
FP8_BYTES = 1
DEEPSEEK_FP8_BLOCK = (128, 128)  # DeepSeek-V3 / Qwen3-FP8 `weight_block_size`
BNB_4BIT_BLOCK = 64  # bitsandbytes blocksize for 4-bit absmax
BNB_NESTED_BLOCK = 256  # bitsandbytes nested (double) quantization block of the absmax
MXFP4_BLOCK = 32  # OCP MX spec: 32 elements share one E8M0 scale
NVFP4_BLOCK = 16  # NVFP4: 16 elements share one E4M3 scale
AWQ_GPTQ_SCALE_BYTES = FP16_BYTES  # AutoAWQ / AutoGPTQ store scales in fp16


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------------------------------------------------
# quantization_config -> Quantization
# ---------------------------------------------------------------------------------------------------------


def _strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    raise ConfigError(f"quantization_config: expected a list of module names, got {value!r}")


def _int(qc: Mapping[str, Any], key: str, default: int) -> int:
    value = qc.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"quantization_config: {key!r} must be an integer, got {value!r}")
    return value


def _fp8(qc: Mapping[str, Any]) -> Quantization:
    block = qc.get("weight_block_size")
    if block is not None and not (
        isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)
    ):
        raise ConfigError(
            f"quantization_config: 'weight_block_size' must be two positive ints, got {block!r}"
        )
    return Quantization(
        method="fp8",
        weight_bits=8,
        block=(block[0], block[1]) if block else None,
        scale_bytes=FP32_BYTES,
        skip_modules=_strings(qc.get("modules_to_not_convert")) + _strings(qc.get("ignored_layers")),
        static_activations=qc.get("activation_scheme") == "static",
    )


def _awq(qc: Mapping[str, Any]) -> Quantization:
    return Quantization(
        method="awq",
        weight_bits=_int(qc, "bits", _int(qc, "w_bit", 4)),
        group_size=_int(qc, "group_size", _int(qc, "q_group_size", 128)),
        scale_bytes=AWQ_GPTQ_SCALE_BYTES,
        zero_point=bool(qc.get("zero_point", True)),
        skip_modules=_strings(qc.get("modules_to_not_convert")),
    )


def _gptq(qc: Mapping[str, Any]) -> Quantization:
    return Quantization(
        method=str(qc.get("quant_method", "gptq")),
        weight_bits=_int(qc, "bits", 4),
        group_size=_int(qc, "group_size", 128),
        scale_bytes=AWQ_GPTQ_SCALE_BYTES,
        zero_point=True,
        act_order=bool(qc.get("desc_act", False)),
        skip_modules=_strings(qc.get("modules_to_not_convert")),
    )


def _bitsandbytes(qc: Mapping[str, Any]) -> Quantization:
    four_bit = bool(qc.get("load_in_4bit", False)) or not bool(qc.get("load_in_8bit", False))
    skip = _strings(qc.get("llm_int8_skip_modules"))
    if not four_bit:
        return Quantization(
            method="bitsandbytes", weight_bits=8, scale_bytes=FP32_BYTES, scheme="int8", skip_modules=skip
        )
    return Quantization(
        method="bitsandbytes",
        weight_bits=4,
        group_size=BNB_4BIT_BLOCK,
        scale_bytes=FP32_BYTES,
        scheme=str(qc.get("bnb_4bit_quant_type", "nf4")),
        double_quant=bool(qc.get("bnb_4bit_use_double_quant", False)),
        skip_modules=skip,
    )


def _mxfp4(qc: Mapping[str, Any]) -> Quantization:
    return Quantization(
        method="mxfp4",
        weight_bits=4,
        group_size=MXFP4_BLOCK,
        scale_bytes=1,
        skip_modules=_strings(qc.get("modules_to_not_convert")),
    )


def _modelopt(qc: Mapping[str, Any]) -> Quantization:
    inner = qc.get("quantization") if isinstance(qc.get("quantization"), Mapping) else qc
    assert isinstance(inner, Mapping)
    algo = str(inner.get("quant_algo", "")).upper()
    skip = _strings(inner.get("exclude_modules")) + _strings(qc.get("ignore"))
    if "FP4" in algo:
        return Quantization(
            method="modelopt_fp4",
            weight_bits=4,
            group_size=_int(inner, "group_size", NVFP4_BLOCK),
            scale_bytes=FP8_BYTES,
            scheme="nvfp4",
            skip_modules=skip,
            static_activations=True,
        )
    if "FP8" in algo:
        return Quantization(
            method="modelopt",
            weight_bits=8,
            scale_bytes=FP32_BYTES,
            scheme="float",
            skip_modules=skip,
            static_activations=True,
        )
    raise ConfigError(f"quantization_config: unsupported modelopt quant_algo {algo or None!r}")


def _compressed_tensors(qc: Mapping[str, Any]) -> Quantization:
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise ConfigError("quantization_config: compressed-tensors config has no 'config_groups'")
    # NOTE: mixed-precision checkpoints have several groups; the first one with weights sizes the linears.
    weights: Mapping[str, Any] | None = None
    for group in groups.values():
        if isinstance(group, Mapping) and isinstance(group.get("weights"), Mapping):
            weights = group["weights"]
            break
    if weights is None:
        raise ConfigError("quantization_config: compressed-tensors config_groups carry no 'weights' scheme")
    bits = _int(weights, "num_bits", 8)
    kind = str(weights.get("type", "int"))
    strategy = str(weights.get("strategy", "channel"))
    group_size = weights.get("group_size")
    block = weights.get("block_structure")
    fmt = str(qc.get("format", ""))
    scheme = "nvfp4" if (kind == "float" and bits == 4) or "nvfp4" in fmt else kind
    inputs = next(
        (
            g.get("input_activations")
            for g in groups.values()
            if isinstance(g, Mapping) and isinstance(g.get("input_activations"), Mapping)
        ),
        None,
    )
    return Quantization(
        method="compressed-tensors",
        weight_bits=bits,
        group_size=int(group_size)
        if isinstance(group_size, int) and strategy in ("group", "tensor_group")
        else -1,
        block=(int(block[0]), int(block[1])) if isinstance(block, list) and len(block) == 2 else None,
        scale_bytes=FP8_BYTES if scheme == "nvfp4" else 0,  # 0: scales in model dtype
        zero_point=not bool(weights.get("symmetric", True)),
        act_order=weights.get("actorder") not in (None, False, "static"),
        skip_modules=_strings(qc.get("ignore")),
        scheme=scheme,
        static_activations=isinstance(inputs, Mapping) and inputs.get("dynamic") is False,
    )


PARSERS: dict[str, Callable[[Mapping[str, Any]], Quantization]] = {
    "fp8": _fp8,
    "awq": _awq,
    "gptq": _gptq,
    "auto-round": _gptq,  # AutoRound exports GPTQ-layout tensors
    "bitsandbytes": _bitsandbytes,
    "mxfp4": _mxfp4,
    "modelopt": _modelopt,
    "modelopt_fp4": _modelopt,
    "compressed-tensors": _compressed_tensors,
}


def quantization_from_config(qc: Any) -> Quantization:
    """config.json `quantization_config` -> Quantization; an unknown method is a one-line ConfigError."""
    if not isinstance(qc, Mapping):
        raise ConfigError(f"config.json: 'quantization_config' must be an object, got {type(qc).__name__}")
    method = str(qc.get("quant_method", "")).lower().replace("_", "-") if qc.get("quant_method") else ""
    method = {"modelopt-fp4": "modelopt_fp4", "auto-round": "auto-round"}.get(method, method)
    if not method and ("quant_algo" in qc or "quantization" in qc):
        method = "modelopt"
    if method not in PARSERS:
        raise ConfigError(
            f"config.json: unsupported quant_method {qc.get('quant_method')!r} "
            f"(supported: {', '.join(sorted(PARSERS))})"
        )
    return PARSERS[method](qc)


# Runtime `--quantization` of an unquantized checkpoint (vLLM quantizes while loading).
RUNTIME_METHODS: dict[str, Quantization] = {
    "fp8": Quantization(method="fp8", weight_bits=8, scale_bytes=FP32_BYTES, from_config=False),
    "bitsandbytes": Quantization(
        method="bitsandbytes",
        weight_bits=4,
        group_size=BNB_4BIT_BLOCK,
        scale_bytes=FP32_BYTES,
        scheme="nf4",
        from_config=False,
    ),
    "mxfp4": Quantization(
        method="mxfp4", weight_bits=4, group_size=MXFP4_BLOCK, scale_bytes=1, from_config=False
    ),
}


def resolve_quantization(config_quant: Quantization | None, requested: str | None) -> Quantization | None:
    """Combine the checkpoint's own quantization with `--quantization`.

    A quantized checkpoint keeps its format whatever kernel name the flag picks (awq_marlin, gptq_marlin ...);
    an unquantized one is quantized at load time by the methods vLLM supports online."""
    if requested is None or requested in ("", "none", "auto"):
        return config_quant
    name = requested.lower()
    if config_quant is not None:
        return config_quant
    if name in RUNTIME_METHODS:
        return RUNTIME_METHODS[name]
    raise ConfigError(
        f"--quantization {requested}: the checkpoint has no quantization_config and vLLM can only "
        f"quantize at load time with {', '.join(sorted(RUNTIME_METHODS))}"
    )


# ---------------------------------------------------------------------------------------------------------
# Which modules it covers, and what one weight matrix costs
# ---------------------------------------------------------------------------------------------------------


def module_of(tensor_name: str) -> str:
    for suffix in (".weight", ".bias"):
        if tensor_name.endswith(suffix):
            return tensor_name[: -len(suffix)]
    return tensor_name


def is_skipped(tensor_name: str, quant: Quantization) -> bool:
    """`modules_to_not_convert` / `ignore` match: "re:" regexes, shell globs, or plain substrings (HF
    semantics)."""
    module = module_of(tensor_name)
    for pattern in quant.skip_modules:
        if pattern.startswith("re:"):
            if re.match(pattern[3:], module):
                return True
        elif "*" in pattern or "?" in pattern:
            if fnmatch.fnmatch(module, pattern) or fnmatch.fnmatch(module, pattern + ".*"):
                return True
        elif pattern and (module == pattern or pattern in module.split(".") or pattern in module):
            return True
    return False


def quantized_matrix_bytes(
    out_features: int, in_features: int, quant: Quantization, model_dtype_bytes: float
) -> int:
    """Bytes one [out, in] weight matrix is stored in under `quant`, scales and indices included."""
    numel = out_features * in_features
    method = quant.method
    if method in ("fp8", "modelopt") or (method == "compressed-tensors" and quant.weight_bits == 8):
        if quant.block is not None:
            b0, b1 = quant.block
            scale_bytes = quant.scale_bytes or int(model_dtype_bytes)
            scales = _ceil_div(out_features, b0) * _ceil_div(in_features, b1) * scale_bytes
        elif method == "compressed-tensors":
            scales = out_features * int(model_dtype_bytes)  # per output channel, model dtype
        else:
            scales = FP32_BYTES  # one per-tensor scale
        extra = FP32_BYTES if quant.static_activations else 0
        return numel * FP8_BYTES + scales + extra
    if method == "awq":
        groups = _ceil_div(in_features, quant.group_size if quant.group_size > 0 else in_features)
        packed = numel * quant.weight_bits // 8
        qzeros = groups * out_features * quant.weight_bits // 8
        return packed + qzeros + groups * out_features * AWQ_GPTQ_SCALE_BYTES
    if method in ("gptq", "gptq_marlin", "auto-round"):
        groups = _ceil_div(in_features, quant.group_size if quant.group_size > 0 else in_features)
        packed = numel * quant.weight_bits // 8
        qzeros = groups * out_features * quant.weight_bits // 8
        return packed + qzeros + groups * out_features * AWQ_GPTQ_SCALE_BYTES + in_features * INT32_BYTES
    if method == "compressed-tensors" and quant.scheme == "nvfp4":
        return numel // 2 + _ceil_div(numel, NVFP4_BLOCK) * FP8_BYTES + 2 * FP32_BYTES
    if method == "compressed-tensors":
        # pack-quantized wNa16: int32 words of 32/bits values, a scale per group, an int64[2] weight_shape.
        group = quant.group_size if quant.group_size > 0 else in_features
        groups = _ceil_div(in_features, group)
        packed = out_features * _ceil_div(in_features * quant.weight_bits, 32) * INT32_BYTES
        scales = out_features * groups * int(model_dtype_bytes)
        zeros = (
            _ceil_div(out_features * quant.weight_bits, 32) * INT32_BYTES * groups if quant.zero_point else 0
        )
        return packed + scales + zeros + 2 * 8
    if method == "bitsandbytes":
        if quant.weight_bits == 8:
            return numel + out_features * FP32_BYTES  # int8 weight + SCB per row
        blocks = _ceil_div(numel, BNB_4BIT_BLOCK)
        quant_map = 16 * FP32_BYTES
        if quant.double_quant:
            nested = _ceil_div(blocks, BNB_NESTED_BLOCK)
            absmax = blocks * 1 + nested * FP32_BYTES + 256 * FP32_BYTES
        else:
            absmax = blocks * FP32_BYTES
        return _ceil_div(numel, 2) + absmax + quant_map
    if method == "mxfp4":
        return numel // 2 + _ceil_div(numel, MXFP4_BLOCK)
    if method == "modelopt_fp4":
        return numel // 2 + _ceil_div(numel, quant.group_size or NVFP4_BLOCK) * FP8_BYTES + 2 * FP32_BYTES
    raise ConfigError(f"no storage layout known for quantization method {method!r}")
