"""`modelforge nodes credentials NODE` and `modelforge nodes revoke NODE`: a node's NATS identity.

Both run as the provisioner user (NATS_URL names it): they record the identity on the node's
aggregate, re-render the node users of the server configuration from every recorded identity, and
have the servers whose pids are given re-read it (elsewhere: `docker compose kill -s HUP nats-1 ...`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from streams.codes import ServingError

DEFAULT_CONFIG = Path("deploy/nats/nats.conf")
DEFAULT_SEEDS = Path("deploy/nodes")


def register_identity_verbs(verbs: Any) -> None:
    made = verbs.add_parser("credentials", help="make a node's NATS nkey and give it a user of its own")
    made.add_argument("node")
    made.add_argument("--seeds", type=Path, default=DEFAULT_SEEDS, help="folder of the seed file <node>.nk")
    _config_arguments(made)
    made.set_defaults(handler=_handler(_credentials))
    gone = verbs.add_parser("revoke", help="take a node's NATS user away: its agent is refused at once")
    gone.add_argument("node")
    gone.add_argument("--reason", default="")
    _config_arguments(gone)
    gone.set_defaults(handler=_handler(_revoke))


def _config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="the nats-server configuration")
    parser.add_argument(
        "--reload-pid",
        type=int,
        action="append",
        default=[],
        help="a local nats-server to reload (repeatable)",
    )


def _handler(command: Any) -> Any:
    def handle(args: argparse.Namespace) -> int:
        try:
            asyncio.run(command(args))
        except (ServingError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0

    return handle


async def _credentials(args: argparse.Namespace) -> None:
    from eventstore.connection import public_key_of
    from gateway.identity import registry
    from streams import subjects

    node = subjects.token(args.node, "node id")
    seed = registry.new_seed()
    seed_file = args.seeds / f"{node}.nk"
    registry.write_private(seed_file, seed + b"\n")
    public_key = public_key_of(seed)
    await _recorded(args, lambda store, _: registry.issue(store, node, public_key))
    print(f"node {node}: public key {public_key}")
    print(f"seed {seed_file} (mode 0600): give it to the node's agent as NATS_NKEY_SEED, nowhere else")


async def _revoke(args: argparse.Namespace) -> None:
    from gateway.identity import registry

    await _recorded(args, lambda store, found: registry.revoke(store, found, args.node, args.reason))
    print(f"node {args.node}: credentials revoked; its agent is refused once the servers reload")


async def _recorded(args: argparse.Namespace, record: Any) -> None:
    """Record the change, then render the configuration from every identity and reload."""
    from eventstore.connection import CLI_CONNECT_S, connect
    from eventstore.store import EventStore
    from gateway.identity import registry

    connection = await connect(None, "modelforge-nodes", first_connect_s=CLI_CONNECT_S)
    try:
        await record(EventStore(connection), await registry.recorded_identities(connection.client))
        identities = await registry.recorded_identities(connection.client)
    finally:
        await connection.close()
    registry.render_config(args.config, identities)
    registry.reload_servers(args.reload_pid)
    print(f"{args.config}: {len(identities)} node users", "(servers reloaded)" if args.reload_pid else "")
