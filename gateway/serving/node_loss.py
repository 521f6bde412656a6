"""Declaring a node lost: pure decisions for the upkeep.

A node whose telemetry stopped for two of its publishing intervals (or whose last sample said it
stopped, or whose credentials were revoked), while it holds residents or leases on the books, is declared lost: `NodeLost` on its node
aggregate, once (the aggregate's expected version: of several gateway replicas one wins, the others
conflict and see it done). Each of its accelerators is then reconciled to cold
(`ResidencyReconciled`, nothing held), which ends its leases and residencies; an invoke still in
flight to it fails at once (`LiveState.lease_watches`) rather than at its deadline, and is tried once
more elsewhere. Its next `WorkerStarted` brings the node back.

Silence counts only while this gateway's telemetry feed is up (`gateway.state.feed`): a stream
electing its leader, or the gateway's own connection down, silences every node at once, which is
the bus's gap, not theirs.

Sooner: a node whose sample is late by one interval and LIVENESS_MARGIN_S (feed up, as above) is
asked, at most once an interval, whether its agent is still connected (`gateway.serving.liveness`).
NATS answering "no responders" on the node's liveness subject proves its connection is gone: it is
declared lost then, about one interval after it died rather than two. No answer in time (a starved
agent, a busy bus) proves nothing: the two-interval rule above still decides.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from gateway.scheduler import AcceleratorState
from gateway.state.catalog import Catalog
from gateway.state.feed import TelemetryFeed, silent_past
from streams.events import serving as s
from streams.messages import AcceleratorTelemetry

# A node is lost after two of its telemetry intervals without a sample, but never sooner than this:
# a busy machine's publisher can be late, and a node declared lost that was not loses its work.
NODE_LOSS_FLOOR_S = 10.0
# A node is asked whether it is connected once its sample is this much later than its interval.
LIVENESS_MARGIN_S = 1.0
GONE_REASON = "its NATS connection is gone (no responders on its liveness subject)"


class Liveness(enum.Enum):
    """What asking a node whether its agent is connected told."""

    ANSWERED = "answered"  # connected: whatever delays its samples, it is there
    NO_RESPONDERS = "no_responders"  # nobody subscribes its liveness subject: its connection is gone
    NO_ANSWER = "no_answer"  # no answer in time, or the asking failed: proves nothing


class LostNode(msgspec.Struct, frozen=True):
    node_id: str
    generation: int
    last_seen: float | None  # POSIX seconds of its last sample
    reason: str


def _loss_after(sample: AcceleratorTelemetry, catalog: Catalog, feed: TelemetryFeed) -> float:
    """When a node whose last sample is `sample` counts as lost (POSIX seconds): at once once its
    credentials are revoked (its NATS user is gone: it can neither serve nor report), at its last
    sample if that said it stopped, else once silent for two intervals while the feed was up."""
    if catalog.nodes[sample.node_id].revoked:
        return 0.0
    seen = sample.observed_at_unix_ms / 1000
    return (
        seen if not sample.healthy else silent_past(seen, max(2 * sample.interval_s, NODE_LOSS_FLOOR_S), feed)
    )


def _loss_reason(sample: AcceleratorTelemetry, catalog: Catalog) -> str:
    if catalog.nodes[sample.node_id].revoked:
        return "its credentials were revoked"
    return "its agent stopped" if not sample.healthy else "no telemetry for two of its intervals"


def _newest_samples(
    catalog: Catalog, accelerators: Mapping[str, AcceleratorState], telemetry: Iterable[AcceleratorTelemetry]
) -> dict[str, AcceleratorTelemetry]:
    """Per node not declared lost that holds residents or leases, its newest sample of its current
    generation (an older generation's samples say nothing of the worker running now)."""
    newest: dict[str, AcceleratorTelemetry] = {}
    for sample in telemetry:
        node = catalog.nodes.get(sample.node_id)
        if node is None or node.lost or node.decommissioned or sample.generation != node.generation:
            continue
        held = newest.get(node.node_id)
        if held is None or sample.observed_at_unix_ms > held.observed_at_unix_ms:
            newest[node.node_id] = sample
    return {
        node_id: sample
        for node_id, sample in newest.items()
        if any(
            (state := accelerators.get(spec.accelerator_id)) is not None and (state.residents or state.leases)
            for spec in catalog.nodes[node_id].accelerators
        )
    }


def nodes_lost(
    catalog: Catalog,
    accelerators: Mapping[str, AcceleratorState],
    telemetry: Iterable[AcceleratorTelemetry],
    now: float,
    feed: TelemetryFeed,
) -> list[LostNode]:
    """Nodes holding something on the books whose worker is gone: its last sample said it stopped,
    or it has been silent for two of its intervals (at least NODE_LOSS_FLOOR_S) while `feed` was
    up. By node id."""
    return [
        LostNode(
            node_id,
            sample.generation,
            sample.observed_at_unix_ms / 1000,
            _loss_reason(sample, catalog),
        )
        for node_id, sample in sorted(_newest_samples(catalog, accelerators, telemetry).items())
        if _loss_after(sample, catalog, feed) <= now
    ]


def next_node_loss_due(
    catalog: Catalog,
    accelerators: Mapping[str, AcceleratorState],
    telemetry: Iterable[AcceleratorTelemetry],
    feed: TelemetryFeed,
) -> float | None:
    """When the next node holding something on the books counts as lost if it stays silent (None:
    none will while the feed is down; its return is a change that asks again)."""
    due = min(
        (
            _loss_after(sample, catalog, feed)
            for sample in _newest_samples(catalog, accelerators, telemetry).values()
        ),
        default=math.inf,
    )
    return None if math.isinf(due) else due


def reconcile_lost(
    catalog: Catalog, accelerators: Mapping[str, AcceleratorState]
) -> list[s.ResidencyReconciled]:
    """Each accelerator of a node declared lost that still holds residents or leases, reconciled to
    cold: nothing of it is held any more."""
    return [
        s.ResidencyReconciled(
            accelerator_id=state.accelerator_id,
            generation=node.generation,
            held=(),
            dropped=tuple(r.deployment_id for r in state.residents),
        )
        for node in catalog.nodes.values()
        if node.lost
        for spec in node.accelerators
        if (state := accelerators.get(spec.accelerator_id)) is not None and (state.residents or state.leases)
    ]


def _ask_at(sample: AcceleratorTelemetry, feed: TelemetryFeed, asked: Mapping[str, float]) -> float:
    """When to ask the node of `sample`, its newest: once it is late by an interval and the margin
    while the feed was up, and an interval after it was last asked (`asked`: node id -> when)."""
    late = silent_past(sample.observed_at_unix_ms / 1000, sample.interval_s + LIVENESS_MARGIN_S, feed)
    return max(late, asked.get(sample.node_id, -math.inf) + sample.interval_s)


def nodes_to_ask(
    catalog: Catalog,
    accelerators: Mapping[str, AcceleratorState],
    telemetry: Iterable[AcceleratorTelemetry],
    now: float,
    feed: TelemetryFeed,
    asked: Mapping[str, float],
) -> list[LostNode]:
    """Nodes holding something on the books whose newest sample (healthy: one that said it stopped
    is lost anyway) is late by an interval and LIVENESS_MARGIN_S while `feed` was up, and that were
    not asked within an interval (`asked`: node id -> when last asked), each with the reason it
    would be lost for. By node id."""
    return [
        LostNode(node_id, sample.generation, sample.observed_at_unix_ms / 1000, GONE_REASON)
        for node_id, sample in sorted(_newest_samples(catalog, accelerators, telemetry).items())
        if sample.healthy and _ask_at(sample, feed, asked) <= now
    ]


def next_ask_due(
    catalog: Catalog,
    accelerators: Mapping[str, AcceleratorState],
    telemetry: Iterable[AcceleratorTelemetry],
    feed: TelemetryFeed,
    asked: Mapping[str, float],
) -> float | None:
    """When the next node is to be asked if it stays silent (None: none, or the feed is down)."""
    due = min(
        (
            _ask_at(sample, feed, asked)
            for sample in _newest_samples(catalog, accelerators, telemetry).values()
            if sample.healthy
        ),
        default=math.inf,
    )
    return None if math.isinf(due) else due


def still_to_declare(catalog: Catalog, lost: LostNode) -> bool:
    """Whether `lost` is still to be declared against the view as it is *now*: a decision made
    before an await (asking the nodes, reading their samples) may meet a view that has since
    applied another replica's `NodeLost` for that generation (or a new generation); appending then,
    against the aggregate's new version, would declare it a second time."""
    node = catalog.nodes.get(lost.node_id)
    return node is not None and not node.lost and node.generation == lost.generation


def proven_gone(asked: Sequence[LostNode], answers: Sequence[Liveness]) -> list[LostNode]:
    """The asked nodes whose answer proves their connection gone: NATS's no responders only."""
    return [node for node, answer in zip(asked, answers, strict=True) if answer is Liveness.NO_RESPONDERS]
