"""`modelforge down` where no stack runs says so (naming the folder it looked in) instead of
printing nothing, and leaves no state folder behind."""

from __future__ import annotations

from pathlib import Path

from modelforge.devstack import stack


def test_down_where_nothing_runs_says_where_it_looked(tmp_path: Path) -> None:
    home = tmp_path / "no-stack-here"
    said: list[str] = []
    stack.down(home, said.append)
    assert said == [
        f"nothing of the embedded stack runs in {home} (set MODELFORGE_HOME to the folder `up` used)"
    ]
    assert not home.exists()
