"""The Python API: the README's examples run as written, and `to_dict()` is the command's `--json`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.run_oomguard import oomguard as oomguard_cli

import oomguard

README = Path(__file__).resolve().parents[1] / "README.md"


def _api_examples() -> list[str]:
    section = README.read_text().split("## Python API", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def _cli_json(*args: str) -> dict[str, object]:
    done = oomguard_cli("plan", "--json", *args)
    loaded: dict[str, object] = json.loads(done.stdout)
    return loaded


def test_the_readme_examples_run() -> None:
    examples = _api_examples()
    assert examples
    for code in examples:
        exec(compile(code, str(README), "exec"), {})  # noqa: S102 -- the README examples, run as written


def test_to_dict_is_the_cli_json_with_its_fixes() -> None:
    api = oomguard.plan(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100", gpu_memory_utilization=0.3)
    cli = _cli_json("meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--gpu-memory-utilization", "0.3")
    assert api.to_dict() == cli
    assert [f.command for f in api.fixes()] == [f["command"] for f in cli["fixes"]]  # type: ignore[index]


def test_an_sglang_plan_is_the_cli_json_too() -> None:
    command = "python -m sglang.launch_server --model-path Qwen/Qwen3-32B --tp 2"
    api = oomguard.plan(command, gpu="H100")
    assert api.to_dict() == _cli_json("--gpu", "H100", "--", *command.split())
    by_keywords = oomguard.plan(model="Qwen/Qwen3-32B", engine="sglang", tp_size=2, gpu="H100")
    assert by_keywords.kv.tokens == api.kv.tokens


def test_unknown_keywords_are_a_typed_error() -> None:
    with pytest.raises(oomguard.UnknownOptionError, match="did you mean max_model_len"):
        oomguard.plan(model="Qwen/Qwen3-8B", gpu="H100", max_model_length=8192)
    with pytest.raises(TypeError):
        oomguard.plan(model="Qwen/Qwen3-32B", engine="sglang", tensor_parallel=2)
    with pytest.raises(TypeError):
        oomguard.simulate(synthetic="poisson:rate=1,duration=10", model="Qwen/Qwen3-8B", max_num_seq=4)


def test_the_public_names_are_listed_and_typed() -> None:
    for name in oomguard.__all__:
        assert getattr(oomguard, name) is not None
    assert (Path(oomguard.__file__).parent / "py.typed").is_file()


def test_the_functions_and_the_subpackages_have_different_names() -> None:
    # A subpackage named like an API function would rebind the name on first import (`import oomguard.x.y`).
    code = (
        "import oomguard.diagnosis.rules as rules, oomguard.simulation.run as run, oomguard\n"
        "assert callable(oomguard.diagnose) and callable(oomguard.simulate)\n"
        "print(rules.__name__, run.__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["oomguard.diagnosis.rules", "oomguard.simulation.run"]
