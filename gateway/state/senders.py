"""Whether the sender of a node's event or telemetry sample is the node it speaks for.

Only a node's own NATS user may publish on its node's subjects, its accelerators' and its telemetry
(deploy/nats/nats.conf), so the subject names the sender. What the message says inside it (the
envelope's aggregate, a `node_id`, an `accelerator_id`, a registration's accelerators) must name
that node and its accelerators alone: a node that speaks for another is refused, not applied, and
the refusal is recorded (`ForgedEventRefused`: where it came from and what it claimed, no content).
Pure: no I/O.
"""

from __future__ import annotations

from gateway.state.catalog import Catalog
from streams import subjects
from streams.envelope import Envelope
from streams.events import control as c
from streams.events.base import Event
from streams.events.identity import ForgedEventRefused
from streams.messages import AcceleratorTelemetry

_NODE, _ACCELERATOR = subjects.Aggregate.NODE.value, subjects.Aggregate.ACCELERATOR.value


def _owner(catalog: Catalog, accelerator_id: str) -> str | None:
    node = catalog.node_of_accelerator(accelerator_id)
    return node.node_id if node is not None else None


def _refusal(
    sender: str, claimed: list[str], subject: str, refused_type: str, sequence: int
) -> ForgedEventRefused | None:
    """The refusal of a message from `sender` that claims a node other than itself, if it does."""
    other = next((node for node in claimed if node != sender), None)
    if other is None:
        return None
    return ForgedEventRefused(
        node_id=sender,
        claimed_node_id=other,
        subject=subject,
        refused_type=refused_type,
        refused_sequence=sequence,
    )


def forged_event(
    subject: str, sequence: int, envelope: Envelope, event: Event, catalog: Catalog
) -> ForgedEventRefused | None:
    """The refusal of a node or accelerator event that speaks for another node than the one its
    subject belongs to (None when it speaks for its own, or is no node's)."""
    parsed = subjects.parse_event_subject(subject)
    if parsed is None or parsed[0] not in (_NODE, _ACCELERATOR):
        return None
    aggregate, subject_id, event_type = parsed
    if aggregate == _NODE:
        sender = subject_id
        claimed = [envelope.aggregate_id, getattr(event, "node_id", sender)]
        if isinstance(event, c.NodeRegistered):  # accelerators another node registered first
            claimed += [_owner(catalog, a.accelerator_id) or sender for a in event.accelerators]
    else:
        others = {envelope.aggregate_id, getattr(event, "accelerator_id", "") or subject_id} - {subject_id}
        node = getattr(event, "node_id", "")
        if not others and not node:  # its own accelerator alone: every lease and residency event
            return None
        owner = _owner(catalog, subject_id)
        sender = owner or subject_id  # (an accelerator no node registered yet)
        claimed = [_owner(catalog, a) or a for a in others]
        if owner is not None and node:
            claimed.append(node)
    return _refusal(sender, claimed, subject, event_type, sequence)


def forged_telemetry(
    subject: str, sequence: int, sample: AcceleratorTelemetry, catalog: Catalog
) -> ForgedEventRefused | None:
    """The refusal of a sample on `mf.tel.<node>.<accelerator>` that speaks for another node or
    accelerator than that one (or for an accelerator another node registered)."""
    parts = subject.split(".")
    if len(parts) != 4:  # (no node's user may publish another shape)
        return None
    sender, accelerator = parts[2], parts[3]
    claimed = [sample.node_id, _owner(catalog, accelerator) or sender]
    if sample.accelerator_id != accelerator:
        claimed.append(_owner(catalog, sample.accelerator_id) or sample.accelerator_id)
    return _refusal(sender, claimed, subject, "AcceleratorTelemetry", sequence)
