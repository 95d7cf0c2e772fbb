"""Bad input never gives a traceback, in any command.

The project standard: a malformed config, a truncated log, binary garbage or a hostile pickle gets a one-line
error naming the problem and exit code 2 (never "internal error", exit 3, which is a bug report), or the
command
goes on and says what it skipped; nothing hangs, nothing runs code from the input.

Every case runs the real CLI (`python -m oomguard ...`, HF_HUB_OFFLINE=1) in its own process. The processes of
all cases are started together once per session (they are independent), then each test reads its case's
result.
Random inputs (hypothesis) go through the same `main` the CLI calls, in-process, to keep the file fast.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gzip
import io
import json
import os
import pickle
import random
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomguard import cli

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO.parent / "shared" / "data" / "models" / "configs"
MODEL = "Qwen/Qwen3-0.6B"  # in the bundled catalog: resolves offline
TIMEOUT_S = 60  # far above any case's real time (< 2 s): only a hang reaches it
MEMORY_LIMIT_BYTES = 4 << 30  # an alias bomb that expands must fail here, not take the machine
PNG_HEADER = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"

# ---------------------------------------------------------------------------------------------------------
# The inputs
# ---------------------------------------------------------------------------------------------------------

GARBAGE: dict[str, bytes] = {
    "empty": b"",
    "random-bytes": random.Random(0).randbytes(4096),
    "png": PNG_HEADER + random.Random(1).randbytes(512),
    "gzip-of-garbage": gzip.compress(random.Random(2).randbytes(4096)),
    "truncated-gzip": gzip.compress(b"TIMESTAMP,ContextTokens,GeneratedTokens\n" * 500)[:60],
    "invalid-utf8": b"INFO \xff\xfe\xfd not utf-8 \xc3\x28\n" * 50,
    "nul-bytes": b"\x00" * 10_000,
    "ten-mb-line": b"x" * (10 << 20),
    "truncated-json": b'{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 40',
}

# Billion laughs: 9 levels of 9 aliases = 387 million strings if anything expands it.
YAML_BOMB = "".join(
    [f"l0: &l0 [{', '.join(['lol'] * 9)}]\n"]
    + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9)]
    + ["model: *l8\n"]
).encode()

DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {name: vllm}
spec:
  template:
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai
"""


class Hostile:
    """Unpickling this for real would run `touch MARKER`."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


@dataclass
class Inputs:
    """The bad files of one session, by name."""

    root: Path
    paths: dict[str, Path] = field(default_factory=dict)

    def file(self, name: str, data: bytes) -> str:
        path = self.root / name
        path.write_bytes(data)
        self.paths[name] = path
        return str(path)

    def model_dir(self, name: str, config: object, extra: dict[str, bytes] | None = None) -> str:
        path = self.root / name
        path.mkdir()
        raw = (
            config
            if isinstance(config, bytes)
            else (config if isinstance(config, str) else json.dumps(config)).encode()
        )
        (path / "config.json").write_bytes(raw)
        for file_name, data in (extra or {}).items():
            (path / file_name).write_bytes(data)
        return str(path)


def _good_config() -> dict[str, object]:
    """Qwen3-0.6B's config.json: the published file when ../shared is beside the checkout, else the bundled
    catalog's copy (the same fields less the generation ones), so that collection never needs ../shared."""
    published = CONFIGS / "Qwen" / "Qwen3-0.6B" / "config.json"
    if published.is_file():
        return dict(json.loads(published.read_text()))
    catalog = REPO / "src" / "oomguard" / "models" / "catalog" / "models.jsonl"
    for line in catalog.read_text().splitlines():
        record = json.loads(line)
        if record["id"] == "Qwen/Qwen3-0.6B":
            return dict(record["config"])
    raise AssertionError("Qwen/Qwen3-0.6B is neither in ../shared nor in the bundled catalog")


def _safetensors(header: dict[str, object]) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw


@dataclass(frozen=True)
class Case:
    id: str
    command: str
    argv: Callable[[Inputs], list[str]]
    codes: frozenset[int] = frozenset({2})  # the documented exit codes this input may give
    stdin: bytes = b""


