"""`modelforge up` / `down`: the embedded stack, its state file, and the processes it started.

Infrastructure (nats-server, PostgreSQL) is reused when already running and restarted on the
same data otherwise. Components (projector, gateway, agent) are `modelforge <verb>` processes
registered in COMPONENTS by the packages that provide them.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec

from gateway.identity.registry import write_private
from gateway.operators import OPERATORS_FILE_ENV
from modelforge.devstack import nats_cluster
from modelforge.devstack.nats_server import NatsServer, start_nats
from modelforge.devstack.postgres import PostgresServer, postgres_url, start_postgres, stop_postgres
from modelforge.devstack.processes import free_port, pid_alive, port_is_free, started, stop_pid
from nodeagent.settings import ARTIFACT_ROOT_ENV, NODE_ID_ENV


class Component(msgspec.Struct):
    name: str
    pid: int
    log: str


class StackState(msgspec.Struct):
    nats: NatsServer | None = None
    cluster: list[NatsServer] = msgspec.field(default_factory=list)  # `up --cluster`'s servers
    postgres: PostgresServer | None = None
    components: list[Component] = msgspec.field(default_factory=list)
    extra: dict[str, str] = msgspec.field(default_factory=dict)  # e.g. gateway URL


NODE_ID = "local"
DEFAULT_GATEWAY_PORT = 8080
OPERATOR_ROLE = "provisioner"  # whose certificate `up` and the CLI verbs use on the cluster
# The gateway holds standby leases of this many requests per resident: a warm request runs under a
# free slot with no lease of its own (docs/scheduler.md, "Standby leases"), and on a cluster they
# keep it serving while a server dies (docs/event-log.md). The environment `up` runs in may set
# MODELFORGE_STANDBY_LEASES itself (0: a lease per request).
STANDBY_LEASES_ENV, STANDBY_SLOTS = "MODELFORGE_STANDBY_LEASES", "4"


class StackRefused(Exception):
    """`up` was asked for what this state folder cannot become (its log lives elsewhere)."""


def components(home: Path, state: StackState) -> list[tuple[str, list[str], dict[str, str]]]:
    """The services `up` runs, in start-up order: name, argv after `modelforge`, and what its
    environment adds. The first agent is the embedded node (`node_settings`); `up --nodes N` adds
    N - 1 more, each a node of its own with its own CPU device and model folder."""
    port = state.extra["gateway_port"]
    agents = []
    for index in range(1, node_count(state) + 1):
        settings = extra_node_settings(home, index)
        Path(settings.get(ARTIFACT_ROOT_ENV, home / "artifacts")).mkdir(parents=True, exist_ok=True)
        agents.append(("agent" if index == 1 else f"agent-{index}", ["agent"], settings))
    standby = {STANDBY_LEASES_ENV: os.environ.get(STANDBY_LEASES_ENV) or STANDBY_SLOTS}
    started = [
        ("projector", ["projector"], {}),
        *agents,
        ("gateway", ["gateway", "--port", port, "--gateway-id", "local"], standby),
    ]
    if not clustered(state):
        return started
    roles = {"projector": "projector", "gateway": "gateway"}  # every agent: "agent"
    return [
        (
            name,
            argv,
            {
                **nats_cluster.client_environment(home, roles.get(name, "agent")),
                **own,
            },
        )
        for name, argv, own in started
    ]


def choose_gateway_port(state: StackState, asked: int | None) -> None:
    """The gateway's port: `asked`, else the one it had, else 8080 where free, else a free one.
    StackRefused where the gateway must start and another process holds that port (an `up` of
    another MODELFORGE_HOME, say): its gateway would exit, and readiness checks could reach the
    other one."""
    port = asked or int(state.extra.get("gateway_port", "0"))
    port = port or (DEFAULT_GATEWAY_PORT if port_is_free(DEFAULT_GATEWAY_PORT) else free_port())
    running = any(c.name == "gateway" and pid_alive(c.pid) for c in state.components)
    if running and asked and asked != int(state.extra["gateway_port"]):
        raise StackRefused(f"the gateway runs on port {state.extra['gateway_port']}: `down` first to move it")
    if not running and not port_is_free(port):
        raise StackRefused(
            f"port {port} for the gateway is taken by another process: stop it, or `up --gateway-port PORT`"
        )
    state.extra["gateway_port"] = str(port)
    state.extra["gateway_url"] = f"http://127.0.0.1:{port}"


def clustered(state: StackState) -> bool:
    """Whether `up` runs the three-server cluster here (`up --cluster` once: every `up` after)."""
    return state.extra.get("cluster") == "1"


def nats_urls(state: StackState) -> str:
    """Where the stack's NATS answers (the cluster's three servers, or the one)."""
    if clustered(state):
        return nats_cluster.cluster_urls(state.cluster)
    return state.nats.url if state.nats else os.environ["NATS_URL"]


def node_count(state: StackState) -> int:
    """How many agents `up` runs: what `--nodes` last asked for (1 by default)."""
    return int(state.extra.get("nodes", "1"))


def extra_node_settings(home: Path, index: int) -> dict[str, str]:
    """The environment of the `index`-th node's agent beyond the embedded node's (nothing for it)."""
    if index == 1:
        return {}
    node = f"{NODE_ID}-{index}"
    return {NODE_ID_ENV: node, ARTIFACT_ROOT_ENV: str(home / f"artifacts-{node}")}


def operator_token(home: Path) -> str:
    """The embedded stack's operator token: made once, kept in a file only its owner can read."""
    path = home / "operator-token"
    if not path.exists():
        write_private(path, secrets.token_urlsafe(32).encode())
    return path.read_text().strip()


