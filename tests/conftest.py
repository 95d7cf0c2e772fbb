"""Shared test fixtures: where the real data lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# The property tests run the same examples on every run, so a red CI run always means a change broke
# something; `HYPOTHESIS_PROFILE=explore pytest ...` searches fresh random inputs for new bugs.
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SHARED_DATA = SHARED / "data"
TEST_DATA = REPO / "tests" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data: validation sets, model configs, traces, scheduler references."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not beside this checkout")
    return SHARED_DATA