CASES: list[Case] = []


def case(
    id: str,
    command: str,
    argv: Callable[[Inputs], list[str]],
    codes: tuple[int, ...] = (2,),
    stdin: bytes = b"",
) -> None:
    CASES.append(Case(id, command, argv, frozenset(codes), stdin))


# Garbage where each command reads a file. (Writers such as `rules -o` overwrite whatever is there.)
FILE_READERS: dict[str, tuple[str, Callable[[str], list[str]]]] = {
    "plan-model-config": ("plan", lambda p: [p, "--no-fixes"]),
    "plan-nvidia-smi": ("plan", lambda p: [MODEL, "--nvidia-smi", p, "--no-fixes"]),
    "plan-calibrate": ("plan", lambda p: [MODEL, "--calibrate", p, "--no-fixes"]),
    "check": ("check", lambda p: [p]),
    "simulate-trace": ("simulate", lambda p: [p, "--model", MODEL]),
    "diagnose": ("diagnose", lambda p: [p]),
    "watch-db": ("watch", lambda p: ["--once", "--no-nvml", "--no-host", "--db", p, "http://127.0.0.1:9"]),
}
for _kind in GARBAGE:
    for _reader, (_command, _argv) in FILE_READERS.items():
        if _kind == "empty" and _reader == "watch-db":
            continue  # SQLite takes an empty file as a new database: not bad input
        if _reader == "plan-model-config":
            case(
                f"{_reader}:{_kind}",
                _command,
                lambda f, k=_kind, a=_argv: a(f.model_dir(f"model-{k}", GARBAGE[k])),
            )
        else:
            case(
                f"{_reader}:{_kind}",
                _command,
                lambda f, k=_kind, a=_argv: (
                    a(f.file(f"{k}.bin", GARBAGE[k]))
                    if f"{k}.bin" not in f.paths
                    else a(str(f.paths[f"{k}.bin"]))
                ),
            )
    case(
        f"plan-config-yaml:{_kind}",
        "plan",
        lambda f, k=_kind: [
            "--no-fixes",
            "--",
            "vllm",
            "serve",
            MODEL,
            "--config",
            f.file(f"{k}.yaml", GARBAGE[k]),
        ],
        codes=(0, 2) if _kind == "empty" else (2,),
    )
for _reader, (_command, _argv) in FILE_READERS.items():
    case(f"{_reader}:directory", _command, lambda f, a=_argv: a(str(f.root)))
    if _reader not in ("watch-db", "plan-model-config"):
        case(f"{_reader}:missing", _command, lambda f, a=_argv: a(str(f.root / "no-such-file.txt")))
case("plan-model-config:missing", "plan", lambda f: [str(f.root / "no-such-dir"), "--no-fixes"])
case("rules-output:directory", "rules", lambda f: ["-o", str(f.root)])
case("rules-grafana:directory", "rules", lambda f: ["--grafana", str(f.root)])
case(
    "simulate-html:directory",
    "simulate",
    lambda f: ["--synthetic", "poisson:rate=1,duration=5", "--model", MODEL, "--html", str(f.root)],
)

# config.json: wrong shapes and wrong values
_BAD_CONFIGS: dict[str, object] = {
    "not-json": "this is not json",
    "a-list": [_good_config()],
    "null": None,
    "missing-keys": {"model_type": "qwen3"},
    "architectures-only": {"architectures": ["Qwen3ForCausalLM"]},
}
for _key in (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "max_position_embeddings",
):
    for _label, _value in (
        ("zero", 0),
        ("negative", -8),
        ("huge", 10**30),
        ("float", 1024.5),
        ("string", "lots"),
        ("list", [1, 2]),
    ):
        _BAD_CONFIGS[f"{_key}-{_label}"] = {**_good_config(), _key: _value}
for _name, _config in _BAD_CONFIGS.items():
    case(
        f"plan-config.json:{_name}",
        "plan",
        lambda f, n=_name, c=_config: [f.model_dir(f"cfg-{n}", c), "--no-fixes"],
    )
