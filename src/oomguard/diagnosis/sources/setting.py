"""The setup a report states outside the engines' own log lines: a launch command of any engine or wrapper,
the model and the parallelism in Python calls, assignments and config dicts, and the model and the GPUs the
reporter's sentences or setting lines name.

- Launch commands: `python -m fastchat.serve.vllm_worker --model-path ... --tensor-parallel-size 2`,
  `torchrun --nnodes 2 --nproc-per-node 8 generate.py --ckpt-path ...`, `text-generation-launcher --model-id
  ... --num-shard 2`, `lmdeploy serve api_server MODEL --tp 2`, `trtllm-serve MODEL --tp_size 4`,
  `ollama run MODEL`, `llama-server -m file.gguf`, `docker run ... --model ...` (vLLM's and SGLang's own
  commands and config lines are their readers'); flags as the command spells them, `-tp`/`-m` included.
- Code: `from_pretrained("org/name", load_in_4bit=True)`, `pipeline(model, backend_config=...(tp=2))` with
  `model = '/path/InternVL2-40B'` earlier, `mii_configs = {"tensor_parallel": 8, "dtype": "fp16"}`.
- The reporter's words (prose lines only, word-bounded): model names ("the Qwen3-30B-A3B-GPTQ-Int4 model",
  "llama3.3 70B"), GPUs with their count and size ("a 4090 24GB", "8*A6000(48G)", "2x H100 NVL 94GB",
  "8 GPU with 23GB VRAM each"); setting lines ("GPU: 2x A100 80GB", "Model: Qwen3-32B") too.
Read in small documents only (a pasted report; a server log's own lines say the setup better), and emitted at
the end only when another reader recognised something: a setup is context for a failure, never one itself.
"""

from __future__ import annotations

import re
import shlex
from functools import lru_cache

from oomguard.diagnosis.evidence import DeviceNamed, Fact, Flags, ModelNamed
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sizing import FAMILIES as _FAMILIES
from oomguard.diagnosis.sizing import params_in_name
from oomguard.diagnosis.sources.base import Context, LineParser, Message, command_part
from oomguard.diagnosis.sources.prose import is_prose, spaced
from oomguard.diagnosis.sources.triggers import Triggers
from oomguard.errors import UnknownGpuError
from oomguard.hardware import Gpu, catalog, find_gpu
from oomguard.units import GiB

# Lines the vLLM and SGLang readers read as commands or config (their own Flags facts).
_ENGINE_OWN = re.compile(
    r"\bvllm\s+serve\b|vllm\.entrypoints|\bLLM\(|sglang\.launch_server|non-default args|with config:|"
    r"ServerArgs\(|Namespace\("
)
# A shell prompt or a line continuation around a pasted command.
_PROMPT = re.compile(r"^\s*(?:[$#>]\s+|\w+@[\w.-]+:\S*[$#]\s*)")
# Commands whose first positional argument is the model.
_POSITIONAL_MODEL = re.compile(
    r"(?:^|\s)(?:lmdeploy\s+(?:serve\s+\w+|chat|lite\s+\w+)|trtllm-serve(?:\s+serve)?|ollama\s+(?:run|pull)|"
    r"mlx_lm\.\w+)\s+(?P<model>[^\s-]\S*)"
)
# Environment assignments before a command ("CUDA_VISIBLE_DEVICES=0,1 python ...").
_ENV_WORD = re.compile(r"[A-Z_][A-Z0-9_]*=\S*")
# What a launch command runs (its first word, path aside).
_HEAD = re.compile(
    r"python[\d.]*|torchrun|deepspeed|accelerate|text-generation-launcher|lmdeploy|trtllm-[\w-]+|llama-[\w-]+|"
    r"ollama_llama_server|ik_llama[\w-]*|"
    r"main|server|ollama|docker|podman|nerdctl|mlx_lm\.\w+|srun|mpirun|[\w-]+\.py|[\w-]+\.sh|swift|"
    r"xinference|vllm|sglang|uv|exllamav?\d?\w*|tabbyapi|mii"
)
# Single-dash flags that name a setup quantity (llama.cpp's -m takes a model file, vLLM's -tp the TP size).
_SHORT_FLAGS = {"-tp": "tensor_parallel_size", "-pp": "pipeline_parallel_size", "-m": "model"}
# llama.cpp's commands (llama-server, llama-cli, ik_llama.cpp's, the runner ollama starts): their argv as
# llama.cpp reads it (common/arg.cpp), each option under the name of the setup quantity it sets. The context
# (-c) sizes the KV cache of every slot; -ub is the tokens of one forward step (the compute buffer's worst
# case); a draft model (-md) gets its own weights, KV cache and compute buffer; --mmproj loads a vision
# projector beside the model.
_LLAMA_CPP_HEAD = re.compile(r"llama-[\w-]+|main|server|ollama_llama_server|ik_llama[\w-]*")
_LLAMA_CPP_SHORT = {
    "-m": "model",
    "-c": "ctx_size",
    "-ngl": "n_gpu_layers",
    "-md": "model_draft",
    "-ngld": "n_gpu_layers_draft",
    "-cd": "ctx_size_draft",
    "-np": "parallel",
    "-b": "batch_size",
    "-ub": "ubatch_size",
    "-ctk": "cache_type_k",
    "-ctv": "cache_type_v",
    "-fa": "flash_attn",
    "-ts": "tensor_split",
    "-sm": "split_mode",
    "-ot": "override_tensor",
    "-mm": "mmproj",
}
_LLAMA_CPP_FIELDS = {
    "ctx_size": "max_model_len",
    "gpu_layers": "n_gpu_layers",
    "model_draft": "speculative_model",
    "spec_draft_model": "speculative_model",
    "gpu_layers_draft": "n_gpu_layers_draft",
    "draft_max": "num_speculative_tokens",
    "draft": "num_speculative_tokens",
    "draft_n": "num_speculative_tokens",
    "spec_draft_n_max": "num_speculative_tokens",
    "parallel": "max_num_seqs",
    "ubatch_size": "max_num_batched_tokens",
    "cache_type_k": "kv_cache_dtype",
}
# A model file for -m (python's -m takes a module).
_MODEL_FILE = re.compile(r"(?i)\.(gguf|ggml|bin|safetensors)$")

