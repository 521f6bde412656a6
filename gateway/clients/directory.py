"""`ClientDirectory`: the `ClientIndex` of one gateway process, kept live from the event log.

Catch-up reads all client events, and the project events that bind clients and channels, with
batched direct gets; then one ordered consumer on those subjects pushes each new event as it is
stored, in stream order, so a revocation, rotation, disable or project binding reaches every
gateway replica within milliseconds (one NATS hop), not at a polling interval.
`authenticate`, `authorize` and `route` are in-memory and synchronous: no I/O on the hot path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from datetime import datetime

from nats.aio.client import Client

from eventstore import reading
from eventstore.subscription import subscribe
from gateway.clients.index import FEED, ClientIndex
from gateway.clients.model import ClientPrincipal, ClientState
from streams import subjects
from streams.envelope import utcnow

log = logging.getLogger("modelforge.gateway.clients")

RESUBSCRIBE_S = 0.5


class ClientDirectory:
    """One per gateway process: `await start()`, `await wait_ready()`, …, `await close()`."""

    def __init__(self, client: Client, *, clock: Callable[[], datetime] = utcnow) -> None:
        self._nats = client
        self._clock = clock
        self._index = ClientIndex()
        self._changed = asyncio.Condition()
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ---- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="client-directory")

    async def wait_ready(self, timeout: float | None = None) -> None:
        async with asyncio.timeout(timeout):
            await self._ready.wait()

    @property
    def ready(self) -> bool:
        """True once the catch-up read is applied (serve `/readyz` from this)."""
        return self._ready.is_set()

    @property
    def applied_sequence(self) -> int:
        return self._index.applied_sequence

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def wait_until_applied(self, sequence: int, timeout: float | None = None) -> None:
        """Return once the client event at `sequence` (an `IssuedKey.sequence` or a version that
        `ClientService` returned) is reflected here."""
        async with self._changed:
            async with asyncio.timeout(timeout):
                await self._changed.wait_for(lambda: self.applied_sequence >= sequence)

    # ---- the hot path (in memory, no I/O) -----------------------------------------------------

    def authenticate(self, authorization: str | None) -> ClientPrincipal:
        """The caller behind an `Authorization: Bearer mf_…` header; else CAPABILITY_NOT_AUTHORIZED
        with 401 (missing, malformed, unknown, revoked, expired key) or 403 (client disabled)."""
        return self._index.authenticate(authorization, self._clock())

    def authorize(self, principal: ClientPrincipal, capability: str) -> None:
        """CAPABILITY_NOT_AUTHORIZED (403) unless `capability` (`name@version`) is in its scopes;
        PROJECT_CAPABILITY_NOT_BOUND (403) when its project is not bound to the capability."""
        self._index.authorize(principal, capability)

    def route(self, principal: ClientPrincipal, capability: str, requested: str) -> str:
        """The model name `Catalog.resolve` serves the call by: its project's channel, if bound."""
        return self._index.projects.route(principal.project_id, capability, requested)

    def channels(self, principal: ClientPrincipal) -> Mapping[str, str] | None:
        """Its project's channel per capability; None for a client bound to no project."""
        if principal.project_id is None:
            return None
        return self._index.projects.of(principal.project_id)

    def client(self, client_id: str) -> ClientState | None:
        return self._index.client(client_id)

    def clients(self) -> list[ClientState]:
        return self._index.clients()

    # ---- keeping the index live ---------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._ready.is_set():
                    history, horizon = await reading.read_subjects_range(
                        self._nats, subjects.EVENTS_STREAM, FEED, self.applied_sequence
                    )
                    for record in history:
                        self._index.apply(record)
                    self._index.caught_up_to(horizon)
                    await self._notify()
                    self._ready.set()
                live = subscribe(self._nats, self.applied_sequence + 1, filter_subject=FEED)
                async for record in live:
                    self._index.apply(record)
                    await self._notify()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("client directory feed failed; resuming after %s", self.applied_sequence)
            # Resume from the last applied sequence after a pause; the stop event ends it early.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RESUBSCRIBE_S):
                    await self._stop.wait()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
