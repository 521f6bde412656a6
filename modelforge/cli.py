"""`modelforge`: one console script, one subcommand per process or operator verb."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

Handler = Callable[[argparse.Namespace], int]

# Packages that add subcommands: each module has `register(subparsers) -> None`, whose parsers
# set `handler` (a Handler) as their default. Imported only when the CLI runs, in this order up to
# the one that registers the command run: the long-running processes' (agent, projector) first,
# so that they do not keep the gateway's modules resident (~18 MiB for each projector worker).
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "nodeagent.cli",
    "projections.cli",
    "gateway.cli",
    "gateway.admin.clients_cli",
    "gateway.admin.cli",
    "gateway.admin.models_cli",
    "gateway.admin.nodes_cli",
    "gateway.admin.canary_cli",
    "gateway.admin.operators_cli",
    "modelforge.backup_cli",
    "modelforge.certs_cli",
)

# Packages a process this CLI starts never uses, hidden from it (`run`). nats-py imports aiohttp,
# when it is installed, for NATS over WebSocket, which no ModelForge process speaks (the
# projector's reader speaks only NATS over TCP); the dev extras install it (the benches' load
# generator, the console test's browser), and then the gateway, the agent, each projector worker
# and `up` itself each paid ~130 ms of CPU at start and ~11 MiB resident (docs/performance.md).
UNUSED_PACKAGES: tuple[str, ...] = ("aiohttp",)


def _cmd_up(args: argparse.Namespace) -> int:
    from modelforge.devstack import demo, stack

    home = stack.state_dir()
    print(f"ModelForge embedded stack in {home}")
    try:
        state = stack.up(
            home, lambda url: asyncio.run(_provision(url)), print, args.nodes, args.cluster, args.gateway_port
        )
        gateway_url = state.extra["gateway_url"]
        gateway = next(c for c in state.components if c.name == "gateway")
        demo.wait_until_ready(gateway_url, gateway.pid, Path(gateway.log))
    except (stack.StackRefused, demo.GatewayNotUp) as refused:
        print(f"modelforge up: {refused}", file=sys.stderr)
        return 2
    print(f"gateway     {gateway_url}")
    nats_url = stack.nats_urls(state)
    demo.bootstrap(gateway_url, stack.operator_token(home), home, stack.NODE_ID, nats_url, print)
    print("stop it with: ./dev down (or .venv/bin/modelforge down)")
    return 0


def _node_count(text: str) -> int:
    count = int(text)
    if not 1 <= count <= 8:
        raise argparse.ArgumentTypeError("between 1 and 8 nodes")
    return count


def _cmd_down(args: argparse.Namespace) -> int:
    from modelforge.devstack import stack

    stack.down(stack.state_dir(), print)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from modelforge.devstack import health, stack

    home = stack.state_dir()
    checks = health.judge(health.observe(home))
    print(health.as_json(home, checks) if args.json else health.render(checks))
    return 0 if all(check.ok for check in checks) else 1


async def _provision(url: str | None = None) -> None:
    from eventstore.connection import CLI_CONNECT_S, connect
    from eventstore.provision import provision
    from eventstore.store import EventStore
    from gateway.clients.limit_streams import provision_limits
    from gateway.contracts import register_contracts

    connection = await connect(url, "modelforge-provision", first_connect_s=CLI_CONNECT_S)
    try:
        names = await provision(connection.client) + await provision_limits(connection.client)
        print("streams     " + ", ".join(names))
        registered = await register_contracts(EventStore(connection))
        print("contracts   " + (", ".join(registered) or "all registered before"))
    finally:
        await connection.close()


def _cmd_provision(args: argparse.Namespace) -> int:
    asyncio.run(_provision())
    return 0


def since_point(text: str) -> tuple[int, datetime | None]:
    """`audit tail --since`: a stream sequence, or an ISO time with its UTC offset."""
    from projections.cli import aware_time

    if text.isdigit():
        return int(text), None
    return 1, aware_time(text)


async def _audit_tail(args: argparse.Namespace) -> None:
    from eventstore import audit
    from eventstore.connection import CLI_CONNECT_S, connect

    since_seq, since_time = args.since
    connection = await connect(None, "modelforge-audit", first_connect_s=CLI_CONNECT_S)
    try:
        async for record in audit.tail(connection.client, args.aggregate, args.type, since_seq, since_time):
            if args.json:
                sys.stdout.write(audit.format_json(record).decode() + "\n")
            else:
                sys.stdout.write(audit.format_line(record) + "\n")
            sys.stdout.flush()
    finally:
        await connection.close()


def _cmd_audit_tail(args: argparse.Namespace) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_audit_tail(args))
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or with `command` of the subcommands up to the module that
    registers it: a process started as `modelforge agent` need not import the gateway (its admin
    verbs import most of it), ~0.8 s of CPU at each agent's start. An unknown `command` gets them all."""
    parser = argparse.ArgumentParser(prog="modelforge", description="ModelForge serving")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start the embedded stack (NATS, PostgreSQL, services)")
    up.add_argument(
        "--nodes",
        type=_node_count,
        help="run this many node agents, each its own node with its own CPU device and model folder "
        "(default: as many as the last `up`, 1 at first)",
    )
    up.add_argument(
        "--cluster",
        action="store_true",
        help="three NATS servers (streams on all three) with TLS on clients and routes, certificates in "
        "$MODELFORGE_HOME/certs (a new MODELFORGE_HOME; every later `up` there keeps the cluster)",
    )
    up.add_argument(
        "--gateway-port",
        type=int,
        help="the gateway's port from now on (default: the one it had, else 8080 where free, else a free one)",
    )
    up.set_defaults(handler=_cmd_up)
    sub.add_parser("down", help="stop what `up` started").set_defaults(handler=_cmd_down)
    status = sub.add_parser(
        "status", help="check the embedded stack: its processes, the gateway, the projection (1: not all ok)"
    )
    status.add_argument("--json", action="store_true", help="stack.json's fields and the checks")
    status.set_defaults(handler=_cmd_status)
    sub.add_parser(
        "provision", help="create or update the JetStream streams (and the limit streams)"
    ).set_defaults(handler=_cmd_provision)

    audit = sub.add_parser("audit", help="audit consumers").add_subparsers(
        dest="audit_command", required=True
    )
    tail = audit.add_parser("tail", help="print events as they happen")
    tail.add_argument("--aggregate", help="aggregate type, e.g. client, accelerator")
    tail.add_argument("--type", help="event type, e.g. LeaseGranted")
    tail.add_argument(
        "--since",
        type=since_point,
        default=(1, None),
        help="stream sequence, or ISO time with a UTC offset (e.g. 2026-12-01T09:00Z), to start from "
        "(default: the beginning)",
    )
    tail.add_argument("--json", action="store_true", help="one JSON object per line")
    tail.set_defaults(handler=_cmd_audit_tail)

    for module in SUBCOMMAND_MODULES:
        if command in sub.choices:
            break
        importlib.import_module(module).register(sub)
    return parser


