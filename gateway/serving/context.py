"""What every serving step needs: the event store, the live view, NATS, and this gateway's identity."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from nats.aio.client import Client

from eventstore.connection import write_held
from eventstore.recorder import RequestRecorder
from eventstore.store import EventStore
from gateway.read_models import ReadModels
from gateway.scheduler.standby import StandbySlots
from gateway.serving.acceptances import HeldAcceptances
from gateway.serving.caps import DeploymentGate
from gateway.serving.coalescing import Coalescer
from gateway.serving.gauges import LiveGauges
from gateway.serving.line import Place, next_up
from gateway.serving.metrics import ServingMetrics
from gateway.serving.outcomes import OutcomeLog
from gateway.serving.queues import QueueBoard
from gateway.serving.refusals import RefusalTally
from gateway.serving.upkeep import PressureTrack
from gateway.state.live import LiveState
from streams.envelope import Actor, ActorKind

log = logging.getLogger("modelforge.gateway.background")
COALESCE_AFTER = 2


@dataclass
class ServingContext:
    store: EventStore
    live: LiveState
    client: Client
    gateway_id: str
    lease_ttl_s: float = 300.0
    # Requests of this replica waiting for capacity, oldest first. A change wakes them all to
    # decide again: waking only the oldest few starved the rest behind a blocked head (504s).
    waiting: deque[Place] = field(default_factory=deque)
    background: set[asyncio.Task[object]] = field(default_factory=set)
    # request records (gateway.serving.background.record_request): written by the recorder, and
    # those it could not write tried again as tasks, which are among the background ones too; a
    # read that must find this replica's requests waits for both (`records_written`). Without a
    # recorder (a context in a unit test) every record is such a task.
    recorder: RequestRecorder | None = None
    recording: set[asyncio.Task[object]] = field(default_factory=set)
    # acceptances held a moment before they are recorded (gateway.serving.acceptances): a request
    # that ends sooner is one record, its end event carrying its acceptance
    acceptances: HeldAcceptances = field(default_factory=HeldAcceptances)
    # group commit (gateway.serving.appends): staged events and the writer task per accelerator
    staged: dict[str, list[Any]] = field(default_factory=dict)
    writers: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    # this replica's pressure hysteresis per accelerator (gateway.serving.upkeep.track_pressure)
    pressure: dict[str, PressureTrack] = field(default_factory=dict)
    # node id -> when this replica last asked it whether it is connected (gateway.serving.liveness):
    # a late node is asked at most once an interval
    liveness_asked: dict[str, float] = field(default_factory=dict)
    # the global queue (gateway.serving.queues): tells the other replicas how long this replica's
    # line is and hears theirs; without one (a context in a unit test) no other replica counts
    board: QueueBoard | None = None
    # placement refusals counted until their window closes, and the timer that writes them
    # (gateway.serving.refusal_log)
    refusals: RefusalTally = field(default_factory=RefusalTally)
    refusal_timer: asyncio.TimerHandle | None = None
    # how the fleet's requests ended, per deployment under guard: what rollback guards judge
    outcomes: OutcomeLog = field(default_factory=OutcomeLog)
    # the deployments' caps across replicas (gateway.serving.caps); without one (a context in a
    # unit test) a deployment has no cap of its own
    gate: DeploymentGate | None = None
    # set when the gateway closes: background writes stop retrying (a lease then ends by its TTL)
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    # embedding requests sharing runs (gateway.serving.coalescing): from 2 runs in flight for a
    # deployment, by default (MODELFORGE_COALESCE_AFTER); its members are the pipeline's
    coalescing: Coalescer[Any] = field(default_factory=lambda: Coalescer(COALESCE_AFTER))
    # this replica's standby leases and their slots (gateway.scheduler.standby), when
    # MODELFORGE_STANDBY_LEASES is set: a warm request runs under a free slot with no lease of its
    # own, and waits for one while MF_EVENTS has no leader
    standby: StandbySlots | None = None
    # the PostgreSQL read model (its sessions closed with the replica): what the HTTP API's reads
    # and the upkeep's search for requests a vanished replica left open (gateway.serving.vanished) use
    read_models: ReadModels = field(default_factory=ReadModels)
    metrics: ServingMetrics = field(init=False)  # this replica's /metrics, its live gauges included

    def __post_init__(self) -> None:
        self.metrics = ServingMetrics(LiveGauges(self))

    @property
    def queued(self) -> int:
        return len(self.waiting)

    def queue_depth(self) -> int:
        """Requests waiting for capacity on every replica (this one's line plus the others')."""
        return self.queued + (self.board.peer_depth() if self.board is not None else 0)

    def queue_changed(self) -> None:
        if self.board is not None:
            self.board.changed(self.queued)

    def spawn(
        self, work: Coroutine[Any, Any, object], context: contextvars.Context | None = None
    ) -> asyncio.Task[object]:
        """Run `work` past the request that started it (a write off the response's path): kept
        referenced until done, waited for by `settle`, its failure logged. `context`: the one it
        runs in (its trace), where not the caller's."""
        task = asyncio.create_task(work, context=context)
        self.background.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[object]) -> None:
        self.background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background write failed: %r", task.exception())

    async def settle(self) -> None:
        """Wait for every write begun off a response's path, and any those begin in turn (what is
        held is written now)."""
        self._write_held_now()
        if self.recorder is not None:
            await self.recorder.written()  # (each is answered, or handed on, within the publish timeout)
        while self.background:
            await asyncio.gather(*list(self.background), return_exceptions=True)

    async def records_written(self, timeout: float) -> None:
        """Record the acceptances held and write the request records the connection holds for a
        moment (`OrderedFlushClient`), and wait, up to `timeout`, until those begun so far are
        acknowledged: a read that follows a request answered here finds its records in the stream,
        and one of a request still running finds its acceptance."""
        self._write_held_now()
        if self.recorder is not None:
            waited = time.monotonic()
            await self.recorder.written(timeout)
            timeout = max(0.0, timeout - (time.monotonic() - waited))
        if self.recording:
            await asyncio.wait(list(self.recording), timeout=timeout)

    def _write_held_now(self) -> None:
        """The acceptances held recorded, and the records the connection holds written, now."""
        self.acceptances.record_all()
        write_held(self.client)

    def wake_waiting(self, deployment_id: str | None = None) -> None:
        """Wake the waiters a change may let in (`next_up`): of every deployment, or of one."""
        for place in next_up(self.waiting, deployment_id):  # each resumes in the order it was set
            place.woken.set()

    @cached_property
    def actor(self) -> Actor:  # every event this gateway writes names it: built once
        return Actor(ActorKind.GATEWAY, self.gateway_id)