for _name in (
    "num_hidden_layers-huge",
    "vocab_size-string",
    "num_key_value_heads-list",
    "hidden_size-negative",
):
    _config = _BAD_CONFIGS[_name]
    case(
        f"simulate-config.json:{_name}",
        "simulate",
        lambda f, n=_name, c=_config: [
            "--synthetic",
            "poisson:rate=1,duration=5",
            "--model",
            f.model_dir(f"sim-cfg-{n}", c),
        ],
    )
    case(
        f"step-config.json:{_name}",
        "step",
        lambda f, n=_name, c=_config: ["--scheduled", "100,1d", "--model", f.model_dir(f"step-cfg-{n}", c)],
    )
    case(
        f"check-config.json:{_name}",
        "check",  # a deployment check cannot plan: FAIL and one error line, exit 2 (bad input, as plan)
        lambda f, n=_name, c=_config: ["--", "vllm", "serve", f.model_dir(f"check-cfg-{n}", c)],
        codes=(1, 2),
    )

# safetensors headers and index next to a good config.json
_SAFETENSORS: dict[str, tuple[str, bytes]] = {
    "huge-declared-length": ("model.safetensors", struct.pack("<Q", 2**63) + b"{}"),
    "header-longer-than-file": ("model.safetensors", struct.pack("<Q", 1000) + b"{}"),
    "header-not-json": ("model.safetensors", struct.pack("<Q", 10) + b"{not json}"),
    "shorter-than-length": ("model.safetensors", b"\x01\x02"),
    "offsets-backwards": (
        "model.safetensors",
        _safetensors({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [8, 0]}}),
    ),
    "index-not-json": ("model.safetensors.index.json", b"nope"),
    "index-total-a-string": (
        "model.safetensors.index.json",
        b'{"metadata": {"total_size": "big"}, "weight_map": {}}',
    ),
}
for _name, (_file, _data) in _SAFETENSORS.items():
    case(
        f"plan-safetensors:{_name}",
        "plan",
        lambda f, n=_name, fl=_file, d=_data: [f.model_dir(f"st-{n}", _good_config(), {fl: d}), "--no-fixes"],
    )

# vLLM --config YAML and Kubernetes manifests
_YAMLS: dict[str, str] = {
    "billion-laughs": YAML_BOMB.decode(),
    "refers-to-itself": "a: &a [*a]\nmodel: x\n",
    "nested-5000-deep": "model: " + "[" * 5000 + "]" * 5000 + "\n",
    "a-list": "- model: Qwen/Qwen3-0.6B\n",
    "a-scalar": "just words\n",
    "bad-syntax": "model: [unclosed\n  tensor-parallel-size: : :\n",
    "python-tag": "model: !!python/object/apply:os.system ['touch /tmp/oomguard-yaml-tag-ran']\n",
    "tp-a-list": f"model: {MODEL}\ntensor-parallel-size: [1, 2]\n",
    "max-model-len-a-mapping": f"model: {MODEL}\nmax-model-len: {{a: 1}}\n",
    "tp-a-word": f"model: {MODEL}\ntensor-parallel-size: many\n",
    "utilization-7": f"model: {MODEL}\ngpu-memory-utilization: 7\n",
}
for _name, _text in _YAMLS.items():
    case(
        f"plan-config-yaml:{_name}",
        "plan",
        lambda f, n=_name, t=_text: [
            "--no-fixes",
            "--",
            "vllm",
            "serve",
            "--config",
            f.file(f"serve-{n}.yaml", t.encode()),
        ],
    )
    case(f"check-yaml:{_name}", "check", lambda f, n=_name, t=_text: [f.file(f"check-{n}.yaml", t.encode())])
