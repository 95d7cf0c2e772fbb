"""Per cause: the plain explanation, the fixes with concrete values (from the evidence's own numbers, and
re-planned by the planner where the setup is known), what does not help and why, and how to verify.

Values come from the facts: vLLM's estimated maximum model length, the needed vs available KV bytes, the free
memory at start, the request and the free bytes of the OOM message, the sampler's rows, the CUDA-graph
estimate. Where a formula is used it is the mechanism's (documented at the point of use).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from oomguard.diagnosis.engine_levers import (
    ENV_PREFIXES,
    KV_TYPE,
    PYTORCH_ENGINES,
    SPELLINGS,
    Lever,
    Spelling,
    tried_options,
)
from oomguard.diagnosis.engine_marks import Engine
from oomguard.diagnosis.evidence import (
    Evidence,
    HostMemory,
    LeverTried,
    OomMessage,
    ScheduledStep,
    StartupNumber,
)
from oomguard.diagnosis.planner import plan_setup, plannable, planner_fixes
from oomguard.diagnosis.setup import EngineSetup
from oomguard.diagnosis.sizing import host_logits_table
from oomguard.diagnosis.step_shape import CappedStep, StepAnalysis, recommended, reschedule_peaks
from oomguard.engines.vllm.config import DEFAULT_BLOCK_SIZE
from oomguard.units import GiB as GIB

# vLLM rounds KV blocks to 16 tokens by default; a suggested length is rounded down to that.
BLOCK = DEFAULT_BLOCK_SIZE
# Lowest utilization worth suggesting (below this, the KV pool of most deployments vanishes).
MIN_UTILIZATION = 0.5


@dataclass(frozen=True)
class Fix:
    flags: dict[str, str]
    summary: str
    # 'engine' (the engine's own computed value, e.g. vLLM's estimated maximum model length), 'planner'
    # (re-planned and verified), 'evidence' (derived from logged numbers, not verified), 'mechanism'
    basis: str
    # The engine whose options `flags` are (an Engine value); "" for a fix without flags, or an
    # engine-neutral one that names each engine's spelling in its summary.
    engine: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "flags": dict(self.flags),
            "summary": self.summary,
            "basis": self.basis,
            "engine": self.engine,
        }


@dataclass(frozen=True)
class Advice:
    explanation: str
    fixes: tuple[Fix, ...]
    not_helpful: tuple[str, ...]
    verify: str
    next_evidence: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Whether the cause's usual levers (CLASS_LEVERS) act on what the advisor found: not where the evidence
    # placed it outside them (a host table of logits is sized by the context, not by the sequences).
    class_levers: bool = True


def _numbers(ev: Evidence, quantity: str) -> list[float]:
    return [n.value for n in ev.of(StartupNumber) if n.quantity == quantity]


def _signal_number(ev: Evidence, name: str, key: str) -> float | None:
    for s in reversed(ev.signals(name)):
        value = s.number(key)
        if value is not None:
            return value
    return None


def _g(x: float) -> str:
    return f"{x / GIB:.2f} GiB"


def _utilization(setup: EngineSetup, ev: Evidence) -> float | None:
    u = setup.flag_float("gpu_memory_utilization")
    if u is None:
        logged = _numbers(ev, "gpu_memory_utilization")
        u = logged[-1] if logged else None
    return u


def _first_oom(ev: Evidence) -> OomMessage | None:
    ooms = [o for o in ev.of(OomMessage) if o.requested]
    if ooms:
        return ooms[0]
    bare = ev.of(OomMessage)
    return bare[0] if bare else None


def _said_not_to_help(advice: Advice, ev: Evidence) -> Advice:
    """A fix the reporter says they already tried without success moves under 'does not help', with their
    sentence: advising it again would send them round in a circle."""
    tried = [f for f in ev.of(LeverTried) if not f.helped]
    if not tried:
        return advice
    keep: list[Fix] = []
    said: list[str] = []
    for fix in advice.fixes:
        # its options: the flags it sets, or those an engine-neutral fix names in its summary
        keys = {k.replace("-", "_") for k in fix.flags}
        keys |= {m.group(1).replace("-", "_") for m in _FLAG_WORD.finditer(fix.summary)}
        failed = next((f for f in tried if keys & set(tried_options(f.lever))), None)
        if failed is None:
            keep.append(fix)
        else:
            said.append(f'{fix.summary} (the report says {failed.lever.value} did not help: "{failed.text}")')
    if not said:
        return advice
    return replace(advice, fixes=tuple(keep), not_helpful=(*advice.not_helpful, *said))


def advise(
    cls: str,
    ev: Evidence,
    setup: EngineSetup,
    step: StepAnalysis | None = None,
    engine: Engine = Engine.UNKNOWN,
) -> Advice:
    """The advice for one cause (`_advise`), less the fixes the report says were tried and did not help."""
    return _said_not_to_help(_advise(cls, ev, setup, step, engine), ev)


def _advise(
    cls: str,
    ev: Evidence,
    setup: EngineSetup,
    step: StepAnalysis | None = None,
    engine: Engine = Engine.UNKNOWN,
) -> Advice:
    """The advice for one cause; `step` is the failing step's arithmetic when a scheduler dump was found;
    `engine` the engine the evidence comes from: vLLM's flags for vLLM, another engine's own options where
    it is another, and engine-neutral advice (the mechanism, each engine's spelling labelled) where the
    engine is not known or has no levers here."""
    builder = ADVISORS.get(cls, _other)
    advice = builder(ev, setup, step)
    if engine in SPELLINGS and engine is not Engine.VLLM:
        return _flags_of(for_engine(cls, advice, engine, ev, setup), engine)
    planned = _planned(cls, setup)
    own = [f for f in advice.fixes if not _foreign_variable(f, Engine.VLLM)]
    fixes = merge_fixes(planned, own, setup_known=bool(planned) or plannable(setup))
    vllm = replace(advice, fixes=fixes, not_helpful=without_contradictions(advice.not_helpful, fixes))
    if engine is Engine.VLLM:
        return _flags_of(vllm, Engine.VLLM)
    return engine_neutral(cls, vllm, ev, setup)


def _flags_of(advice: Advice, engine: Engine) -> Advice:
    """The advice with each fix that sets flags marked as that engine's."""
    fixes = tuple(replace(f, engine=engine.value) if f.flags and not f.engine else f for f in advice.fixes)
    return replace(advice, fixes=fixes)


def _foreign_variable(fix: Fix, engine: Engine) -> bool:
    """A fix setting another engine's own variable (an advisor may offer SGLang's next to vLLM's when the
    setup did not say which engine ran)."""
    return any(
        key.startswith(prefixes)
        for other, prefixes in ENV_PREFIXES.items()
        if other is not engine and prefixes
        for key in fix.flags
    )


# What an unverified fix says when the planner could have checked it but did not find it fits.
UNVERIFIED = " [not re-planned: check with `oomguard plan`]"


def merge_fixes(planned: list[Fix], own: list[Fix], setup_known: bool = False) -> tuple[Fix, ...]:
    """The engine's own computed values first (vLLM's estimate is what vLLM will accept), then the planner's
    verified fixes, then the ones derived from the evidence's numbers, then the mechanism's. A verified value
    beats an unverified one on the same flags (the planner re-planned the whole setup; the evidence fix is one
    number read off the log), so an unverified fix on flags the planner changed goes. When the setup was
    recovered, the unverified fixes say so."""
    covered = [frozenset(f.flags) for f in planned if f.flags]
    engine = [f for f in own if f.basis == "engine"]
    kept_own = [
        f
        for f in own
        if f.basis != "engine" and not (f.flags and any(frozenset(f.flags) <= c for c in covered))
    ]
    if setup_known:
        kept_own = [
            Fix(f.flags, f.summary + UNVERIFIED, f.basis) if f.flags and UNVERIFIED not in f.summary else f
            for f in kept_own
        ]
    evidence = [f for f in kept_own if f.basis == "evidence"]
    return tuple(engine + planned + evidence + [f for f in kept_own if f not in evidence])


_FLAG_WORD = re.compile(r"--([a-z][a-z0-9-]+)")


def without_contradictions(not_helpful: tuple[str, ...], fixes: tuple[Fix, ...]) -> tuple[str, ...]:
    """'Does not help' never names a flag one of the fixes changes (the same advice cannot be both)."""
    changed = {k.replace("_", "-") for f in fixes for k in f.flags}
    return tuple(n for n in not_helpful if not any(m.group(1) in changed for m in _FLAG_WORD.finditer(n)))


# Causes whose fix is a change to the startup budget: the planner's verified fixes apply.
PLANNER_CLASSES = {
    "weights-dont-fit",
    "kv-cache-insufficient-at-startup",
    "max-model-len-exceeds-kv",
    "sampler-or-logits",
    "cuda-graph-capture",
}


def _planned(cls: str, setup: EngineSetup) -> list[Fix]:
    if cls not in PLANNER_CLASSES:
        return []
    fixes = []
    for f in planner_fixes(setup, limit=3):
        flags = {k: str(v) for k, v in f.flags.items()}
        fixes.append(Fix(flags, f.summary + " [re-planned: fits]", "planner"))
    return fixes


def _weights(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    fixes: list[Fix] = []
    oom = _first_oom(ev)
    tp = setup.parallel("tensor_parallel_size")
    if oom and oom.total and oom.allocated is not None and oom.requested:
        # Weights need at least what was allocated plus the failed request; spread over more ranks they
        # shrink.
        need = oom.allocated + oom.requested
        usable = oom.total * (_utilization(setup, ev) or setup.behaviour.default_gpu_memory_utilization)
        ranks = max(2, 2 ** math.ceil(math.log2(max(1.0, need * tp / usable * 1.25))))
        fixes.append(
            Fix(
                {"tensor_parallel_size": str(ranks)},
                f"--tensor-parallel-size {ranks}: the weights "
                f"(at least {_g(need)} on {tp} GPU(s)) split over {ranks} GPUs leave room for KV",
                "evidence",
            )
        )
    else:
        fixes.append(
            Fix(
                {"tensor_parallel_size": str(tp * 2)},
                f"--tensor-parallel-size {tp * 2}: shard the weights over more GPUs",
                "mechanism",
            )
        )
    if not setup.flag("quantization") or setup.flag("quantization") in ("None", "none"):
        fixes.append(
            Fix(
                {"quantization": "fp8"},
                "--quantization fp8 (or an FP8/AWQ/GPTQ checkpoint): about half the weight bytes of bf16",
                "mechanism",
            )
        )
    if setup.parallel("pipeline_parallel_size") > 1:
        fixes.append(
            Fix(
                {"VLLM_PP_LAYER_PARTITION": "<fewer layers on the failing stage>"},
                "rebalance pipeline stages: the last stage also holds the lm_head and sampler",
                "mechanism",
            )
        )
    return Advice(
        "The model's weights do not fit in the GPU memory this engine may use. The OOM came while creating "
        "or "
        "loading parameters, before any KV cache or activation existed.",
        tuple(fixes),
        (
            "Lowering --max-model-len or --max-num-seqs: they size KV and activations, which come after the "  # noqa: ISC004
            "weights.",
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: there is nothing to defragment, the bytes are "  # noqa: ISC004
            "missing.",
        ),
        "The engine logs 'Model loading took X GiB' and then a positive 'Available KV cache memory'; it "
        "starts "
        "cleanly three times in a row.",
        "nvidia-smi before start (is the GPU empty?) and the 'Model loading took' line of a run that loads.",
    )


def _kv_startup(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    fixes: list[Fix] = []
    u = _utilization(setup, ev)
    estimates = _numbers(ev, "cuda_graph_estimate_bytes")
    weights = _numbers(ev, "weights_bytes")
    budget = _numbers(ev, "budget_bytes")
    if weights and budget:
        fixes.append(
            Fix(
                {},
                f"weights {_g(weights[-1])} of a {_g(budget[-1])} budget: the rest must hold the "
                "activation peak and at least one request's KV",
                "evidence",
            )
        )
    if u is not None and u < 0.95:
        fixes.append(
            Fix(
                {"gpu_memory_utilization": f"{min(0.95, u + 0.05):.2f}"},
                f"--gpu-memory-utilization {min(0.95, u + 0.05):.2f}: a larger budget for KV (only if "
                "nothing else shares the GPU)",
                "evidence",
            )
        )
    if setup.flag_int("max_num_seqs") is None or (setup.flag_int("max_num_seqs") or 0) > 256:
        fixes.append(
            Fix(
                {"max_num_seqs": "256"},
                "--max-num-seqs 256: a smaller profile batch and sampler warm-up "
                "(rows x vocabulary) leave more for KV",
                "mechanism",
            )
        )
    fixes.append(
        Fix({"kv_cache_dtype": "fp8"}, "--kv-cache-dtype fp8: half the bytes per KV token", "mechanism")
    )
    tp = setup.parallel("tensor_parallel_size")
    fixes.append(
        Fix(
            {"tensor_parallel_size": str(tp * 2)},
            f"--tensor-parallel-size {tp * 2}: weights per GPU halve, the freed memory goes to KV",
            "mechanism",
        )
    )
    if estimates and max(estimates) >= 4 * GIB:
        fixes.append(
            Fix(
                {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"},
                f"the CUDA-graph estimate is "
                f"{_g(max(estimates))}: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 with a lower "
                "--gpu-memory-utilization, or --enforce-eager",
                "evidence",
            )
        )
    return Advice(
        "After weights, the profile-run activation peak, non-torch memory (and from v0.21 the CUDA-graph "
        "estimate), nothing was left of gpu_memory_utilization x total for KV blocks.",
        tuple(fixes),
        (
            "Lowering --max-model-len alone: the pool is empty, not too small for one long request.",
            "Lowering --gpu-memory-utilization: it shrinks the budget the KV pool is carved from.",
        ),
        "'Available KV cache memory' is positive and 'GPU KV cache size' covers your context x concurrency.",
        "The startup ledger: 'Model loading took', the profiling summary (VLLM_LOGGING_LEVEL=DEBUG) and "
        "'Estimated CUDA graph memory'.",
    )


def _max_len(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    fixes: list[Fix] = []
    length = _signal_number(ev, "max-model-len-exceeds-kv", "max_model_len")
    estimate = _signal_number(ev, "max-model-len-exceeds-kv", "estimated_max_model_len")
    tokens = _signal_number(ev, "max-model-len-exceeds-kv", "kv_cache_tokens")
    need = _signal_number(ev, "max-model-len-exceeds-kv", "kv_needed_bytes")
    avail = _signal_number(ev, "max-model-len-exceeds-kv", "kv_available_bytes")
    fit = estimate or tokens
    if fit is None and length and need and avail:
        fit = length * avail / need  # KV bytes grow linearly with the context for full attention
    if fit:
        value = int(fit) // BLOCK * BLOCK
        fixes.append(
            Fix(
                {"max_model_len": str(value)},
                f"--max-model-len {value}: the longest context the KV pool "
                f"holds for one request" + (f" (was {int(length)})" if length else ""),
                "engine" if estimate or tokens else "evidence",
            )
        )
    u = _utilization(setup, ev)
    total = setup.gpu_total_bytes
    if need and avail and u and total:
        raised = math.ceil((u + (need - avail) / total) * 100 + 0.5) / 100
        if raised <= 0.98:
            fixes.append(
                Fix(
                    {"gpu_memory_utilization": f"{raised:.2f}"},
                    f"--gpu-memory-utilization {raised:.2f}: "
                    f"adds the missing {_g(need - avail)} of KV (if the GPU has it free)",
                    "evidence",
                )
            )
    elif need and avail:
        fixes.append(Fix({}, f"raise --gpu-memory-utilization to add {_g(need - avail)} of KV", "evidence"))
    fixes.append(
        Fix(
            {"kv_cache_dtype": "fp8"},
            "--kv-cache-dtype fp8: twice the tokens in the same pool (check accuracy)",
            "mechanism",
        )
    )
    return Advice(
        "The KV pool exists but one request at max_model_len needs more KV than it holds: vLLM refuses to "
        "start "
        "rather than fail the first long request.",
        tuple(fixes),
        (
            (
                "Lowering --max-num-seqs or --max-num-batched-tokens barely moves it: the pool must hold one "
                "full-length "
                "request."
            ),
        ),
        "The engine starts and logs 'Maximum concurrency for N tokens per request: >= 1.00x'.",
        "The context length your traffic really needs (p99 prompt + max_tokens).",
    )


def _step_fixes(step: StepAnalysis, budget_now: int | None) -> tuple[list[Fix], list[str], list[str]]:
    """Fixes, what does not help, and notes from the failing step's arithmetic (step_shape.py)."""
    g = 1 / GIB
    w, s = step.widths.hidden_size, step.widths.dtype_bytes
    now = step.padded if step.layout != "packed" else step.packed
    rows, longest = step.padded.num_prefills, step.padded.max_prefill_len
    fixes: list[Fix] = []
    notes = [f"failing step ({step.step.where}): {step.shape.describe()}; layer width {step.width_source}"]
    had = step.available * g if step.available is not None else None
    if had is not None:
        notes.append(f"the step had at least {had:.1f} GiB (free at the OOM plus its hidden streams)")

    def describe(c: CappedStep) -> str:
        within = (
            ""
            if had is None or c.fits is None
            else f"; within the {had:.1f} GiB the step had"
            if c.fits
            else f"; still above the {had:.1f} GiB the step had"
        )
        return (
            f"padded activation peak falls from {now.peak_bytes * g:.1f} to at most "
            f"{c.padded.peak_bytes * g:.1f}"
            f" GiB ({rows} x {longest:,} -> {c.padded.num_prefills} x {c.padded.max_prefill_len:,} rows of "
            f"{w:,} x {s:g} B){within}"
        )

    best = recommended(step)
    if best is not None:
        flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in best.flags.items())
        fixes.append(Fix(best.flags, f"{flags}: {describe(best)}", "evidence"))
        cap = int(best.flags["long_prefill_token_threshold"])
        only = reschedule_peaks(step, max(budget_now or 0, step.shape.num_tokens), cap)
        if only.padded.peak_bytes < now.peak_bytes:
            fixes.append(
                Fix(
                    only.flags,
                    f"--long-prefill-token-threshold {cap} alone (the token budget stays): {describe(only)}",
                    "evidence",
                )
            )
    if step.layout == "padded":
        fixes.append(
            Fix(
                {},
                f"a version whose layer packs the rows instead of padding them: the same step then "
                f"needs {step.packed.peak_bytes * g:.1f} GiB instead of {now.peak_bytes * g:.1f}",
                "evidence",
            )
        )
    not_helpful = []
    if step.layout == "padded":
        not_helpful.append(
            f"Lowering --gpu-memory-utilization: the padded peak ({now.peak_bytes * g:.1f} GiB) grows "
            "with rows x the longest chunk of a step, not with the KV budget; it only moves the crash "
            "later."
        )
    if step.padded.exceeds_int32_index:
        notes.append(
            f"the padded tensor has {step.padded.max_tensor_elements:,} elements, above 2^31: kernels with "
            "32-bit indexing fail on this step instead of running out of memory (canUse32BitIndexMath)"
        )
    return fixes, not_helpful, notes


def _activation(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    fixes: list[Fix] = []
    mnbt = setup.flag_int("max_num_batched_tokens")
    notes: list[str] = []
    not_helpful: list[str] = []
    steps = ev.of(ScheduledStep)
    if step is not None:
        fixes, not_helpful, notes = _step_fixes(step, mnbt)
    elif steps:
        worst = max(steps, key=lambda s: len(s.tokens_per_request) * max(s.tokens_per_request))
        rows, longest = len(worst.tokens_per_request), max(worst.tokens_per_request)
        cap = 8192 if longest > 8192 else max(BLOCK, longest // 4)
        fixes.append(
            Fix(
                {"max_num_batched_tokens": str(cap), "long_prefill_token_threshold": str(cap)},
                f"--max-num-batched-tokens {cap} --long-prefill-token-threshold {cap}: a padded step of "
                f"{rows} x {longest:,} rows becomes at most {rows} x {cap:,} "
                f"({longest / cap:.1f}x smaller; no OOM size to read the layer width from)",
                "evidence",
            )
        )
    target = 8192 if (mnbt or 0) > 8192 else max(2048, (mnbt or 8192) // 2)
    ledger_now = plan_setup(setup) if step is None else None
    ledger_new = plan_setup(setup, max_num_batched_tokens=target) if ledger_now else None
    if ledger_now and ledger_new and ledger_new.activation < ledger_now.activation:
        fixes.append(
            Fix(
                {"max_num_batched_tokens": str(target)},
                f"--max-num-batched-tokens {target}: activation "
                f"peak falls from {ledger_now.activation:.1f} to {ledger_new.activation:.1f} GiB "
                "[re-planned]",
                "planner",
            )
        )
    elif not steps:
        was = f" (now {mnbt:,})" if mnbt else ""
        fixes.append(
            Fix(
                {"max_num_batched_tokens": str(target)},
                f"--max-num-batched-tokens {target}{was}: the "
                "largest step, and its activation peak, shrinks in proportion",
                "mechanism",
            )
        )
    u = _utilization(setup, ev)
    if u is not None and u >= 0.95:
        fixes.append(
            Fix(
                {"gpu_memory_utilization": f"{u - 0.05:.2f}"},
                f"--gpu-memory-utilization {u - 0.05:.2f} "
                f"(from {u}): leaves {0.05 * (setup.gpu_total_bytes or 0) / GIB:.1f} GiB for peaks the "
                "profile run did not see",
                "evidence",
            )
        )
    if setup.flag("enable_chunked_prefill") in ("false", "False"):
        fixes.append(
            Fix(
                {"enable_chunked_prefill": "true"},
                "--enable-chunked-prefill: long prompts run in "
                "max_num_batched_tokens chunks instead of one step",
                "mechanism",
            )
        )
    oom = _first_oom(ev)
    if oom and oom.requested and oom.free is not None:
        notes.append(f"the failed allocation was {_g(oom.requested)} with {_g(oom.free)} free")
    return Advice(
        "A transient activation tensor of one step (prefill chunk, padded mixed-length batch, MLP "
        "intermediate) "
        "needed more than the memory left outside the KV pool. KV usage was not the limit.",
        tuple(fixes),
        tuple(not_helpful)
        or (
            (
                "Lowering --gpu-memory-utilization only moves the crash later when the step shape is "
                "unbounded (padding "
                "grows with the longest chunk in the batch)."
            ),
            "Adding KV capacity (fp8 KV, more GPUs for KV): KV was not full.",
        ),
        "Replay the same traffic (mixed long and short prompts) for hours: no OOM, and the peak tracks the "
        "scheduled tokens per step.",
        "The scheduler output of the crashing step (num_scheduled_tokens per request) and the KV usage at "
        "the crash.",
        tuple(notes),
    )


def _logits_table(ev: Evidence) -> Advice | None:
    """A table of logits in host RAM, one row per position of the context (llama-cpp-python's scores): the
    context decides its size, not the number of sequences."""
    s = host_logits_table(ev)
    if s is None:
        return None
    rows, width = int(s.number("array_rows") or 0), int(s.number("array_width") or 0)
    return Advice(
        "A table of logits in host RAM (a row of the whole vocabulary per position of the context, fp32) did "
        "not fit: it grows with the context x the vocabulary, not with the weights or their quantization.",
        (
            Fix(
                {},
                f"a smaller context (llama-cpp-python: n_ctx; the wrapper's context option): the table is "
                f"{rows:,} positions x {width:,} x 4 bytes; each halving of the context halves it",
                "evidence",
            ),
        ),
        ("A smaller quantization of the weights: the table's size does not depend on them.",),
        "The model loads with the smaller context, and host memory stays below the limit.",
        "The context the wrapper passes (n_ctx) and the host's free memory.",
        class_levers=False,
    )


def _sampler(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    table = _logits_table(ev)
    if table is not None:
        return table
    fixes: list[Fix] = []
    rows = _signal_number(ev, "sampler-warmup-oom", "num_requests") or setup.flag_int("max_num_seqs")
    oom = _first_oom(ev)
    if rows:
        smaller = max(16, int(rows) // 4)
        # The warm-up's tensors are rows x vocabulary: memory scales linearly with the rows.
        detail = ""
        if oom and oom.requested:
            detail = (
                f": the failed {_g(oom.requested)} allocation becomes about "
                f"{_g(oom.requested * smaller / rows)}"
            )
        fixes.append(
            Fix(
                {"max_num_seqs": str(smaller)},
                f"--max-num-seqs {smaller} (from {int(rows)}){detail}",
                "evidence" if detail else "mechanism",
            )
        )
    u = _utilization(setup, ev)
    if u is not None:
        fixes.append(
            Fix(
                {"gpu_memory_utilization": f"{u - 0.05:.2f}"},
                f"--gpu-memory-utilization {u - 0.05:.2f}: "
                "more room outside the budget for the warm-up's logits copies",
                "evidence",
            )
        )
    if ev.signals("prose-logprobs"):
        fixes.append(
            Fix(
                {},
                "request prompt_logprobs for fewer prompts per batch: prompt_len x vocabulary "
                "logprobs are not budgeted by the profile run",
                "mechanism",
            )
        )
    return Advice(
        "The sampler's tensors (logits over the whole vocabulary for every row, sorted for top-k/top-p, or "
        "prompt logprobs) did not fit: they scale with max_num_seqs x vocabulary size, not with the model.",
        tuple(fixes),
        ("Lowering --max-model-len: the sampler works on one row per sequence, whatever its length.",),
        "The engine passes 'warming up sampler' at startup; runtime requests with logprobs succeed.",
        "The vocabulary size and max_num_seqs; whether requests ask for prompt_logprobs.",
    )


def _cudagraph(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    fixes: list[Fix] = [
        Fix(
            {"enforce_eager": "true"},
            "--enforce-eager: no graphs (confirms the cause; costs decode speed)",
            "mechanism",
        )
    ]
    estimates = _numbers(ev, "cuda_graph_estimate_bytes")
    u = _utilization(setup, ev)
    total = setup.gpu_total_bytes
    kvs = _numbers(ev, "kv_available_bytes")
    if estimates and max(estimates) >= 4 * GIB:
        back = (
            f"; KV gets {_g(min(kvs) + max(estimates))} instead of {_g(min(kvs))}"
            if kvs and min(kvs) + max(estimates) > 0
            else ""
        )
        fixes.append(
            Fix(
                {
                    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0",
                    "gpu_memory_utilization": (
                        f"{(u or setup.behaviour.default_gpu_memory_utilization) - 0.05:.2f}"
                    ),
                },
                f"the graph estimate ({_g(max(estimates))}) is far above real "
                "graph pools: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 and a 0.05 lower "
                f"--gpu-memory-utilization to keep room for the real pool{back}",
                "evidence",
            )
        )
    elif u is not None:
        oom = _first_oom(ev)
        cut = 0.01
        if oom and oom.requested and total:
            cut = max(0.01, math.ceil((oom.requested - (oom.free or 0)) / total * 100 + 0.5) / 100)
        fixes.append(
            Fix(
                {"gpu_memory_utilization": f"{u - cut:.2f}"},
                f"--gpu-memory-utilization {u - cut:.2f} "
                f"(from {u}): the graph pool needs memory outside the KV budget",
                "evidence",
            )
        )
    fixes.append(
        Fix(
            {"max_cudagraph_capture_size": "128"},
            "-O.max_cudagraph_capture_size=128 (or --max-num-seqs 128): fewer and smaller graphs",
            "mechanism",
        )
    )
    return Advice(
        "CUDA-graph capture (or its memory estimate) needed more memory than was left after the KV pool: the "
        "graphs' private pool is sized by the largest captured batch, and before v0.21 it was not budgeted "
        "at all.",
        tuple(fixes),
        ("Lowering --max-model-len: graph memory depends on the captured batch sizes, not on the context.",),
        "Startup logs 'Graph capturing finished ... took X GiB' and 'CUDA graph pool memory: actual vs "
        "estimated' "
        "within a few percent.",
        "The lines around capture: 'Estimated CUDA graph memory', 'Profiling CUDA graph memory', 'CUDA graph "
        "pool "
        "memory'.",
    )


def _parse_bytes(text: str | None) -> float | None:
    """'25GiB', '25 GiB', '26843545600' -> bytes (vLLM's --kv-cache-memory-bytes accepts suffixes)."""
    if not text:
        return None
    m = re.match(r"^\s*([\d.]+)\s*([KMGT]i?B?)?\s*$", text, re.IGNORECASE)
    if not m:
        return None
    unit = (m.group(2) or "").upper().rstrip("B").rstrip("I")
    return float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit]


def _ep_failed_allocation(ev: Evidence) -> OomMessage | None:
    """The OOM of the all-to-all buffer itself: the largest failed request when the stack is in the EP
    path."""
    sized = [o for o in ev.of(OomMessage) if o.requested]
    return max(sized, key=lambda o: o.requested or 0) if sized else None


def _ep(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    fixes: list[Fix] = []
    oom = _ep_failed_allocation(ev)
    sglang = setup.engine == "sglang"
    if oom is not None and oom.requested:
        asked, free = oom.requested, oom.free
        notes = f"the buffer asked for {_g(asked)}" + (f" with {_g(free)} free" if free is not None else "")
        if not sglang:
            smaller = max(128, int((free if free else asked / 2) * 0.8) >> 20) // 128 * 128
            fixes.append(
                Fix(
                    {"VLLM_DEEPEP_BUFFER_SIZE_MB": str(smaller)},
                    f"VLLM_DEEPEP_BUFFER_SIZE_MB={smaller}: {notes}; a buffer that fits what was free",
                    "evidence",
                )
            )
        kv = _parse_bytes(setup.flag("kv_cache_memory_bytes"))
        if kv and free is not None and asked > free:
            target = int((kv - (asked - free) - 1 * GIB) / GIB)
            if target > 0:
                fixes.append(
                    Fix(
                        {"kv_cache_memory_bytes": f"{target}GiB"},
                        f"--kv-cache-memory-bytes {target}GiB (was {kv / GIB:.0f}GiB): the KV pool you set "
                        "leaves "
                        f"{_g(asked - free)} too little for the buffer, plus 1 GiB of slack",
                        "evidence",
                    )
                )
    if not sglang:
        if not any("VLLM_DEEPEP_BUFFER_SIZE_MB" in f.flags for f in fixes):
            fixes.append(
                Fix(
                    {"VLLM_DEEPEP_BUFFER_SIZE_MB": "512"},
                    "VLLM_DEEPEP_BUFFER_SIZE_MB=512 (default 1024): a smaller high-throughput NVL buffer",
                    "mechanism",
                )
            )
        fixes.append(
            Fix(
                {"max_num_batched_tokens": "256"},
                "--max-num-batched-tokens 256 with deepep_low_latency: the RDMA "
                "buffer is sized by the tokens dispatched per rank",
                "mechanism",
            )
        )
    if not setup.flag("kv_cache_memory_bytes"):
        fixes.append(
            Fix(
                {"gpu_memory_utilization": f"{(_utilization(setup, ev) or 0.9) - 0.05:.2f}"},
                "a 0.05 lower --gpu-memory-utilization: room outside the KV pool for the buffers",
                "mechanism",
            )
        )
    if sglang or setup.engine == "unknown":
        fixes.append(
            Fix(
                {"SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "128"},
                "SGLang: cap dispatch tokens per rank "
                "(128) so the low-latency buffer is ~1.8 GiB instead of ~14",
                "mechanism",
            )
        )
    return Advice(
        "The expert-parallel all-to-all buffers (DeepEP/NVSHMEM dispatch and combine) are allocated outside "
        "PyTorch; when the KV pool or graphs took the memory, the buffer allocation fails, sometimes only as "
        "'invalid argument'.",
        tuple(fixes),
        (
            "Lowering --max-model-len: the buffers scale with tokens per step and experts, not with context.",
            "Turning off DP alone: the buffer is per EP rank.",
        ),
        "Startup with EP logs the buffer creation and the engine serves a burst of long prompts without a "
        "dispatch/combine failure.",
        "Per-rank free memory just before the buffer is created, and the all2all backend in use.",
    )


def _dp(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    blocks = [n for n in ev.of(StartupNumber) if n.quantity == "num_gpu_blocks" and "DP" in n.process_tag]
    fixes = []
    if blocks:
        low = int(min(b.value for b in blocks))
        fixes.append(
            Fix(
                {"num_gpu_blocks_override": str(low)},
                f"--num-gpu-blocks-override {low}: the smallest "
                "rank's pool for every DP rank, so block ids agree",
                "evidence",
            )
        )
    fixes.append(
        Fix(
            {},
            "one DP replica per GPU set: co-located replicas each size their KV from the same free memory",
            "mechanism",
        )
    )
    return Advice(
        "Each data-parallel rank profiles and sizes its own KV pool. Replicas sharing GPUs, or ranks that "
        "measured different free memory, end up with pools that do not add up or do not match.",
        tuple(fixes),
        ("Raising --gpu-memory-utilization: every replica takes the larger share.",),
        "All DP ranks log the same 'GPU KV cache size'; total per GPU stays under its memory.",
        "The 'GPU KV cache size' / num_gpu_blocks line of every EngineCore_DPn.",
    )


def _kv_runtime(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    seqs = setup.flag_int("max_num_seqs")
    tokens = _numbers(ev, "kv_cache_tokens")
    fixes = [
        Fix({"kv_cache_dtype": "fp8"}, "--kv-cache-dtype fp8: twice the tokens in the same pool", "mechanism")
    ]
    if seqs:
        fixes.append(
            Fix(
                {"max_num_seqs": str(max(1, seqs * 3 // 4))},
                f"--max-num-seqs {max(1, seqs * 3 // 4)}: fewer sequences hold KV at once",
                "evidence",
            )
        )
    if tokens:
        fixes.append(
            Fix(
                {},
                f"the pool holds {int(tokens[-1]):,} tokens: cap max_tokens/prompt length at the "
                "gateway so running x length stays below it",
                "evidence",
            )
        )
    fixes.append(Fix({}, "more replicas or a larger --tensor-parallel-size for more KV", "mechanism"))
    return Advice(
        "The KV pool filled up under load: requests were preempted or queued, and with some schedulers the "
        "next allocation failed. Arrivals or request lengths exceed the pool.",
        tuple(fixes),
        ("Raising --max-num-seqs: more sequences compete for the same full pool.",),
        "Under the same traffic, vllm:kv_cache_usage_perc stays below ~90%, num_preemptions stops growing "
        "and the "
        "waiting queue drains.",
        "vllm:kv_cache_usage_perc, vllm:num_requests_waiting and vllm:num_preemptions_total over the "
        "incident.",
    )


def _fragmentation(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    oom = _first_oom(ev)
    detail = ""
    if oom and oom.reserved_unallocated is not None and oom.requested:
        detail = f": {_g(oom.reserved_unallocated)} was cached but free, the request was {_g(oom.requested)}"
    return Advice(
        "PyTorch's caching allocator held enough free memory, but not in one contiguous block" + detail + ".",
        (
            Fix(
                {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments"
                ":True: segments grow in place instead of splitting (not with sleep mode / some KV "
                "connectors)",
                "mechanism",
            ),
            Fix(
                {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:20"},
                "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:20 "
                "during load: large cached blocks are not split (what vLLM does itself from 2026)",
                "mechanism",
            ),
        ),
        ("More GPUs or a smaller model: the bytes were there.",),
        "A memory snapshot (torch.cuda.memory._record_memory_history) at the same point shows the largest "
        "free "
        "block above the request.",
        "A torch memory snapshot at the OOM (torch.cuda.memory._dump_snapshot) to compare the largest free "
        "block "
        "with the request.",
    )


def _leak(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    return Advice(
        "Memory grows under steady load and is not returned (GPU KV blocks, host RSS or a scheduler-side "
        "list), "
        "until a limit kills the process.",
        (
            Fix({}, "pin the last vLLM version without the growth and bisect the upgrade", "mechanism"),
            Fix(
                {},
                "until fixed, restart on a schedule before the growth reaches the limit (from the measured "
                "rate)",
                "mechanism",
            ),
        ),
        (
            "Raising memory limits or lowering --gpu-memory-utilization: the growth only takes longer to hit "  # noqa: ISC004
            "them.",
        ),
        "At a fixed request rate for several hours to a day, GPU memory and worker RSS stay flat and "
        "restarts "
        "stay at zero; 'fine after a restart' does not count.",
        "A time series at constant load: GPU memory, worker RSS, KV usage with traffic stopped.",
    )


def _other_process(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    fixes: list[Fix] = []
    free = _signal_number(ev, "free-memory-below-utilization", "free_bytes")
    total = _signal_number(ev, "free-memory-below-utilization", "total_bytes") or setup.gpu_total_bytes
    if free and total:
        cap = math.floor(free / total * 100 - 0.5) / 100
        fixes.append(
            Fix(
                {"gpu_memory_utilization": f"{cap:.2f}"},
                f"--gpu-memory-utilization {cap:.2f}: what is free at start ({_g(free)} of {_g(total)})",
                "evidence",
            )
        )
        fixes.append(
            Fix(
                {},
                f"or free the {_g(total - free)} held by other processes (nvidia-smi --query-compute-apps)",
                "evidence",
            )
        )
    oom = _first_oom(ev)
    if oom and oom.processes:
        held = ", ".join(f"PID {pid}: {_g(used)}" for pid, used in oom.processes[:4])
        fixes.append(Fix({}, f"processes on the GPU at the OOM: {held}", "evidence"))
    fixes.append(
        Fix(
            {},
            "delete the previous engine (del llm; gc.collect(); torch.cuda.empty_cache()) before "
            "building another in the same process",
            "mechanism",
        )
    )
    return Advice(
        "Part of the GPU was held by something other than this engine (another process, an earlier engine in "
        "the "
        "same process, a MIG slice smaller than expected), so vLLM saw less memory than it planned for.",
        tuple(fixes),
        ("Raising --gpu-memory-utilization: it asks for more of memory that is not free.",),
        "nvidia-smi shows only this engine on its GPUs; startup passes the free-memory check.",
        "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv at the time of failure.",
    )


def _host(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    limits = [h for h in ev.of(HostMemory) if h.quantity == "limit"]
    fixes = []
    if limits:
        fixes.append(
            Fix(
                {},
                f"raise the container memory limit above {limits[0].value / GIB:.0f} GiB (the "
                "load peak is checkpoint shards x workers per host)",
                "evidence",
            )
        )
    else:
        fixes.append(Fix({}, "raise the container/host memory limit to cover the load peak", "mechanism"))
    fixes.append(
        Fix({}, "load one worker at a time / fewer workers per host; smaller safetensors shards", "mechanism")
    )
    if ev.signals("ray-memory-kill", "ray-actor-died"):
        # Ray's own levers (https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html): the
        # monitor kills at RAY_memory_usage_threshold of the node's RAM; fewer tasks per node lower the peak.
        fixes.insert(
            0,
            Fix(
                {"RAY_memory_usage_threshold": "0.98"},
                "RAY_memory_usage_threshold=0.98 when starting Ray (default 0.95) if the node has headroom, "
                "or give "
                "the node more RAM: Ray's monitor killed the worker at its threshold",
                "mechanism",
            ),
        )
        fixes.insert(
            1,
            Fix(
                {},
                "fewer Ray workers per node (request more CPUs per task / actor, e.g. num_cpus) so their RAM "
                "peaks do not coincide; set max_restarts/max_task_retries to retry after a kill",
                "mechanism",
            ),
        )
    if ev.signals("unified-memory-exhausted"):
        fixes.append(
            Fix(
                {"gpu_memory_utilization": "0.80"},
                "on unified memory, lower --gpu-memory-utilization "
                "(e.g. 0.80) so the OS and other processes keep RAM",
                "mechanism",
            )
        )
    return Advice(
        "The host or container ran out of RAM (exit 137 / OOMKilled / kernel OOM killer / ENOMEM): the GPU "
        "was "
        "not the limit. Weight loading, several TP workers per host and page cache are the usual peak.",
        tuple(fixes),
        (
            (
                "Lowering --gpu-memory-utilization or --max-model-len (except on unified memory): GPU "
                "settings do not "
                "change host RAM."
            ),
        ),
        "memory.events oom_kill stops growing, the pod no longer exits 137, and the node keeps free memory.",
        "kubectl describe pod (Last State), dmesg -T | grep -i oom, cat /sys/fs/cgroup/memory.events and "
        "memory.max.",
    )


def _multimodal(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    seqs = setup.flag_int("max_num_seqs")
    fixes = [
        Fix(
            {"limit_mm_per_prompt": '{"image": 1, "video": 0}'},
            '--limit-mm-per-prompt \'{"image":1,"video":0}\': the profile run encodes fewer items',
            "mechanism",
        ),
        Fix(
            {"mm_processor_kwargs": '{"max_pixels": 1003520}'},
            '--mm-processor-kwargs \'{"max_pixels": '
            "1003520}': a smaller largest image for the encoder profile (Qwen-VL family)",
            "mechanism",
        ),
    ]
    fixes.append(
        Fix(
            {"max_num_seqs": str(max(1, (seqs or 256) // 8))},
            f"--max-num-seqs {max(1, (seqs or 256) // 8)}:"
            " the profile batch multiplies the encoder's activation",
            "mechanism",
        )
    )
    return Advice(
        "The vision/audio encoder ran on the largest possible inputs, times the profile batch, and its "
        "activations "
        "did not fit; V1 profiles the encoder at startup so this fails before serving.",
        tuple(fixes),
        (
            "Lowering --max-model-len alone: the encoder's input size is set by the image limits, not the "  # noqa: ISC004
            "context.",
        ),
        "Startup passes 'Encoder cache will be initialized ... profiled with N items' and serves large "
        "images.",
        "The 'Encoder cache will be initialized ... profiled with N items' line and the image limits in use.",
    )


def _spec(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    u = _utilization(setup, ev) or setup.behaviour.default_gpu_memory_utilization
    return Advice(
        "A draft model (speculative decoding) or LoRA adapters use memory the profile run does not fully see "
        "(draft weights on one rank, draft KV, adapter buffers), so the KV pool was sized too large.",
        (
            Fix(
                {"gpu_memory_utilization": f"{u - 0.05:.2f}"},
                f"--gpu-memory-utilization {u - 0.05:.2f}: room for the "
                "draft model's weights and activations",
                "mechanism",
            ),
            Fix(
                {"num_speculative_tokens": "2"},
                "fewer speculative tokens (num_speculative_tokens 2): smaller draft "
                "batches and graph captures",
                "mechanism",
            ),
            Fix(
                {"max_loras": "1"},
                "--max-loras 1 / smaller --max-lora-rank: smaller adapter buffers",
                "mechanism",
            ),
        ),
        ("Lowering --max-model-len: the extra memory is the draft model's, not the context's.",),
        "With the draft model loaded, startup logs leave >= 1 GiB free after capture and the server survives "
        "load.",
        "Startup logs of the same deployment with and without the draft model / LoRA.",
    )


def _int32(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    mnbt = setup.flag_int("max_num_batched_tokens")
    fixes = []
    if mnbt:
        fixes.append(
            Fix(
                {"max_num_batched_tokens": str(max(2048, mnbt // 2))},
                f"--max-num-batched-tokens "
                f"{max(2048, mnbt // 2)} (from {mnbt:,}): below the 2^31 / (elements per token) threshold",
                "evidence",
            )
        )
    fixes.append(
        Fix(
            {"max_num_batched_tokens": "32768"},
            "--max-num-batched-tokens <= 2^31 / (2 x "
            "intermediate_size): e.g. 61,681 tokens for intermediate 17,408",
            "mechanism",
        )
    )
    return Advice(
        "A kernel indexes a tensor with 32-bit offsets; one step of this size has more than 2^31 elements in "
        "it "
        "(tokens x width), so it reads out of bounds or refuses to run. Raising the batch, an OOM knob, "
        "triggers it.",
        tuple(fixes),
        ("Raising --gpu-memory-utilization or adding GPUs: it is an index overflow, not a lack of memory.",),
        "The profile run and the largest real steps complete; no illegal memory access at the old batch "
        "size.",
        "The largest step's tokens and the model's widest per-token tensor (2 x intermediate_size).",
    )


def _allocation_cap(ev: Evidence) -> Advice | None:
    """A GPU API's cap on one allocation refused the request (Vulkan's maxMemoryAllocationSize, Level Zero's
    4 GB, WebGPU's maxBufferSize): the buffer, not the memory, is too large."""
    capped = [
        s for s in ev.signals("platform-limit") if s.number("limit_bytes") or s.number("per_allocation")
    ]
    if not capped:
        return None
    return Advice(
        "The runtime refuses any single allocation above its per-allocation cap, whatever memory is free: "
        "one buffer (a compute buffer, a KV layer, an activation) asked more than the cap.",
        (
            Fix(
                {},
                "make the largest single buffer smaller: fewer tokens per step (a smaller micro-batch) or "
                "the tensor split in parts",
                "mechanism",
            ),
            Fix(
                {},
                "lift the cap where the runtime allows it: UR_L0_ENABLE_RELAXED_ALLOCATION_LIMITS=1 (Level "
                "Zero / SYCL on Intel GPUs), GGML_VK_FORCE_MAX_ALLOCATION_SIZE (llama.cpp's Vulkan backend, "
                "when the driver allows more than it reports)",
                "mechanism",
            ),
        ),
        ("More free memory or a lower memory fraction: the cap is per allocation, not on the total.",),
        "The same run allocates the buffer (no per-allocation error) and serves.",
        "The size of the refused allocation and the device's per-allocation limit (vulkaninfo "
        "maxMemoryAllocationSize, clinfo 'Max memory allocation').",
    )


def _not_memory(ev: Evidence) -> Advice | None:
    """The device could not run the work (no code for the GPU, a driver too old, a device the process cannot
    see), or a kernel's launch asked more than one block may have (registers, shared memory, grid size)."""
    if ev.has("offload-pool-full"):
        return Advice(
            "The KV offload connector's own pool (LMCache's CPU backend or NIXL transfer buffer) had no room "
            "for the blocks it was given: its size is its configuration's, not the GPU's or the host's free "
            "memory.",
            (
                Fix(
                    {},
                    "a larger connector pool (LMCache max_local_cpu_size / nixl_buffer_size, within host "
                    "memory), or a connector version that evicts instead of failing or retrying forever",
                    "mechanism",
                ),
            ),
            ("GPU memory settings: the GPU did not run out.",),
            "The same load runs with the connector's pool no longer reporting failed allocations.",
            "The connector's configuration (pool sizes) and version, and the host's free memory.",
        )
    if ev.has("misreported-oom"):
        return Advice(
            "The message that blames memory is a wrapper's guess: the exception it wraps is one no "
            "allocation raises (a missing key, a wrong call, a missing module, a model file the engine "
            "cannot read), and nothing in the evidence says memory ran out.",
            (
                Fix(
                    {},
                    "fix the wrapped exception itself (the first error of the chain, its message and frame); "
                    "a version of the engine or its plugin that supports this model and these options",
                    "mechanism",
                ),
            ),
            ("Memory settings: nothing ran out.",),
            "The same start passes the step that failed.",
            "The whole exception chain (the first traceback, not only the last message) and the versions.",
        )
    if ev.has("device-error"):
        return Advice(
            "The device reported an error that is not a lack of memory: the software cannot run on this GPU "
            "as installed (no kernel built for its architecture, a driver older than the CUDA runtime, a "
            "device index the process cannot see).",
            (
                Fix(
                    {},
                    "match the build to the GPU and driver: a wheel built for this architecture "
                    "(TORCH_CUDA_ARCH_LIST / PYTORCH_ROCM_ARCH), a driver at least the runtime's, and "
                    "CUDA_VISIBLE_DEVICES naming devices that exist",
                    "mechanism",
                ),
            ),
            ("Any memory setting: nothing ran out.",),
            "A small model runs on the same GPU with the same build.",
            "nvidia-smi (driver and GPU), the engine's and PyTorch's versions and the CUDA/ROCm they were "
            "built for, CUDA_VISIBLE_DEVICES.",
        )
    if ev.has("internal-assert"):
        return Advice(
            "PyTorch's own invariant check failed (an internal assert): a bug in the framework, often where "
            "two users of the caching allocator's private pools meet (a graph capture, sleep mode's or a "
            "memory saver's pool), not a lack of memory.",
            (
                Fix(
                    {},
                    "find the PyTorch issue named by the assert's condition and file, and the PyTorch "
                    "version that fixes it; meanwhile turn off the feature that adds the second pool (the "
                    "memory saver or sleep mode, or CUDA graphs)",
                    "mechanism",
                ),
            ),
            ("Memory settings: nothing ran out.",),
            "The same start passes the step that failed on the fixed PyTorch, or with the feature off.",
            "The assert's full line (condition, file:line) and the PyTorch and engine versions.",
        )
    launch = [
        s
        for s in ev.signals("platform-limit")
        if s.number("kernel_limit") or "launch" in s.text or "configuration argument" in s.text
    ]
    if not launch:
        return None
    return Advice(
        "A kernel asked more than the device gives one launch (shared memory or registers per block, a grid "
        "dimension): a limit of the GPU, not memory running out.",
        (
            Fix(
                {},
                "a kernel configuration for this GPU: smaller block sizes or fewer pipeline stages (Triton's "
                "BLOCK_*/num_stages), or the engine version whose kernel splits the grid",
                "mechanism",
            ),
        ),
        ("More memory or a lower memory fraction: the limit is per launch.",),
        "The same request runs with the smaller kernel configuration.",
        "The kernel's name, the GPU model, and the shapes of the step that failed.",
    )


def _workspace(ev: Evidence) -> Advice | None:
    """The attention library's fixed workspace (FlashInfer's) could not hold a kernel's temporary buffer:
    the workspace's size is the engine's setting, and the buffer grows with the batch. (vLLM: envs.py
    VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE, 394 MiB; SGLang: environ.py SGLANG_FLASHINFER_WORKSPACE_SIZE, 384
    MiB, raised to 512 MiB for Qwen2/Qwen3 in flashinfer_backend.py; global_config.py's
    FLASHINFER_WORKSPACE_SIZE before it.)"""
    if not ev.has("workspace-too-small"):
        return None
    return Advice(
        "The attention library's workspace, a buffer of fixed size the engine allocates once, could not hold "
        "a kernel's temporary buffer (it grows with the sequences in a batch): the workspace is too small, "
        "the GPU did not run out.",
        (
            Fix(
                {},
                "a larger FlashInfer workspace: vLLM: VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE (bytes, default "
                "394 MiB); SGLang: SGLANG_FLASHINFER_WORKSPACE_SIZE (FLASHINFER_WORKSPACE_SIZE in older "
                "releases; bytes, default 384 MiB, 512 MiB for Qwen2/Qwen3)",
                "mechanism",
            ),
            Fix(
                {},
                "fewer sequences per batch (vLLM: --max-num-seqs; SGLang: --max-running-requests), or "
                "another attention backend",
                "mechanism",
            ),
        ),
        ("More free GPU memory or a lower memory fraction: the workspace's size is fixed.",),
        "The same batch size runs (and its CUDA graphs capture) with the larger workspace.",
        "The temporary buffer's size and the workspace left in the error, and the batch size it failed at.",
    )


def _other(ev: Evidence, setup: EngineSetup, step: StepAnalysis | None) -> Advice:
    special = _allocation_cap(ev) or _workspace(ev) or _not_memory(ev)
    if special is not None:
        return special
    return Advice(
        "Memory went somewhere the known mechanisms do not cover (a library such as NCCL or the driver "
        "growing "
        "outside vLLM's budget, a version regression).",
        (
            Fix(
                {},
                "compare against the previous library versions (NCCL, PyTorch, driver) and bisect",
                "mechanism",
            ),
        ),
        ("Tuning vLLM's memory flags: the growth is outside what they control.",),
        "The same test passes on the previous versions and on the fixed build.",
        "Versions of vLLM, PyTorch, NCCL and the driver for a passing and a failing run.",
    )


ADVISORS = {
    "weights-dont-fit": _weights,
    "kv-cache-insufficient-at-startup": _kv_startup,
    "max-model-len-exceeds-kv": _max_len,
    "activation-peak": _activation,
    "sampler-or-logits": _sampler,
    "cuda-graph-capture": _cudagraph,
    "ep-all2all-buffer": _ep,
    "dp-replica-kv-accounting": _dp,
    "kv-exhaustion-at-runtime": _kv_runtime,
    "fragmentation": _fragmentation,
    "memory-leak": _leak,
    "other-process-or-shared-gpu": _other_process,
    "host-ram-oom": _host,
    "multimodal-encoder": _multimodal,
    "spec-decode-or-lora-extra": _spec,
    "int32-index-overflow": _int32,
    "other": _other,
}


# Per cause, the levers that act on its mechanism, in the order worth trying: (lever, direction, why).
CLASS_LEVERS: dict[str, tuple[tuple[Lever, str, str], ...]] = {
    "weights-dont-fit": (
        (Lever.GPU_LAYERS, "down", "fewer layers' weights on the GPU"),
        (Lever.SHARDS, "up", "the weights split over more GPUs"),
    ),
    "kv-cache-insufficient-at-startup": (
        (Lever.KV_SHARE, "up", "a larger pool for KV (only if nothing else shares the GPU)"),
        (Lever.CONTEXT, "down", "less KV per sequence"),
        (Lever.CONCURRENCY, "down", "fewer sequences to reserve for"),
        (Lever.KV_DTYPE, "on", "half the bytes per KV token"),
        (Lever.SHARDS, "up", "weights per GPU shrink, the freed memory goes to KV"),
    ),
    "max-model-len-exceeds-kv": (
        (Lever.CONTEXT, "down", "the longest context the KV cache holds"),
        (Lever.KV_DTYPE, "on", "twice the tokens in the same memory (check accuracy)"),
        (Lever.FLASH_ATTN, "on", "no attention-score buffer growing with the context"),
        (Lever.KV_SHARE, "up", "a larger share for KV, if the GPU has it free"),
    ),
    "activation-peak": (
        (Lever.STEP_TOKENS, "down", "a smaller prefill step, and its activation peak shrinks in proportion"),
        (Lever.FLASH_ATTN, "on", "attention without the score buffer"),
        (Lever.KV_SHARE, "down", "more room outside the KV pool for the step's activations"),
        (Lever.CONCURRENCY, "down", "fewer rows in each step"),
    ),
    "sampler-or-logits": (
        (Lever.CONCURRENCY, "down", "fewer rows of logits over the vocabulary at once"),
        (Lever.KV_SHARE, "down", "more room outside the KV pool for the logits"),
    ),
    "cuda-graph-capture": (
        (Lever.GRAPHS, "down", "fewer or no CUDA graphs captured (costs decode speed)"),
        (Lever.KV_SHARE, "down", "more room outside the KV pool for the graphs' memory"),
    ),
    "kv-exhaustion-at-runtime": (
        (Lever.CONCURRENCY, "down", "fewer sequences hold KV at once"),
        (Lever.KV_DTYPE, "on", "twice the tokens in the same pool"),
        (Lever.KV_SHARE, "up", "a larger pool, if the GPU has it free"),
        (Lever.CONTEXT, "down", "shorter sequences"),
    ),
    "fragmentation": ((Lever.KV_SHARE, "down", "slack for an allocator that cannot reuse its free pieces"),),
    "other-process-or-shared-gpu": ((Lever.KV_SHARE, "down", "only what is free besides the other holder"),),
    "multimodal-encoder": (
        (Lever.STEP_TOKENS, "down", "fewer image tokens encoded per step"),
        (Lever.KV_SHARE, "down", "room outside the KV pool for the encoder"),
    ),
    "spec-decode-or-lora-extra": (
        (Lever.KV_SHARE, "down", "room for the draft model or adapters outside the KV pool"),
        (Lever.CONTEXT, "down", "the draft's KV is sized by the same context"),
    ),
    "int32-index-overflow": ((Lever.STEP_TOKENS, "down", "a step below the 2^31-element index limit"),),
    "ep-all2all-buffer": ((Lever.KV_SHARE, "down", "room outside the KV pool for the all-to-all buffers"),),
    "dp-replica-kv-accounting": ((Lever.KV_SHARE, "down", "room for the rank that sized its pool last"),),
}
# The name each engine goes by in the advice's text.
ENGINE_NAMES = {
    Engine.VLLM: "vLLM",
    Engine.SGLANG: "SGLang",
    Engine.LLAMA_CPP: "llama.cpp",
    Engine.OLLAMA: "ollama",
    Engine.TENSORRT_LLM: "TensorRT-LLM",
    Engine.TGI: "TGI",
    Engine.LMDEPLOY: "LMDeploy",
    Engine.EXLLAMA: "ExLlama",
    Engine.TRANSFORMERS: "transformers",
    Engine.DEEPSPEED_MII: "DeepSpeed-MII",
}
# Text that only makes sense for vLLM: its flags, variables and name.
_VLLM_ONLY = re.compile(r"--[a-z]|\bVLLM_|\bvllm serve\b")
# GGUF engines load no safetensors and run layers on the CPU: their host memory is weights and KV there.
GGUF_ENGINES = (Engine.LLAMA_CPP, Engine.OLLAMA)
# Levers of one engine for one cause, where the mechanism is that engine's own.
_LEVERS = tuple[tuple[Lever, str, str], ...]
_GGUF_HOST: _LEVERS = (
    (Lever.CONTEXT, "down", "less KV in host memory for the layers that run on the CPU"),
    (Lever.KV_DTYPE, "on", "half the bytes per KV token, wherever the layer runs"),
    (Lever.CONCURRENCY, "down", "fewer slots, each with its own context"),
)
ENGINE_CLASS_LEVERS: dict[tuple[Engine, str], _LEVERS] = {
    **{(engine, "host-ram-oom"): _GGUF_HOST for engine in GGUF_ENGINES},
    # transformers loads the weights itself: quantizing them and offloading layers are its levers.
    (Engine.TRANSFORMERS, "weights-dont-fit"): (
        (Lever.WEIGHT_BITS, "down", "a quarter of the weight bytes"),
        (Lever.SHARDS, "up", "the weights split over every visible GPU"),
        (Lever.GPU_LAYERS, "down", "fewer layers' weights on the GPU"),
    ),
}
# Engines whose memory share is a reserve left free (ollama's overhead, TabbyAPI's autosplit reserve,
# DeepSpeed-MII's memory_config.size): it only goes one way, and its value is bytes or MiB, not a fraction.
RESERVE_SHARE = (Engine.OLLAMA, Engine.EXLLAMA, Engine.DEEPSPEED_MII)


def for_engine(cls: str, advice: Advice, engine: Engine, ev: Evidence, setup: EngineSetup) -> Advice:
    """The advice in the engine's own options: the vLLM advisor's fixes that hold for any engine (plain
    steps, the engine's own variables, the PyTorch allocator's for engines that use it), then the cause's
    levers in this engine's spelling. vLLM's flags never reach another engine's user, and the planner (which
    plans vLLM) is not asked."""
    name = ENGINE_NAMES[engine]
    kept = [
        Fix(f.flags, f.summary.replace("vLLM", name), f.basis) for f in advice.fixes if _portable(f, engine)
    ]
    spelled = SPELLINGS[engine]
    levers: list[Fix] = []
    usual = ENGINE_CLASS_LEVERS.get((engine, cls), CLASS_LEVERS.get(cls, ())) if advice.class_levers else ()
    for lever, direction, why in usual:
        spelling = spelled.get(lever)
        # ollama's and TabbyAPI's memory share is a reserve left free: it only goes one way.
        reserve_only = lever is Lever.KV_SHARE and engine in RESERVE_SHARE
        if spelling is not None and not (reserve_only and direction == "up"):
            fix = _lever_fix(lever, direction, why, spelling, engine, ev, setup)
            if fix is not None:
                levers.append(fix)
    fixes = tuple(kept + levers)
    not_helpful = tuple(n.replace("vLLM", name) for n in advice.not_helpful if not _VLLM_ONLY.search(n))
    return replace(
        advice,
        explanation=advice.explanation.replace("vLLM", name),
        fixes=fixes,
        not_helpful=without_contradictions(not_helpful, fixes),
        verify=advice.verify.replace("vLLM", name),
        next_evidence=advice.next_evidence.replace("vLLM", name),
    )


def _portable(fix: Fix, engine: Engine) -> bool:
    """A fix of the vLLM advisor that holds for another engine as it is."""
    if _VLLM_ONLY.search(fix.summary):
        return False
    if engine in GGUF_ENGINES and "safetensors" in fix.summary:
        return False
    for key in fix.flags:
        if key == "PYTORCH_CUDA_ALLOC_CONF":
            if engine not in PYTORCH_ENGINES:
                return False
        elif not key.startswith(ENV_PREFIXES.get(engine, ())) or not ENV_PREFIXES.get(engine):
            return False
    return True


def _lever_fix(
    lever: Lever,
    direction: str,
    why: str,
    spelling: Spelling,
    engine: Engine,
    ev: Evidence,
    setup: EngineSetup,
) -> Fix | None:
    """The lever as a fix in the engine's spelling (None when the command already sets that value)."""
    value, basis, source = _lever_value(lever, direction, spelling, engine, ev, setup)
    if value is not None and setup.flag(_setup_key(spelling)) == str(value):
        return None
    note = f"; {spelling.note}" if spelling.note else ""
    if value is None:
        verb = {"down": "lower", "up": "raise", "on": "set"}[direction]
        named = spelling.form.replace("{v}", "").strip(" =:[]")
        return Fix({}, f"{verb} {named}: {why}{note}", "mechanism")
    written = spelling.written(value)
    return Fix({spelling.key: str(value)}, f"{written}: {why}{source}{note}", basis)


def _lever_value(
    lever: Lever, direction: str, spelling: Spelling, engine: Engine, ev: Evidence, setup: EngineSetup
) -> tuple[object | None, str, str]:
    """The value to write for a lever, how it is known (basis) and where it came from (for the summary)."""
    if lever is Lever.KV_DTYPE:
        return KV_TYPE[engine], "mechanism", ""
    if lever is Lever.FLASH_ATTN:
        return (
            {Engine.LLAMA_CPP: "on", Engine.TRANSFORMERS: "flash_attention_2"}.get(engine, "1"),
            "mechanism",
            "",
        )
    if lever is Lever.WEIGHT_BITS:
        return "True", "mechanism", ""
    if lever is Lever.GPU_LAYERS and engine is Engine.TRANSFORMERS:
        return None, "mechanism", ""
    if lever is Lever.GRAPHS:
        if engine is Engine.TGI:
            return 0, "mechanism", ""
        if engine is Engine.LLAMA_CPP:
            return 1, "mechanism", ""
        return None, "mechanism", ""
    if lever is Lever.CONTEXT:
        return _context_value(ev, setup, _current(lever, spelling, setup))
    if lever is Lever.SHARDS:
        if engine is Engine.LLAMA_CPP:
            return "1,1", "mechanism", ""
        if engine is Engine.EXLLAMA:
            return "true", "mechanism", ""
        if engine is Engine.TRANSFORMERS:
            return "auto", "mechanism", ""
        return setup.parallel("tensor_parallel_size") * 2, "mechanism", ""
    if lever is Lever.KV_SHARE:
        return _share_value(direction, spelling, engine, ev, setup)
    if lever is Lever.CONCURRENCY and engine is Engine.OLLAMA:
        return 1, "mechanism", ""
    now = _current(lever, spelling, setup)
    if now is not None and direction == "down":
        return max(1, int(now) // 2), "evidence", f" (half of {int(now)})"
    if lever is Lever.STEP_TOKENS and spelling.default is not None:
        return int(spelling.default) // 2, "mechanism", f" (half the default {int(spelling.default)})"
    return None, "mechanism", ""


# The setup's own value of a lever, where the recovered flags carry it under vLLM's names.
_VLLM_KEYS = {
    Lever.STEP_TOKENS: "max_num_batched_tokens",
    Lever.CONCURRENCY: "max_num_seqs",
    Lever.CONTEXT: "max_model_len",
}


def _setup_key(spelling: Spelling) -> str:
    """The recovered setup's key for an engine option (command-line flags are kept with underscores)."""
    return spelling.key.replace("-", "_")


def _current(lever: Lever, spelling: Spelling, setup: EngineSetup) -> float | None:
    """The value the user's command gave the lever, in the engine's own option (or vLLM's name for it, which
    some wrappers pass through)."""
    for key in (_setup_key(spelling), _VLLM_KEYS.get(lever, "")):
        value = setup.flag_float(key) if key else None
        if value is not None and value > 0:
            return value
    return None


def _context_value(ev: Evidence, setup: EngineSetup, now: float | None) -> tuple[object | None, str, str]:
    """The context that fits, from the engine's own numbers (its estimate, the pool's tokens, needed vs
    available KV), else half the context the evidence or the command names."""
    estimate = _signal_number(ev, "max-model-len-exceeds-kv", "estimated_max_model_len")
    tokens = _signal_number(ev, "max-model-len-exceeds-kv", "kv_cache_tokens")
    length = _signal_number(ev, "max-model-len-exceeds-kv", "max_model_len") or now
    need = _signal_number(ev, "max-model-len-exceeds-kv", "kv_needed_bytes")
    avail = _signal_number(ev, "max-model-len-exceeds-kv", "kv_available_bytes")
    if estimate or tokens:
        fit = int(estimate or tokens or 0)
        return fit // BLOCK * BLOCK, "engine", " (what the engine says its KV cache holds)"
    if length and need and avail and avail < need:
        # KV bytes grow linearly with the context for full attention.
        fit = int(length * avail / need) // BLOCK * BLOCK
        if fit >= BLOCK:
            return fit, "evidence", f" ({int(length)} x {_g(avail)} available / {_g(need)} needed)"
    if length:
        return int(length) // 2 // BLOCK * BLOCK, "evidence", f" (half of {int(length)})"
    return None, "mechanism", ""


def _share_value(
    direction: str, spelling: Spelling, engine: Engine, ev: Evidence, setup: EngineSetup
) -> tuple[object | None, str, str]:
    oom = _first_oom(ev)
    if engine in RESERVE_SHARE:
        if direction != "down":
            return None, "mechanism", ""
        # A reserve (bytes for ollama, MB per GPU for TabbyAPI) at least the failed allocation.
        need = oom.requested if oom and oom.requested else None
        gib = max(1, -(-(need or 0) // GIB)) if need else 1
        source = f" (the failed allocation was {_g(need)})" if need else ""
        value: object = gib * 1024 if engine is Engine.EXLLAMA else gib * GIB
        return value, "evidence" if need else "mechanism", source
    now = _current(Lever.KV_SHARE, spelling, setup)
    base, where = (now, "") if now is not None else (spelling.default, "the default ")
    if base is None:
        return None, "mechanism", ""
    step = -0.1 if direction == "down" else 0.05
    value = round(min(0.95, max(0.3, base + step)), 2)
    if value == base:
        return None, "mechanism", ""
    return value, "evidence" if now is not None else "mechanism", f" (from {where}{base:g})"


# What a lever does, said without any engine's option name (engine-neutral advice).
MECHANISMS: dict[tuple[Lever, str], str] = {
    (Lever.CONTEXT, "down"): "cap the context the KV cache must hold",
    (Lever.KV_SHARE, "up"): "give the engine a larger share of the GPU memory for its KV cache",
    (Lever.KV_SHARE, "down"): "leave more GPU memory outside the engine's KV cache",
    (Lever.STEP_TOKENS, "down"): "cap the tokens of one prefill step",
    (Lever.CONCURRENCY, "down"): "cap the requests running at once",
    (Lever.KV_DTYPE, "on"): "store the KV cache in 8 bits",
    (Lever.GPU_LAYERS, "down"): "keep fewer layers on the GPU (offload the rest)",
    (Lever.SHARDS, "up"): "shard the model over more GPUs",
    (Lever.GRAPHS, "down"): "capture fewer CUDA graphs, or none",
    (Lever.FLASH_ATTN, "on"): "use a flash-attention kernel",
    (Lever.WEIGHT_BITS, "down"): "load the weights quantized",
}
# The engines whose spellings engine-neutral advice names, labelled (the two oomguard plans).
NEUTRAL_SPELLED = (Engine.VLLM, Engine.SGLANG)


def engine_neutral(cls: str, advice: Advice, ev: Evidence, setup: EngineSetup) -> Advice:
    """The advice when the engine is not known (or has no levers here): the vLLM advisor's fixes that hold
    for any engine; each lever of the cause as its mechanism, with vLLM's and SGLang's spellings labelled
    (vLLM's value is the advisor's, read from the evidence, where it set that flag); then the advisor's other
    vLLM fixes (and the planner's re-planned values) labelled as vLLM's. No unlabelled flag: a vLLM flag is
    noise to a TGI or llama.cpp user."""
    # PyTorch's allocator settings hold for whatever engine it is when the OOM was PyTorch's allocator's.
    torch = any(o.flavor.startswith(("torch", "expandable")) for o in ev.of(OomMessage))
    kept = [f for f in advice.fixes if not f.flags and not _VLLM_ONLY.search(f.summary)]
    allocator = [f for f in advice.fixes if torch and set(f.flags) == {"PYTORCH_CUDA_ALLOC_CONF"}]
    # The advisor's own value of a vLLM flag, where one fix sets that flag alone.
    own = {
        k: (v, f)
        for f in advice.fixes
        if len(f.flags) == 1 and f.basis != "planner"
        for k, v in f.flags.items()
    }
    folded: set[int] = set()
    levers: list[Fix] = []
    for lever, direction, why in CLASS_LEVERS.get(cls, ()) if advice.class_levers else ():
        if (lever, direction) not in MECHANISMS:
            continue
        vllm_key = SPELLINGS[Engine.VLLM][lever].key if lever in SPELLINGS[Engine.VLLM] else ""
        found = own.get(vllm_key)
        if found is not None:
            folded.add(id(found[1]))
        levers.append(_neutral_lever(lever, direction, why, ev, setup, found))
    vllm = [
        replace(f, summary=f"vLLM: {f.summary}", engine=Engine.VLLM.value if f.flags else "")
        for f in advice.fixes
        if f not in kept
        and f not in allocator
        and id(f) not in folded
        and set(f.flags) != {"PYTORCH_CUDA_ALLOC_CONF"}
    ]
    not_helpful = tuple(
        f"vLLM: {n}" if _VLLM_ONLY.search(n) else n.replace("vLLM", "the engine") for n in advice.not_helpful
    )
    return replace(
        advice,
        explanation=advice.explanation.replace("vLLM", "the engine"),
        fixes=tuple(kept + allocator + levers + vllm),
        not_helpful=not_helpful,
        verify=advice.verify.replace("vLLM", "the engine"),
        next_evidence=advice.next_evidence.replace("vLLM", "the engine"),
    )


def _neutral_lever(
    lever: Lever,
    direction: str,
    why: str,
    ev: Evidence,
    setup: EngineSetup,
    vllm_fix: tuple[str, Fix] | None = None,
) -> Fix:
    """One lever as its mechanism, with each neutral engine's spelling (and value, where the evidence
    gives one) labelled with the engine's name; `vllm_fix` is the vLLM advisor's value for it and its fix."""
    spelled: list[str] = []
    basis = "mechanism"
    for engine in NEUTRAL_SPELLED:
        spelling = SPELLINGS[engine].get(lever)
        if spelling is None:
            continue
        if engine is Engine.VLLM and vllm_fix is not None:
            value: object | None = vllm_fix[0]
            how, where = vllm_fix[1].basis, ""
        else:
            value, how, where = _lever_value(lever, direction, spelling, engine, ev, setup)
        if value is None:
            shown = spelling.form.replace(" {v}", "").replace("{v}", "")
        else:
            shown = spelling.written(value) + where
            basis = how if how != "mechanism" else basis
        spelled.append(f"{ENGINE_NAMES[engine]}: {shown}")
    names = f" ({'; '.join(spelled)})" if spelled else ""
    return Fix({}, f"{MECHANISMS[(lever, direction)]}: {why}{names}", basis)
