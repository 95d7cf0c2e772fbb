"""The recovered setup read as quantities: how many bytes of weights each GPU must hold, against the device.

Three phases, each a typed read that keeps where it came from, so the diagnosis can print it:
1. the model (`ModelSize`): the parameter count from the bundled catalog (by the checkpoint's name, however a
   report writes it: a local path ending in the model's directory, a quantized or renamed copy), else the
   size its name carries ("Llama-3-70B", "Mixtral-8x7B", "Qwen3-30B-A3B"); the precision from the name and
   the flags (GPTQ/AWQ/Int4, FP8/Int8, GGUF Qx_K, `load_in_4bit`, `dtype`);
2. the split (`Split`): the GPUs the weights are divided over (tensor x pipeline parallel, in any engine's
   spelling; the ranks of a `torchrun` that runs a model-parallel checkpoint), or the GPUs the report names
   when it states no split (then only an assumption, used where it can only make the weights look smaller);
3. the device (`Device`): its total, from the engine's own line, the allocator message, nvidia-smi, or the
   GPU the report names, through the GPU table of `oomguard.hardware`.
`WeightsPerGpu` puts them together and says it in one line. A fourth quantity, where the model is a catalog
one and the setup sets a context length (`ContextKv`): what one request of that length needs of one GPU's KV
pool, by the planner's own KV layout and fit arithmetic (`engines/vllm/kv.py`), not a second one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache

from oomguard.diagnosis.evidence import Evidence, Fact, Signal
from oomguard.units import GiB as GIB

# Parameter counts in model ids: "Llama-3-70B", "Qwen3-30B-A3B" (total first), "Mixtral-8x7B" (experts share
# attention: 8x7B is 46.7B, about 0.83 of 8 x 7), "bloom-7b1" (7.1B), "pythia-6.9b".
_PARAMS = re.compile(
    r"(?i)(?<![\w.])(?:(?P<n>\d+)x)?(?P<b>\d+(?:\.\d+)?)(?P<unit>b|m)(?P<frac>\d)?(?![a-z0-9])"
)
MOE_SHARED_FACTOR = 0.83
# Model families by the words their checkpoints are named with.
FAMILIES = (
    "llama|qwen|mistral|mixtral|deepseek|gemma|phi|yi|falcon|bloom|opt|gpt|glm|chatglm|internlm|internvl|"
    "baichuan|vicuna|kimi|granite|olmo|starcoder|codellama|nemotron|minimax|ernie|hunyuan|mpt|pythia|dbrx|"
    "jamba|llava|command"
)
# A size written onto its family's word, with no separator before it: "baichuan13b", "chatglm6b", "qwen7b",
# "llama2_7b" (a directory named by hand; the family's version, if any, before an underscore or hyphen).
_JOINED_PARAMS = re.compile(
    rf"(?i)(?<![a-z])(?:{FAMILIES})(?:\d+(?:\.\d+)?[-_])?(?P<b>\d+(?:\.\d+)?)b(?![a-z0-9])"
)
# Bytes per parameter by the precision a name or a flag states. 4-bit formats carry group scales (~0.56);
# 8-bit ones per-channel or block scales (~1.05).
FOUR_BIT = re.compile(
    r"(?i)(?<![a-z0-9])(awq|gptq|int4|4bit|4-bit|nf4|bnb|bitsandbytes|mxfp4|nvfp4|fp4|w4a16|w4a8|w4a4|q4|"
    r"exl2|exl3)(?![a-z])"
)
EIGHT_BIT = re.compile(r"(?i)(?<![a-z0-9])(fp8|int8|8bit|8-bit|w8a8|w8a16|q8|fbgemm_fp8|modelopt)(?![a-z])")
FLOAT32 = re.compile(r"(?i)(?<![a-z0-9])(fp32|float32|float)(?![a-z0-9])")
# A copy saved in 16 bits ("gpt-oss-120b-bf16", "...-fp16", GGUF "f16"): for a model whose original is
# quantized (gpt-oss's MXFP4), a dequantized copy twice or more its size.
SIXTEEN_BIT = re.compile(r"(?i)(?<![a-z0-9])(bf16|fp16|f16|bfloat16|float16|16bit|16-bit)(?![a-z0-9])")
# GGUF quantization types and their bits per weight (llama.cpp's quantize table, rounded): Q4_K_M is ~4.8.
_GGUF = re.compile(r"(?i)(?<![a-z0-9])(?P<t>i?q(?P<bits>[1-8])(?:_[a-z0-9]+)*)(?![a-z0-9])")
GGUF_BITS = {1: 1.8, 2: 2.7, 3: 3.6, 4: 4.8, 5: 5.6, 6: 6.6, 7: 7.5, 8: 8.5}
BYTES = {"4-bit": 0.56, "8-bit": 1.05, "16-bit": 2.0, "32-bit": 4.0}


@dataclass(frozen=True)
class ModelSize:
    """Phase 1: the model's weights at the precision it runs in."""

    name: str  # as the evidence names it (a path's last part)
    params: float  # every parameter, every expert
    bytes: float  # the whole checkpoint at `precision`
    precision: str  # "16-bit", "4-bit (gptq in its name)", "fp8 (the catalog's config)", "GGUF q4_k_m"
    source: str  # "the catalog's Qwen/Qwen3-30B-A3B" | "the 70B in its name"
    fact: Fact | None = None  # the line the model was read from
    catalog_id: str | None = None  # the catalog model it is (a copy of)