def operators_file(home: Path) -> Path:
    """Named operator keys (`modelforge operators add`), read by the embedded gateway."""
    return home / "operators"


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
    # Replaced whole: the processes `up` has started read it (`running_environment`) while `up`
    # records the next one, and a half-written file is not JSON.
    write_private(_state_file(home), msgspec.json.format(msgspec.json.encode(state)))


def running_environment(home: Path) -> dict[str, str]:
    """Where the embedded stack in `home` can be reached, for what of it is running: the settings
    operator commands fall back on when the environment does not name a server."""
    state = load_state(home)
    env: dict[str, str] = {}
    if state.nats and pid_alive(state.nats.pid):
        env["NATS_URL"] = state.nats.url
    if clustered(state) and any(pid_alive(member.pid) for member in state.cluster):
        env["NATS_URL"] = nats_urls(state)
        env.update(nats_cluster.client_environment(home, OPERATOR_ROLE))
    if state.postgres and pid_alive(state.postgres.pid):
        env["DATABASE_URL"] = state.postgres.url
    if (
        any(c.name == "gateway" and pid_alive(c.pid) for c in state.components)
        and "gateway_url" in state.extra
    ):
        env["MODELFORGE_GATEWAY_URL"] = state.extra["gateway_url"]
        if (home / "operator-token").exists():
            env["MODELFORGE_OPERATOR_TOKEN"] = operator_token(home)
        env[OPERATORS_FILE_ENV] = str(operators_file(home))
    if any(c.name == "agent" and pid_alive(c.pid) for c in state.components):
        env.update(node_settings(home))
    return env


def node_settings(home: Path) -> dict[str, str]:
    """The embedded node's identity and model folder (`models pull`, `artifacts import` use them)."""
    return {NODE_ID_ENV: NODE_ID, ARTIFACT_ROOT_ENV: str(home / "artifacts")}


def ensure_nats(home: Path, state: StackState) -> str:
    if clustered(state):
        state.cluster = nats_cluster.ensure_cluster(home, state.cluster)
        os.environ.update(nats_cluster.client_environment(home, OPERATOR_ROLE))  # provisioning, the demo
        return nats_urls(state)
    if os.environ.get("NATS_URL"):
        return os.environ["NATS_URL"]
    current = state.nats
    if current and pid_alive(current.pid):
        return current.url
    port = current.port if current and port_is_free(current.port) else None
    state.nats = start_nats(home, port)
    return state.nats.url


def planned_postgres(state: StackState) -> tuple[str, int | None]:
    """The database URL the services get, and the port PostgreSQL must be started on (None: it runs
    already, or DATABASE_URL names another). Known before it starts, so that the services which
    need no database to start are not held up by it."""
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"], None
    current = state.postgres
    if current and pid_alive(current.pid):
        return current.url, None
    port = current.port if current and port_is_free(current.port) else free_port()
    return postgres_url(port), port


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
    return Component(name, started(process), str(log))


