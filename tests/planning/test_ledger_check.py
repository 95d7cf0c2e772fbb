"""Issue 11 point 8: the DP=2 / EP incident's ledger as numbers, from the CLI and from pytest."""

from __future__ import annotations

import pytest
from tests.run_oomguard import oomguard

from oomguard.errors import ConfigError
from oomguard.planning.ledger_check import check_ledger

GiB = 1 << 30
INCIDENT = "weights=20GiB,kv=25GiB/replica,dp=2,ep_buffer=12GiB"


def test_the_incident_ledger_fails_82_over_80_with_the_degraded_setting() -> None:
    done = oomguard("check", "--ledger", INCIDENT, "--gpu-memory", "80GiB")
    assert done.returncode == 1
    assert done.stdout.startswith("FAIL") and "82.00 GiB > 80.00 GiB" in done.stdout
    assert "KV cache 25.00 x 2" in done.stdout
    assert "cap the KV cache at" in done.stdout and "1 replica(s) per GPU" in done.stdout


def test_the_pytest_api_gives_the_same_answer_and_a_fix_that_fits() -> None:
    result = check_ledger(INCIDENT, gpu_memory="80GiB")
    assert not result and result.ledger.used_bytes == 82 * GiB
    assert result.fixes and all(f.ledger.fits for f in result.fixes)
    kv = result.fixes[0].ledger.bytes_of("kv_cache")
    assert 20 * GiB < kv < 24 * GiB  # weights and the EP buffer once, KV twice, a little headroom kept


def test_one_replica_per_gpu_passes() -> None:
    done = oomguard(
        "check", "--ledger", "weights=20GiB,kv=25GiB/replica,ep_buffer=12GiB", "--gpu-memory", "80GiB"
    )
    assert done.returncode == 0 and done.stdout.startswith("PASS")


def test_a_ledger_without_units_or_device_is_bad_input() -> None:
    assert oomguard("check", "--ledger", "weights=20,kv=25GiB", "--gpu-memory", "80GiB").returncode == 2
    assert oomguard("check", "--ledger", INCIDENT).returncode == 2
    with pytest.raises(ConfigError):
        check_ledger("weights=20GiB,vram=3GiB", gpu_memory="80GiB")