@dataclass(frozen=True)
class Split:
    """Phase 2: how many GPUs the weights are divided over."""

    ranks: int
    source: str  # "tensor_parallel_size=2", "torchrun: 2 nodes x 8", "no split stated"
    stated: bool  # read from the evidence (False: assumed from the GPUs the report names)


@dataclass(frozen=True)
class Device:
    """Phase 3: one GPU's memory."""

    total: int
    name: str | None
    source: str  # "the allocator message", "nvidia-smi", "the report names it", ...
    fact: Fact | None = None


@dataclass(frozen=True)
class WeightsPerGpu:
    """The weights one GPU must hold, against its device when that is known."""

    model: ModelSize
    split: Split
    device: Device | None

    @property
    def bytes(self) -> float:
        return self.model.bytes / max(1, self.split.ranks)

    @property
    def share(self) -> float | None:
        return self.bytes / self.device.total if self.device else None

    def describe(self) -> str:
        """'Qwen3-30B-A3B-GPTQ-Int4: about 16 GiB of weights per GPU on a 24 GiB device (RTX 4090)'."""
        size = f"{self.bytes / GIB:.0f}" if self.bytes >= 10 * GIB else f"{self.bytes / GIB:.1f}"
        text = f"{self.model.name}: about {size} GiB of weights per GPU"
        if self.device is not None:
            total = self.device.total / GIB
            text += f" on a {total:.0f} GiB device" if total >= 10 else f" on a {total:.1f} GiB device"
            if self.device.name:
                text += f" ({self.device.name})"
        how = [f"{self.model.params / 1e9:.3g}B parameters from {self.model.source}", self.model.precision]
        if self.split.ranks > 1 or self.split.stated:
            how.append(f"split over {self.split.ranks} ({self.split.source})")
        return f"{text} [{'; '.join(how)}]"


@dataclass(frozen=True)
class ContextKv:
    """Phase 4: what one request at the context length the setup sets needs of one GPU's KV pool (the
    planner's KV layout for the catalog model, at the setup's split and cache dtype)."""

    tokens: int
    bytes: int
    flag: str  # the flag that set the length, as the evidence spelled it ("max_model_len=131072")

    def describe(self, model: str) -> str:
        return (
            f"{self.flag}: one {self.tokens:,}-token request needs about {self.bytes / GIB:.1f} GiB of KV "
            f"per GPU (the planner's KV layout for {model})"
        )


def context_kv(size: ModelSize, flags: dict[str, str], split: Split, total: int) -> ContextKv | None:
    """Phase 4, when the model is a catalog one, the split is stated and the setup sets a context length."""
    tokens = _int(flags.get("max_model_len"))
    if size.catalog_id is None or not split.stated or tokens is None:
        return None
    kv_flags = dict(flags)
    if "tensor_parallel_size" not in flags and "pipeline_parallel_size" not in flags and split.ranks > 1:
        kv_flags["tensor_parallel_size"] = str(split.ranks)  # a model-parallel checkpoint's ranks
    need = kv_for_context(size.catalog_id, kv_flags, total)
    return ContextKv(tokens, need, f"max_model_len={tokens}") if need else None


def _name(model: str) -> str:
    """The model's own name in an id or a path (a Hugging Face cache directory read as its 'org/name')."""
    from oomguard.models.resolve import hub_cache_parts

    parts = hub_cache_parts([p for p in model.replace("\\", "/").split("/") if p])
    return parts[-1] if parts else model


