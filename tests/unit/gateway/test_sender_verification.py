"""A node's event or telemetry sample that speaks for another node is refused and noted for the
record, never applied: the subject (which only that node's NATS user may publish) names the sender."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from eventstore.records import RecordedEvent
from gateway.state.catalog import Catalog, evolve_catalog
from gateway.state.live import LiveState
from gateway.state.senders import forged_event, forged_telemetry
from streams import subjects
from streams.envelope import Actor, ActorKind, Envelope
from streams.events import control as c
from streams.events import serving as s
from streams.events.base import Event
from streams.events.identity import ForgedEventRefused
from streams.messages import AcceleratorTelemetry
from streams.subjects import Aggregate


def registered(node: str, accelerator: str = "", hostname: str = "") -> c.NodeRegistered:
    spec = c.AcceleratorSpec(
        accelerator_id=accelerator or f"{node}-cpu0", kind="cpu", name="cpu", total_bytes=1 << 30
    )
    return c.NodeRegistered(
        node_id=node,
        hostname=hostname or node,
        hardware_fingerprint="f",
        accelerators=(spec,),
        protocol_capabilities=(),
        runtimes=("onnx",),
        agent_version="1",
    )


FLEET = evolve_catalog(evolve_catalog(Catalog(), registered("a")), registered("b"))


def envelope(aggregate: Aggregate, aggregate_id: str, event: Event) -> Envelope:
    return Envelope(
        event_id="e1",
        event_type=type(event).event_type(),
        schema_version=1,
        aggregate_type=aggregate.value,
        aggregate_id=aggregate_id,
        occurred_at=datetime(2026, 12, 1, tzinfo=UTC),
        actor=Actor(ActorKind.AGENT, aggregate_id),
    )


def on(aggregate: Aggregate, subject_id: str, event: Event, envelope_id: str | None = None) -> RecordedEvent:
    subject = subjects.event_subject(aggregate, subject_id, type(event).event_type())
    return RecordedEvent(7, subject, envelope(aggregate, envelope_id or subject_id, event), event)


def claimed_by(record: RecordedEvent) -> str | None:
    return getattr(refused(record), "claimed_node_id", None)


def refused(record: RecordedEvent, catalog: Catalog = FLEET) -> ForgedEventRefused | None:
    assert record.envelope is not None
    return forged_event(record.subject, record.sequence, record.envelope, record.event, catalog)


def loaded(accelerator: str) -> s.ResidencyLoaded:
    return s.ResidencyLoaded(
        load_id="l",
        accelerator_id=accelerator,
        deployment_id="emb",
        generation=1,
        runtime="onnx",
        baseline_bytes=0,
        loaded_bytes=1,
        peak_bytes=1,
        measured_bytes=1,
        cold_load_ms=1.0,
    )


def sample(node: str, accelerator: str) -> AcceleratorTelemetry:
    return AcceleratorTelemetry(
        node_id=node,
        accelerator_id=accelerator,
        generation=1,
        total_bytes=1 << 30,
        used_bytes=1 << 20,
        process_bytes=0,
        observed_at_unix_ms=1,
        residencies=[],
        healthy=True,
    )


def test_a_node_speaking_for_itself_is_not_refused() -> None:
    assert refused(on(Aggregate.NODE, "a", registered("a"))) is None
    assert refused(on(Aggregate.ACCELERATOR, "a-cpu0", loaded("a-cpu0"))) is None
    assert forged_telemetry("mf.tel.a.a-cpu0", 3, sample("a", "a-cpu0"), FLEET) is None


def test_a_registration_on_a_nodes_subject_that_names_another_node_is_refused() -> None:
    forged = refused(on(Aggregate.NODE, "a", registered("b")))
    assert forged == ForgedEventRefused(
        node_id="a",
        claimed_node_id="b",
        subject="mf.evt.node.a.NodeRegistered",
        refused_type="NodeRegistered",
        refused_sequence=7,
    )


def test_a_registration_claiming_an_accelerator_another_node_registered_is_refused() -> None:
    theft = registered("a", accelerator="b-cpu0")
    assert claimed_by(on(Aggregate.NODE, "a", theft)) == "b"


def test_an_envelope_naming_another_aggregate_than_its_subject_is_refused() -> None:
    forged = refused(on(Aggregate.ACCELERATOR, "a-cpu0", loaded("a-cpu0"), envelope_id="b-cpu0"))
    assert forged is not None
    assert (forged.node_id, forged.claimed_node_id) == ("a", "b")


def test_an_accelerator_event_for_another_nodes_accelerator_is_refused() -> None:
    assert claimed_by(on(Aggregate.ACCELERATOR, "a-cpu0", loaded("b-cpu0"))) == "b"


def test_a_load_request_naming_another_node_on_an_accelerator_is_refused() -> None:
    request = s.ResidencyLoadRequested(
        load_id="l", accelerator_id="a-cpu0", node_id="b", deployment_id="emb", required_bytes=1
    )
    assert claimed_by(on(Aggregate.ACCELERATOR, "a-cpu0", request)) == "b"


def claimed(subject: str, telemetry: AcceleratorTelemetry) -> str | None:
    return getattr(forged_telemetry(subject, 3, telemetry, FLEET), "claimed_node_id", None)


def test_telemetry_for_another_node_or_its_accelerator_is_refused() -> None:
    assert claimed("mf.tel.a.a-cpu0", sample("b", "a-cpu0")) == "b"
    assert claimed("mf.tel.a.a-cpu0", sample("a", "b-cpu0")) == "b"
    assert claimed("mf.tel.a.b-cpu0", sample("a", "b-cpu0")) == "b"


node_ids = st.from_regex(r"[a-z][a-z0-9\-]{0,12}", fullmatch=True)


@given(node_ids, node_ids)
def test_a_sample_names_its_subjects_node_or_is_refused(sender: str, named: str) -> None:
    forged = forged_telemetry(f"mf.tel.{sender}.{sender}-cpu0", 1, sample(named, f"{sender}-cpu0"), Catalog())
    assert (forged is None) == (sender == named)


def test_the_live_view_leaves_a_forged_event_out_and_notes_it_until_it_is_recorded() -> None:
    live = LiveState()
    real = on(Aggregate.NODE, "b", registered("b"))
    live.apply(RecordedEvent(1, real.subject, real.envelope, real.event))
    forged = on(Aggregate.NODE, "a", registered("b", accelerator="a-cpu0"))
    live.apply(RecordedEvent(2, forged.subject, forged.envelope, forged.event))
    assert [a.accelerator_id for a in live.catalog.nodes["b"].accelerators] == ["b-cpu0"]
    assert (live.applied, live.node_versions["a"]) == (2, 2)
    assert list(live.forged) == [("mf.evt.node.a.NodeRegistered", 2)]
    note = live.forged[("mf.evt.node.a.NodeRegistered", 2)]
    recorded = on(Aggregate.NODE, "a", note)
    live.apply(RecordedEvent(3, recorded.subject, recorded.envelope, note))
    assert live.forged == {}


def test_the_live_view_applies_no_forged_sample_and_notes_each_claim_once() -> None:
    live = LiveState()
    for sequence in (1, 2):
        live.apply_sample("mf.tel.a.a-cpu0", sequence, sample("b", "a-cpu0"))
    assert live.telemetry == {}
    assert list(live.forged) == [("mf.tel.a.a-cpu0", 1)]
