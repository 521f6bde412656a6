"""The CLI's fallback on the embedded stack: an empty variable counts as unset, and a command that
reached the default NATS URL because no stack runs says so instead of a traceback (as output into a
closed pipe ends without one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eventstore.errors import ServerTooOld
from eventstore.tls import CA_ENV
from modelforge import cli
from modelforge.devstack import stack


def test_an_empty_variable_takes_the_embedded_stacks_value(monkeypatch: pytest.MonkeyPatch) -> None:
    running = {"MODELFORGE_OPERATOR_TOKEN": "from-the-stack", "NATS_URL": "nats://127.0.0.1:1"}
    monkeypatch.setattr(stack, "running_environment", lambda home: running)
    monkeypatch.setenv("MODELFORGE_OPERATOR_TOKEN", "")  # `export ...=$(cat a-missing-file)`
    monkeypatch.setenv("NATS_URL", "nats://elsewhere:4222")
    cli._embedded_defaults("clients")
    assert os.environ["MODELFORGE_OPERATOR_TOKEN"] == "from-the-stack"
    assert os.environ["NATS_URL"] == "nats://elsewhere:4222"  # a set variable wins


def test_another_nats_url_takes_none_of_the_embedded_clusters_tls_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    running = {"NATS_URL": "tls://127.0.0.1:1", CA_ENV: "/stack/certs/provisioner/ca.pem"}
    monkeypatch.setattr(stack, "running_environment", lambda home: running)
    monkeypatch.setenv("NATS_URL", "nats://elsewhere:4222")
    monkeypatch.delenv(CA_ENV, raising=False)
    cli._embedded_defaults("clients")
    assert CA_ENV not in os.environ  # the stack's CA would refuse the other server's certificate


def test_a_too_old_default_server_names_the_missing_stack(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MODELFORGE_HOME", str(tmp_path / "nothing-runs-here"))
    monkeypatch.delenv("NATS_URL", raising=False)

    async def refused(url: str | None = None) -> None:
        raise ServerTooOld("2.9.10", (2, 12, 0))

    monkeypatch.setattr(cli, "_provision", refused)
    assert cli.main(["provision"]) == 2
    err = capsys.readouterr().err
    assert "nats-server 2.9.10 is too old" in err
    assert "no embedded stack runs in" in err
    assert "nothing-runs-here" in err
    assert "Traceback" not in err


def _embedded_node_runs(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """An embedded stack with its agent runs in `home`; the environment names none of its settings."""
    running = {"NATS_URL": "nats://127.0.0.1:1", **stack.node_settings(home)}
    monkeypatch.setattr(stack, "running_environment", lambda home: running)
    for name in running:
        monkeypatch.delenv(name, raising=False)


def test_a_verb_takes_the_embedded_nodes_identity_and_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _embedded_node_runs(monkeypatch, tmp_path)
    cli._embedded_defaults("models")
    assert os.environ["MODELFORGE_NODE_ID"] == stack.NODE_ID
    assert os.environ["MODELFORGE_ARTIFACT_ROOT"] == str(tmp_path / "artifacts")


def test_another_agent_never_takes_the_embedded_nodes_identity(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _embedded_node_runs(monkeypatch, tmp_path)
    cli._embedded_defaults("agent")
    assert os.environ["NATS_URL"] == "nats://127.0.0.1:1"
    assert "MODELFORGE_NODE_ID" not in os.environ
    assert "MODELFORGE_ARTIFACT_ROOT" not in os.environ


def test_output_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    reader, writer = os.pipe()
    os.close(reader)  # as `modelforge ... | head` after head has read its lines
    script = "import sys; from modelforge import cli; sys.exit(cli.main(['status']))"
    env = {**os.environ, "MODELFORGE_HOME": str(tmp_path)}
    try:
        done = subprocess.run([sys.executable, "-c", script], stdout=writer, stderr=subprocess.PIPE, env=env)
    finally:
        os.close(writer)
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    assert done.returncode == 1
