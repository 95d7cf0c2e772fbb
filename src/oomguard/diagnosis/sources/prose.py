"""Narrative text around the logs (issue bodies, notes, chat pastes): statements of mechanism.

People describe what they saw ("memory keeps increasing until the pod is OOMKilled", "only with a draft
model"). Each statement is reduced to one mechanism signal; a negated one ("not related to CUDA graph
capture") is kept as its negation. Only read in small documents: a server log is not prose. Boilerplate
that every PyTorch OOM message carries ("to avoid fragmentation", "expandable_segments") is ignored.
"""

from __future__ import annotations

import re

from oomguard.diagnosis.evidence import LeverTried, Signal
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import Context, LineParser, Message, split_prefix
from oomguard.diagnosis.sources.levers_tried import levers_tried

# Text that appears inside tool output and says nothing about this failure.
BOILERPLATE = (
    "to avoid fragmentation",
    "reserved but unallocated memory is large",
    "Tried to allocate",
    "If you are running out of memory",
    "CUDA graphs can take additional",
    # vLLM's refusal for too few recurrent-state blocks names the step it stops before, not a graph's memory
    "so CUDA graph capture cannot proceed",
    "To disable, set",
    "See documentation for Memory Management",
    "is reserved by PyTorch",
    "allocated in private pools",  # the allocator message wrapped over lines is still the allocator's
    "allocated by PyTorch",
)

# A memory quantity ("20GB", "1.5 GiB", "4079 MB") and a span of time or of work it was measured over.
_QUANTITY = r"\b\d+(\.\d+)?\s?[kmgt]i?b\b"
_SPAN = (
    r"\b(per|each|every|after|over|for|within|across|in)\s+(about\s+|~)?(\d[\d,.]*\s*[km]?|a few|a couple of|"
    r"several|many|hundreds of|thousands of)\s*(requests?|queries|calls|iterations?|steps?|epochs?|rounds?|"
    r"cycles?|turns?|generations?|batches|hours?|hrs?|days?|minutes?|mins?|weeks?|h|d)\b"
)
# An image that is software, not a picture: "the docker image", "vllm/vllm-openai:v0.8.5 image", "the 0.6.4
# image", "a ROCm image", "image tag".
_SOFTWARE_IMAGE = re.compile(
    r"\b(docker|container|containers|rocm|cuda|base|official|nightly|oci|disk|system|vm|runtime|server|release|"
    r"latest|dev|vllm|sglang|tgi|lmdeploy|ollama|triton|v?\d+(\.\w+)+|[\w.-]+/[\w.-]+(:[\w.-]+)?)\s+images?\b"
    r"|\bimages?\s+(tags?|versions?|digests?|builds?|registry|pull\w*)\b"
)
_NEG = re.compile(r"\b(not|no|never|n't|without|isn't|wasn't|doesn't|don't)\b[^.;,]{0,30}$")
_OOM = r"\b(oom|oomkilled|out of memory|out-of-memory|killed|enomem|crash\w*|dies|dead|fail\w*)\b"
# The logits that are not the vocabulary's: the attention's scores, a router's, an indexer's.
_NOT_VOCAB_LOGITS = r"\b(attention|attn|router|routing|gate|gating|indexer|qk|mqa|score|scores)\b"
# A context length's names ("8192 context size", "n_ctx 32768", "max_model_len=131072").
_CONTEXT = r"\b(context|ctx|n_ctx|context[ _-](size|length|window)|max_model_len|max-model-len)\b"
_MEM = r"\b(memory|oom|out of memory|gib|gb|mib|vram|profil\w*|headroom|blocks?|kv)\b"

