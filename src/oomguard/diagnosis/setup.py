"""The engine setup behind the failure, recovered from the evidence: engine, version, model, GPU and flags,
each with where it was read. This is what the planner is asked to re-plan."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from oomguard.diagnosis.evidence import (
    DeviceNamed,
    Evidence,
    Fact,
    Flags,
    GpuMemory,
    ModelNamed,
    OomMessage,
    StartupNumber,
    Version,
    Where,
)
from oomguard.diagnosis.sizing import (
    ContextKv,
    Device,
    ModelSize,
    WeightsPerGpu,
    context_kv,
    model_size,
    split_of,
)
from oomguard.engines.vllm.versions import Behaviour, behaviour_or_newest
from oomguard.errors import InputFormatError

# Spellings of the same flag in different evidence (argv, non-default args, SGLang) -> vLLM field name.
FLAG_ALIASES = {
    "tp": "tensor_parallel_size",
    "tp_size": "tensor_parallel_size",
    "pp": "pipeline_parallel_size",
    "pp_size": "pipeline_parallel_size",
    "dp": "data_parallel_size",
    "dp_size": "data_parallel_size",
    "max_seq_len": "max_model_len",
    "context_length": "max_model_len",
    "model_path": "model",
    "model_tag": "model",
    # other engines' and wrappers' spellings (TGI, DeepSpeed-MII, LMDeploy, Transformers, checkpoints' demos)
    "model_id": "model",
    "model_name_or_path": "model",
    "pretrained_model_name_or_path": "model",
    "model_dir": "model",
    "ckpt_path": "model",
    "checkpoint_path": "model",
    "tensor_parallel": "tensor_parallel_size",
    "num_shard": "tensor_parallel_size",
    "torch_dtype": "dtype",
    "quantize": "quantization",
    # the context one request may hold (ollama/llama.cpp, LMDeploy, TGI)
    "num_ctx": "max_model_len",
    "n_ctx": "max_model_len",
    "ctx_size": "max_model_len",
    "session_len": "max_model_len",
    "max_total_tokens": "max_model_len",
    "device_memory_utilization": "gpu_memory_utilization",
    "kv_cache_memory": "kv_cache_memory_bytes",
    "expert_parallel_size": "expert_parallel_size",
}
TRUE = ("true", "1", "yes", "on")
_V1_ENGINE = re.compile(r"V1 LLM engine")


@dataclass(frozen=True)
class EngineSetup:
    engine: str  # 'vllm' | 'sglang' | 'unknown'
    version: str | None
    model: str | None
    gpu_name: str | None
    gpu_total_bytes: int | None
    flags: dict[str, str] = field(default_factory=dict)
    provenance: dict[str, Where] = field(default_factory=dict)
    v1: bool | None = None
    # Memory terms the engine itself logged (planner names: weights, activation, non_torch, cuda_graph),
    # bytes.
    measured: dict[str, int] = field(default_factory=dict)
    # Bytes other processes held on the GPU when the engine started (from its free-memory check).
    other_processes_bytes: int = 0
    # "Available KV cache memory" as the engine logged it (what the plan must reproduce), bytes.
    logged_kv_bytes: int | None = None
    # The device one GPU is, with where its total was read; the GPUs the report names (None: not said).
    device: Device | None = None
    gpus_named: int | None = None
    # The weights one GPU must hold (model size, precision, split, device), when the model's size is known.
    weights: WeightsPerGpu | None = None
    # The KV one request at the setup's context length needs per GPU, when the model is a catalog one.
    context: ContextKv | None = None

    def flag(self, name: str) -> str | None:
        return self.flags.get(name)

    def flag_int(self, name: str) -> int | None:
        value = self.flags.get(name)
        try:
            return int(float(value)) if value is not None else None
        except ValueError:
            return None

    def flag_float(self, name: str) -> float | None:
        value = self.flags.get(name)
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None

    def flag_true(self, name: str) -> bool:
        value = self.flags.get(name)
        return value is not None and value.lower() in TRUE

    def parallel(self, name: str) -> int:
        return self.flag_int(name) or 1

    @property
    def version_tuple(self) -> tuple[int, int] | None:
        m = re.match(r"v?(\d+)\.(\d+)", self.version or "")
        return (int(m.group(1)), int(m.group(2))) if m else None

    @property
    def behaviour(self) -> Behaviour:
        """vLLM's rules for the logged version (the newest known when the version is unknown or not
        vLLM's)."""
        return behaviour_or_newest(self.version if self.engine != "sglang" else None)

    def as_dict(self) -> dict[str, object]:
        return {
            "engine": self.engine,
            "version": self.version,
            "model": self.model,
            "gpu": self.gpu_name,
            "gpu_total_gib": round(self.gpu_total_bytes / (1 << 30), 2) if self.gpu_total_bytes else None,
            "v1": self.v1,
            "flags": dict(self.flags),
            "measured_gib": {k: round(v / (1 << 30), 2) for k, v in self.measured.items()},
            "weights_per_gpu_gib": round(self.weights.bytes / (1 << 30), 2) if self.weights else None,
            "weights_per_gpu": self.weights.describe() if self.weights else None,
            "provenance": {k: str(v) for k, v in self.provenance.items()},
        }