def _precision(text: str) -> tuple[float, str] | None:
    """Bytes per parameter and how it was read, from a model name or a flag's value."""
    gguf = _GGUF.search(text) if ("gguf" in text.lower() or "_k" in text.lower()) else None
    if gguf:
        bits = GGUF_BITS[int(gguf.group("bits"))]
        return bits / 8, f"GGUF {gguf.group('t').lower()}"
    m = FOUR_BIT.search(text)
    if m:
        return BYTES["4-bit"], f"4-bit ({m.group(1).lower()})"
    m = EIGHT_BIT.search(text)
    if m:
        return BYTES["8-bit"], f"8-bit ({m.group(1).lower()})"
    m = FLOAT32.search(text)
    if m:
        return BYTES["32-bit"], f"32-bit ({m.group(1).lower()})"
    m = SIXTEEN_BIT.search(text)
    if m:
        return BYTES["16-bit"], f"16-bit ({m.group(1).lower()})"
    return None


def precision_of(model: str, flags: dict[str, str]) -> tuple[float, str] | None:
    """The precision the run states: the flags first (`--quantization`, `load_in_4bit`, `dtype`), then the
    checkpoint's name."""
    for key in ("quantization", "quantize", "load_format"):
        value = flags.get(key)
        if value and value not in ("None", "none", "null", "auto"):
            found = _precision(value)
            if found:
                return found[0], f"{found[1]} from {key}"
    if flags.get("load_in_4bit", "").lower() in ("true", "1"):
        return BYTES["4-bit"], "4-bit (load_in_4bit)"
    if flags.get("load_in_8bit", "").lower() in ("true", "1"):
        return BYTES["8-bit"], "8-bit (load_in_8bit)"
    found = _precision(_name(model))
    if found:
        return found[0], found[1] + " in its name"
    dtype = flags.get("dtype") or flags.get("torch_dtype") or ""
    if FLOAT32.search(dtype):
        return BYTES["32-bit"], f"32-bit (dtype {dtype})"
    return None


def params_in_name(model: str) -> float | None:
    """The parameter count a model's name states ('Llama-3-70B' -> 70e9), None when it states none."""
    m = _PARAMS.search(_name(model))
    if not m:
        joined = _JOINED_PARAMS.search(_name(model))
        return float(joined.group("b")) * 1e9 if joined else None
    value = float(m.group("b") + ("." + m.group("frac") if m.group("frac") else ""))
    params = value * (1e9 if m.group("unit").lower() == "b" else 1e6)
    return params * (int(m.group("n")) * MOE_SHARED_FACTOR if m.group("n") else 1)


@lru_cache(maxsize=256)
def _catalog_size(model: str) -> tuple[str, float, float, str, float | None] | None:
    """(catalog id, parameters, checkpoint bytes, their precision, bytes per parameter when unquantized) of
    the catalog model `model` names."""
    from oomguard.errors import OomguardError
    from oomguard.models.resolve import catalog_match, resolve_model
    from oomguard.models.weights import checkpoint_weight_bytes

    entry = catalog_match(model)
    if entry is None:
        return None
    try:
        spec = resolve_model(entry.id)
    except OomguardError:
        return None
    stored = spec.checkpoint_bytes or checkpoint_weight_bytes(spec).total
    quant = spec.quantization
    if quant is not None:
        return entry.id, float(spec.num_params), float(stored), f"{quant.method} (the catalog's config)", None
    precision = f"{spec.dtype} (the catalog's config)"
    return entry.id, float(spec.num_params), float(stored), precision, spec.dtype_bytes


@lru_cache(maxsize=256)
def catalog_vocab(catalog_id: str) -> int | None:
    """The vocabulary of a catalog model: the rows of its LM head, the last dimension of its logits."""
    from oomguard.errors import OomguardError
    from oomguard.models.resolve import resolve_model

    try:
        return resolve_model(catalog_id).vocab_size or None
    except OomguardError:
        return None


@lru_cache(maxsize=1)
def catalog_vocab_sizes() -> frozenset[int]:
    """Every vocabulary of the catalog's models (each its LM head's rows): a tensor's dimension equal to one
    of them is the vocabulary's, whichever model the report ran."""
    from oomguard.models.resolve import catalog_ids

    return frozenset(v for v in (catalog_vocab(c) for c in catalog_ids()) if v)


def host_logits_table(ev: Evidence) -> Signal | None:
    """The host allocation that failed, when it was a table of logits: a 2-D array (NumPy names its shape)
    whose rows are as wide as a vocabulary. llama-cpp-python keeps one row per position of the context
    (`scores`, n_ctx x n_vocab in fp32) from the model's construction."""
    for s in ev.signals("host-enomem"):
        width = s.number("array_width")
        if s.number("array_rows") is not None and width is not None and int(width) in catalog_vocab_sizes():
            return s
    return None


