"""Three nats-server processes from the wheel routed into one JetStream cluster on this machine:
`up --cluster`, and the suite's cluster (tests/support/cluster.py), the production shape of
compose.yaml. With certificates (`modelforge certs`, one folder per server named like it) every
client connection and every route is TLS with verify on, as deploy/nats/nats.conf has it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from eventstore.provision import REPLICAS_ENV
from modelforge.certs_cli import client_settings, make_certificates
from modelforge.devstack.nats_server import CONFIG, NatsServer, PortTaken, start_nats
from modelforge.devstack.nats_tls import tls_block
from modelforge.devstack.processes import free_port, pid_alive, port_is_free, stop_pid
from modelforge.pki import default_identities

CLUSTER_NAME = "modelforge"
MEMBERS = ("nats-1", "nats-2", "nats-3")  # compose.yaml's names, which `modelforge certs` signs
CERTS_FOLDER = "certs"
# Starts of the three with newly planned ports before giving up, when a port is taken each time.
STARTS = 5


def member_config(name: str, route_port: int, route_ports: Sequence[int], certs: Path | None) -> str:
    """One member's config; its client port and store come from start_nats's flags."""
    routes = ", ".join(f"nats-route://127.0.0.1:{port}" for port in route_ports)
    route_tls = tls_block(certs / name) if certs else ""
    client_tls = tls_block(certs / name) if certs else ""
    return (
        CONFIG
        + f"server_name: {name}\n"
        + f"cluster {{\n  name: {CLUSTER_NAME}\n  listen: 127.0.0.1:{route_port}\n  routes: [{routes}]\n"
        + (f"  {route_tls}" if route_tls else "")
        + "}\n"
        + client_tls
    )


def plan_members(previous: Sequence[NatsServer] = ()) -> list[NatsServer]:
    """Each member's ports: the ones it had (a restart keeps the routes every member names and the
    client port its clients know), else a free route port (every member's config names them all
    before any starts) and client port 0 (the server picks one as it binds). pid 0: not started."""
    kept = {server.name: server for server in previous}
    planned = []
    for name in MEMBERS:
        before = kept.get(name)
        port = before.port if before and port_is_free(before.port) else 0
        route_port = before.route_port if before and port_is_free(before.route_port) else free_port()
        planned.append(NatsServer(0, port, "", "", name=name, route_port=route_port))
    return planned


def start_member(
    home: Path, member: NatsServer, members: Sequence[NatsServer], certs: Path | None, *, detach: bool = True
) -> NatsServer:
    """Starts `member` (of `members`, which name every route) in home/<its name>."""
    config = member_config(member.name, member.route_port, [m.route_port for m in members], certs)
    started = start_nats(home / member.name, member.port or None, detach=detach, config_text=config)
    return NatsServer(
        started.pid, started.port, started.store_dir, started.log,
        name=member.name, route_port=member.route_port, tls=certs is not None,
    )  # fmt: skip


def start_all(
    home: Path, plan: Callable[[], list[NatsServer]], certs: Path | None, *, detach: bool = True
) -> list[NatsServer]:
    """Starts the members `plan()` gives. Another process may bind a planned route port before its
    member does (the ports are chosen before any server starts); that member exits, and a fresh
    cluster missing one of its three never elects a meta leader. So the members started are stopped
    and all start again on the ports `plan()` gives next (the taken one is no longer free)."""
    for _ in range(STARTS - 1):
        try:
            return _start_planned(home, plan(), certs, detach)
        except PortTaken:
            continue
    return _start_planned(home, plan(), certs, detach)


def _start_planned(
    home: Path, members: list[NatsServer], certs: Path | None, detach: bool
) -> list[NatsServer]:
    started: list[NatsServer] = []
    try:
        for member in members:
            started.append(start_member(home, member, members, certs, detach=detach))
    except PortTaken:
        for member in started:
            stop_pid(member.pid)
        raise
    return started


def start_cluster(home: Path, certs: Path | None, *, detach: bool = True) -> list[NatsServer]:
    """Starts the three members on free ports; JetStream answers once they elect a meta leader
    (provisioning waits for that itself)."""
    return start_all(home, plan_members, certs, detach=detach)


def cluster_urls(members: Sequence[NatsServer]) -> str:
    return ",".join(member.url for member in members)


def _running(member: NatsServer) -> bool:
    return member.pid > 0 and pid_alive(member.pid)


def ensure_cluster(home: Path, members: Sequence[NatsServer]) -> list[NatsServer]:
    """`up --cluster`: the members as they run, each one down started again on its ports (all on
    new free ones when none runs), with TLS from the certificates in home/certs, made on the first
    run and kept after."""
    certs = home / CERTS_FOLDER
    make_certificates(certs, default_identities())
    if not any(_running(member) for member in members):
        return start_all(home, lambda: plan_members(members), certs)
    return [member if _running(member) else start_member(home, member, members, certs) for member in members]


def client_environment(home: Path, role: str) -> dict[str, str]:
    """What a process of `role` (a folder of home/certs) needs to use the cluster: its TLS
    settings, and three copies of every stream it provisions."""
    return {**client_settings(home / CERTS_FOLDER, role), REPLICAS_ENV: str(len(MEMBERS))}