def recover_setup(evidence: Evidence) -> EngineSetup:
    flags: dict[str, str] = {}
    provenance: dict[str, Where] = {}
    engine = "unknown"
    model_fact: Fact | None = None
    for fact in sorted(evidence.of(Flags), key=lambda f: _ORIGIN_ORDER.get(f.origin, 0)):
        for key, value in fact.flags:
            if key == "engine":
                engine = value
                continue
            key = FLAG_ALIASES.get(key, key)
            if fact.origin == "engine-config" and value in ("None", ""):
                continue
            flags[key] = value
            provenance[key] = fact.where
            if key == "model":
                model_fact = fact
        if fact.origin == "sglang-args":
            engine = "sglang"
    version = None
    v1: bool | None = None
    for v in evidence.of(Version):
        if v.engine in ("vllm", "sglang"):
            version = v.version
            provenance["version"] = v.where
            engine = v.engine if engine == "unknown" else engine
            if _V1_ENGINE.search(v.text):
                v1 = True
    if engine == "unknown" and evidence.of(StartupNumber):
        quantities = {n.quantity for n in evidence.of(StartupNumber)}
        engine = "sglang" if any(q.startswith("sglang") for q in quantities) else "vllm"
    if "VLLM_USE_V1" in flags:
        v1 = flags["VLLM_USE_V1"] not in ("0", "false", "False")
    model = flags.get("model")
    device = _gpu(evidence, provenance)
    if model:
        provenance.setdefault("model", provenance.get("model", Where("?", 0)))
    # The model's size, from the model the engine runs, else (sizing only) the one the reporter names.
    size = _model_size(model, model_fact, evidence.of(ModelNamed), flags)
    counts = [d.count for d in evidence.of(DeviceNamed) if d.count]
    gpus_named = max(counts) if counts else None
    commanded = model is not None and size is not None and size.fact is model_fact
    split = split_of(flags, gpus_named, command=commanded)
    weights = WeightsPerGpu(size, split, device) if size is not None else None
    context = context_kv(size, flags, split, device.total) if size is not None and device else None
    return EngineSetup(
        engine=engine,
        version=version,
        model=model,
        gpu_name=_first_name(evidence),
        gpu_total_bytes=device.total if device else None,
        flags=flags,
        provenance=provenance,
        v1=v1,
        measured=_measured(evidence, provenance),
        other_processes_bytes=_other_processes(evidence),
        logged_kv_bytes=_logged_kv(evidence),
        device=device,
        gpus_named=gpus_named,
        weights=weights,
        context=context,
    )


def _model_size(
    model: str | None, fact: Fact | None, named: list[ModelNamed], flags: dict[str, str]
) -> ModelSize | None:
    """Phase 1 on the model the setup runs: its own name first; when that states no size (a local directory
    such as '/models/llm'), the model the report names in words, the largest when it names several (the one
    that could fail; the others are what worked)."""
    size = model_size(model, flags, fact)
    if size is not None:
        return size
    sizes = [s for s in (model_size(n.name, flags, n) for n in named) if s is not None]
    return max(sizes, key=lambda s: s.bytes) if sizes else None


# Startup quantities the planner accepts as measured terms (PlanRequest.measured keys).
MEASURED_TERMS = {
    "weights_bytes": "weights",
    "activation_bytes": "activation",
    "non_torch_bytes": "non_torch",
    "cuda_graph_estimate_bytes": "cuda_graph",
}


def _measured(evidence: Evidence, provenance: dict[str, Where]) -> dict[str, int]:
    """The first logged value of each term (rank 0 logs first; `oomguard plan --calibrate` does the same)."""
    out: dict[str, int] = {}
    for n in evidence.of(StartupNumber):
        term = MEASURED_TERMS.get(n.quantity)
        if term and term not in out and n.value >= 0:
            out[term] = round(n.value)
            provenance[f"measured_{term}"] = n.where
    return out


def _logged_kv(evidence: Evidence) -> int | None:
    for n in evidence.of(StartupNumber):
        if n.quantity == "kv_available_bytes":
            return round(n.value)
    return None


def _other_processes(evidence: Evidence) -> int:
    """What vLLM's startup check saw missing: total - free at start (others' memory plus the CUDA context)."""
    for s in evidence.signals("free-memory-below-utilization"):
        free, total = s.number("free_bytes"), s.number("total_bytes")
        if free is not None and total is not None and total > free:
            return round(total - free)
    return 0


