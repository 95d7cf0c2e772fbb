"""Bad input through every command of the real CLI: no traceback, no "internal error", no hang, no blow-up.

    python bench/fuzz_cli.py             # the fixed corpus of hostile inputs, each command
    python bench/fuzz_cli.py --random 200  # plus N random byte strings / flag values (seeded)

Each case runs `python -m oomguard ...` in its own process (HF_HUB_OFFLINE=1, 30 s, 4 GiB address space) and
is
judged by the project standard: exit 0/1/2 (the documented codes), stderr without "Traceback" or "internal
error", and bad input answered in one line. Prints one row per failing case and a summary table.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import json
import os
import pickle
import random
import resource
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
TIMEOUT_S = 30
MEMORY_LIMIT_BYTES = 4 << 30
PNG_HEADER = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
GOOD_CONFIG = SHARED_DATA / "models" / "configs" / "Qwen" / "Qwen3-0.6B" / "config.json"
MODEL = "Qwen/Qwen3-0.6B"


@dataclass(frozen=True)
class Case:
    command: str
    name: str
    argv: tuple[str, ...]
    stdin: bytes = b""


@dataclass(frozen=True)
class Outcome:
    case: Case
    code: int | None  # None: timed out
    stderr: str
    seconds: float

    @property
    def failure(self) -> str | None:
        if self.code is None:
            return f"hung > {TIMEOUT_S} s"
        if "Traceback" in self.stderr:
            return "traceback"
        if "internal error" in self.stderr:
            return "internal error"
        if self.code not in (0, 1, 2):
            return f"exit {self.code}"
        return None


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def run_case(case: Case) -> Outcome:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO / "src"))
    env.pop("OOMGUARD_DEBUG", None)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "oomguard", case.command, *case.argv],
            input=case.stdin,
            check=False,
            capture_output=True,
            timeout=TIMEOUT_S,
            env=env,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        return Outcome(case, None, "", time.perf_counter() - start)
    return Outcome(case, proc.returncode, proc.stderr.decode("utf-8", "replace"), time.perf_counter() - start)


def bad_files(root: Path) -> dict[str, Path]:
    """The same hostile bytes for every file-reading flag."""
    files: dict[str, bytes] = {
        "empty": b"",
        "random-bytes": random.Random(0).randbytes(4096),
        "png": PNG_HEADER + random.Random(1).randbytes(512),
        "gzip-of-garbage": gzip.compress(random.Random(2).randbytes(4096)),
        "truncated-gzip": gzip.compress(b"TIMESTAMP,ContextTokens,GeneratedTokens\n" * 500)[:60],
        "invalid-utf8": b"INFO \xff\xfe\xfd not utf-8 \xc3\x28\n" * 50,
        "nul-bytes": b"\x00" * 10_000,
        "ten-mb-line": b"x" * (10 << 20),
        "truncated-json": b'{"architectures": ["LlamaForCausalLM"], "hidden_size": 40',
        "html-error-page": b"<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>\n",
    }
    paths = {}
    for name, data in files.items():
        path = root / f"{name}.bin"
        path.write_bytes(data)
        paths[name] = path
    paths["directory"] = root / "a-directory"
    paths["directory"].mkdir()
    paths["missing"] = root / "does-not-exist.txt"
    return paths


def config_dirs(root: Path) -> dict[str, Path]:
    """Model directories whose config.json is broken in one way each."""
    base = GOOD_CONFIG.read_text()
    good = json.loads(base)
    variants: dict[str, object] = {
        "not-json": "this is not json",
        "a-list": [good],
        "null": None,
        "missing-keys": {"model_type": "qwen3"},
        "empty-object": {},
    }
    for key in (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "intermediate_size",
        "head_dim",
        "max_position_embeddings",
    ):
        for label, value in (
            ("zero", 0),
            ("negative", -8),
            ("huge", 10**30),
            ("float", 1024.5),
            ("string", "lots"),
            ("null", None),
            ("bool", True),
            ("list", [1, 2]),
        ):
            variants[f"{key}-{label}"] = {**good, key: value}
    variants["torch_dtype-bogus"] = {**good, "torch_dtype": "float7"}
    variants["model_type-bogus"] = {**good, "model_type": "nonsense", "architectures": ["NopeForCausalLM"]}
    variants["architectures-string"] = {**good, "architectures": "Qwen3ForCausalLM"}
    variants["rope_scaling-list"] = {**good, "rope_scaling": [1, 2]}
    variants["quantization-garbage"] = {**good, "quantization_config": "fp8"}
    variants["quantization-bits-str"] = {
        **good,
        "quantization_config": {"quant_method": "awq", "bits": "four"},
    }
    variants["text_config-list"] = {**good, "text_config": [1]}
    variants["sliding_window-negative"] = {**good, "sliding_window": -1, "use_sliding_window": True}
    dirs = {}
    for name, content in variants.items():
        path = root / f"config-{name}"
        path.mkdir()
        text = content if isinstance(content, str) else json.dumps(content)
        (path / "config.json").write_text(text)
        dirs[name] = path
    # safetensors headers: a huge declared length, bad JSON, hostile offsets
    for name, header in (
        ("st-huge-length", struct.pack("<Q", 2**63) + b"{}"),
        ("st-bad-json", struct.pack("<Q", 10) + b"{not json}"),
        ("st-short", struct.pack("<Q", 1000) + b"{}"),
        ("st-garbage", b"\x01\x02"),
        ("st-negative-offsets", _st({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [8, 0]}})),
        ("st-huge-shape", _st({"w": {"dtype": "BF16", "shape": [2**62, 2**62], "data_offsets": [0, 8]}})),
    ):
        path = root / f"model-{name}"
        path.mkdir()
        (path / "config.json").write_text(base)
        (path / "model.safetensors").write_bytes(header)
        dirs[name] = path
    for name, index in (
        ("index-not-json", b"nope"),
        ("index-list", b"[]"),
        ("index-bad-total", b'{"metadata": {"total_size": "big"}, "weight_map": {}}'),
        ("index-negative-total", b'{"metadata": {"total_size": -5}, "weight_map": {"a": 3}}'),
    ):
        path = root / f"model-{name}"
        path.mkdir()
        (path / "config.json").write_text(base)
        (path / "model.safetensors.index.json").write_bytes(index)
        dirs[name] = path
    return dirs


def _st(header: dict[str, object]) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw


class Hostile:
    """A pickle whose loading would run `touch MARKER` if anything ever unpickled it for real."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