def up(
    home: Path,
    provision: Callable[[str], None],
    echo: Callable[[str], None],
    nodes: int | None = None,
    cluster: bool = False,
    gateway_port: int | None = None,
) -> StackState:
    """`nodes`: run that many agents from now on (None: as many as the last `up`). `cluster`: three
    NATS servers with TLS from now on (StackRefused where the log already lives on one server).
    `gateway_port`: the gateway's from now on (`choose_gateway_port`)."""
    state = load_state(home)
    choose_gateway_port(state, gateway_port)
    if cluster and not clustered(state):
        if state.nats or os.environ.get("NATS_URL"):
            where = f"the NATS_URL {os.environ['NATS_URL']}" if os.environ.get("NATS_URL") else "one server"
            raise StackRefused(
                f"the event log of {home} lives on {where}: `up --cluster` starts its own three servers,"
                " in a MODELFORGE_HOME of its own (and NATS_URL unset)"
            )
        state.extra["cluster"] = "1"
    if nodes is not None:
        state.extra["nodes"] = str(nodes)
    nats_url = ensure_nats(home, state)
    echo(f"nats        {nats_url}")
    database_url, start_postgres_on = planned_postgres(state)
    save_state(home, state)
    provision(nats_url)
    env = {
        "NATS_URL": nats_url,
        "DATABASE_URL": database_url,
        "MODELFORGE_HOME": str(home),
        "MODELFORGE_OPERATOR_TOKEN": operator_token(home),
        OPERATORS_FILE_ENV: str(operators_file(home)),
        **node_settings(home),  # the gateway imports artifact sets into the embedded node's folder
    }
    running = {c.name: c for c in state.components if pid_alive(c.pid)}
    state.components, started = [], []

    def start(name: str, argv: list[str], own: dict[str, str]) -> None:
        component = running.pop(name, None)
        if component is None:
            component = start_component(home, name, argv, {**env, **own})
            started.append(component)
        state.components.append(component)
        echo(f"{name:<11} pid {component.pid}, log {component.log}")

    # The agents and the gateway need no database to start (the gateway reads it per call), so they
    # start while PostgreSQL does (a few hundred ms; initdb's seconds on a first run): the gateway's
    # start is on the way to the first answer. The projector starts once the database is up.
    services = components(home, state)
    try:
        for name, argv, own in services:
            if name != "projector":
                start(name, argv, own)
        if start_postgres_on is not None:
            state.postgres = start_postgres(home, start_postgres_on)
        echo(f"postgres    {database_url}")
    except BaseException:
        for component in started:  # nothing half-started is left behind
            stop_pid(component.pid)
        raise
    start(*next(service for service in services if service[0] == "projector"))
    for extra in running.values():  # agents beyond what --nodes now asks for
        stop_pid(extra.pid)
        echo(f"stopped {extra.name} (pid {extra.pid})")
    save_state(home, state)
    return state


def down(home: Path, echo: Callable[[str], None]) -> None:
    state = load_state(home)
    stopped = 0
    for component in reversed(state.components):
        stopped += pid_alive(component.pid)
        stop_pid(component.pid)
        echo(f"stopped {component.name} (pid {component.pid})")
    state.components = []
    if state.postgres and pid_alive(state.postgres.pid):
        stop_postgres(state.postgres)
        echo(f"stopped postgres (pid {state.postgres.pid})")
        stopped += 1
    if state.nats and pid_alive(state.nats.pid):
        stop_pid(state.nats.pid)
        echo(f"stopped nats (pid {state.nats.pid})")
        stopped += 1
    for member in state.cluster:
        if pid_alive(member.pid):
            stop_pid(member.pid)
            echo(f"stopped {member.name} (pid {member.pid})")
            stopped += 1
    if not stopped:  # often a shell without the MODELFORGE_HOME `up` ran with
        echo(f"nothing of the embedded stack runs in {home} (set MODELFORGE_HOME to the folder `up` used)")
    if _state_file(home).exists():  # never make a state folder where no stack ran
        save_state(home, state)
