"""`modelforge clients …`: create, rotate, revoke, disable, enable and list service clients.

Talks to the event store named by NATS_URL. A new key is printed once; hashes are never printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from gateway.clients.model import ClientState
from gateway.clients.service import ClientService, IssuedKey
from streams.codes import ServingError
from streams.envelope import Actor, ActorKind


def register(subparsers: Any) -> None:
    clients = subparsers.add_parser("clients", help="service clients and their API keys")
    verbs = clients.add_subparsers(dest="clients_command", required=True)

    create = verbs.add_parser("create", help="create a client and print its first API key (once)")
    create.add_argument("--name", required=True)
    create.add_argument("--scope", action="append", required=True, help="capability@version; repeatable")
    create.add_argument("--rpm", type=int, default=60, help="requests per minute (default 60)")
    create.add_argument("--concurrency", type=int, default=4, help="max concurrent requests (default 4)")
    create.add_argument(
        "--priority",
        type=int,
        default=0,
        help="workload priority: higher is woken first when waiting for capacity",
    )
    create.add_argument("--project", help="project id to bind the client to")
    create.add_argument("--expires-in-days", type=float, help="the key expires after this many days")
    create.add_argument(
        "--environment", default="", help="the integration environment it calls from (e.g. production)"
    )
    create.add_argument("--purpose", default="", help="what the client uses its capabilities for")
    create.set_defaults(handler=_run(_create))

    rotate = verbs.add_parser(
        "rotate",
        help="issue a new key; the old one stops (after a grace period); a client whose keys were "
        "all revoked gets a fresh one",
    )
    rotate.add_argument("client", help="client id or name")
    rotate.add_argument("--grace-seconds", type=float, default=0.0)
    rotate.add_argument("--expires-in-days", type=float)
    rotate.set_defaults(handler=_run(_rotate))

    revoke = verbs.add_parser("revoke", help="revoke one credential at once")
    revoke.add_argument("client", help="client id or name")
    revoke.add_argument("credential")
    revoke.add_argument("--reason", default="")
    revoke.set_defaults(handler=_run(_revoke))

    disable = verbs.add_parser("disable", help="refuse every key of a client")
    disable.add_argument("client", help="client id or name")
    disable.add_argument("--reason", default="")
    disable.set_defaults(handler=_run(_disable))

    enable = verbs.add_parser("enable", help="accept a disabled client's keys again")
    enable.add_argument("client", help="client id or name")
    enable.set_defaults(handler=_run(_enable))

    limits = verbs.add_parser(
        "limits",
        help="change a client's scopes, rate, concurrency or priority (what is not given stays)",
    )
    limits.add_argument("client", help="client id or name")
    limits.add_argument("--scope", action="append", help="capability@version; repeatable; replaces all")
    limits.add_argument("--rpm", type=int, help="requests per minute")
    limits.add_argument("--concurrency", type=int, help="max concurrent requests")
    limits.add_argument("--priority", type=int, help="workload priority")
    limits.set_defaults(handler=_run(_limits))

    listing = verbs.add_parser("list", help="clients, limits and credentials (never keys)")
    listing.add_argument("--json", action="store_true", help="the admin API's JSON of the clients")
    listing.set_defaults(handler=_run(_list))


Verb = Callable[[ClientService, argparse.Namespace], Awaitable[None]]


def _run(verb: Verb) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        try:
            asyncio.run(_with_service(verb, args))
        except ServingError as exc:
            print(f"error {exc.code}: {exc.message}", file=sys.stderr)
            return 1
        return 0

    return handler


async def _with_service(verb: Verb, args: argparse.Namespace) -> None:
    from eventstore.connection import CLI_CONNECT_S, connect
    from eventstore.provision import provision
    from eventstore.store import EventStore

    connection = await connect(None, "modelforge-clients", first_connect_s=CLI_CONNECT_S)
    try:
        await provision(connection.client)
        service = ClientService(EventStore(connection), actor=Actor(ActorKind.OPERATOR, "cli"))
        await verb(service, args)
    finally:
        await connection.close()


async def _resolve(service: ClientService, ref: str) -> str:
    """Accept a client id or a client name."""
    from gateway.clients.service import client_id_for

    for candidate in (ref, client_id_for(ref)):
        try:
            if await service.get(candidate) is not None:
                return candidate
        except ServingError:
            continue
    raise ServingError("CLIENT_NOT_FOUND", f"no service client {ref!r}", "client")


def _days(value: float | None) -> timedelta | None:
    if value is None:
        return None
    try:
        return timedelta(days=value)
    except (ValueError, OverflowError):  # nan, inf, more days than a timedelta holds
        raise ServingError("INVALID_INPUT", f"{value} is not a lifetime in days", "expires_in") from None


def _print_key(issued: IssuedKey) -> None:
    print(f"client      {issued.client_id}")
    print(f"credential  {issued.credential_id}")
    if issued.expires_at is not None:
        print(f"expires     {issued.expires_at.isoformat()}")
    print(f"api key     {issued.key}")
    print("            (shown once: store it now; only its hash is kept)")


async def _create(service: ClientService, args: argparse.Namespace) -> None:
    issued = await service.create(
        args.name,
        tuple(args.scope),
        requests_per_minute=args.rpm,
        max_concurrency=args.concurrency,
        priority=args.priority,
        project_id=args.project,
        expires_in=_days(args.expires_in_days),
        integration_environment=args.environment,
        purpose=args.purpose,
    )
    _print_key(issued)


async def _rotate(service: ClientService, args: argparse.Namespace) -> None:
    client_id = await _resolve(service, args.client)
    issued = await service.rotate(
        client_id, grace_s=args.grace_seconds, expires_in=_days(args.expires_in_days)
    )
    _print_key(issued)


async def _revoke(service: ClientService, args: argparse.Namespace) -> None:
    client_id = await _resolve(service, args.client)
    await service.revoke(client_id, args.credential, args.reason)
    print(f"revoked {args.credential} of {client_id}")


async def _disable(service: ClientService, args: argparse.Namespace) -> None:
    client_id = await _resolve(service, args.client)
    await service.disable(client_id, args.reason)
    print(f"disabled {client_id}")


async def _enable(service: ClientService, args: argparse.Namespace) -> None:
    client_id = await _resolve(service, args.client)
    await service.enable(client_id)
    print(f"enabled {client_id}")


async def _limits(service: ClientService, args: argparse.Namespace) -> None:
    client_id = await _resolve(service, args.client)
    await service.change_limits(
        client_id,
        scopes=tuple(args.scope) if args.scope else None,
        requests_per_minute=args.rpm,
        max_concurrency=args.concurrency,
        priority=args.priority,
    )
    state = await service.get(client_id)
    assert state is not None
    print(format_client(state))


async def _list(service: ClientService, args: argparse.Namespace) -> None:
    from gateway.admin.clients import client_view
    from gateway.admin.tables import clients, table

    rows = msgspec.to_builtins([client_view(state) for state in await service.all_clients()])
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        print(table(rows, clients(datetime.now(UTC))))


def format_client(state: ClientState) -> str:
    """Display lines for one client: limits and credentials by id and prefix, never a hash."""
    status = "enabled" if state.enabled else "disabled"
    lines = [
        f"{state.client_id}  {state.name}  [{status}]  scopes={','.join(state.scopes)}  "
        f"rpm={state.requests_per_minute}  concurrency={state.max_concurrency}  priority={state.priority}"
        + (f"  project={state.project_id}" if state.project_id else "")
        + (f"  environment={state.integration_environment}" if state.integration_environment else "")
        + (f"  purpose={state.purpose!r}" if state.purpose else "")
    ]
    for credential in state.credentials:
        if credential.revoked:
            note = "revoked"
        elif credential.grace_until is not None:
            note = f"rotated, valid until {credential.grace_until.isoformat()}"
        else:
            note = "active"
        if credential.expires_at is not None:
            note += f", expires {credential.expires_at.isoformat()}"
        lines.append(f"    {credential.credential_id}  {credential.key_prefix}…  {note}")
    return "\n".join(lines)