YAML_BOMB = b"""a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
model: *i
"""

YAMLS: dict[str, bytes] = {
    "yaml-bomb": YAML_BOMB,
    "yaml-scalar": b"just a string\n",
    "yaml-list": b"- model: Qwen/Qwen3-0.6B\n- 3\n",
    "yaml-bad-syntax": b"model: [unclosed\n  tensor-parallel-size: : :\n",
    "yaml-python-tag": b"model: !!python/object/apply:os.system ['touch /tmp/oomguard-yaml-pwned']\n",
    "yaml-model-int": b"model: 42\n",
    "yaml-tp-string": b"model: Qwen/Qwen3-0.6B\ntensor-parallel-size: many\n",
    "yaml-tp-list": b"model: Qwen/Qwen3-0.6B\ntensor-parallel-size: [1, 2]\n",
    "yaml-tp-zero": b"model: Qwen/Qwen3-0.6B\ntensor-parallel-size: 0\n",
    "yaml-util-huge": b"model: Qwen/Qwen3-0.6B\ngpu-memory-utilization: 7\n",
    "yaml-mml-null": b"model: Qwen/Qwen3-0.6B\nmax-model-len: null\n",
    "yaml-mml-map": b"model: Qwen/Qwen3-0.6B\nmax-model-len: {a: 1}\n",
    "yaml-deep-nesting": b"model: " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "k8s-wrong-kind": b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n",
    "k8s-args-string": (
        b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: v}\nspec:\n  template:\n"
        b"    spec:\n      containers:\n      - name: vllm\n        image: vllm/vllm-openai\n"
        b'        args: "--model Qwen/Qwen3-0.6B --tensor-parallel-size 2"\n'
    ),
    "k8s-args-map": (
        b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: v}\nspec:\n  template:\n"
        b"    spec:\n      containers:\n      - name: vllm\n        image: vllm/vllm-openai\n"
        b"        args: {model: x}\n"
    ),
    "k8s-containers-string": (
        b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: v}\nspec:\n  template:\n"
        b"    spec:\n      containers: vllm\n"
    ),
    "k8s-spec-list": b"apiVersion: apps/v1\nkind: Deployment\nmetadata: x\nspec: [1, 2]\n",
    "k8s-args-numbers": (
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: v}\nspec:\n  containers:\n"
        b"  - name: vllm\n    image: vllm/vllm-openai\n    command: [vllm, serve]\n"
        b"    args: [Qwen/Qwen3-0.6B, --tensor-parallel-size, 0, --max-model-len, -1, null]\n"
        b"    resources: {limits: {nvidia.com/gpu: lots}}\n"
    ),
    "k8s-nodeselector-list": (
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: v}\nspec:\n  nodeSelector: [a]\n"
        b"  containers:\n  - name: vllm\n    image: vllm/vllm-openai\n"
        b"    args: [vllm, serve, Qwen/Qwen3-0.6B]\n"
    ),
    "k8s-multi-doc-garbage": b"---\n42\n---\nnull\n---\n- a\n---\napiVersion: v1\nkind: Pod\n",
}