def _embedded_defaults(command: str) -> None:
    """What the environment leaves unset (NATS_URL, DATABASE_URL, MODELFORGE_GATEWAY_URL,
    MODELFORGE_OPERATOR_TOKEN, the embedded node's MODELFORGE_NODE_ID and MODELFORGE_ARTIFACT_ROOT)
    defaults to the embedded stack `up` started, while it runs."""
    from eventstore.tls import CA_ENV, CERT_ENV, KEY_ENV
    from modelforge.devstack import stack

    home = stack.state_dir()
    settings = stack.running_environment(home)
    if os.environ.get("NATS_URL"):  # another NATS: the embedded cluster's TLS settings are not its
        settings = {k: v for k, v in settings.items() if k not in (CA_ENV, CERT_ENV, KEY_ENV)}
    if command == "agent":  # another agent is another node: never the embedded node's identity
        settings = {k: v for k, v in settings.items() if k not in stack.node_settings(home)}
    for name, value in settings.items():
        if not os.environ.get(name):  # an empty variable is unset (`export X=$(cat missing-file)`)
            os.environ[name] = value


def no_stack_hint() -> str:
    """Why a command reached NATS at the default URL, when it did: NATS_URL unset and no embedded
    stack running in MODELFORGE_HOME (often a shell that did not export the MODELFORGE_HOME `up` used)."""
    from eventstore.connection import DEFAULT_URL
    from modelforge.devstack import stack

    if os.environ.get("NATS_URL"):
        return ""
    return (
        f"NATS_URL is unset and no embedded stack runs in {stack.state_dir()}, so this used {DEFAULT_URL}:"
        " start one (./dev up), set MODELFORGE_HOME to the folder `up` used, or set NATS_URL"
    )


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(next((w for w in words if not w.startswith("-")), None)).parse_args(words)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command not in ("up", "down", "status"):  # `up` chooses for itself
        _embedded_defaults(args.command)
    from eventstore.connection import NatsUnreachable
    from eventstore.errors import ServerTooOld, StreamsNotProvisioned
    from eventstore.tls import TlsSettingsInvalid

    handler: Handler = args.handler
    try:
        return handler(args)
    except BrokenPipeError:
        # The reader left (`| head`): nothing is wrong with the command. Point stdout at devnull so
        # the interpreter's final flush does not fail again (the recipe of Python's signal docs).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (NatsUnreachable, ServerTooOld, StreamsNotProvisioned, TlsSettingsInvalid) as refused:
        print(f"modelforge: {refused}", file=sys.stderr)
        if hint := no_stack_hint():
            print(f"modelforge: {hint}", file=sys.stderr)
        return 2


def run() -> int:
    """`main` in a process of its own (the console script, `python -m modelforge.cli`): with
    UNUSED_PACKAGES hidden (`None` in `sys.modules`: importing one raises ImportError, as if it
    were not installed). An in-process caller of `main` (a test) keeps them."""
    for name in UNUSED_PACKAGES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None is the documented block
    return main()


if __name__ == "__main__":
    sys.exit(run())
