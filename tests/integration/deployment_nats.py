"""A nats-server running deploy/nats/nats.conf itself, and a URL per role, for the deployment tests.

Only what ties the file to the compose network is left out (the cluster block, whose routes name
the other containers, the monitoring port, and the jetstream block with the container's store
folder); the port and JetStream's store come from the command line, the passwords and server name
from the environment, as in compose.yaml. Its client `tls` block stays, naming certificates
`modelforge certs` made for the test where compose mounts them (/etc/nats-certs), so every role
connects over TLS with a client certificate, as in production: the server process's environment
carries the TLS variables (eventstore/tls.py) while it runs. The accounts, users and permissions
are the file's own, with the node users rendered for NODES (each with a seed file of its own) as
`modelforge nodes credentials` renders them.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from eventstore.connection import Connection, connect, public_key_of
from gateway.identity.nats_users import NodeIdentity, with_node_users
from gateway.identity.registry import new_seed, write_private
from modelforge.certs_cli import client_settings, make_certificates
from modelforge.devstack.nats_server import NatsServer, start_nats
from modelforge.devstack.processes import stop_pid
from modelforge.pki import default_identities

CONFIG = Path(__file__).resolve().parents[2] / "deploy/nats/nats.conf"
COMPOSE_CERTS = "/etc/nats-certs"  # where compose.yaml mounts a server's certificate folder
SERVER_IDENTITY = "nats-1"
ROLES = ("provisioner", "gateway", "projector", "audit", "sys")
PASSWORDS = {role: f"{role}-secret" for role in ROLES}
NODES = ("node-a", "node-b")


def _without_block(text: str, name: str) -> str:
    """`text` less the top-level `name { ... }` block (braces matched)."""
    found = re.search(rf"^{name}\s*\{{", text, re.MULTILINE)
    assert found is not None, f"{CONFIG} has no {name} block"
    depth = 0
    for end in range(found.end() - 1, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0:
            return text[: found.start()] + text[end + 1 :]
    raise AssertionError(f"{CONFIG}: the {name} block is not closed")


def single_server_config(certs: Path) -> str:
    text = _without_block(_without_block(CONFIG.read_text(), "cluster"), "jetstream")
    text = text.replace(f"{COMPOSE_CERTS}/", f"{certs / SERVER_IDENTITY}/")
    return re.sub(r"^http:.*$", "", text, flags=re.MULTILINE)


def certificates(scratch: Path) -> Path:
    folder = scratch / "deployment-certs"
    if not (folder / SERVER_IDENTITY).exists():
        make_certificates(folder, default_identities())
    return folder


@contextmanager
def tls_settings(certs: Path) -> Iterator[None]:
    """The TLS variables of a gateway's process while the server runs (restored after)."""
    settings = client_settings(certs, "gateway")
    before = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def seed_file(server: NatsServer, node: str) -> Path:
    return Path(server.store_dir).parent / "seeds" / f"{node}.nk"


def config_file(server: NatsServer) -> Path:
    """The file the server runs (start_nats writes it next to the store)."""
    return Path(server.store_dir).parent / "nats.conf"


@contextmanager
def deployment_server(scratch: Path) -> Iterator[NatsServer]:
    env = {f"{role.upper()}_PASSWORD": password for role, password in PASSWORDS.items()}
    state = scratch / f"nats-deploy-{uuid.uuid4().hex[:8]}"
    identities = {}
    for node in NODES:
        seed = new_seed()
        write_private(state / "seeds" / f"{node}.nk", seed)
        identities[node] = NodeIdentity(node, public_key_of(seed))
    certs = certificates(scratch)
    server = start_nats(
        state,
        detach=False,
        config_text=with_node_users(single_server_config(certs), identities),
        env={**env, "SERVER_NAME": "nats-permissions"},
    )
    try:
        with tls_settings(certs):
            yield server
    finally:
        stop_pid(server.pid)


def url(server: NatsServer, role: str) -> str:
    return f"nats://{role}:{PASSWORDS[role]}@127.0.0.1:{server.port}"


async def connect_node(server: NatsServer, node: str) -> Connection:
    """A node agent's connection: it signs in with its node's seed, as NATS_NKEY_SEED makes it."""
    return await connect(
        f"nats://127.0.0.1:{server.port}", f"agent-{node}", nkey_seed=str(seed_file(server, node))
    )


def restarted(server: NatsServer) -> NatsServer:
    """The same server (port, store) started anew on the configuration file as it now reads."""
    stop_pid(server.pid)
    env = {f"{role.upper()}_PASSWORD": password for role, password in PASSWORDS.items()}
    return start_nats(
        Path(server.store_dir).parent,
        server.port,
        detach=False,
        config_text=config_file(server).read_text(),
        env={**env, "SERVER_NAME": "nats-permissions"},
    )
