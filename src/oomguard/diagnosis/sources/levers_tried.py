"""A reporter's sentence that says what they changed and whether it helped.

Each memory mechanism has its own cure, so the change that made a failing deployment work names the mechanism
("-c 30000 fits and has no issues": the context; "I lowered ... and it worked"; "--enforce-eager does not
work either": not the CUDA graphs). Levers are recognised in every engine's spelling (vLLM, SGLang,
llama.cpp, ollama, TensorRT-LLM, TGI, LMDeploy, ExLlama, transformers; engine_levers.SPELLINGS) and in plain
words; the outcome must be said in the same sentence. Advice ("try --enforce-eager", "you should ...") and
questions are not outcomes. Only prose reaches this reader (sources/prose.py decides what prose is).
"""

from __future__ import annotations

import re

from oomguard.diagnosis.engine_levers import tried_options
from oomguard.diagnosis.evidence import TriedLever

# An option in either spelling: `max_model_len`, `--max-model-len`, `max-model-len` (not the words "context
# length": a sentence names the context it ran with as often as one it changed).
_SEP = r"[-_]"


def _option(*names: str) -> str:
    return "|".join(re.escape(n).replace(r"\-", _SEP).replace("_", _SEP) for n in names)


# What names each lever beside the engines' option names (engine_levers.tried_options): short flags, the
# reporter's words. Listed most specific first (a quantized KV cache before quantized weights).
WORDS: dict[TriedLever, str] = {
    TriedLever.EXPANDABLE_SEGMENTS: r"expandable[-_ ]segments?(?::true)?",
    TriedLever.QUANTIZED_KV: (
        r"-ctk|-ctv|(?:fp8|int8|int4|q8_0|q4_0|quantized|8-bit|4-bit) (?:kv|k/v)(?: cache)?"
        r"|kv[- ]cache (?:quantization|in fp8|to fp8)"
    ),
    TriedLever.SHORTER_CONTEXT: (
        r"-c \d+|(?:shorter|smaller|lower|reduc\w*|decreas\w*|limit\w*|capp\w*) (?:the )?(?:context|"
        r"max(?:imum)? (?:model|sequence) len\w*|sequence length)"
        r"|(?:context|model|sequence) len(?:gth)? (?:of |to |= ?)?\d+k?"
    ),
    TriedLever.SMALLER_STEP: r"-ub|chunked prefill",
    TriedLever.FEWER_GPU_LAYERS: (
        r"-ngl|gpu layers|(?:cpu|layer) offload\w*"
        r"|offload\w* (?:some |the )?(?:layers|weights) to (?:the )?cpu"
    ),
    TriedLever.MORE_GPUS: (
        r"-tp \d+|--tp \d+|(?:more|two|2|four|4|eight|8|multiple|second) gpus?|sharding|sharded"
    ),
    # (words, not a model id's parts: "Mixtral-8x7B-Instruct-v0.1-GPTQ" is the model, not a change)
    TriedLever.QUANTIZED_WEIGHTS: (
        r"(?<![-/.])(?:quantiz\w*(?: version| model| weights)?(?! (?:kv|k/v|cache))|awq|gptq|"
        r"bitsandbytes|bnb|(?:int4|int8|4-bit|8-bit)(?! (?:kv|k/v|cache))|fp8 (?:model|weights|checkpoint))"
    ),
    TriedLever.NO_CUDA_GRAPHS: r"eager mode|(?:disabl\w*|without|no) cuda ?graphs?",
    TriedLever.FLASH_ATTENTION: r"-fa|flash[- ]?attention\w*|sdpa",
    TriedLever.SMALLER_MM_INPUT: (
        r"(?:fewer|smaller|less|lower|reduc\w*|resiz\w*|downscal\w*) (?:the )?(?:images?|videos?|"
        r"frames?|resolution|audio)|image (?:size|resolution)"
    ),
    TriedLever.NO_SPECULATION: r"speculative decoding|draft model|-md",
    TriedLever.NO_PROMPT_LOGPROBS: r"prompt logprobs",
    TriedLever.MORE_HOST_MEMORY: (
        r"/dev/shm|(?:more|increas\w*|rais\w*|bigger|larger) (?:the )?(?:host |system |cpu |pod |"
        r"container )?(?:ram|memory limit|shm|shared memory)"
    ),
    TriedLever.GPU_TO_ITSELF: (
        r"(?:kill\w*|stopp?\w*|clos\w*) (?:the )?(?:other|second) (?:process\w*|instance\w*|"
        r"model\w*|container\w*|job\w*)|(?:its own|a separate|a dedicated|an empty) gpu|"
        r"nothing else on the gpu"
    ),
    TriedLever.RESTART: (
        r"restart\w* (?:the )?(?:server|container|pod|engine|service)? ?(?:periodically|every|each|"
        r"daily|nightly)"
    ),
}


