"""The gateway's live view: catalogue, accelerators and telemetry, kept current by subscriptions.

One ordered subscription to MF_EVENTS folds the catalogue and every accelerator aggregate; one
to MF_TELEMETRY (last value per subject) keeps observed memory and node liveness. Waiters block
on an `asyncio.Condition` notified after every applied event: no polling. The gateway's own
successful appends are applied at once (`apply_own`), so its next decision does not wait for
the subscription to echo them back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

import msgspec
from nats.aio.client import Client

from eventstore.records import RecordedEvent
from eventstore.subscription import subscribe
from gateway.deployments.model import DeploymentState
from gateway.scheduler import (
    DEFAULT_POLICY,
    AcceleratorState,
    CoResidencyPair,
    CoResidencyStatus,
    SchedulerPolicy,
)
from gateway.scheduler.fleet import accelerator_model
from gateway.scheduler.policy import policy_of
from gateway.state.accelerators import (
    evolve_accelerator,
    new_accelerator,
    with_deployment_facts,
    with_telemetry,
)
from gateway.state.catalog import Catalog, evolve_catalog
from gateway.state.evictions import PendingEviction, fold_evictions
from gateway.state.feed import TelemetryFeed, feed_down, feed_up, silent_for
from gateway.state.feed_watch import watch_feed
from gateway.state.following import follow_telemetry, hear_drops
from gateway.state.lease_watches import LeaseWatches
from gateway.state.loads import LoadFailure, Outgrown, PendingLoad, fold_loads, outgrown
from gateway.state.reconnects import ReconnectWatch
from gateway.state.senders import forged_event, forged_telemetry
from streams import subjects
from streams.codec import UnknownEvent
from streams.envelope import ActorKind
from streams.events import control as c
from streams.events import serving as s
from streams.events.base import Event
from streams.events.identity import ForgedEventRefused
from streams.messages import AcceleratorTelemetry

log = logging.getLogger("modelforge.gateway.state")


def policy_from(event: c.SchedulerPolicyRevised) -> SchedulerPolicy:
    """Settings override the defaults field by field; unknown names are ignored."""
    return policy_of(event.settings, event.revision)


class LiveState:
    def __init__(self, telemetry_stale_s: float = 10.0) -> None:
        self.catalog = Catalog()
        self.policy = DEFAULT_POLICY
        self.accelerators: dict[str, AcceleratorState] = {}
        self.versions: dict[str, int] = {}  # accelerator id -> its aggregate version
        self.telemetry: dict[str, AcceleratorTelemetry] = {}
        # The same samples by node: whether a node is live is asked per node on every placement and
        # every request under a standby slot, and a fleet's samples are many.
        self._node_samples: dict[str, dict[str, AcceleratorTelemetry]] = {}
        self.telemetry_seq = 0  # the MF_TELEMETRY sequence of the last sample read
        self.applied = 0
        # The last MF_EVENTS sequence the subscription delivered: `applied` may run ahead of it
        # (our own appends, folded when acknowledged), and a snapshot is taken only when it does not.
        self.followed = 0
        self.telemetry_stale_s = telemetry_stale_s
        # Whether node silence can be the bus's (gateway.state.feed_watch): when a sample was last
        # heard (or the watch began), set on each, and the feed's gaps.
        self.telemetry_heard_at = time.time()
        self.telemetry_heard = asyncio.Event()
        self.feed = TelemetryFeed()
        self.reconnects = ReconnectWatch()  # in-flight invokes per node, ended when its agent reconnects
        self.changed = asyncio.Condition()
        # One lock for decide-and-append: decisions read every accelerator; appends take ~0.2 ms.
        self.decision_lock = asyncio.Lock()
        self.load_failures: dict[str, LoadFailure] = {}  # deployment id -> its last failed load
        # What measurement proved about pairs of deployments sharing an accelerator (latest per pair):
        # placement keeps a PROVEN_UNSAFE pair apart.
        self.co_residency: tuple[CoResidencyPair, ...] = ()
        # Deployments whose last health check failed a layer (deployment id -> its code), until a
        # check passes or it is loaded again: placement refuses them with RUNTIME_UNHEALTHY.
        self.unhealthy: dict[str, str] = {}
        self.lease_grants: dict[str, s.LeaseGranted] = {}  # lease id -> its grant, while it is held
        self.evictions: dict[str, PendingEviction] = {}  # eviction id -> one under way
        self.loads: dict[str, PendingLoad] = {}  # load id -> one requested, not yet reported on
        self.outgrown: dict[str, Outgrown] = {}  # deployment id -> its last load past its envelope
        self.node_versions: dict[str, int] = {}  # node id -> its aggregate's version (NodeLost expects it)
        self.lease_watches = LeaseWatches()  # in-flight invokes, told when their node drops their lease
        # This replica's decided-but-unacknowledged events per accelerator, and the view with them
        # folded in: the next decision must see them (group commit, see gateway.serving.writer).
        self.staged: dict[str, list[Event]] = {}
        self.tentative: dict[str, AcceleratorState] = {}
        # Accelerators where another writer's event arrived while ours were staged: those were
        # decided without it, so the writer refuses them as a conflict (gateway.serving.appends).
        self.interrupted: set[str] = set()
        self.listeners: list[Callable[[], None]] = []  # called after every change (cheap, sync)
        # Called when the subscription delivers the echo of our own latest append, which changes
        # nothing and notifies no one but makes the view `settled` (cheap, sync).
        self.settled_listeners: list[Callable[[], None]] = []
        # Node messages refused as forged (gateway.state.senders) by (subject, sequence), until the
        # upkeep records them; telemetry is refused on every sample but noted once per claim.
        self.forged: dict[tuple[str, int], ForgedEventRefused] = {}
        self._claims_refused: set[tuple[str, str]] = set()
        self._tasks: list[asyncio.Task[None]] = []

    # ---- folding -------------------------------------------------------------------------

    def apply(self, record: RecordedEvent, own: bool = False) -> None:
        """Fold one MF_EVENTS record (idempotent: older sequences are ignored per aggregate).
        `own`: one of this replica's staged events, now acknowledged (already in the view)."""
        event, envelope = record.event, record.envelope
        if isinstance(event, UnknownEvent) or envelope is None:
            log.warning(
                "skipping undecodable event at sequence %d: %s", record.sequence, getattr(event, "reason", "")
            )
            self.applied = max(self.applied, record.sequence)
            return
        forged = forged_event(record.subject, record.sequence, envelope, event, self.catalog)
        if forged is not None:
            self._refuse(record, forged)
            return
        if isinstance(event, ForgedEventRefused):  # recorded, by this replica or another
            self.forged.pop((event.subject, event.refused_sequence), None)
        if envelope.aggregate_type == subjects.Aggregate.ACCELERATOR.value:
            acc_id = envelope.aggregate_id
            match event:
                case s.ResidencyLoadFailed():
                    self.load_failures[event.deployment_id] = LoadFailure(
                        event, envelope.occurred_at.timestamp(), envelope.actor.kind == ActorKind.AGENT
                    )
                case s.LeaseGranted():
                    self.lease_grants[event.lease_id] = event
                case s.LeaseReleased() | s.LeaseExpired():
                    self.lease_grants.pop(event.lease_id, None)
                case s.ResidencyReconciled():
                    # The agent's restart took the leases of what it no longer holds off the books:
                    # nothing will expire them, so the upkeep must not wait for them either.
                    held = set(event.held)
                    for lease_id, grant in list(self.lease_grants.items()):
                        if grant.accelerator_id == acc_id and grant.deployment_id not in held:
                            del self.lease_grants[lease_id]
            if record.sequence > self.versions.get(acc_id, 0):
                staged = self.staged.get(acc_id)
                if staged and not own and event not in staged:  # (the echo of our own append is not)
                    self.interrupted.add(acc_id)
                at = envelope.occurred_at.timestamp()
                if isinstance(event, s.ResidencyLoaded):
                    self._note_outgrown(event)
                fold_evictions(self.evictions, event, at)
                fold_loads(self.loads, event, at)
                match event:
                    case s.CoResidencyProven():
                        self._prove(event)
                    case s.ResidencyHealthChecked() if not (
                        event.process_ok and event.runtime_ok and event.model_ok
                    ):
                        self.unhealthy[event.deployment_id] = event.code or "HEALTHCHECK_FAILED"
                    case s.ResidencyHealthChecked() | s.ResidencyLoaded():
                        self.unhealthy.pop(event.deployment_id, None)
                state = self.accelerators.get(acc_id) or self._new_accelerator(acc_id)
                self.accelerators[acc_id] = evolve_accelerator(
                    state, event, envelope.occurred_at, self.catalog
                )
                self.versions[acc_id] = record.sequence
                if self.lease_watches and isinstance(event, s.ResidencyReconciled):
                    self.lease_watches.dropped(
                        (lease.lease_id for lease in state.leases),
                        (lease.lease_id for lease in self.accelerators[acc_id].leases),
                    )
        elif isinstance(event, c.SchedulerPolicyRevised):
            self.policy = policy_from(event)
        else:
            self.catalog = evolve_catalog(self.catalog, event)
            if envelope.aggregate_type == subjects.Aggregate.NODE.value:
                self.node_versions[envelope.aggregate_id] = record.sequence
            if envelope.aggregate_type == subjects.Aggregate.DEPLOYMENT.value:
                # Residents took the deployment's policy and channel when loaded; keep them current.
                for acc_id, state in self.accelerators.items():
                    self.accelerators[acc_id] = with_deployment_facts(
                        state, envelope.aggregate_id, self.catalog
                    )
            if isinstance(event, c.NodeRegistered):
                for spec in event.accelerators:
                    if spec.accelerator_id not in self.accelerators:
                        self.accelerators[spec.accelerator_id] = new_accelerator(
                            spec.accelerator_id, event.node_id, spec.total_bytes
                        )
        self.applied = max(self.applied, record.sequence)

    def _refuse(self, record: RecordedEvent, forged: ForgedEventRefused) -> None:
        """Leave a forged event out of the view (its aggregate's version still moves past it)."""
        log.warning("refused %s: it speaks for node %s", record.subject, forged.claimed_node_id)
        self.forged[(record.subject, record.sequence)] = forged
        aggregate, aggregate_id, _type = record.subject.split(".")[2:]
        versions = self.versions if aggregate == subjects.Aggregate.ACCELERATOR.value else self.node_versions
        versions[aggregate_id] = max(versions.get(aggregate_id, 0), record.sequence)
        self.applied = max(self.applied, record.sequence)

    def apply_sample(self, subject: str, sequence: int, sample: AcceleratorTelemetry) -> None:
        """Apply a telemetry sample that speaks for its sender alone; refuse any other."""
        forged = forged_telemetry(subject, sequence, sample, self.catalog)
        if forged is None:
            self.apply_telemetry(sample)
        elif (subject, forged.claimed_node_id) not in self._claims_refused:
            self._claims_refused.add((subject, forged.claimed_node_id))
            log.warning("refused telemetry on %s: it speaks for node %s", subject, forged.claimed_node_id)
            self.forged[(subject, sequence)] = forged

    def _prove(self, event: s.CoResidencyProven) -> None:
        pair = CoResidencyPair(
            left=event.deployment_a, right=event.deployment_b, status=CoResidencyStatus(event.state)
        )
        others = [p for p in self.co_residency if {p.left, p.right} != {pair.left, pair.right}]
        self.co_residency = (*others, pair)

    def apply_own(self, record: RecordedEvent, expected_version: int) -> None:
        """Apply our own append at once if nothing else can have come in between."""
        acc_id = record.envelope.aggregate_id if record.envelope else ""
        if self.versions.get(acc_id, 0) == expected_version:
            self.apply(record, own=True)

    # ---- staged events (decided here, not yet acknowledged) --------------------------------

    def stage(self, accelerator_id: str, events: list[Event]) -> None:
        at = datetime.now(UTC)
        state = self.view(accelerator_id) or self._new_accelerator(accelerator_id)
        for event in events:
            state = evolve_accelerator(state, event, at, self.catalog)
        self.staged.setdefault(accelerator_id, []).extend(events)
        self.tentative[accelerator_id] = state

    def unstage(self, accelerator_id: str, count: int | None = None) -> None:
        """Drop the first `count` staged events (acknowledged), or all of them (refused)."""
        staged = self.staged.get(accelerator_id, [])
        del staged[: len(staged) if count is None else count]
        if not staged:  # (a partial acknowledgement leaves the view as it was: it already held them)
            self.staged.pop(accelerator_id, None)
            self.tentative.pop(accelerator_id, None)
            self.interrupted.discard(accelerator_id)  # nothing left that was decided without it

    def view(self, accelerator_id: str) -> AcceleratorState | None:
        """What decisions see: the acknowledged state plus this replica's staged events."""
        return self.tentative.get(accelerator_id) or self.accelerators.get(accelerator_id)

    def _note_outgrown(self, loaded: s.ResidencyLoaded) -> None:
        deployment = self.catalog.deployments.get(loaded.deployment_id)
        found = outgrown(self.loads, loaded, deployment.probe_id) if deployment is not None else None
        if found is not None:
            self.outgrown[loaded.deployment_id] = found
            log.warning("envelope of %s no longer holds: %s", loaded.deployment_id, found.reason())

    def outgrown_envelope(self, deployment: DeploymentState) -> str | None:
        """Why cold loads of `deployment` may not go by its envelope: a load of it measured more than
        the envelope reserved (None while none has, or since a new probe's measurement was promoted)."""
        found = self.outgrown.get(deployment.deployment_id)
        return found.reason() if found is not None and found.probe_id == deployment.probe_id else None

    def holds_lease(self, accelerator_id: str, lease_id: str) -> bool:
        """Whether the acknowledged books still hold the lease (not released, expired or reconciled away)."""
        state = self.accelerators.get(accelerator_id)
        return state is not None and any(lease.lease_id == lease_id for lease in state.leases)

    def _new_accelerator(self, accelerator_id: str) -> AcceleratorState:
        node = self.catalog.node_of_accelerator(accelerator_id)
        spec = (
            next((a for a in node.accelerators if a.accelerator_id == accelerator_id), None) if node else None
        )
        return new_accelerator(accelerator_id, node.node_id if node else "", spec.total_bytes if spec else 0)

    def apply_telemetry(self, sample: AcceleratorTelemetry) -> None:
        previous = self.telemetry.get(sample.accelerator_id)
        if previous is not None and previous.node_id != sample.node_id:  # moved to another node
            self._node_samples[previous.node_id].pop(sample.accelerator_id, None)
        self.telemetry[sample.accelerator_id] = sample
        self._node_samples.setdefault(sample.node_id, {})[sample.accelerator_id] = sample
        self.reconnects.saw(sample)
        observed_at = sample.observed_at_unix_ms / 1000
        for table in (self.accelerators, self.tentative):
            state = table.get(sample.accelerator_id)
            if state is not None:
                table[sample.accelerator_id] = with_telemetry(
                    state,
                    sample.used_bytes,
                    observed_at,
                    tuple(sorted(sample.cached_sets)),
                    {w.deployment_id: w.bytes for w in sample.workers},
                )

    # ---- queries -------------------------------------------------------------------------

    def node_live(self, node_id: str, now: float | None = None) -> bool:
        """Whether the node's newest sample says it is up and it has not been silent for longer than
        the staleness bound while the telemetry feed could carry its samples."""
        now = time.time() if now is None else now
        return any(
            t.healthy and silent_for(t.observed_at_unix_ms / 1000, self.feed, now) <= self.telemetry_stale_s
            for t in self._node_samples.get(node_id, {}).values()
        )

    def heard_from_feed(self, now: float) -> None:
        """The telemetry feed carried something (a sample, or its stream answered with a leader)."""
        self.telemetry_heard_at = now
        self.telemetry_heard.set()
        if self.feed.down_since is not None:
            log.info("telemetry feed back: node silence counts again from now")
        self.feed = feed_up(self.feed, now)

    def feed_found_down(self) -> None:
        if self.feed.down_since is None:
            log.warning(
                "telemetry feed down (MF_TELEMETRY unreachable or leaderless): node silence not counted"
            )
        self.feed = feed_down(self.feed, self.telemetry_heard_at)

    def schedulable_accelerators(self, now: float | None = None) -> list[AcceleratorState]:
        """Accelerators of enabled nodes with fresh telemetry, marked available for placement."""
        out = []
        for node in self.catalog.nodes.values():
            ok = node.schedulable and self.node_live(node.node_id, now)
            for spec in node.accelerators:
                state = self.view(spec.accelerator_id)
                if state is None:
                    continue
                model = accelerator_model(spec.kind, spec.name, spec.compute_capability)
                if (state.available, state.hardware_model, state.runtimes) != (ok, model, node.runtimes):
                    state = msgspec.structs.replace(
                        state, available=ok, hardware_model=model, runtimes=node.runtimes
                    )
                out.append(state)
        return out

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        async with self.changed:
            try:
                async with asyncio.timeout(timeout):
                    await self.changed.wait_for(predicate)
            except TimeoutError:
                return False
        return True

    def settled(self) -> bool:
        """Whether the view holds exactly the events up to `applied`: none of ours ahead of what the
        subscription delivered (a snapshot of it then is a fold of the log up to `applied`)."""
        return self.followed >= self.applied

    async def wait_applied(self, sequence: int, timeout: float = 5.0) -> bool:
        return await self.wait_for(lambda: self.applied >= sequence, timeout)

    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()
        for listener in self.listeners:
            listener()

    # ---- subscriptions -------------------------------------------------------------------

    async def start(self, client: Client) -> None:
        """Subscribe; returns once the state has caught up with the streams as they were: every
        event, and the telemetry samples stored, so that a replica which says it is ready does not
        refuse requests NO_ELIGIBLE_NODE for nodes whose samples it has not read yet."""
        js = client.jetstream()
        last = (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
        samples = (await js.stream_info(subjects.TELEMETRY_STREAM)).state.last_seq
        # From the first event not folded yet: after a restored snapshot, only its tail.
        self._tasks.append(asyncio.create_task(self._follow_events(client, self.applied + 1)))
        self._tasks.append(asyncio.create_task(follow_telemetry(self, client)))
        self._tasks.append(asyncio.create_task(hear_drops(self, client)))
        self._tasks.append(asyncio.create_task(watch_feed(self, client)))
        if last and not await self.wait_applied(last, timeout=120):
            raise RuntimeError(f"gateway state did not catch up to sequence {last}")
        # The last sample stored is delivered last (last value per subject, in stream order).
        if samples and not await self.wait_for(lambda: self.telemetry_seq >= samples, timeout=10):
            log.warning(
                "telemetry not read up to sample %d within 10 s; nodes count as down until it is", samples
            )

    async def _follow_events(self, client: Client, from_sequence: int) -> None:
        async for record in subscribe(client, from_sequence, folded=self._folded):
            self.apply(record)
            await self.notify()

    def _folded(self, sequence: int, subject: str) -> bool:
        """An accelerator event this replica appended and applied on its acknowledgement."""
        self.followed = sequence  # (asked of every delivery, folded or not)
        parts = subject.split(".")
        folded = (
            len(parts) == 5
            and parts[2] == subjects.Aggregate.ACCELERATOR.value
            and sequence <= self.versions.get(parts[3], 0)
        )
        if folded and sequence >= self.applied:
            for listener in self.settled_listeners:
                listener()
        return folded

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