_MANIFESTS: dict[str, str] = {
    "wrong-kind": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n",
    "args-a-string": DEPLOYMENT + f'        args: "--model {MODEL} --tensor-parallel-size 2"\n',
    "args-a-mapping": DEPLOYMENT + "        args: {model: x}\n",
    "spec-a-list": "apiVersion: apps/v1\nkind: Deployment\nmetadata: x\nspec: [1, 2]\n",
    "gpu-limit-a-word": DEPLOYMENT
    + f"        args: [{MODEL}]\n        resources: {{limits: {{nvidia.com/gpu: lots}}}}\n",
    "documents-of-garbage": "---\n42\n---\nnull\n---\n- a\n---\napiVersion: v1\nkind: Pod\n",
}
for _name, _text in _MANIFESTS.items():
    case(
        f"check-manifest:{_name}", "check", lambda f, n=_name, t=_text: [f.file(f"k8s-{n}.yaml", t.encode())]
    )

# traces
_AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
_TRACES: dict[str, str] = {
    "negative-length.csv": _AZURE + "2023-11-16 18:17:03.97,-5,10\n",
    "word-for-length.csv": _AZURE + "2023-11-16 18:17:03.97,many,10\n",
    "missing-column.csv": "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.97,5\n",
    "header-only.csv": _AZURE,
    "bad-timestamp.csv": _AZURE + "yesterday,50,10\n",
    "negative-length.jsonl": '{"timestamp": 0, "input_length": -1, "output_length": 5}\n',
    "words.jsonl": '{"timestamp": "soon", "input_length": "ten", "output_length": 5}\n',
    "a-list-row.jsonl": "[1, 2, 3]\n",
    "nan-and-infinity.jsonl": '{"timestamp": NaN, "input_length": 10, "output_length": Infinity}\n',
    "cut-mid-json.jsonl": '{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"timestamp": 1, "inp',
    "hash-ids-a-string.jsonl": '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": "abc"}\n',  # noqa: E501
}
for _name, _text in _TRACES.items():
    case(
        f"simulate-trace:{_name}",
        "simulate",
        lambda f, n=_name, t=_text: [f.file(f"trace-{n}", t.encode()), "--model", MODEL],
    )
case(
    "simulate-trace:unsorted",
    "simulate",
    lambda f: [
        f.file(
            "unsorted.csv", (_AZURE + "2023-11-16 18:17:09.0,50,10\n2023-11-16 18:17:03.0,40,10\n").encode()
        ),
        "--model",
        MODEL,
    ],
    codes=(0, 2),
)

# Prometheus text and torch snapshots, as diagnose evidence
case(
    "diagnose:html-error-page",
    "diagnose",
    lambda f: [
        f.file("metrics.txt", (b"<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>\n"))
    ],
)
case(
    "diagnose:prometheus-garbage",
    "diagnose",
    lambda f: [
        f.file(
            "scrape.prom",
            (b'vllm:num_requests_running{{{ 1 2 3\n# TYPE \nvllm:gpu_cache_usage_perc{engine="0} NaN\n'),
        )
    ],
)
case(
    "diagnose:hostile-pickle",
    "diagnose",
    lambda f: [f.file("snapshot.pickle", pickle.dumps({"segments": [Hostile(str(f.root / "pwned"))]}))],
)
case("diagnose:random-stdin", "diagnose", lambda f: ["-"], stdin=random.Random(5).randbytes(8192))

# Flag values
_PLAN_FLAGS: dict[str, tuple[str, ...]] = {
    "--tensor-parallel-size": ("0", "-1", "1000000", "abc", "nan", "1e400"),
    "--pipeline-parallel-size": ("0", "nan"),
    "--max-model-len": ("0", "-5", "abc", "inf"),
    "--gpu-memory-utilization": ("2", "0", "-0.5", "nan", "abc"),
    "--block-size": ("7", "0", "nan"),
    "--max-num-seqs": ("0", "inf"),
    "--max-num-batched-tokens": ("0", "99999999999999999999999"),
    "--num-gpu-blocks-override": ("nan", "-1"),
    "--kv-cache-memory-bytes": ("99999999999999999999999", "inf"),
    "--gpu-memory": ("abc", "1e400", "-5GiB", "12 parsecs"),
    "--gpu": ("RTX 9090 Ti Super",),
    "--vllm-version": ("banana",),
    "--replicas-per-gpu": ("0", "99999999999999999999999"),
    "--cpu-offload-gb": ("nan",),
}
for _flag, _values in _PLAN_FLAGS.items():
    for _value in _values:
        case(
            f"plan{_flag}={_value}",
            "plan",
            lambda f, fl=_flag, v=_value: [MODEL, fl, v, "--no-fixes"],
            codes=(1, 2),
        )
