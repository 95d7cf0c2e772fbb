"""The `oomguard` command itself: no command is a usage error (exit 2, usage on stderr); --help is not."""

from __future__ import annotations

import pytest
from tests.run_oomguard import oomguard

from oomguard import cli


def test_no_command_prints_usage_to_stderr_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == cli.EXIT_BAD_INPUT == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "usage: oomguard COMMAND" in err
    assert all(name in err for name in cli.COMMANDS)


def test_help_prints_usage_to_stdout_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    assert "usage: oomguard COMMAND" in capsys.readouterr().out


def test_the_installed_entry_point_exits_2_without_a_command() -> None:
    done = oomguard()
    assert done.returncode == 2
    assert "usage: oomguard COMMAND" in done.stderr and done.stdout == ""