# Python: keyword arguments, dict items and assignments that hold a model, parallelism or precision.
_MODEL_KEYS = (
    "model|model_path|model_name|model_id|model_dir|model_name_or_path|pretrained_model_name_or_path|"
    "ckpt_path|checkpoint_path"
)
_MODEL_ARG = re.compile(
    rf"""(?<![\w.-])['"]?(?P<k>{_MODEL_KEYS})['"]?\s*[:=]\s*(?:(?P<q>['"])(?P<v>[^'"\s]+)(?P=q)|"""
    r"""(?P<var>[A-Za-z_]\w*)\s*[,)}])"""
)
_CALL_FIRST = re.compile(
    r"""\b(?:from_pretrained|pipeline|Engine|Llama)\(\s*(?:(?P<q>['"])(?P<v>[^'"\s]+)(?P=q)|"""
    r"""(?P<var>[A-Za-z_]\w*)\s*[,)])"""
)
_ASSIGN = re.compile(r"""^\s*(?P<var>[A-Za-z_]\w*)\s*=\s*(?P<q>['"])(?P<v>[^'"\s]+)(?P=q)\s*$""")
_PARALLEL_ARG = re.compile(
    r"""(?<![\w.-])['"]?(?P<k>tensor_parallel_size|tensor_parallel|tp_size|tp|num_shard|"""
    r"""pipeline_parallel_size|pp_size|pp)['"]?\s*[:=]\s*(?P<v>\d+)\b"""
)
_CONTEXT_ARG = re.compile(
    r"""(?<![\w.-])['"]?(?P<k>num_ctx|n_ctx|ctx_size|context_length|max_model_len|max_seq_len|session_len|"""
    r"""max_total_tokens)['"]?\s*[:=]\s*(?P<v>\d+)\b"""
)
# (A bare `dtype=` is a tensor's as often as the model's, in the code lines of a traceback: only a loader's
# `torch_dtype` and a config dict's quoted "dtype" key count.)
_PRECISION_ARG = re.compile(
    r"""(?<![\w.-])(?:(?P<flag>load_in_4bit|load_in_8bit)\s*=\s*True\b|['"]?(?P<k>quantization|quantize|"""
    r"""torch_dtype)['"]?\s*[:=]\s*(?:torch\.)?['"]?(?P<v>[A-Za-z][\w.]*)|['"](?P<dk>dtype)['"]\s*:\s*"""
    r"""['"](?P<dv>[A-Za-z][\w.]*))"""
)
# A string that names a model (not a task such as "text-generation", not a variable's text).
_MODELISH = re.compile(r"/|\d|\.gguf$", re.IGNORECASE)