# (signal, pattern that must match, optional second pattern that must also match somewhere in the line).
# Every pattern is bounded by \b on both sides (stems list their endings): "provisioning" is not "vision",
# "scheduled_spec_decode_tokens" is not "spec decode".
RULES: tuple[tuple[str, re.Pattern[str], re.Pattern[str] | None], ...] = (
    ("prose-leak", re.compile(r"\bleak(s|ed|ing|age)?\b|不会释放|没有释放|未释放|不释放|泄漏|泄露"), None),
    (
        "prose-growth",
        re.compile(
            r"\b(keeps?|continu\w*|steadily|gradually|slowly|monotonic\w*|constantly)\s+(\w+\s+)?"
            r"(ris\w*|increas\w*|grow\w*|climb\w*)\b"
            r"|\b(ris\w*|increas\w*|grow\w*|climb\w*)\s+(\w+\s+)?(over time|continuously|steadily|until|"
            r"without bound)\b"
            r"|\b(does|did)\s*(not|n't)\s+(fall|drop|go down|decrease|come down)\b"
            r"|\bnot being (cleared|freed|released)\b|\bnever (freed|released|drops)\b"
            r"|\bafter (a few|several|many|\d+) (hours|days)\b|\bgrows? (across|over|with each|every)\b"
            r"|\b(keeps?|continu\w*)\s+(\w+\s+)?ramp\w*\b"
            # the trend said after what grew ("grows wired/Metal memory over time", "RssAnon grows
            # monotonically"), unless it grows with the context, which is the context's size ("grows
            # monotonically by context x heads x head_dim per turn")
            r"|\b(ris(es|ing)|rose|increas\w*|grow(s|ing)?|grew|climb\w*)\b[^.;]{0,40}\bover time\b"
            r"|\b(ris(es|ing)|rose|increas\w*|grow(s|ing)?|grew|climb\w*)\s+monoton\w*\b(?![^.;]{0,30}context)"
            # Chinese: keeps (不断), steadily (持续), all along (一直), gradually (逐渐) increasing / growing
            r"|(不断|持续|一直|逐渐|缓慢)\s*(的|地|在)?\s*(增加|增长|上涨|上升|变大)|越来越(多|大)"
        ),
        None,
    ),
    # A growth the reporter measured: a growth word, a memory quantity and the span it grew over ("increases
    # by 20GB ... when left running for 7 days", "grew from 18 GB to 31 GB over 6 hours", "+4 GB every 1000
    # requests"): a quantity over time is the leak's own signature, whatever the words around it.
    (
        "prose-measured-growth",
        re.compile(
            r"\b(increas\w*|grow\w*|grew|ris(es|ing)|rose|climb\w*|accumulat\w*|went up|goes up|creep\w*|"
            r"balloon\w*|leak\w*)\b"
        ),
        re.compile(rf"{_QUANTITY}.*{_SPAN}|{_SPAN}.*{_QUANTITY}"),
    ),
    # Memory the engine does not give back when it is deleted, shut down or done with a request: the memory
    # itself is the subject ("the memory is not released", "does not free all the memory"), not another
    # process's ("hopes other processes don't release GPU memory").
    (
        "prose-not-freed",
        re.compile(
            r"\b(memory|vram|kv cache|blocks)\s+(is|was|were|are|has|have|had|gets?|got)\s*(not|n't|never)\s+"
            r"(been\s+)?(fully\s+|completely\s+|properly\s+)?(freed|released|returned|reclaimed|given back)\b"
            r"|\b(does|did)\s*(not|n't|never)\s+(fully\s+|completely\s+|properly\s+)?(free|release|reclaim)\s+"
            r"(up\s+)?((all|the|its|any|of)\s+)*(gpu\s+|cuda\s+)?(memory|vram)\b"
        ),
        None,
    ),
    ("prose-fragmentation", re.compile(r"\bfragment\w*|\bsplit(s|ting)? the block\b|\bmax_split_size"), None),
    # Memory freed by the program but kept by PyTorch's caching allocator, which the next allocation outside
    # it cannot use ("retained inside PyTorch's caching allocator pool (`reserved - allocated`) rather than
    # returned to the CUDA driver"); memory held outside the allocator is something else's.
    (
        "prose-fragmentation",
        re.compile(
            r"\b(retain\w*|held|kept|stays?|remains?|cached|sits?)\s+(inside|in|within|by)\s+(the\s+)?"
            r"(pytorch'?s\s+|torch'?s\s+)?caching allocator\b|\breserved\s*[-\u2212]\s*allocated\b"
            r"|\bnot\s+(\w+\s+)?returned to the (cuda\s+|gpu\s+)?driver\b"
        ),
        None,
    ),
    (
        "prose-host-memory",
        re.compile(
            r"\b(host|cpu memory|system memory|node memory|container|pod|ram|rss|cgroup|page cache|"
            r"memory limit|memory monitor|unified.memory|physical (memory|limit)|ray|oom[- ]?killer|"
            r"sigkill\w*|swap space|pinned memory|page-locked|/dev/shm|shm)\b|"
            r"(?<!gpu )(?<!cuda )(?<![显卡])内存"
        ),
        # how a host says it: the kill, or the memory running out
        re.compile(
            rf"{_OOM}|\blimit\b|\booms\b|\bkill(s|ing)?\b|\bran out\b|\bruns? out\b|\brunning out\b|"
            r"\bexhaust\w*|爆"
        ),
    ),
    # The host's memory given as a size ("all shards are first loaded into CPU memory, which occupies around
    # 40GB"): words that name the host's RAM itself (not a pod or a container, which hold GPUs too).
    (
        "prose-host-memory",
        re.compile(
            r"\b(host (ram|memory)|cpu memory|cpu ram|system memory|system ram|node memory|ram|rss)\b"
        ),
        # its size, or what a host out of RAM does: fill up, swap, freeze
        re.compile(
            r"\b\d+(\.\d+)?\s?[gt]i?b\b|\b100\s?%|\bfill(s|ed|ing)? up\b|\bswapp\w*|\bthrash\w*|"
            r"\bfr(eez\w*|oze)\b|\bunresponsive\b"
        ),
    ),
    # 内存 is RAM (显存 is the GPU's): "内存不足" (not enough), "内存溢出" (overflow), unless the GPU's is
    # meant ("GPU内存", "显卡内存")
    (
        "prose-host-memory",
        re.compile(r"(?<!gpu )(?<!cuda )(?<![显卡])内存\s*(不足|溢出|不够|满了|耗尽)"),
        None,
    ),
    # A process "killed" with no exception of its own: the host's OOM killer is what kills a process outright;
    # a GPU that runs out raises an error in it instead ("the program always be killed", "it got killed").
    (
        "prose-killed",
        re.compile(
            r"\b(be|been|being|was|were|is|are|got|gets?|getting)\s+(\w+\s+)?(killed|sigkilled|oom-?killed)\b"
        ),
        None,
    ),
    (
        "prose-activation",
        re.compile(r"\b(activations?|workspace|intermediate tensors?|padding|padded|prefill peak)\b"),
        re.compile(_MEM),
    ),
    # The prompt prefilled whole, in one step ("force-disables chunked prefill, so the entire prompt is sent
    # ... in a single call", "Chunked prefill DISABLED (262144 = no chunking) -> CRASH"): the step's
    # activations scale with the whole prompt. (A state, not advice: "disable chunked prefill" is a lever.)
    (
        "prose-activation",
        re.compile(
            r"\b(disables|disabled|force-disables|force-disabled)\s+(the\s+)?chunk(ed|ing)\b"
            r"|\bchunk(ed|ing)(\s+prefill)?\s+(is\s+|was\s+|being\s+)?(disabled|off)\b"
            r"|\b(no|without)\s+(\w+\s+)?chunk(ed|ing)\b(?![\s_-]+size)|\bunchunked\b"
        ),
        None,
    ),
    # The weights themselves too large for the devices, or held twice while loading or refitting ("the
    # original bfloat16 weights cannot fit into 4 Gaudi2 HPUs", "we need much larger slice sizes to fit the
    # sharded weights", "creates a full copy of the model weights", "transiently holding ~2x the repacked
    # weight footprint").
    (
        "prose-weights",
        re.compile(
            r"\bweights\s+(\w+\s+)?(do not|don't|won't|cannot|can't|does not|doesn't|would not|wouldn't|"
            r"could not|couldn't|will not)\s+fit\b|\bto fit the (\w+\s+)?(model\s+)?weights\b"
            r"|\b(full|second|whole|extra|another|entire) cop(y|ies) of (the |all )?(\w+\s+)?weights\b"
            r"|(~|\b)\d(\.\d)?\s?x the (\w+\s+)?weights?\b|\b(twice|double) the (\w+\s+)?weights?\b"
        ),
        None,
    ),
    (
        "prose-spec-decode",
        re.compile(r"\b(speculative|draft model|eagle\d?|mtp|medusa|spec[ -]decod\w*)\b"),
        re.compile(_MEM),
    ),
    ("prose-lora", re.compile(r"\blora\b"), re.compile(_MEM)),
    (
        "prose-ep-buffer",
        re.compile(
            r"\b(deepep|deep_ep|all2all|all-to-all|all_to_all|nvshmem|dispatch buffer|low_latency buffer|"
            r"ep buffers?|a2a|eplb|redundant.experts|expert.parallel\w*|low[-_ ]latency buffers?|"
            r"num_rdma_bytes|num_nvl_bytes|rdma buffers?|nvl buffers?|pplx(_kernels)?|mori|symmetric heap|"
            r"num_max_dispatch_tokens_per_rank|max_tokens_per_rank|num_dispatchers)\b"
        ),
        None,
    ),
    (
        "prose-dp-blocks-differ",
        re.compile(r"\bblocks?\b|\bkv[ _-]?cache\w*|\bcapacit(y|ies)\b|\bnum_\w*blocks\b"),
        re.compile(
            r"\b(ranks?|replicas?|dp\d*)\b.*\b(spread|differ\w*|mismatch\w*|imbalanc\w*|inconsistent|vary|varies)\b"
            r"|\b(spread|differ\w*|mismatch\w*|imbalanc\w*|inconsistent|vary|varies)\b.*\b(ranks?|replicas?|dp\d*)\b"
        ),
    ),
    ("prose-cudagraph", re.compile(r"\b(cuda ?graphs?|graph capture|capturing)\b"), re.compile(_MEM)),
    (
        "prose-library-regression",
        re.compile(
            r"\b(nccl|cublas|driver|rebuild|regression|regressed|after upgrad\w*|torch \d|pytorch \d)\b"
        ),
        re.compile(_MEM),
    ),
    (
        "prose-logprobs",
        re.compile(
            r"\b(prompt_logprobs|logprobs|logits over|full[- ]vocab\w*|lm_eval|lm-eval|loglikelihood)\b"
        ),
        None,
    ),
    # The vocabulary-wide tensors named in words next to a memory word ("an OOM can occur inside
    # `LogitsProcessor` where the logits are casted to fp32"): not the attention's, a router's or an
    # indexer's logits, which are other mechanisms' tensors.
    (
        "prose-logprobs",
        re.compile(
            r"(?<!attn )(?<!attention )(?<!router )(?<!indexer )(?<!gate )(?<!gating )(?<!qk )(?<!mqa )"
            r"\b(logits?|logitsprocessor|logits_processor|lm_head|log_softmax|log-softmax|log probs)\b"
        ),
        re.compile(_MEM),
    ),
    # The vocabulary-wide tensor called large ("very large intermediate tensor `logits`", "memory usage
    # reduction factor (due to large vocabulary)"): its size is the vocabulary's, whatever the memory word.
    # (Not the attention's, a router's or an indexer's logits: other mechanisms' tensors.)
    (
        "prose-logprobs",
        re.compile(
            rf"\b(large|huge|big|massive|giant|enormous)\b(?:(?!{_NOT_VOCAB_LOGITS})[^.;]){{0,40}}"
            r"\b(logits?|vocab|vocabulary|vocabularies|vocab_size)\b"
            rf"|\b(logits?|vocab|vocabulary|vocab_size)\b(?:(?!{_NOT_VOCAB_LOGITS})[^.;]){{0,30}}"
            r"\b(large|huge|big|massive|giant|enormous)\b"
        ),
        None,
    ),
    # The context's KV cache too large for the device: a context length said with the memory it needs ("an
    # 8192 context size requires over 20GB of VRAM for the llama_kv_cache_init"), or a KV-sizing setting
    # whose larger value runs out of memory ("changing [the kv cache] to 16384 results in CUDA out of
    # memory").
    (
        "prose-context-kv",
        re.compile(
            rf"(\b\d+k?\s+(token\s+)?{_CONTEXT}|{_CONTEXT}\s+(of\s+|=\s*|to\s+)?\d+k?\b)[^.;]*"
            rf"\b(requires?|required|needs?|needed|takes?|took|uses?|consumes?)\b[^.;]{{0,25}}{_QUANTITY}"
            rf"|\b(kv[ _-]?cache|cache_lens|n_ctx|ctx[_-]size|context size)\b[^.;]{{0,15}}\b\d{{4,7}}k?\b"
            r"[^.;]{0,60}\b(oom|out of memory)\b"
        ),
        None,
    ),
    (
        "prose-kv-full",
        re.compile(r"\bkv[ -]cache\b|\bkv blocks?\b|\bcache blocks\b"),
        # full, or ran out of blocks while serving: retracted (SGLang), swapped out (vLLM V0)
        re.compile(
            r"\bfull\b|\bexhaust\w*|\b100%|\bsaturat\w*|\bpreempt\w*|\bretract\w*|\bswapped out\b|"
            r"\b(ran|runs?|running) out of (free )?(kv|cache|blocks|pages|slots)\b|\bno (free|more) blocks\b"
        ),
    ),
    (
        "prose-other-process",
        re.compile(
            r"\b(another process|other process(es)?|second (llm|model|instance|engine)|same gpu|shared gpu|"
            r"garbage.collect\w*|mig|co-?locat\w*|other tenants?|multiprocessing|multiple "
            r"(processes|instances)|"
            r"two (processes|instances)|optimizer states?)\b|\bdel\(?\s*llm\b"
            # the same in other words: another tenant of the device, whatever kind of program it is
            r"|\b(another|a second|the second|other) (container|containers|service|services|"
            r"program|programs|application|applications|apps?|users?|jobs?|copy|copies|deployments?|pods?|"
            r"workers? process)\b"
            r"|\b([2-9]|two|three|four|several|multiple) (\w+ )?(containers|services|copies|deployments|pods|"
            r"instances)\b"
            r"|\bsame (card|device|npu|gpus)\b|\b(occupied|taken|held|used) by (another|other|a different|"
            r"the other|a previous|an? (old|older|stale|zombie))\b|\bzombie process(es)?\b"
            # a device already taken before the engine started
            r"|\b(gpus?|cards?|devices?|npus?)\s+(that\s+|which\s+)?(is|was|were|are)\s+(already\s+"
            r"(occupied|in use|busy|taken|consumed)|(occupied|in use|busy|taken|consumed)\s+already)\b"
            r"|\b(busy|occupied) (gpus?|cards?|devices?)\b"
            # a previous run's processes still alive on the device ("2 orphaned VLLM::Worker processes remain
            # alive, holding ~22GB VRAM"); Chinese: the GPU still (仍然 / 还在) occupied after the kill
            r"|\borphan(ed|s)?\b[^.;]{0,30}\b(process(es)?|workers?)\b"
            r"|\b(leftover|lingering|stale|dangling) (\w+ )?(process(es)?|workers?)\b"
            r"|(仍然|依然|还在|还是)\s*被\s*占用"
            # Chinese: two models put on one card ("在一张4090上部署两个qwen3-0.6b")
            r"|(一|同一)\s*(张|块)\s*[\w.-]{0,16}\s*(卡|显卡)?\s*上\s*(部署|跑|运行|启动|起)\s*了?\s*(两|二|三|几|多|[2-9])\s*个"
        ),
        None,
    ),
    # Device memory already in use before the engine started ("Before startup, npu-smi reported 20,687 MB
    # used out of 44,278 MB"): someone else's, whoever the tool shows or hides.
    (
        "prose-other-process",
        re.compile(
            r"\bbefore (startup|start\w*|launch\w*|"
            r"(the )?(server|engine|model|vllm|sglang) (start\w*|launch\w*|load\w*))\b"
        ),
        re.compile(rf"{_QUANTITY}[^.;]{{0,20}}\b(used|in use|occupied|taken)\b"),
    ),
    (
        "prose-int32",
        # The limit by name or value (2^31 - 1 = 2,147,483,647; 2^32 = 4,294,967,296), an integer, index or
        # offset that overflows or wraps, and the fix said in words (offsets widened to 64 bits).
        re.compile(
            r"\b(u?int32(_t|_max)?|u?int_max|i32|32[- ]?bit|2\^3[12]|2 ?\*\* ?3[12]|2[\u00b3][\u00b9\u00b2]|"
            r"2,?147,?483,?64[78]|4,?294,?967,?29[56]|0x7fffffff|"
            r"(integer|int|index|indices|indexing|offsets?|strides?|pointers?|products?|multiplication|"
            r"arithmetic)\s+(overflow\w*|wrap\w*)|"
            r"overflow\w*\s+(of\s+|in\s+)?(an?\s+|the\s+)?(int|integer|index|offset|signed)|"
            r"wrap(s|ped|ping)?(\s+around)?\s+(to\s+)?(a\s+)?negative|"
            r"(to|use|using|as|into|promot\w*|cast\w*|upcast\w*|widen\w*)\s+(an?\s+)?u?int64(_t)?)\b"
        ),
        None,
    ),
    (
        # A kernel reading or writing outside its memory, in words ("IMA" is vLLM's and SGLang's shorthand for
        # an illegal memory access): among memory-looking failures, how a wrapped 32-bit offset shows.
        "prose-kernel-fault",
        re.compile(
            r"\b(illegal memory access(es)?|illegal (memory )?address(es)?|memory access faults?|"
            r"gpu page faults?|out[- ]of[- ]bounds? (read|write|access|load|store)\w*|"
            r"oob (read|write|access|load|store)\w*|"
            r"(fix\w*|caus\w*|trigger\w*|hit\w*|avoid\w*|prevent\w*|lead\w* to|result\w* in)\s+"
            r"(an?\s+|the\s+)?ima)\b"
        ),
        None,
    ),
    (
        # A kernel's grid past the device's launch limit (CUDA's grid y and z dimensions stop at 65,535): a
        # limit of the GPU, not memory, whatever fault it ends in.
        "prose-launch-limit",
        re.compile(r"\b(grid|griddim\w*|grid dim\w*|grid size|blocks? per grid)\b"),
        re.compile(r"\b(6553[56]|65,53[56]|2\^16|2\*\*16)\b"),
    ),
    (
        "prose-dp-attention",
        # (not the flag that turns it on, `--enable-dp-attention` / `enable_dp_attention=True`: a setting
        # quoted in a sentence is configuration, which the setup weighs, not a statement of mechanism)
        re.compile(
            r"(?<![-_])\b(attention dp|dp attention|dp-attention|attn_tp\w*|attn_dp\w*|"
            r"attention data parallel)\b"
        ),
        None,
    ),
    ("prose-oom", re.compile(rf"{_OOM}|报错|显存不足"), None),
    (
        "prose-multimodal",
        re.compile(
            r"\b(images?|vision|visual|pixels?|max_pixels|videos?|multimodal|multi-modal|encoder|vit|"
            r"qwen\d?(\.\d)?[-_ ]?vl\w*|llava|internvl\w*|minicpm-?v\w*)\b"
        ),
        re.compile(_MEM),
    ),
)

