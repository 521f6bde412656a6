"""`clients create --environment --purpose` and how `clients` prints a client's context."""

from __future__ import annotations

import argparse

from gateway.admin.clients_cli import format_client, register
from gateway.clients.model import ClientState


def _parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["clients", *argv])


def test_create_takes_the_integration_environment_and_purpose() -> None:
    args = _parsed("create", "--name", "a", "--scope", "rag.embedding@1", "--environment", "staging",
                   "--purpose", "handbook search")  # fmt: skip

    assert (args.environment, args.purpose) == ("staging", "handbook search")


def test_create_without_them_leaves_both_empty() -> None:
    args = _parsed("create", "--name", "a", "--scope", "rag.embedding@1")

    assert (args.environment, args.purpose) == ("", "")


def test_a_client_is_printed_with_its_environment_and_purpose() -> None:
    state = ClientState("cl_a", "a", ("rag.embedding@1",), 60, 4, integration_environment="staging",
                        purpose="handbook search")  # fmt: skip

    first = format_client(state).splitlines()[0]

    assert "environment=staging" in first
    assert "purpose='handbook search'" in first