# Where a device total was read, best first (the engine's own line is what it sized its budget from).
_TOTAL_SOURCES = (
    "the engine's startup line",
    "the allocator message",
    "nvidia-smi (its CUDA total)",
    "nvidia-smi",
    "the GPU the report names",
)


def _gpu(evidence: Evidence, provenance: dict[str, Where]) -> Device | None:
    """The device (phase 3 of sizing): its name and the total vLLM sized its budget from, best source first:
    the engine's own logged total, the OOM message's (CUDA's), the catalog's CUDA total for nvidia-smi's
    name, nvidia-smi's memory.total (0.3-0.6% above what CUDA reports on data-centre parts), the GPU the
    report names in words (the GPU table's total for the part, else the size written beside it)."""
    name: str | None = None
    candidates: list[tuple[int, int, Fact]] = []
    for n in evidence.of(StartupNumber):
        if n.quantity == "gpu_total_bytes" and n.value > 0:
            candidates.append((0, round(n.value), n))
    candidates += [(1, o.total, o) for o in evidence.of(OomMessage) if o.total]
    for g in evidence.of(GpuMemory):
        if name is None and g.name:
            name = g.name
            provenance["gpu"] = g.where
        if g.cuda_total:
            candidates.append((2, g.cuda_total, g))
        candidates.append((3, g.total, g))
    for d in evidence.of(DeviceNamed):
        if name is None and d.part:
            name = d.part
            provenance["gpu"] = d.where
        if d.total:
            candidates.append((4, d.total, d))
    if not candidates:
        return None
    rank, total, fact = min(candidates, key=lambda c: c[0])
    provenance["gpu_total"] = fact.where
    shown = fact.name if isinstance(fact, DeviceNamed) else name  # as the report writes it ("4090")
    return Device(total, shown, _TOTAL_SOURCES[rank], fact)


def _first_name(evidence: Evidence) -> str | None:
    """The GPU's name as the GPU table knows it: nvidia-smi's, else the part the report names."""
    for g in evidence.of(GpuMemory):
        if g.name:
            return g.name
    for d in evidence.of(DeviceNamed):
        if d.part:
            return d.part
    return None


# Later, more authoritative sources override earlier ones: the engine's own config line beats a command.
_ORIGIN_ORDER = {
    "user-supplied": -1,  # --command: fills what the evidence lacks, never overrides what it shows
    "environment": 0,
    "command-line": 1,
    "code": 1,  # a Python call, assignment or config dict in the report
    "non-default-args": 2,
    "llm-kwargs": 2,
    "sglang-args": 3,
    "engine-config": 3,
}


# Where the facts a user supplies on the command line are said to come from.
SUPPLIED = "command line of oomguard diagnose"


def supplied_facts(command: str | None, gpu: str | None, vllm_version: str | None) -> list[Fact]:
    """Setup the evidence lacks, from `--command "vllm serve ..."`, `--gpu` and `--vllm-version`, as facts of
    the lowest precedence (the evidence's own lines win), so that fixes can be re-planned.
    Raises InputFormatError for an unknown GPU or a command that is not a vLLM/SGLang server command."""
    from oomguard.diagnosis.sources.vllm_log import parse_argv
    from oomguard.errors import UnknownGpuError
    from oomguard.hardware import find_gpu

    facts: list[Fact] = []
    if command:
        m = re.search(
            r"\bvllm\s+serve\b|vllm\.entrypoints\.openai\.api_server|sglang\.launch_server", command
        )
        if not m:
            raise InputFormatError(
                f"--command {command!r}: expected 'vllm serve MODEL ...' or a launch command"
            )
        flags = parse_argv(command[m.end() :], positional_model="serve" in m.group(0))
        if "sglang" in m.group(0):
            flags["engine"] = "sglang"
        facts.append(
            Flags(where=Where(SUPPLIED, 0), text=command, origin="user-supplied", flags=tuple(flags.items()))
        )
    if gpu:
        try:
            found = find_gpu(gpu)
        except UnknownGpuError as err:
            raise InputFormatError(f"--gpu {gpu!r}: {err}") from err
        facts.append(
            GpuMemory(
                where=Where(SUPPLIED, 0),
                text=f"--gpu {gpu}",
                gpu=None,
                name=found.name,
                total=found.total_bytes,
                used=0,
                cuda_total=found.total_bytes,
            )
        )
    if vllm_version:
        if not re.fullmatch(r"v?\d+\.\d+(\.\d+)?[\w.+-]*", vllm_version):
            raise InputFormatError(f"--vllm-version {vllm_version!r}: expected a version such as 0.11.0")
        facts.append(
            Version(
                where=Where(SUPPLIED, 0),
                text=f"--vllm-version {vllm_version}",
                engine="vllm",
                version=vllm_version.lstrip("v"),
            )
        )
    return facts