# Setting lines: "Model: Qwen3-32B", "- GPU: 2x A100 80GB", "显卡：8*A6000".
_SETTING_MODEL = re.compile(r"(?i)^\W*(?:model(?:\s*name)?|模型)\s*[:：]\s*(?P<v>[^\s,;]+)")
# Model names in a sentence: an id with a separator ("Qwen3-30B-A3B-GPTQ-Int4", "meta-llama/Llama-3-70B"),
# a family and a size ("llama3.3 70B"), or a bare size said to be a model's ("a 671B model").
_MODEL_WORD = re.compile(r"(?<![\w./-])(?P<n>[A-Za-z][\w.]*(?:[-_/][\w.]+)+)(?![\w/-])")
_FAMILY_SIZE = re.compile(rf"(?i)(?<![\w./-])(?P<f>(?:{_FAMILIES})[\w.-]*)\s+(?P<s>\d+(?:\.\d+)?b)(?![\w.])")
_BARE_SIZE = re.compile(r"(?i)(?<![\w.])(?P<s>\d+(?:\.\d+)?)\s?b\s+(?:parameters?|params|models?)\b")

# GPUs in words: an optional count, brand words, the part's name, its form, an optional size.
_BRAND = r"(?:(?:nvidia|geforce|tesla|quadro|amd|instinct|radeon|rtx|gtx)[\s-]*)*"
_FORM = r"(?:[\s-]*(?:nvl|sxm\d?|pcie|ada|ti|super|blackwell|max-?q))*"
_SIZE = r"(?:[\s-]*[(（]?\s*(?P<size>\d+(?:\.\d+)?)\s*(?:G|GB|GiB)s?\b\s*[)）]?)?"
_COUNT_BEFORE = re.compile(r"(?<![\d.])(?P<count>\d{1,3})\s*(?:[x×*]|张|块|卡)?\s*$")
_COUNT_AFTER = re.compile(r"^\s*[x×*]\s*(?P<count>\d{1,3})\b")
# "8 GPU with 23GB VRAM each", "2 cards of 24GB", "24GB VRAM" (a size with no part named).
_GPUS_OF_SIZE = re.compile(
    r"(?i)(?<![\w.])(?:(?P<count>\d{1,3})\s*(?:x\s*)?(?:gpus?|cards?|卡)\b[^.;\n]{0,30}?)?"
    r"(?P<size>\d+(?:\.\d+)?)\s*(?:GB|GiB|G)\s*(?:of\s+)?(?:vram|gpu memory|memory each|显存)"
)
# A stated size this far from the table's total is another part of that name (the table's is kept within).
SIZE_AGREES = 0.15
# Cloud instances by the GPU every size of their family carries (AWS EC2 accelerated computing, Google Cloud's
# accelerator-optimized machine types): "a g4dn.xlarge instance" is a T4.
_INSTANCE_GPUS = {
    "g4dn": "T4",
    "g5": "A10G",
    "g6": "L4",
    "g6e": "L40S",
    "p3": "V100 16GB",
    "p3dn": "V100 32GB",
    "p4d": "A100 40GB",
    "p4de": "A100 80GB",
    "p5": "H100 80GB",
    "p5e": "H200",
    "p5en": "H200",
    "a2-highgpu": "A100 40GB",
    "a2-megagpu": "A100 40GB",
    "a2-ultragpu": "A100 80GB",
    "a3-highgpu": "H100 80GB",
    "a3-megagpu": "H100 80GB",
    "a3-ultragpu": "H200",
    "g2-standard": "L4",
}
_INSTANCE = re.compile(
    r"(?i)(?<![\w.-])(?:(?P<aws>g4dn|g5|g6e?|p3dn|p3|p4de?|p5en|p5e?)\.(?:\d*x?large|metal)|"
    r"(?P<gcp>a2-(?:highgpu|megagpu|ultragpu)|a3-(?:highgpu|megagpu|ultragpu)|g2-standard)-\d+g?)(?![\w.-])"
)


@lru_cache(maxsize=1)
def _gpu_words() -> re.Pattern[str]:
    """The parts' names in the GPU table (`oomguard.hardware`) as a pattern: 'h100', 'a6000', '4090'."""
    words: set[str] = set()
    for gpu in catalog():
        for form in (gpu.key, gpu.name, *gpu.aliases):
            for tok in re.split(r"[^a-z0-9]+", form.lower()):
                if re.search(r"\d", tok) and not re.fullmatch(r"\d+gb|sxm\d?|pcie\d?|\d{1,3}", tok):
                    words.add(tok)
    words.discard("6000")  # "RTX 6000 Ada" / "RTX PRO 6000": read with their form words
    alternation = "|".join(sorted(words, key=len, reverse=True))
    return re.compile(
        rf"(?i)(?<![\w.-]){_BRAND}(?P<part>(?:rtx\s*pro\s*6000|rtx\s*6000|{alternation}|(?:rtx|gtx)\s*\d{{4}}))"
        rf"(?P<form>{_FORM})(?!\w)(?!-[^\d\s]){_SIZE}"
    )


