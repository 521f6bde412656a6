"""Service clients: API keys, scopes and limits, as an event-sourced aggregate.

The HTTP layer uses `ClientDirectory` (authenticate, authorize), `RequestLimiter` (rpm and
concurrency across replicas) and, for admin verbs, `ClientService`.
"""

from gateway.clients.directory import ClientDirectory
from gateway.clients.limit_streams import provision_limits
from gateway.clients.limits import RequestLimiter
from gateway.clients.model import ClientPrincipal, ClientState, Credential
from gateway.clients.permit import Permit
from gateway.clients.service import ClientService, IssuedKey, client_id_for

__all__ = [
    "ClientDirectory",
    "ClientPrincipal",
    "ClientService",
    "ClientState",
    "Credential",
    "IssuedKey",
    "Permit",
    "RequestLimiter",
    "client_id_for",
    "provision_limits",
]