TRACES: dict[str, bytes] = {
    "trace-negative": b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,-5,10\n",
    "trace-nonnumeric": b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,many,10\n",
    "trace-missing-columns": b"TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.97,5\n",
    "trace-header-only": b"TIMESTAMP,ContextTokens,GeneratedTokens\n",
    "trace-unsorted": (
        b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:09.0,50,10\n2023-11-16 18:17:03.0,40,10\n"
    ),
    "trace-bad-timestamp": b"TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,50,10\n",
    "trace-huge-lengths": b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.0,99999999999999999999,10\n",  # noqa: E501
    "trace-float-lengths": b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.0,50.5,1e400\n",
    "jsonl-negative": b'{"timestamp": 0, "input_length": -1, "output_length": 5}\n',
    "jsonl-strings": b'{"timestamp": "soon", "input_length": "ten", "output_length": 5}\n',
    "jsonl-list-row": b"[1, 2, 3]\n",
    "jsonl-null-row": b"null\n",
    "jsonl-missing": b'{"timestamp": 0}\n',
    "jsonl-hash-ids-bad": b'{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": "abc"}\n',
    "jsonl-nan": b'{"timestamp": NaN, "input_length": 10, "output_length": Infinity}\n',
    "jsonl-truncated": b'{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"timestamp": 1, "inp',
    "jsonl-unsorted": (
        b'{"timestamp": 9, "input_length": 10, "output_length": 5}\n'
        b'{"timestamp": 1, "input_length": 10, "output_length": 5}\n'
    ),
    "jsonl-huge-hash-ids": b'{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1e300]}\n',
}

METRICS: dict[str, bytes] = {
    "prom-garbage": b"vllm:num_requests_running{{{ 1 2 3\n# TYPE \n\x00\n",
    "prom-html": b"<!DOCTYPE html><html><body>502 Bad Gateway</body></html>\n",
    "prom-nan-values": b'vllm:gpu_cache_usage_perc{engine="0"} NaN\nvllm:num_requests_waiting{engine="0"} +Inf\n',  # noqa: E501
    "prom-bad-labels": b'vllm:gpu_cache_usage_perc{engine="0} 0.5\n',
}