def _resolve(part: str, form: str, size: float | None) -> Gpu | None:
    """The GPU table's part for a name as written, with its size when that tells the variants apart."""
    words = f"{part} {form}".strip()
    tries = ([f"{words} {size:g}GB"] if size else []) + [words]
    for query in tries:
        try:
            return find_gpu(query)
        except UnknownGpuError:
            continue
    return None


def gpus_named(text: str) -> list[tuple[str, Gpu | None, int | None, int | None]]:
    """(the GPU as written, the GPU table's part, bytes per device or None, count or None) for each GPU a line
    names."""
    out: list[tuple[str, Gpu | None, int | None, int | None]] = []
    for m in _gpu_words().finditer(text):
        size = float(m.group("size")) if m.group("size") else None
        gpu = _resolve(m.group("part"), m.group("form") or "", size)
        total: int | None = None
        if gpu is not None and (size is None or abs(gpu.total_bytes / GiB - size) <= SIZE_AGREES * size):
            total = gpu.total_bytes
        elif size is not None:
            gpu, total = None, round(size * GiB)
        before = _COUNT_BEFORE.search(text[: m.start()])
        after = _COUNT_AFTER.match(text[m.end() :])
        count = int((before or after).group("count")) if (before or after) else None  # type: ignore[union-attr]
        written = (m.group("part") + (m.group("form") or "")).strip()
        out.append((written, gpu, total, count if count else None))
    for m in _INSTANCE.finditer(text):
        family = (m.group("aws") or m.group("gcp")).lower()
        gpu = find_gpu(_INSTANCE_GPUS[family])
        out.append((m.group(0), gpu, gpu.total_bytes, None))
    if not out:
        for m in _GPUS_OF_SIZE.finditer(text):
            count = int(m.group("count")) if m.group("count") else None
            out.append((f"{m.group('size')} GB GPU", None, round(float(m.group("size")) * GiB), count))
    return out


def models_named(text: str) -> list[str]:
    """Model names a sentence holds: ids whose name a catalog entry or a parameter count tells the size of."""
    from oomguard.models.resolve import catalog_match

    out: list[str] = []
    for m in _MODEL_WORD.finditer(text):
        name = m.group("n").rstrip(".")
        if params_in_name(name) is not None or catalog_match(name) is not None:
            out.append(name)
    for m in _FAMILY_SIZE.finditer(text):
        out.append(f"{m.group('f')}-{m.group('s')}")
    if not out:
        out += [f"{m.group('s')}B" for m in _BARE_SIZE.finditer(text)]
    return out


def command_flags(body: str) -> dict[str, str]:
    """The flags of a launch command on one line (any engine or wrapper): `--k v`, `--k=v`, `-tp N`,
    `-m file.gguf`, and the model a command takes positionally. Empty when the line is no command."""
    text = command_part(_PROMPT.sub("", body)).rstrip(" \\")
    positional = _POSITIONAL_MODEL.search(text)
    if " -" not in f" {text}" and not positional:
        return {}
    try:
        tokens = shlex.split(text, comments=False)
    except ValueError:
        tokens = text.split()
    start = 0
    while start < len(tokens) and (
        _ENV_WORD.match(tokens[start]) or tokens[start] in ("sudo", "nohup", "exec")
    ):
        start += 1
    tokens = tokens[start:]
    if not tokens:
        return {}
    if tokens[0].startswith("--"):
        if sum(t.startswith("-") for t in tokens) < 2:
            return {}  # one flag alone on a line: vLLM's reader takes continuation lines of a command
    elif not _HEAD.fullmatch(tokens[0].rsplit("/", 1)[-1]):
        return {}  # not a command (an error message that names a flag, a sentence)
    flags: dict[str, str] = {}
    if _LLAMA_CPP_HEAD.fullmatch(tokens[0].rsplit("/", 1)[-1]):
        return llama_cpp_argv(tokens[1:])
    if positional:
        flags["model"] = positional.group("model")
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        value = tokens[i + 1] if i + 1 < len(tokens) and not tokens[i + 1].startswith("-") else None
        if tok.startswith("--") and len(tok) > 2:
            key, eq, given = tok[2:].partition("=")
            if eq:
                value = given
            elif value is not None:
                i += 1
            flags[key.replace("-", "_")] = value if value is not None else "true"
        elif tok in _SHORT_FLAGS and value is not None:
            if tok != "-m" or _MODEL_FILE.search(value):
                flags[_SHORT_FLAGS[tok]] = value
            i += 1
        i += 1
    return flags


