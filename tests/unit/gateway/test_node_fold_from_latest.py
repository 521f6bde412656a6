"""A node folded from the last event of each type (what one `multi_last` direct get reads) is the
node its whole log folds to: the gateway reads nodes that way, since a node registered at the start
of a long log otherwise costs a walk through all of it (docs/performance.md)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from eventstore.records import RecordedEvent
from gateway.promotion.evolve import evolve_node, fold, fold_node_from_latest
from streams import subjects
from streams.events import control as c
from streams.events.base import Event
from streams.subjects import Aggregate

NODE = "node-a"


def registered(hostname: str) -> c.NodeRegistered:
    spec = c.AcceleratorSpec(accelerator_id="cpu0", kind="cpu", name="cpu", total_bytes=1 << 30)
    return c.NodeRegistered(
        node_id=NODE,
        hostname=hostname,
        hardware_fingerprint=f"fp-{hostname}",
        accelerators=(spec,),
        protocol_capabilities=(),
        runtimes=("onnxruntime-cpu",),
        agent_version="1",
    )


LATER_EVENTS: st.SearchStrategy[Event] = st.one_of(
    st.sampled_from(["h1", "h2", "h3"]).map(registered),
    st.just(c.NodeEnabled(node_id=NODE)),
    st.just(c.NodeDisabled(node_id=NODE, reason="maintenance")),
    st.booleans().map(lambda eligible: c.NodeProductionEligibilityChanged(node_id=NODE, eligible=eligible)),
    st.just(c.NodeDecommissioned(node_id=NODE)),
    st.integers(1, 50).map(lambda generation: c.WorkerStarted(node_id=NODE, generation=generation)),
    st.just(
        c.NodeLost(
            node_id=NODE, generation=1, last_seen_at=datetime(2026, 12, 4, tzinfo=UTC), reason="silent"
        )
    ),
)


def recorded(events: list[Event]) -> list[RecordedEvent]:
    return [
        RecordedEvent(
            sequence=10 * (i + 1),  # other aggregates' events in between
            subject=subjects.event_subject(Aggregate.NODE, NODE, type(event).__name__),
            envelope=None,
            event=event,
        )
        for i, event in enumerate(events)
    ]


def latest_of_each(records: list[RecordedEvent]) -> list[RecordedEvent]:
    """What the stream's per-subject index answers: the last record on each subject, in stream order."""
    return sorted({r.subject: r for r in records}.values(), key=lambda r: r.sequence)


@given(st.sampled_from(["h0", "h1"]).map(registered), st.lists(LATER_EVENTS, max_size=25))
def test_a_node_folded_from_its_latest_events_of_each_type_is_the_node_its_whole_log_folds_to(
    first: c.NodeRegistered, later: list[Event]
) -> None:
    history = recorded([first, *later])
    assert fold_node_from_latest(latest_of_each(history)) == fold(evolve_node, history)


def test_a_node_disabled_before_it_registered_again_stays_disabled_from_its_latest_events() -> None:
    history = recorded([registered("h1"), c.NodeDisabled(node_id=NODE, reason="broken"), registered("h2")])
    node = fold_node_from_latest(latest_of_each(history))
    assert node is not None
    assert (node.enabled, node.hardware_fingerprint) == (False, "fp-h2")