# Machine text, never prose: a table row or header (cells, column runs), a key=value or dict dump, a stack
# frame or exception line, a log line with a level or a process tag, a dmesg/kernel line.
_TABLE = re.compile(r"^\s*[|+]|\|.*\||\S {3,}\S.* {3,}\S")
_DUMP = re.compile(
    r"\w\(\w+=|\w=\{|\w=\[|[{\[]\s*'\w+'\s*:.*'\w+'\s*:|(\b\w+=\S+[,\s]+){4,}|\w+:\s*\d+(,\s*\w+:\s*\d+){2,}"
)
_MACHINE = re.compile(
    r"^\s*(File \"|Traceback|[\w.]+(Error|Exception|Warning)\b|\[\s*[\d.]+\]|at [\w.$]+\()"
    # a syslog / journalctl line: "Jul 10 16:29:17 DESKTOP ollama[180]: ..."
    r"|^\s*[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \S+ [\w.@/-]+(\[\d+\])?:"
)
# A Markdown quote's markers in front of a line ("> ", ">> ").
_QUOTE = re.compile(r"^\s*(>\s?)+")
_WORD = re.compile(r"[A-Za-z]{2,}|[\u4e00-\u9fff]")  # Latin words, or CJK characters (one word each)
_URL = re.compile(r"\(?https?://\S+\)?")
# A file path's components are no words ("/workspace/csrc/cumem_allocator.cpp" says nothing of a workspace).
# (A URL is kept: the words of a linked page's address are the reporter's pick.)
_PATH = re.compile(r"(?<![\w:/.~-])[.~]{0,2}(?:/[\w.-]+){2,}(?::\d+)?")
# A sentence has at least this many words.
MIN_WORDS = 4
# Words of a failure in any line, machine text or prose: a document none of whose lines any reader
# recognised still gets an answer when one of them says this, or gives a memory quantity (exit 2 only when
# none does). "memory" as a word, not a setting's name (gpu-memory-utilization).
_FAILURE = re.compile(
    r"(?i)\b(out of memory|oom(s|ed|killed)?|killed|kill(s|ing)?|sigkill|enomem|vram|exceptions?|errors?|"
    r"crash\w*|traceback|panic\w*|segfault)\b|(?<![\w-])memory(?![\w-])|显存|内存|报错"
    r"|\b\d+(\.\d+)?\s?[kmgt]i?b\b"  # a memory quantity (a table of usage, a buffer's size)
)
_OUT_OF_MEMORY = re.compile(r"(?i)\b(out of memory|oom(s|ed|killed)?|enomem)\b|显存不足|爆显存")


