"""`modelforge up` / `down`: the embedded stack, its state file, and the processes it started.

Infrastructure (nats-server, PostgreSQL) is reused when already running and restarted on the
same data otherwise. Components (projector, gateway, agent) are `modelforge <verb>` processes
registered in COMPONENTS by the packages that provide them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec

from modelforge.devstack.nats_server import NatsServer, start_nats
from modelforge.devstack.postgres import PostgresServer, start_postgres, stop_postgres
from modelforge.devstack.processes import pid_alive, port_is_free, stop_pid


class Component(msgspec.Struct):
    name: str
    pid: int
    log: str


class StackState(msgspec.Struct):
    nats: NatsServer | None = None
    postgres: PostgresServer | None = None
    components: list[Component] = msgspec.field(default_factory=list)
    extra: dict[str, str] = msgspec.field(default_factory=dict)  # e.g. gateway URL


# name -> argv after `modelforge`; filled in order of start-up by later features.
COMPONENTS: list[tuple[str, list[str]]] = []


def state_dir() -> Path:
    return Path(os.environ.get("MODELFORGE_HOME", ".modelforge")).resolve()


def _state_file(home: Path) -> Path:
    return home / "stack.json"


def load_state(home: Path) -> StackState:
    path = _state_file(home)
    if not path.exists():
        return StackState()
    return msgspec.json.decode(path.read_bytes(), type=StackState)


def save_state(home: Path, state: StackState) -> None:
    home.mkdir(parents=True, exist_ok=True)
    _state_file(home).write_bytes(msgspec.json.format(msgspec.json.encode(state)))


def ensure_nats(home: Path, state: StackState) -> str:
    if os.environ.get("NATS_URL"):
        return os.environ["NATS_URL"]
    current = state.nats
    if current and pid_alive(current.pid):
        return current.url
    port = current.port if current and port_is_free(current.port) else None
    state.nats = start_nats(home, port)
    return state.nats.url


def ensure_postgres(home: Path, state: StackState) -> str:
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    current = state.postgres
    if current and pid_alive(current.pid):
        return current.url
    port = current.port if current and port_is_free(current.port) else None
    state.postgres = start_postgres(home, port)
    return state.postgres.url


def start_component(home: Path, name: str, argv: list[str], env: dict[str, str]) -> Component:
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "modelforge.cli", *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
        )
    return Component(name, process.pid, str(log))


def up(home: Path, provision: Callable[[str], None], echo: Callable[[str], None]) -> StackState:
    state = load_state(home)
    nats_url = ensure_nats(home, state)
    echo(f"nats        {nats_url}")
    database_url = ensure_postgres(home, state)
    echo(f"postgres    {database_url}")
    save_state(home, state)
    provision(nats_url)
    env = {"NATS_URL": nats_url, "DATABASE_URL": database_url, "MODELFORGE_HOME": str(home)}
    running = {c.name: c for c in state.components if pid_alive(c.pid)}
    state.components = []
    for name, argv in COMPONENTS:
        component = running.get(name) or start_component(home, name, argv, env)
        state.components.append(component)
        echo(f"{name:<11} pid {component.pid}, log {component.log}")
    save_state(home, state)
    return state


def down(home: Path, echo: Callable[[str], None]) -> None:
    state = load_state(home)
    for component in reversed(state.components):
        stop_pid(component.pid)
        echo(f"stopped {component.name} (pid {component.pid})")
    state.components = []
    if state.postgres and pid_alive(state.postgres.pid):
        stop_postgres(state.postgres)
        echo(f"stopped postgres (pid {state.postgres.pid})")
    if state.nats and pid_alive(state.nats.pid):
        stop_pid(state.nats.pid)
        echo(f"stopped nats (pid {state.nats.pid})")
    save_state(home, state)
