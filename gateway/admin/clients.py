"""Admin endpoints for service clients: create (its key shown once), rotate (a new key shown once),
revoke one credential, disable, enable, and list (credentials by id and prefix: never a key or a
hash). Each answers once this gateway's key directory holds the change, so the next request it
serves sees it; the other replicas follow through their own subscriptions. A directory that has
not applied it within APPLY_WAIT_S (its feed stalled) does not hold the answer back: the change is
recorded, so the answer says `"applied": false` and shows the client as the event log has it (a
key is shown once: an error answer would lose it)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any

import msgspec

from gateway.admin.endpoint import ROWS, Call, Endpoint
from gateway.admin.pipeline import Reason
from gateway.admin.reads import last_uses
from gateway.clients.model import ClientState
from gateway.clients.service import ClientService, IssuedKey
from streams.codes import ServingError

log = logging.getLogger("modelforge.gateway.admin.clients")
APPLY_WAIT_S = 10.0
CENTURY_S = 100 * 365 * 86_400.0  # a key's lifetime, at most (a date past the calendar is no date)
Lifetime = Annotated[float, msgspec.Meta(gt=0, le=CENTURY_S)]


class NewClient(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    scopes: list[str]
    requests_per_minute: int = 60
    max_concurrency: int = 4
    priority: int = 0
    project_id: str | None = None
    expires_in_s: Lifetime | None = None  # the first key's lifetime (default: no expiry)
    integration_environment: str = ""  # where the client calls from, e.g. "production", "staging"
    purpose: str = ""  # what it uses the capabilities for, in a line


class LimitsChange(msgspec.Struct, frozen=True, kw_only=True):
    """What is not given stays as it is; `scopes` replaces every scope."""

    scopes: list[str] | None = None
    requests_per_minute: int | None = None
    max_concurrency: int | None = None
    priority: int | None = None


class Rotation(msgspec.Struct, frozen=True, kw_only=True):
    grace_s: float = 0.0  # how long the old key keeps working
    credential_id: str | None = None  # default: the current credential
    expires_in_s: Lifetime | None = None  # the new key's lifetime


def _lifetime(seconds: float | None) -> timedelta | None:
    return timedelta(seconds=seconds) if seconds is not None else None


def _key(issued: IssuedKey, applied: bool) -> dict[str, Any]:
    return {
        "applied": applied,
        "client_id": issued.client_id,
        "credential_id": issued.credential_id,
        "key": issued.key,  # shown once, never stored
        "key_prefix": issued.key_prefix,
        "expires_at": issued.expires_at,
    }


def client_view(state: ClientState, last_used: Mapping[str, object] | None = None) -> dict[str, Any]:
    """The client as the admin API shows it; `last_used`: client and credential ids -> when their
    key last authenticated a request (the read model's, to within a minute)."""
    used = last_used or {}
    return {
        "client_id": state.client_id,
        "name": state.name,
        "scopes": list(state.scopes),
        "requests_per_minute": state.requests_per_minute,
        "max_concurrency": state.max_concurrency,
        "priority": state.priority,
        "enabled": state.enabled,
        "project_id": state.project_id,
        "integration_environment": state.integration_environment,
        "purpose": state.purpose,
        "last_used_at": used.get(state.client_id),
        "credentials": [
            {
                "credential_id": c.credential_id,
                "key_prefix": c.key_prefix,
                "revoked": c.revoked,
                "grace_until": c.grace_until,
                "expires_at": c.expires_at,
                "last_used_at": used.get(c.credential_id),
            }
            for c in state.credentials
        ],
    }


async def applied_here(call: Call, sequence: int) -> bool:
    """Whether this gateway's key directory holds the event at `sequence` within APPLY_WAIT_S."""
    try:
        await call.edge.directory.wait_until_applied(sequence, timeout=APPLY_WAIT_S)
    except TimeoutError:
        log.warning("client change %d recorded but not applied here within %.0f s", sequence, APPLY_WAIT_S)
        return False
    return True


async def _state_after(call: Call, sequence: int) -> object:
    client_id = call.path["client_id"]
    applied = await applied_here(call, sequence)
    if applied:
        state = call.edge.directory.client(client_id)
    else:
        state = await ClientService(call.edge.ctx.store).get(client_id)
    if state is None:  # (the command would have been refused CLIENT_NOT_FOUND)
        raise ServingError("CLIENT_NOT_FOUND", f"no service client {client_id!r}", "client_id")
    return {**client_view(state), "applied": applied}


async def create_client(call: Call) -> object:
    b: NewClient = call.body
    clients = ClientService(call.edge.ctx.store, actor=call.actor)
    issued = await clients.create(
        b.name, b.scopes, requests_per_minute=b.requests_per_minute, max_concurrency=b.max_concurrency,
        priority=b.priority, project_id=b.project_id, expires_in=_lifetime(b.expires_in_s),
        integration_environment=b.integration_environment, purpose=b.purpose,
    )  # fmt: skip
    return _key(issued, await applied_here(call, issued.sequence))


async def rotate(call: Call) -> object:
    b: Rotation = call.body
    clients = ClientService(call.edge.ctx.store, actor=call.actor)
    issued = await clients.rotate(
        call.path["client_id"],
        grace_s=b.grace_s,
        credential_id=b.credential_id,
        expires_in=_lifetime(b.expires_in_s),
    )
    return _key(issued, await applied_here(call, issued.sequence))


async def revoke(call: Call) -> object:
    b: Reason = call.body
    clients = ClientService(call.edge.ctx.store, actor=call.actor)
    return await _state_after(
        call, await clients.revoke(call.path["client_id"], call.path["credential_id"], b.reason)
    )


async def disable(call: Call) -> object:
    b: Reason = call.body
    clients = ClientService(call.edge.ctx.store, actor=call.actor)
    return await _state_after(call, await clients.disable(call.path["client_id"], b.reason))


async def enable(call: Call) -> object:
    clients = ClientService(call.edge.ctx.store, actor=call.actor)
    return await _state_after(call, await clients.enable(call.path["client_id"]))


async def change_limits(call: Call) -> object:
    b: LimitsChange = call.body
    clients = ClientService(call.edge.ctx.store, actor=call.actor)
    changed = await clients.change_limits(
        call.path["client_id"],
        scopes=tuple(b.scopes) if b.scopes is not None else None,
        requests_per_minute=b.requests_per_minute,
        max_concurrency=b.max_concurrency,
        priority=b.priority,
    )
    return await _state_after(call, changed)


async def list_clients(call: Call) -> object:
    clients = await ClientService(call.edge.ctx.store).all_clients()
    used = await last_uses(call)
    return [client_view(s, used) for s in clients]


ENDPOINTS = [
    Endpoint("POST", "/clients", "Create a service client (its key is shown once)", create_client, NewClient, "clients"),
    Endpoint("GET", "/clients", "Service clients and their credentials (never keys)", list_clients, tag="clients", response=ROWS),
    Endpoint("POST", "/clients/{client_id}/rotate", "A new key (shown once); the old one stops after grace_s", rotate, Rotation, "clients"),
    Endpoint("POST", "/clients/{client_id}/credentials/{credential_id}/revoke", "Revoke a credential at once", revoke, Reason, "clients"),
    Endpoint("POST", "/clients/{client_id}/limits", "Change scopes, rate, concurrency or priority (omitted: unchanged)", change_limits, LimitsChange, "clients"),
    Endpoint("POST", "/clients/{client_id}/disable", "Refuse every key of a client (403)", disable, Reason, "clients"),
    Endpoint("POST", "/clients/{client_id}/enable", "Accept a disabled client's keys again", enable, tag="clients"),
]  # fmt: skip
