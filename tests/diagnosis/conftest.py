"""Helpers: write evidence to files and run the real CLI entry point on them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oomguard.cli import main as oomguard_main


@pytest.fixture
def run_diagnose(tmp_path: Path, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    def run(
        *texts: str | bytes, args: tuple[str, ...] = ("--json",), names: tuple[str, ...] = ()
    ) -> tuple[int, Any, str]:
        paths = []
        for i, text in enumerate(texts):
            path = tmp_path / (names[i] if i < len(names) else f"evidence{i}.log")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text if isinstance(text, bytes) else text.encode())
            paths.append(str(path))
        code = oomguard_main(["diagnose", *args, *paths])
        out, err = capsys.readouterr()
        data = json.loads(out) if code == 0 and "--json" in args else out
        return code, data, err

    return run


def top(result: Any) -> str:
    return str(result["causes"][0]["class"])


def classes(result: Any, n: int = 3) -> list[str]:
    return [c["class"] for c in result["causes"][:n]]