# Chinese and Japanese text writes Latin words and numbers with no space around them ("推理时报OOM",
# "报ray oom的错"); \b sees no boundary between two word characters, so one is put there before matching.
_CJK_LATIN = re.compile(
    r"(?<=[\u3040-\u30ff\u4e00-\u9fff])(?=[A-Za-z0-9])|(?<=[A-Za-z0-9])(?=[\u3040-\u30ff\u4e00-\u9fff])"
)


def spaced(text: str) -> str:
    """The text with a space between CJK characters and the Latin words or numbers they touch."""
    return _CJK_LATIN.sub(" ", text)


# Code quoted inside a sentence ("if I set limit_mm_per_prompt={"image": 12}, vLLM will reserve ..."): the
# sentence around it is judged without it.
_INLINE = re.compile(r"\s*(?:`[^`]*`|\{[^{}]*\})\s*")


def is_prose(line: Line, msg: Message) -> bool:
    """A reporter's sentence: no log level or process tag, not a table, dump, frame or exception line, and
    mostly words (code quoted inside the sentence aside)."""
    if msg.level or msg.tag or _MACHINE.match(line.text.strip()):
        return False
    quoted = _QUOTE.match(line.text)
    if quoted:  # a log line quoted in an issue ("> INFO 11-01 23:47:30 [gpu_worker.py:391] ...") is still one
        inner = split_prefix(line.text[quoted.end() :])
        if inner.level or inner.tag or _MACHINE.match(inner.body):
            return False
    text = _INLINE.sub(" ", line.text.strip())
    if _TABLE.search(text) or _DUMP.search(text):
        return False
    words = _WORD.findall(text)
    plain = _URL.sub("", text).replace(" ", "")
    return len(words) >= MIN_WORDS and sum(map(len, _WORD.findall(_URL.sub("", text)))) >= 0.5 * len(plain)


