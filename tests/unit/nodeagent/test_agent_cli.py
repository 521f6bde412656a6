"""`modelforge agent`'s CPU threads: a flag, else MODELFORGE_CPU_THREADS; a value that is not a
whole number ≥ 1 stops the agent before it connects, naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelforge import cli


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_cpu_threads_that_are_not_a_positive_whole_number_are_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str
) -> None:
    monkeypatch.setenv("MODELFORGE_CPU_THREADS", value)
    with pytest.raises(SystemExit, match=r"MODELFORGE_CPU_THREADS.*whole number ≥ 1"):
        cli.main(["agent", "--node-id", "n1", "--artifact-root", str(tmp_path)])


def test_the_flag_wins_over_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MODELFORGE_CPU_THREADS", "5")
    with pytest.raises(SystemExit, match="not 0"):
        cli.main(["agent", "--node-id", "n1", "--artifact-root", str(tmp_path), "--cpu-threads", "0"])
