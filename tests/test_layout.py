"""The package layout the README describes: no import cycles, renderers read only the neutral result, and
every engine folder has the same roles."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "oomguard"
ENGINE_ROLES = {"flags", "config", "kv", "accounting", "plan", "log_format", "fixes", "engine"}


def _imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        name = ".".join(("oomguard", *path.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__")
        targets = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("oomguard"):
                targets.add(node.module)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.startswith("oomguard"))
        targets.discard(name)  # `from oomguard.pkg import sub` inside pkg names a submodule, not itself
    return graph


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and (SRC / parts[1]).is_dir() else module


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()
    for start in graph:
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    return [*path, nxt]
                if nxt not in path and nxt not in done:
                    stack.append((nxt, [*path, nxt]))
        done.add(start)
    return None


def test_no_module_imports_itself_through_others() -> None:
    assert _cycle(_imports()) is None


def test_no_package_imports_itself_through_others() -> None:
    packages: dict[str, set[str]] = {}
    for module, targets in _imports().items():
        if module == "oomguard":
            continue  # the public API re-exports every package on purpose
        edges = packages.setdefault(_package(module), set())
        edges.update(_package(t) for t in targets if _package(t) not in (_package(module), "oomguard"))
    assert _cycle(packages) is None


def test_renderers_read_only_the_neutral_result() -> None:
    for module, targets in _imports().items():
        if module.startswith("oomguard.render"):
            assert not [t for t in targets if t.startswith(("oomguard.engines", "oomguard.planning"))], module


def test_every_engine_folder_has_the_same_roles() -> None:
    engines = [p for p in (SRC / "engines").iterdir() if p.is_dir() and not p.name.startswith("_")]
    assert {p.name for p in engines} >= {"vllm", "sglang"}
    for folder in engines:
        assert ENGINE_ROLES <= {p.stem for p in folder.glob("*.py")}, folder.name


def _readme_layout() -> list[str]:
    """The lines of the README's Layout block (the code block under '## Layout')."""
    readme = (SRC.parents[1] / "README.md").read_text()
    block = readme.split("\n## Layout\n", 1)[1].split("```\n", 2)[1]
    return block.splitlines()


def test_every_path_the_readme_layout_names_exists_and_names_every_top_level_module() -> None:
    engines = [p for p in (SRC / "engines").iterdir() if p.is_dir() and not p.name.startswith("_")]
    named: set[str] = set()
    for line in _readme_layout():
        indent = len(line) - len(line.lstrip())
        m = re.match(r"[\w./<>]+(?:, [\w./<>]+)*", line.strip())  # the path column, before the description
        first = m.group(0) if m else ""
        if indent == 2 and first:  # an entry of src/oomguard/: "errors.py, units.py", "engines/<name>/"
            for name in first.split(", "):
                paths = (
                    [SRC / name.replace("<name>", e.name) for e in engines]
                    if "<name>" in name
                    else [SRC / name]
                )
                assert all(p.exists() for p in paths), name
                named.add(name.split("/")[0])
        elif indent == 4 and first.endswith(".py"):  # an engine role: in at least one engine folder
            assert any((e / first).exists() for e in engines), first
    top_level = {p.name for p in SRC.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert top_level - named == set(), "README Layout does not name these"