def _narrowed(said: list[str]) -> list[str]:
    """A sentence's readings, the more specific one kept where two name the same memory: a workspace or an
    intermediate tensor in a sentence about capturing CUDA graphs is the graphs' ("`workspace` for each graph
    is not released during capturing")."""
    if "prose-cudagraph" in said:
        return [name for name in said if name != "prose-activation"]
    return said


class Parser(LineParser):
    # Prose is only read in small documents (read whole), never through the gates.
    GATES = ()

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.seen: set[str] = set()
        self.failure: tuple[Line, str] | None = None  # the first line with a failure word (the fallback)

    def feed(self, line: Line, msg: Message) -> None:
        raw = line.text.strip()
        text = spaced(raw)  # matched with CJK/Latin boundaries marked; shown as written
        if self.failure is None and _FAILURE.search(text):
            self.failure = (line, text)
        elif (
            self.failure is not None
            and not _OUT_OF_MEMORY.search(self.failure[1])
            and _OUT_OF_MEMORY.search(text)
        ):
            self.failure = (line, text)  # an out-of-memory line says more than an earlier "error"
        if len(text) < 12 or len(text) > 4000 or any(b in text for b in BOILERPLATE):
            return
        if not is_prose(line, msg):
            return  # engine and tool output describe nothing about the failure in words
        low = _PATH.sub(" ", text.lower())
        for lever, helped in levers_tried(_PATH.sub(" ", text)):
            self.ctx.emit(
                LeverTried(where=self.ctx.where(line), text=self.ctx.clip(raw), lever=lever, helped=helped)
            )
        said: list[str] = []
        for name, first, second in RULES:
            if second is not None and not second.search(low):
                continue
            if name == "prose-multimodal":
                low = _SOFTWARE_IMAGE.sub(" ", low)  # a docker image is no picture
            # Any mention said without a negation counts ("no leak in the forward ... the leaking memory");
            # for CUDA graphs the first mention decides, a negated one kept as its negation ("not related to
            # CUDA graphs, disabling CUDA graphs did not help").
            found = [bool(_NEG.search(low[: m.start()])) for m in first.finditer(low)]
            if not found:
                continue
            if name == "prose-cudagraph" and found[0]:
                said.append("prose-not-cudagraph")
            elif not all(found):
                said.append(name)
        for name in _narrowed(said):
            self._emit(line, raw, name)

    def _emit(self, line: Line, text: str, name: str) -> None:
        self.ctx.emit(Signal(where=self.ctx.where(line), text=self.ctx.clip(text), name=name))

    def finish(self) -> None:
        """Nothing in the document was recognised, yet a line names a failure: say so (one fact), so the
        diagnosis answers with the usual causes and the evidence to collect instead of refusing."""
        if self.ctx.facts or self.failure is None:
            return
        line, text = self.failure
        oom = 1.0 if _OUT_OF_MEMORY.search(text) else 0.0
        self.ctx.emit(
            Signal(
                where=self.ctx.where_no(line.no),
                text=self.ctx.clip(line.text.strip()),
                name="failure-words",
                numbers=(("out_of_memory", oom),),
            )
        )
