"""A fresh embedded stack for a benchmark: `modelforge up` in a home of its own on a free port, a
client key with limits no benchmark reaches, and the processes to share CPU out to; `down` after.

Used by `python -m bench.peer --up`, so that the side-by-side runs from one command on any
machine instead of from scripts that find pids by hand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec

from modelforge.devstack.processes import free_port

CAPABILITY = "rag.embedding@1"


class Stack(msgspec.Struct, frozen=True):
    url: str  # the embeddings route
    key: str
    cpu: dict[str, str]  # group -> `--cpu` spec: PID, a trailing `+` adds its descendants


class _Process(msgspec.Struct):
    pid: int


class _Component(msgspec.Struct):
    name: str
    pid: int


class _Extra(msgspec.Struct):
    gateway_url: str


class _StackFile(msgspec.Struct):
    """The part of `$MODELFORGE_HOME/stack.json` a benchmark reads."""

    nats: _Process
    postgres: _Process
    components: list[_Component]
    extra: _Extra


def _modelforge(home: Path, *args: str) -> str:
    env = {**os.environ, "MODELFORGE_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "modelforge.cli", *args], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"modelforge {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def _key(issued: str) -> str:
    for line in issued.splitlines():
        if line.startswith("api key"):
            return line.split()[-1]
    raise RuntimeError(f"no api key in:\n{issued}")


@contextmanager
def embedded_stack() -> Iterator[Stack]:
    """`up` in a new home (returns once the stack serves), then `down` and the home removed."""
    home = Path(tempfile.mkdtemp(prefix="mf-bench-home-"))
    home.chmod(0o755)  # (run as root, PostgreSQL runs as its own user, who must reach its folder)
    try:
        _modelforge(home, "up", "--gateway-port", str(free_port()))
        issued = _modelforge(
            home, "clients", "create", "--name", "bench", "--scope", CAPABILITY,
            "--rpm", "1000000", "--concurrency", "1000",
        )  # fmt: skip
        found = msgspec.json.decode((home / "stack.json").read_bytes(), type=_StackFile)
        pids = {component.name: component.pid for component in found.components}
        yield Stack(
            url=f"{found.extra.gateway_url}/v1/embeddings",
            key=_key(issued),
            cpu={
                "gateway": str(pids["gateway"]),
                "agent": f"{pids['agent']}+",  # with its model workers
                "nats": str(found.nats.pid),
                "projector": f"{pids['projector']}+",  # the supervisor and its workers
                "postgres": f"{found.postgres.pid}+",
            },
        )
    finally:
        try:
            _modelforge(home, "down")
        finally:
            shutil.rmtree(home, ignore_errors=True)