def corpus(root: Path) -> list[Case]:
    files = bad_files(root)
    configs = config_dirs(root)
    marker = root / "pwned"
    (root / "hostile.pickle").write_bytes(pickle.dumps({"segments": [Hostile(str(marker))]}))
    files["hostile-pickle"] = root / "hostile.pickle"
    for group in (YAMLS, TRACES, METRICS):
        for name, data in group.items():
            suffix = (
                ".yaml"
                if name.startswith(("yaml", "k8s"))
                else ".jsonl"
                if name.startswith("jsonl")
                else ".csv"
                if name.startswith("trace")
                else ".txt"
            )
            path = root / f"{name}{suffix}"
            path.write_bytes(data)
            files[name] = path
    cases: list[Case] = []

    def add(command: str, name: str, *argv: str, stdin: bytes = b"") -> None:
        cases.append(Case(command, name, tuple(argv), stdin))

    for fname, path in files.items():
        p = str(path)
        add("plan", f"model-dir:{fname}", p, "--no-fixes")
        add("plan", f"nvidia-smi:{fname}", MODEL, "--nvidia-smi", p, "--no-fixes")
        add("plan", f"calibrate:{fname}", MODEL, "--calibrate", p, "--no-fixes")
        add("plan", f"config:{fname}", "--no-fixes", "--", "vllm", "serve", MODEL, "--config", p)
        add("check", f"file:{fname}", p)
        add("simulate", f"trace:{fname}", p, "--model", MODEL, "--max-steps", "200")
        add("simulate", f"model:{fname}", "--synthetic", "poisson:rate=2,duration=5", "--model", p)
        add("step", f"model:{fname}", "--scheduled", "100,1d", "--model", p)
        add("diagnose", f"file:{fname}", p)
        add("watch", f"db:{fname}", "--db", p, "--once", "http://127.0.0.1:9/metrics", "--timeout", "1s")
        add("rules", f"output:{fname}", "-o", p)
        add("rules", f"grafana:{fname}", "--grafana", p)
    add("diagnose", "stdin:random", "-", stdin=random.Random(5).randbytes(8192))
    add("check", "stdin-like:dev-null", "/dev/null")
    for cname, path in configs.items():
        add("plan", f"config.json:{cname}", str(path), "--no-fixes")
        add("check", f"config.json:{cname}", "--", "vllm", "serve", str(path))
        add("step", f"config.json:{cname}", "--scheduled", "100,1d", "--model", str(path))
        add(
            "simulate",
            f"config.json:{cname}",
            "--synthetic",
            "poisson:rate=2,duration=5",
            "--model",
            str(path),
        )
    cases += flag_cases()
    return cases


