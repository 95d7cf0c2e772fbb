"""Shared test fixtures: where the real data lives."""

from __future__ import annotations

from pathlib import Path

import pytest

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