case("plan:unknown-model-offline", "plan", lambda f: ["nobody/no-such-model-xyz"])
case("plan:unclosed-quote-command", "plan", lambda f: ["--command", "vllm serve 'unclosed"])
for _flag, _value in (
    ("--min-headroom", "1e400"),
    ("--min-headroom", "abc"),
    ("--gpu-memory", "1e400"),
    ("--min-concurrency", "abc"),
):
    case(
        f"check{_flag}={_value}",
        "check",
        lambda f, fl=_flag, v=_value: [fl, v, "--", "vllm", "serve", MODEL],
        codes=(1, 2),
    )
_SIM = ["--synthetic", "poisson:rate=2,duration=5", "--model", MODEL]
for _flag, _value in (
    ("--rate-scale", "nan"),
    ("--rate-scale", "-1"),
    ("--step-time", "abc"),
    ("--step-time", "nan,1,1"),
    ("--headroom", "1e400"),
    ("--tensors-alive", "0"),
    ("--max-num-seqs", "0"),
    ("--num-gpu-blocks-override", "-1"),
    ("--max-num-batched-tokens", "0"),
    ("--sweep", "max_num_seqs=abc"),
    ("--window", "a:b"),
    ("--sweep", "nonsense"),
):
    case(f"simulate{_flag}={_value}", "simulate", lambda f, fl=_flag, v=_value: [*_SIM, fl, v])
for _spec in (
    "poisson:rate=1e9,duration=1e9",
    "poisson:rate=nan,duration=5",
    "poisson:rate=2,duration=inf",
    "poisson:rate=-1,duration=5",
    "agentic:sessions=100000,turns=100000",
    "bursty:rate=1,burst=nan",
    "nonsense:rate=1",
    "poisson:rate=2,duration=5,prompt=lognormal:1e400:1",
):
    case(f"simulate--synthetic={_spec}", "simulate", lambda f, s=_spec: ["--synthetic", s, "--model", MODEL])
for _scheduled in ("", "abc", "-5,1d", "num_scheduled_tokens={", "1e400"):
    case(
        f"step--scheduled={_scheduled!r}",
        "step",
        lambda f, s=_scheduled: ["--scheduled", s, "--hidden-size", "4096"],
    )
for _flag, _value in (
    ("--free", "1e400"),
    ("--hidden-size", "-1"),
    ("--tensor-parallel-size", "0"),
    ("--dtype", "float7"),
):
    case(
        f"step{_flag}={_value}",
        "step",
        lambda f, fl=_flag, v=_value: ["--scheduled", "100,1d", "--model", MODEL, fl, v],
    )
for _flag, _value in (
    ("--interval", "nan"),
    ("--interval", "-1"),
    ("--duration", "1e400"),
    ("--kv-high", "abc"),
    ("--timeout", "inf"),
):
    case(
        f"watch{_flag}={_value}",
        "watch",
        lambda f, fl=_flag, v=_value: [
            "--once",
            "--no-nvml",
            "--db",
            str(f.root / "w.sqlite"),
            "http://127.0.0.1:9",
            fl,
            v,
        ],
    )
case("watch:url-not-a-url", "watch", lambda f: ["--once", "--db", str(f.root / "w.sqlite"), "http://[::1"])
for _flag, _value in (
    ("--leak-window", "nan"),
    ("--for", "1e400"),
    ("--horizon", "-5"),
    ("--kv-high", "abc"),
):
    case(f"rules{_flag}={_value}", "rules", lambda f, fl=_flag, v=_value: [fl, v])