def flag_cases() -> list[Case]:
    cases: list[Case] = []
    values = (
        "abc",
        "-1",
        "0",
        "1000000",
        "1e400",
        "nan",
        "inf",
        "",
        "0x10",
        "1.5",
        "99999999999999999999999",
    )
    plan_flags = (
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
        "--data-parallel-size",
        "--max-model-len",
        "--gpu-memory-utilization",
        "--block-size",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--num-gpu-blocks-override",
        "--replicas-per-gpu",
        "--at-length",
        "--gpu-memory",
        "--vllm-version",
        "--kv-cache-dtype",
        "--dtype",
        "--quantization",
        "--gpu",
        "--cpu-offload-gb",
        "--swap-space",
        "--max-num-partial-prefills",
        "--long-prefill-token-threshold",
        "--speculative-config",
        "--hf-overrides",
        "--compilation-config",
        "--kv-cache-memory-bytes",
        "--max-logprobs",
        "--limit-mm-per-prompt",
        "--mm-processor-kwargs",
        "--rope-scaling",
    )
    for flag in plan_flags:
        for value in values:
            cases.append(Case("plan", f"{flag}={value!r}", (MODEL, flag, value, "--no-fixes")))
    for flag in ("--tensor-parallel-size", "--max-model-len", "--gpu-memory-utilization", "--block-size"):
        for value in ("0", "-1", "abc", "1000000"):
            cases.append(Case("plan", f"fixes {flag}={value!r}", (MODEL, flag, value)))
    cases.append(Case("plan", "block-size 7", (MODEL, "--block-size", "7")))
    cases.append(Case("plan", "unknown gpu", (MODEL, "--gpu", "RTX 9090 Ti Super")))
    cases.append(Case("plan", "unknown model", ("nobody/no-such-model-xyz",)))
    cases.append(Case("plan", "fewest-gpus tiny gpu", (MODEL, "--gpu-memory", "1MiB", "--fewest-gpus")))
    cases.append(Case("plan", "command garbage", ("--command", "vllm serve 'unclosed")))
    cases.append(Case("plan", "no model", ("--gpu", "H100")))
    cases.append(Case("check", "command tp 0", ("--", "vllm", "serve", MODEL, "-tp", "0")))
    for flag in ("--min-headroom", "--min-concurrency", "--gpu-memory", "--gpu", "--vllm-version"):
        for value in ("abc", "-1", "nan", "1e400"):
            cases.append(Case("check", f"{flag}={value!r}", ("--", "vllm", "serve", MODEL, flag, value)))
            cases.append(
                Case("check", f"before {flag}={value!r}", (flag, value, "--", "vllm", "serve", MODEL))
            )
    sim_flags = (
        "--rate-scale",
        "--window",
        "--sweep",
        "--step-time",
        "--headroom",
        "--tensors-alive",
        "--hidden-size",
        "--vocab-size",
        "--dtype",
        "--max-steps",
        "--gpu-memory",
        "--gpu",
        "--max-num-seqs",
        "--max-model-len",
        "--block-size",
        "--num-gpu-blocks-override",
        "--max-num-batched-tokens",
        "--long-prefill-token-threshold",
        "--tensor-parallel-size",
    )
    for flag in sim_flags:
        for value in (
            "abc",
            "-1",
            "0",
            "nan",
            "1e400",
            "1:0",
            "x=1,2",
            "max_num_seqs=abc",
            "nonsense=1",
            "1,2",
            "1,2,3,4",
        ):
            cases.append(
                Case(
                    "simulate",
                    f"{flag}={value!r}",
                    (
                        "--synthetic",
                        "poisson:rate=2,duration=5",
                        "--model",
                        MODEL,
                        flag,
                        value,
                        "--max-steps",
                        "300",
                    ),
                )
            )
    for spec in (
        "poisson",
        "poisson:rate=abc",
        "poisson:rate=-1,duration=5",
        "poisson:rate=0,duration=5",
        "poisson:rate=1e9,duration=1e9",
        "bursty:burst=-1",
        "agentic:sessions=0",
        "agentic:turns=-1",
        "nonsense:rate=1",
        "poisson:rate=2,duration=5,prompt=weird",
        "poisson:rate=2,duration=5,seed=x",
        "poisson:rate=nan,duration=5",
        "poisson:rate=2,duration=inf",
        ":",
        "poisson:=,=,=",
    ):
        cases.append(
            Case(
                "simulate",
                f"synthetic={spec!r}",
                ("--synthetic", spec, "--model", MODEL, "--max-steps", "300"),
            )
        )
    for sched in (
        "",
        "abc",
        "-5,1d",
        "0",
        "1d",
        "99999999999999999999,1d",
        "1e400",
        "num_scheduled_tokens={",
        "num_scheduled_tokens={'a': -1}",
        "num_scheduled_tokens={'a': 'b'}",
        ",,,",
        "5d",
        "1x",
    ):
        cases.append(Case("step", f"scheduled={sched!r}", ("--scheduled", sched, "--hidden-size", "4096")))
        cases.append(Case("step", f"model scheduled={sched!r}", ("--scheduled", sched, "--model", MODEL)))
    for flag in (
        "--hidden-size",
        "--intermediate-size",
        "--vocab-size",
        "--dtype",
        "--tensor-parallel-size",
        "--data-parallel-size",
        "--num-experts",
        "--experts-per-token",
        "--tensors-alive",
        "--sampler-copies",
        "--free",
        "--gpu",
    ):
        for value in ("abc", "-1", "0", "nan", "1e400", "99999999999999999999999"):
            cases.append(
                Case(
                    "step",
                    f"{flag}={value!r}",
                    ("--scheduled", "100,1d", "--hidden-size", "4096", flag, value),
                )
            )
            cases.append(
                Case(
                    "step",
                    f"model {flag}={value!r}",
                    ("--scheduled", "100,1d", "--model", MODEL, flag, value),
                )
            )
    watch_flags = (
        "--interval",
        "--timeout",
        "--count",
        "--duration",
        "--pid",
        "--leak-window",
        "--horizon",
        "--kv-high",
        "--queue-min",
        "--imbalance",
        "--host-memory-ratio",
        "--plan",
        "--gpu",
        "--selector",
        "--gpu-selector",
    )
    for flag in watch_flags:
        for value in ("abc", "-1", "0", "nan", "1e400", "{", "vllm serve"):
            cases.append(
                Case(
                    "watch",
                    f"{flag}={value!r}",
                    (
                        "--once",
                        "--no-nvml",
                        "--db",
                        ":memory:",
                        "http://127.0.0.1:9",
                        "--timeout",
                        "1s",
                        flag,
                        value,
                    ),
                )
            )
    for url in (
        "not a url",
        "ftp://x",
        "http://",
        "http://[::1",
        "http://127.0.0.1:99999",
        "file:///etc/passwd",
        "localhost:abc",
    ):
        cases.append(
            Case("watch", f"url={url!r}", ("--once", "--no-nvml", "--db", ":memory:", "--timeout", "1s", url))
        )
        cases.append(
            Case(
                "watch",
                f"prometheus={url!r}",
                ("--once", "--db", ":memory:", "--timeout", "1s", "--prometheus", url),
            )
        )
    for flag in (
        "--selector",
        "--for",
        "--group",
        "--leak-window",
        "--kv-high",
        "--imbalance",
        "--horizon",
        "--gpu-selector",
        "--container-selector",
    ):
        for value in ("abc", "-1", "0", "nan", "1e400", "{", '"', "}\n{"):
            cases.append(Case("rules", f"{flag}={value!r}", (flag, value)))
    return cases