def model_size(model: str | None, flags: dict[str, str], fact: Fact | None = None) -> ModelSize | None:
    """Phase 1: the model's size, the catalog first, else the count in its name; None when neither says."""
    if not model:
        return None
    name = _name(model)
    stated = precision_of(model, flags)
    catalog = _catalog_size(model)
    if catalog is not None:
        cid, params, stored, precision, dtype_bytes = catalog
        if stated is None:
            return ModelSize(name, params, stored, precision, f"the catalog's {cid}", fact, cid)
        if dtype_bytes is None:
            # The catalog holds a quantized original; the name or a flag says this copy is stored otherwise.
            per_param, how = stated
            return ModelSize(name, params, params * per_param, how, f"the catalog's {cid}", fact, cid)
        per_param, how = stated
        # The catalog holds the unquantized original; the name or a flag says this copy is quantized.
        bytes_ = stored * per_param / dtype_bytes
        return ModelSize(name, params, bytes_, how, f"the catalog's {cid}", fact, cid)
    counted = params_in_name(model)
    if counted is None:
        return None
    per_param, how = stated or (BYTES["16-bit"], "16-bit (none stated)")
    return ModelSize(name, counted, counted * per_param, how, "the size in its name", fact)


def split_of(flags: dict[str, str], named_gpus: int | None, command: bool) -> Split:
    """Phase 2: the GPUs the weights are divided over: TP x PP as set; a model-parallel `torchrun`'s ranks;
    none when a launch command or config line was read and sets none (the engines' default is one GPU);
    else the GPUs the report names (an assumption: the most the weights could be spread over), else unknown
    (ranks 1, not stated)."""
    tp = _int(flags.get("tensor_parallel_size"))
    pp = _int(flags.get("pipeline_parallel_size"))
    if tp or pp:
        parts = [f"tensor_parallel_size={tp}"] if tp else []
        parts += [f"pipeline_parallel_size={pp}"] if pp else []
        return Split((tp or 1) * (pp or 1), ", ".join(parts), True)
    procs, nodes = _int(flags.get("nproc_per_node")), _int(flags.get("nnodes"))
    if procs:
        return Split(procs * (nodes or 1), f"torchrun: {nodes or 1} node(s) x {procs} processes", True)
    if command:
        return Split(1, "the command sets no tensor or pipeline parallelism", True)
    if named_gpus and named_gpus > 1:
        return Split(named_gpus, f"the {named_gpus} GPUs the report names, if spread over all", False)
    return Split(1, "no split stated", False)


def _int(value: str | None) -> int | None:
    try:
        n = int(float(value)) if value is not None else None
    except ValueError:
        return None
    return n if n and n > 0 else None


# The flags the KV of one request depends on (besides the model): its length, the split, the cache dtype.
KV_FLAGS = ("max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "kv_cache_dtype", "dtype")


def kv_for_context(model: str, flags: dict[str, str], gpu_total_bytes: int) -> int | None:
    """Bytes the KV pool of one GPU needs to hold one request of the setup's `max_model_len`: the planner's
    own KV layout (`engines/vllm/kv.py`) for `model` (a catalog id) at the setup's TP/PP and cache dtype, and
    its fit check's arithmetic. None when the model cannot be resolved offline or a flag does not parse."""
    try:
        from oomguard.engines.vllm import kv
        from oomguard.engines.vllm.config import resolve_engine_config
        from oomguard.engines.vllm.flags import args_from_mapping
        from oomguard.engines.vllm.parallel import distinct_ranks
        from oomguard.engines.vllm.plan import kv_need_bytes
        from oomguard.models.resolve import resolve_model
        from oomguard.planning import PlanRequest

        parsed = args_from_mapping({k: flags[k] for k in KV_FLAGS if k in flags}, where="")
        spec = resolve_model(model, dtype=parsed.get("dtype"))  # a catalog id: resolved offline
        # The layout does not depend on the length: let one past the model's limit through, as vLLM's
        # VLLM_ALLOW_LONG_MAX_MODEL_LEN does.
        args = replace(parsed, env={**parsed.env, "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
        engine = resolve_engine_config(
            args,
            spec,
            gpu_total_bytes=gpu_total_bytes,
            gpu_name="",
            compute_capability=None,
            vllm_version=PlanRequest.vllm_version,
        )
        rank = distinct_ranks(spec, engine)[0]
        layout = kv.group_layers(kv.layer_specs(spec, engine, rank.layer_indices))
        need: int = kv_need_bytes(engine.max_model_len, layout, engine)
        return need
    except Exception:  # noqa: BLE001 - the planner's any failure costs this quantity, never the diagnosis
        return None