def llama_cpp_argv(args: list[str]) -> dict[str, str]:
    """llama.cpp's options (after the program's name) -> the setup's flags: each short option under its long
    name, the long names that set a quantity the rules weigh under the setup's name for it (the context as
    max_model_len, the draft model as speculative_model, the slots as max_num_seqs, -ub as the tokens of a
    step), the others as llama.cpp names them; a switch with no value is "true"."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(args):
        tok, eq, given = args[i].partition("=")
        value: str | None = given if eq else None
        if not eq and i + 1 < len(args) and not re.match(r"-[A-Za-z-]", args[i + 1]):
            value = args[i + 1]
            i += 1
        if tok in _LLAMA_CPP_SHORT:
            key = _LLAMA_CPP_SHORT[tok]
        elif tok.startswith("--") and len(tok) > 2:
            key = tok[2:].replace("-", "_")
            key = key[2:] if key.startswith("n_") and key[2:] in _LLAMA_CPP_FIELDS else key
        else:
            i += 1
            continue
        flags[_LLAMA_CPP_FIELDS.get(key, key)] = value if value is not None else "true"
        i += 1
    return flags


class Parser(LineParser):
    # Small documents only (read.py adds it beside the prose reader), never through the gates.
    TRIGGERS = Triggers(words=())

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.facts: list[Fact] = []
        self.strings: dict[str, str] = {}  # variable -> the string last assigned to it (`model = '...'`)
        self.seen: set[tuple[str, str]] = set()

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body.strip()
        if not body or len(body) > 4000:
            return
        where = self.ctx.where(line)
        flags: dict[str, str] = {}
        origin = "command-line"
        if not _ENGINE_OWN.search(body):
            flags = {} if msg.level else command_flags(body)
            if not flags:
                flags, origin = self._code(body), "code"
        if flags:
            self.facts.append(
                Flags(where=where, text=self.ctx.clip(body), origin=origin, flags=tuple(flags.items()))
            )
        if msg.level or msg.tag:
            return
        setting = _SETTING_MODEL.match(body)
        if setting:
            self._model(line, setting.group("v"))
        text = spaced(body)
        prose = is_prose(line, msg)
        if prose:
            for name in models_named(text):
                self._model(line, name)
        if prose or re.match(r"(?i)^\W*(?:gpus?|hardware|device|显卡|硬件)\s*[:：]", body):
            for written, gpu, total, count in gpus_named(text):
                if ("gpu", written) not in self.seen:
                    self.seen.add(("gpu", written))
                    part = gpu.name if gpu else None
                    self.facts.append(
                        DeviceNamed(
                            where=where, text=written, name=written, part=part, total=total, count=count
                        )
                    )

    def _model(self, line: Line, name: str) -> None:
        if ("model", name) not in self.seen:
            self.seen.add(("model", name))
            self.facts.append(ModelNamed(where=self.ctx.where(line), text=name, name=name))

    def _code(self, body: str) -> dict[str, str]:
        """Model, parallelism and precision in Python code or a config dict on this line."""
        flags: dict[str, str] = {}
        assign = _ASSIGN.match(body)
        if assign:
            self.strings[assign.group("var")] = assign.group("v")
        for pattern in (_MODEL_ARG, _CALL_FIRST):
            for m in pattern.finditer(body):
                value = m.group("v") or self.strings.get(m.group("var") or "", "")
                if value and _MODELISH.search(value) and "model" not in flags:
                    flags["model"] = value
        for pattern in (_PARALLEL_ARG, _CONTEXT_ARG):
            for m in pattern.finditer(body):
                flags[m.group("k")] = m.group("v")
        for m in _PRECISION_ARG.finditer(body):
            if m.group("flag"):
                flags[m.group("flag")] = "true"
            elif m.group("dk"):
                flags["dtype"] = m.group("dv")
            else:
                flags[m.group("k")] = m.group("v")
        return flags

    def finish(self) -> None:
        if self.ctx.facts == 0:
            return  # nothing else recognised: a setup with no failure is no evidence
        for fact in self.facts:
            self.ctx.emit(fact)
