"""The operators file: `name sha256` lines; keys are made once and only their digests kept."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gateway.operators import (
    OperatorFile,
    add_operator,
    identify,
    key_digest,
    parse_operators,
    remove_operator,
)
from modelforge import cli


def test_a_key_is_stored_only_as_its_digest_in_a_private_file(tmp_path: Path) -> None:
    path = tmp_path / "operators"
    key = add_operator(path, "alice")
    assert key.startswith("mfo_")
    assert key not in path.read_text()
    assert parse_operators(path.read_text()) == {"alice": key_digest(key)}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_key_identifies_its_operator_and_no_other_key_does(tmp_path: Path) -> None:
    path = tmp_path / "operators"
    alice, bob = add_operator(path, "alice"), add_operator(path, "bob")
    operators = parse_operators(path.read_text())
    assert (identify(operators, alice), identify(operators, bob)) == ("alice", "bob")
    assert identify(operators, alice + "x") is None


def test_the_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "operators"
    keys = OperatorFile(path)
    assert keys.identify("anything") is None  # no file yet: nobody by name
    alice = add_operator(path, "alice")
    assert keys.identify(alice) == "alice"
    remove_operator(path, "alice")
    assert keys.identify(alice) is None


def test_an_unreadable_file_admits_nobody_and_says_why(tmp_path: Path) -> None:
    path = tmp_path / "operators"
    path.write_text("alice not-a-digest\n")
    keys = OperatorFile(path)
    assert keys.identify("mfo_x") is None
    assert "line 1" in keys.problem


@pytest.mark.parametrize(
    "text",
    ["alice\n", f"alice {'0' * 64} extra\n", f"al ice {'0' * 64}\n", f"alice {'0' * 64}\nalice {'1' * 64}\n"],
)
def test_a_malformed_line_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="line"):
        parse_operators(text)


def test_an_existing_operator_is_not_given_a_second_key(tmp_path: Path) -> None:
    path = tmp_path / "operators"
    add_operator(path, "alice")
    with pytest.raises(ValueError, match="exists"):
        add_operator(path, "alice")


def test_the_cli_adds_lists_and_removes_operators(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "operators")
    assert cli.main(["operators", "add", "alice", "--file", path]) == 0
    key = capsys.readouterr().out.split("key ")[1].split()[0]
    assert identify(parse_operators(Path(path).read_text()), key) == "alice"
    assert cli.main(["operators", "list", "--file", path]) == 0
    assert capsys.readouterr().out.split() == ["OPERATOR", "----------", "alice"]
    assert cli.main(["operators", "list", "--file", path, "--json"]) == 0
    assert capsys.readouterr().out.strip() == '["alice"]'
    assert cli.main(["operators", "remove", "alice", "--file", path]) == 0
    assert parse_operators(Path(path).read_text()) == {}
