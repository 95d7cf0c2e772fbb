"""Engine identification on real OOM reports: the engine `diagnose` names vs the engine the report came from,
and whether the fixes it prints are spelled for that engine, engine-neutral, or another engine's flags.

The truth is each row's `engine` field (free text the harvester wrote from the thread, e.g. "sglang (ROCm
aiter backend)", "vllm (FastChat vllm_worker)"); it is never given to the diagnosis, which sees only the
`evidence` text. `truth_engine` reduces it to oomguard's Engine values: the engine whose options the user
sets ("other" where oomguard has no levers for it, or where the row names a kernel library two engines use).

Per report the fixes of every listed cause are judged by the flags in them (the pasteable `flags` keys and the
`--flag` words of the summaries, outside a spelling labelled with its engine's name):
- own: flags of the report's engine, and no other engine's;
- neutral: no flag of any engine unlabelled (the mechanism in words, or each engine's spelling labelled with
  its name: "vLLM: --max-model-len N; SGLang: --context-length N");
- foreign: a flag that only another engine accepts, unlabelled: the harmful case (a vLLM flag given to a
  TGI user is noise he cannot paste).
A flag several engines accept under the same name (`--kv-cache-dtype`) counts for each of them;
PYTORCH_CUDA_ALLOC_CONF counts for no engine in particular.

Per-report lines are printed for dev and tune; frozen prints its aggregate only.
Usage: python bench/engine_identification.py [--split dev,tune,frozen] [--cases]
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.engine_levers import ENV_PREFIXES, SPELLINGS, Engine, identify
from oomguard.diagnosis.evidence import Evidence
from oomguard.diagnosis.read import read_one, require_evidence
from oomguard.diagnosis.remedies import Fix
from oomguard.engines.vllm.cli_flags import vllm_flags
from oomguard.errors import InputFormatError

ROOT = Path(__file__).resolve().parents[1]
SPLITS = {
    "dev": ROOT.parent / "shared" / "data" / "validation" / "oom_reports_dev.jsonl",
    "tune": ROOT / "bench" / "data" / "oom_corpus" / "tune.jsonl",
    "frozen": ROOT / "bench" / "data" / "oom_corpus" / "frozen.jsonl",
}
SHOWN = ("dev", "tune")
OTHER = "other"
UNKNOWN = Engine.UNKNOWN.value

# The row's engine text -> the engine whose options the user sets. First match wins: a product that puts
# its own options in front of another engine comes before the engine it runs (ollama before llama.cpp, the
# MLX servers before the "vllm" in their names, text-generation-webui before TGI's words); a wrapper that
# passes the engine's options through (LLaMA-Factory, verl, FastChat, Dynamo, LM Studio's llama.cpp
# runtime) falls through to the engine it names. A kernel library named with both vLLM and SGLang is "other".
TRUTH_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), engine)
    for pattern, engine in (
        (r"\bollama\b", "ollama"),
        (r"\bmlx\b|mlx[-_]", OTHER),
        (r"text-generation-webui \(transformers", "transformers"),
        (r"text-generation-webui", OTHER),
        (r"tabbyapi|exllama", "exllama"),
        (r"\blorax\b|\btgi\b|text-generation-inference", "tgi"),
        (r"tensorrt[-_ ]?llm|tensorrtllm|trtllm", "tensorrt-llm"),
        (r"\blmdeploy\b|turbomind", "lmdeploy"),
        (r"deepspeed[-_ ]mii", "deepspeed-mii"),
        (r"\bsglang\b.*\bvllm\b|\bvllm\b.*\bsglang\b", OTHER),
        (r"\bsglang\b", "sglang"),
        (r"\bvllm\b|aphrodite", "vllm"),
        (r"llama[-_.]?cpp|llamafile|\bllama-server\b", "llama.cpp"),
        (r"\btransformers\b", "transformers"),
    )
)


def truth_engine(text: str) -> str:
    """The row's engine as one of Engine's values, or 'other' when oomguard has no levers for it."""
    found = next((engine for pattern, engine in TRUTH_RULES if pattern.search(text)), OTHER)
    known = {e.value for e in Engine}
    return found if found in known else OTHER


def _key(name: str) -> str:
    return name.lstrip("-").replace("-", "_").lower()


def _owners() -> tuple[dict[str, set[str]], list[tuple[str, str]]]:
    """Option name -> the engines that accept it; env-variable prefixes -> their engine."""
    owners: dict[str, set[str]] = {}
    for engine, levers in SPELLINGS.items():
        for spelling in levers.values():
            for word in [spelling.key, *re.findall(r"--([a-z][\w-]+)", spelling.form)]:
                owners.setdefault(_key(word), set()).add(engine.value)
    for flag in vllm_flags():
        owners.setdefault(_key(flag), set()).add(Engine.VLLM.value)
    prefixes = [(p, e.value) for e, ps in ENV_PREFIXES.items() for p in ps] + [("VLLM_", Engine.VLLM.value)]
    return owners, prefixes


OWNERS, PREFIXES = _owners()
ENGINE_NAMES = r"vLLM|SGLang|llama\.cpp|ollama|TensorRT-LLM|TGI|LMDeploy|ExLlama|transformers|DeepSpeed-MII"
# A spelling labelled with its engine: "vLLM: --max-model-len 8192" or "SGLang --context-length 8192".
LABELLED = re.compile(rf"\b(?:{ENGINE_NAMES})(?:'s)?:? (?:`)?--[a-z][\w-]*")
FLAG_WORD = re.compile(r"(?<![\w-])--([a-z][a-z0-9_-]+)")
ENV_WORD = re.compile(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)=")


# A fix that says whose it is: "vLLM: --kv-cache-dtype fp8: ..." (engine-neutral advice's vLLM-only fixes).
OWNED_FIX = re.compile(rf"^(?:{ENGINE_NAMES}): ")


def flag_owners(fix: Fix) -> list[set[str]]:
    """For each flag a fix names unlabelled, the engines that accept it (empty set: any engine)."""
    named: list[set[str]] = []
    if OWNED_FIX.match(fix.summary):
        return named
    words = [*fix.flags, *FLAG_WORD.findall(LABELLED.sub("", fix.summary))]
    words += ENV_WORD.findall(LABELLED.sub("", fix.summary))
    for word in words:
        if word == "PYTORCH_CUDA_ALLOC_CONF":
            continue
        prefixed = {e for p, e in PREFIXES if word.startswith(p)}
        owners = prefixed or OWNERS.get(_key(word), set())
        if owners:
            named.append(owners)
    return named


def advice_kind(fixes: list[Fix], truth: str) -> str:
    owned = [o for f in fixes for o in flag_owners(f)]
    if any(truth not in o for o in owned):
        return "foreign"
    return "own" if owned else "neutral"


@dataclass
class Row:
    id: str
    truth: str
    found: str
    advice: str  # own | neutral | foreign | (no answer)


def run_one(row: dict[str, object]) -> Row:
    truth = truth_engine(str(row.get("engine", "")))
    evidence = Evidence()
    evidence.documents.append(read_one(str(row["id"]), io.BytesIO(str(row["evidence"]).encode()), evidence))
    try:
        require_evidence(evidence)
    except InputFormatError:
        return Row(str(row["id"]), truth, UNKNOWN, "(no answer)")
    d = diagnose(evidence)
    found = identify(evidence, d.setup).value
    return Row(str(row["id"]), truth, found, advice_kind([f for c in d.causes for f in c.fixes], truth))


def pct(k: int, n: int) -> str:
    return f"{k}/{n} = {k / n:.1%}" if n else "0/0"


def report(name: str, rows: list[dict[str, object]], cases: bool) -> None:
    out = [run_one(r) for r in rows]
    print(f"\n=== {name}: {len(out)} reports ===")
    if cases:
        print(f"{'':4} {'report':<56} {'engine (row)':<14} {'identified':<14} fixes")
        for r in out:
            mark = "ok  " if r.found == r.truth else ("?   " if r.found in (UNKNOWN, OTHER) else "BAD ")
            print(f"{mark} {r.id[:56]:<56} {r.truth:<14} {r.found:<14} {r.advice}")
    n = len(out)
    right = sum(r.found == r.truth for r in out)
    vague = sum(r.found != r.truth and r.found in (UNKNOWN, OTHER) for r in out)
    print(f"identified {pct(right, n)}   unknown/other instead {vague}   wrong engine {n - right - vague}")
    for label, of in (
        ("vLLM reports", [r for r in out if r.truth == Engine.VLLM.value]),
        ("other engines' reports", [r for r in out if r.truth != Engine.VLLM.value]),
    ):
        kinds = Counter(r.advice for r in of)
        print(
            f"  {label:<24} identified {pct(sum(r.found == r.truth for r in of), len(of))};  fixes: "
            + ", ".join(f"{k} {kinds[k]}" for k in ("own", "neutral", "foreign", "(no answer)") if kinds[k])
        )
    confusion = Counter((r.truth, r.found) for r in out if r.found != r.truth)
    if confusion:
        print(
            "confusion (row's engine -> identified): "
            + "; ".join(f"{c} x {t} -> {f}" for (t, f), c in confusion.most_common())
        )


def load(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", default="dev,tune", help="comma-separated: dev, tune, frozen")
    parser.add_argument("--cases", action="store_true", help="per-report lines (never for frozen)")
    args = parser.parse_args(argv)
    for name in [s for s in args.split.split(",") if s]:
        if name not in SPLITS:
            parser.error(f"unknown split {name!r} (dev, tune, frozen)")
        report(name, load(SPLITS[name]), (args.cases or name in SHOWN) and name != "frozen")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
