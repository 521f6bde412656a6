"""A process started as one subcommand imports the modules of that subcommand, not of every other."""

from __future__ import annotations

import subprocess
import sys

from modelforge.cli import build_parser


def imported_after_parsing(*argv: str) -> set[str]:
    """The modules a fresh interpreter holds once `modelforge ARGV` is parsed."""
    script = (
        "import sys\n"
        "from modelforge.cli import build_parser\n"
        f"build_parser({argv[0]!r}).parse_args({list(argv)!r})\n"
        "print('\\n'.join(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def test_an_agent_starts_without_importing_the_gateway() -> None:
    modules = imported_after_parsing("agent", "--node-id", "n1", "--artifact-root", "/tmp")
    assert "nodeagent.cli" in modules
    assert not {m for m in modules if m.split(".")[0] in {"gateway", "projections"}}


def test_a_projector_worker_starts_without_importing_the_gateway() -> None:
    modules = imported_after_parsing("projector", "--stream", "MF_EVENTS", "--supervised")
    assert "projections.cli" in modules
    assert not {m for m in modules if m.split(".")[0] == "gateway"}


def test_a_verb_registered_late_is_parsed_with_its_own_options() -> None:
    assert "gateway.admin.operators_cli" in imported_after_parsing("operators", "list", "--json")


def test_a_parser_made_for_a_word_that_is_no_verb_knows_every_verb() -> None:
    assert build_parser("nope").parse_args(["certs", "out"]).command == "certs"  # the last module's verb