def random_cases(n: int, root: Path) -> list[Case]:
    rng = random.Random(1234)
    cases: list[Case] = []
    for i in range(n):
        path = root / f"random-{i}.bin"
        data = rng.randbytes(rng.choice((1, 17, 300, 5000)))
        if rng.random() < 0.5:  # mostly-text with some binary: gets further into the parsers
            data = bytes(
                b if rng.random() < 0.9 else rng.randrange(256)
                for b in rng.choice(list(TRACES.values()) + list(YAMLS.values()) + [GOOD_CONFIG.read_bytes()])
            )
        path.write_bytes(data)
        command = rng.choice(("plan-config", "check", "simulate", "diagnose"))
        if command == "plan-config":
            d = root / f"random-model-{i}"
            d.mkdir()
            (d / "config.json").write_bytes(data)
            cases.append(Case("plan", f"random config {i}", (str(d), "--no-fixes")))
        elif command == "simulate":
            cases.append(
                Case("simulate", f"random trace {i}", (str(path), "--model", MODEL, "--max-steps", "200"))
            )
        else:
            cases.append(Case(command, f"random {i}", (str(path),)))
    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=0, help="also this many random inputs")
    parser.add_argument("--only", default="", help="only cases whose command starts with this")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="oomguard-fuzz-") as tmp:
        root = Path(tmp)
        cases = corpus(root) + random_cases(args.random, root)
        cases = [c for c in cases if c.command.startswith(args.only)]
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
            outcomes = list(pool.map(run_case, cases))
        elapsed = time.perf_counter() - start
        pwned = (root / "pwned").exists() or Path("/tmp/oomguard-yaml-pwned").exists()
    failures = [o for o in outcomes if o.failure]
    for o in failures:
        last = o.stderr.strip().splitlines()[-1] if o.stderr.strip() else ""
        print(f"FAIL {o.case.command:<9} {o.case.name[:60]:<60} {o.failure}: {last[:200]}")
    print()
    print(
        f"{'command':<10} {'cases':>6} {'exit 0':>7} {'exit 1':>7} {'exit 2':>7} {'failures':>9} "
        f"{'slowest s':>10}"
    )
    for command in sorted({o.case.command for o in outcomes}):
        mine = [o for o in outcomes if o.case.command == command]
        print(
            f"{command:<10} {len(mine):>6} {sum(o.code == 0 for o in mine):>7} "
            f"{sum(o.code == 1 for o in mine):>7} "
            f"{sum(o.code == 2 for o in mine):>7} {sum(bool(o.failure) for o in mine):>9} "
            f"{max(o.seconds for o in mine):>10.2f}"
        )
    print(
        f"{len(outcomes)} cases in {elapsed:.0f} s; {len(failures)} failures; hostile pickle/YAML ran: "
        f"{pwned}"
    )
    return 1 if failures or pwned else 0


if __name__ == "__main__":
    sys.exit(main())
