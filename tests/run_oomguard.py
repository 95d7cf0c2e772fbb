"""`oomguard ARGS` in a child process, as a user runs it: the tests that need its real exit code and output
streams (entry point, argument errors, one-line messages) call it from here."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")


def oomguard(
    *args: str,
    stdin: str | None = None,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m oomguard ARGS` from this checkout, offline, with nothing of the caller's environment but
    what `env` adds (it may replace PYTHONPATH): a test never reaches the Hugging Face Hub and never depends
    on the developer's shell (OOMGUARD_DEBUG, tokens, caches)."""
    return subprocess.run(
        [sys.executable, "-m", "oomguard", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        cwd=cwd,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": SRC, **(env or {})},
    )