def _pattern(lever: TriedLever) -> re.Pattern[str]:
    parts = [p for p in (_option(*tried_options(lever)), WORDS.get(lever, "")) if p]
    return re.compile(rf"(?<!\w)(?:{'|'.join(parts)})(?![\w-])", re.IGNORECASE)


# Each lever's pattern: the engines' option names for it and its words (LARGER_KV_SHARE is read on its own).
LEVERS: tuple[tuple[TriedLever, re.Pattern[str]], ...] = tuple(
    (lever, _pattern(lever)) for lever in (*WORDS, TriedLever.LESS_LORA)
)
# A larger share for the engine (the KV cache then gets blocks): only when the change is said to go up.
_SHARE = re.compile(
    r"(?<!\w)(?:"
    + _option(
        "gpu_memory_utilization",
        "mem_fraction_static",
        "cuda_memory_fraction",
        "kv_cache_free_gpu_mem_fraction",
    )
    + r"|cache_max_entry_count)(?![\w-])",
    re.IGNORECASE,
)
_UP = re.compile(r"\b(?:increas\w*|rais\w*|higher|bump\w*|up to)\b", re.IGNORECASE)

_HELPED = re.compile(
    r"\b(?:fix(?:es|ed) (?:it|this|that|my|the (?:issue|problem|oom|error|crash))|(?:is|was|got|gets) fixed|"
    r"solv(?:es|ed)|resolv(?:es|ed)|works?|worked|working|helps|helped|fits|"
    r"no longer|no issues?|no (?:more )?(?:oom|errors?)|runs? (?:fine|ok|okay|well|successfully)|"
    r"succeed(?:s|ed)?|went away|is gone|made the difference|"
    r"never (?:got|get|gets|had|hit|saw|see|seen) (?:an? |the |any )?"
    r"(?:ooms?|out of memory|errors?|crash\w*))\b"
    r"|解决|可以了|成功",
    re.IGNORECASE,
)
_NOT_HELPED = re.compile(
    r"\b(?:(?:did|does|do|has|have|had|is|was)\s*(?:n[o']?t|not)|not|never|nothing|no one|neither|nor)\b"
    r"(?:\s+\w+){0,3}\s+(?:help\w*|work\w*|fix\w*|solv\w*|chang\w*|matter\w*|effect|difference|luck)\b"
    r"|\bstill\s+(?:\w+\s+){0,2}(?:ooms?|crash\w*|fail\w*|runs? out|out of memory|errors?|the same)\b"
    r"|\beven (?:with|after|when|if|setting|using|lowering|reducing|adding)\b"
    r"|\bno (?:effect|luck|difference)\b|\bsame (?:error|oom|result|issue|problem)\b"
    r"|\bwithout (?:success|effect|luck)\b"
    r"|没用|无效|不行",
    re.IGNORECASE,
)
# Advice and plans before a lever ("try --enforce-eager", "you should lower ...") say nothing about an
# outcome; nor does a question.
_NOT_AN_OUTCOME = re.compile(
    r"\b(?:try|trying|suggest\w*|should|could|would|maybe|perhaps|might|please|recommend\w*|consider|"
    r"if you|you can|is there|how (?:can|do)|whether|if)\b",
    re.IGNORECASE,
)
_QUESTION = re.compile(r"\?\s*$")
# Sentences end at a full stop, exclamation or question mark, or a line break.
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n")


def levers_tried(text: str) -> list[tuple[TriedLever, bool]]:
    """The levers a reporter's text says were tried, each with whether it helped (said in the same
    sentence; a negated outcome wins over a positive word in it). Each lever once, its first outcome."""
    found: dict[TriedLever, bool] = {}
    for sentence in _SENTENCE.split(text):
        if len(sentence) < 8 or _QUESTION.search(sentence):
            continue
        failed = bool(_NOT_HELPED.search(sentence))
        if not failed and not _HELPED.search(sentence):
            continue
        for lever, pattern in LEVERS:
            m = pattern.search(sentence)
            if lever not in found and m and not _NOT_AN_OUTCOME.search(sentence[: m.start()]):
                found[lever] = not failed
        share = _SHARE.search(sentence)
        if (
            TriedLever.LARGER_KV_SHARE not in found
            and share
            and _UP.search(sentence)
            and not _NOT_AN_OUTCOME.search(sentence[: share.start()])
        ):
            found[TriedLever.LARGER_KV_SHARE] = not failed
    return list(found.items())