# ---------------------------------------------------------------------------------------------------------
# Running them
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    code: int | None  # None: still running after TIMEOUT_S
    stdout: str
    stderr: str


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def run_cli(command: str, argv: list[str], stdin: bytes = b"") -> Result:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO / "src"))
    env.pop("OOMGUARD_DEBUG", None)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "oomguard", command, *argv],
            input=stdin,
            capture_output=True,
            check=False,
            timeout=TIMEOUT_S,
            env=env,
            preexec_fn=_limit_memory,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        return Result(None, "", "")
    return Result(
        proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
    )


@pytest.fixture(scope="session")
def bad_inputs(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    if not CONFIGS.is_dir():
        pytest.skip("../shared/data is not beside this checkout")
    return Inputs(tmp_path_factory.mktemp("bad-inputs"))


@pytest.fixture(scope="session")
def results(bad_inputs: Inputs) -> dict[str, Result]:
    """Every case, run once, several processes at a time (each case is its own process)."""
    argvs = {c.id: c.argv(bad_inputs) for c in CASES}
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = {c.id: pool.submit(run_cli, c.command, argvs[c.id], c.stdin) for c in CASES}
        return {key: future.result() for key, future in futures.items()}


def assert_handled(result: Result, codes: frozenset[int]) -> None:
    """Finished, with a documented exit code, no traceback, and a bad-input refusal in one line."""
    assert result.code is not None, f"still running after {TIMEOUT_S} s"
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "internal error" not in result.stderr, result.stderr
    assert result.code in codes, (
        f"exit {result.code}, expected one of {sorted(codes)}: {result.stderr[-500:]}"
    )
    if result.code == 2:
        lines = result.stderr.strip().splitlines()
        assert lines and lines[-1].startswith("oomguard ") and ": error: " in lines[-1], result.stderr
        assert len(lines[-1]) < 2000, "the one-line error must not echo a whole input back"


def test_the_case_ids_are_unique():
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_and_a_documented_exit_code(case: Case, results: dict[str, Result]):
    assert_handled(results[case.id], case.codes)


def test_a_hostile_pickle_is_never_executed(results: dict[str, Result], bad_inputs: Inputs):
    assert results["diagnose:hostile-pickle"].code == 2
    assert not (bad_inputs.root / "pwned").exists()


def test_a_python_tag_in_yaml_is_never_executed(results: dict[str, Result]):
    assert results["plan-config-yaml:python-tag"].code == 2
    assert not Path("/tmp/oomguard-yaml-tag-ran").exists()


@pytest.mark.parametrize("command", ["plan-config-yaml", "check-yaml"])
def test_a_yaml_alias_bomb_is_refused_by_name(command: str, results: dict[str, Result]):
    assert "alias bomb" in results[f"{command}:billion-laughs"].stderr


@pytest.mark.parametrize(
    "id,words",
    [
        ("plan-config.json:hidden_size-huge", ("hidden_size", "beyond any real model")),
        ("plan-config.json:vocab_size-string", ("vocab_size", "'lots'")),
        ("simulate-config.json:vocab_size-string", ("vocab_size", "'lots'")),
        ("plan-config-yaml:tp-a-list", ("tensor_parallel_size", "list")),
        ("check-manifest:args-a-string", ("args", "list of strings")),
        ("check-manifest:gpu-limit-a-word", ("nvidia.com/gpu", "'lots'")),
        ("plan--tensor-parallel-size=nan", ("tensor-parallel-size", "'nan'")),
        ("simulate--rate-scale=nan", ("rate factor", "nan")),
        ("simulate--synthetic=poisson:rate=1e9,duration=1e9", ("rate x duration",)),
        ("rules--leak-window=nan", ("duration", "'nan'")),
    ],
)
def test_the_error_names_the_bad_value(id: str, words: tuple[str, ...], results: dict[str, Result]):
    error = results[id].stderr
    assert results[id].code == 2 and all(w in error for w in words), error


def test_an_absurd_flag_still_draws_a_bounded_ledger(results: dict[str, Result]):
    # 10**23 batched tokens is a plan that does not fit (exit 1), printed with its bar no wider than usual.
    result = results["plan--max-num-batched-tokens=99999999999999999999999"]
    assert result.code == 1 and "99,999,999,999,999,999,999,999" in result.stdout
    bar = next(line for line in result.stdout.splitlines() if line.strip().startswith("["))
    assert len(bar) < 200


# ---------------------------------------------------------------------------------------------------------
# Random inputs, in-process through the CLI's own entry point
# ---------------------------------------------------------------------------------------------------------


def cli_exit(argv: list[str]) -> tuple[int, str]:
    """`oomguard ARGV` in-process: the exit code and stderr (argparse's SystemExit counted as its code)."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = cli.main(argv)
        except SystemExit as exit_:
            code = int(exit_.code or 0)
    return code, err.getvalue()


RANDOM = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
TEXTISH = st.one_of(
    st.binary(max_size=2000),
    st.text(max_size=500).map(str.encode),
    st.sampled_from(
        [
            b"TIMESTAMP,ContextTokens,GeneratedTokens\n",
            b'{"timestamp": 0, ',
            b"model: x\n",
            b"apiVersion: v1\nkind: Pod\n",
        ]
    ).flatmap(lambda head: st.binary(max_size=300).map(lambda tail: head + tail)),
)


@RANDOM
@given(data=TEXTISH, reader=st.sampled_from(["simulate", "check", "diagnose", "plan-config", "plan-smi"]))
def test_random_bytes_into_any_file_reader_are_handled(data: bytes, reader: str, tmp_path: Path):
    path = tmp_path / "input"
    path.write_bytes(data)
    argv = {
        "simulate": ["simulate", str(path), "--model", MODEL, "--max-steps", "50"],
        "check": ["check", str(path)],
        "diagnose": ["diagnose", str(path)],
        "plan-config": ["plan", "--no-fixes", "--", "vllm", "serve", MODEL, "--config", str(path)],
        "plan-smi": ["plan", MODEL, "--nvidia-smi", str(path), "--no-fixes"],
    }[reader]
    os.environ["HF_HUB_OFFLINE"] = "1"
    code, err = cli_exit(argv)
    assert code in (0, 1, 2) and "internal error" not in err, err


@RANDOM
@given(
    key=st.sampled_from(
        [
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "intermediate_size",
            "vocab_size",
            "head_dim",
            "max_position_embeddings",
            "torch_dtype",
            "rope_scaling",
            "quantization_config",
            "tie_word_embeddings",
        ]
    ),
    value=st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-10, 10**20),
        st.floats(allow_nan=False),
        st.text(max_size=5),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    ),
)
def test_random_config_json_values_are_handled(key: str, value: object, tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({**_good_config(), key: value}))
    code, err = cli_exit(["plan", str(tmp_path), "--no-fixes"])
    assert code in (0, 1, 2) and "internal error" not in err, err


@RANDOM
@given(
    flag=st.sampled_from(
        [
            "--tensor-parallel-size",
            "--pipeline-parallel-size",
            "--data-parallel-size",
            "--max-model-len",
            "--gpu-memory-utilization",
            "--block-size",
            "--max-num-seqs",
            "--max-num-batched-tokens",
            "--kv-cache-dtype",
            "--gpu-memory",
            "--swap-space",
            "--num-gpu-blocks-override",
            "--enable-expert-parallel",
            "--quantization",
        ]
    ),
    value=st.one_of(st.integers(-(10**6), 10**30).map(str), st.floats().map(str), st.text(max_size=8)),
)
def test_random_flag_values_into_plan_are_handled(flag: str, value: str):
    code, err = cli_exit(["plan", MODEL, flag, value, "--no-fixes"])
    assert code in (0, 1, 2) and "internal error" not in err, err


@pytest.mark.parametrize(
    "flags", [["--data-parallel-size", "4563077169"], ["-tp", "8", "-pp", "128", "-dp", "256"]]
)
def test_a_deployment_larger_than_any_cluster_is_refused_as_a_typo(flags: list[str]) -> None:
    """Found by the random-flag test: a DP size of 4.5 billion sized per-rank host tables until memory ran
    out. Now a one-line error naming the GPU count."""
    code, err = cli_exit(["plan", MODEL, *flags, "--no-fixes"])
    assert code == 2 and "GPUs, more than any deployment" in err and "internal error" not in err, err
