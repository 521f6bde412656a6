"""A node's identity on NATS: the nkey its agent connects with, and the events a gateway refused
because their sender was not the node they named. All on the node aggregate of the node concerned."""

from __future__ import annotations

from streams.events.base import Event


class NodeCredentialsIssued(Event, frozen=True):
    """`modelforge nodes credentials`: from now on the node's agent connects with this nkey (its
    public half; the seed never leaves the file it was written to). Replaces any earlier key."""

    node_id: str
    public_key: str  # "U..." (a NATS user nkey)


class NodeCredentialsRevoked(Event, frozen=True):
    """`modelforge nodes revoke`: the node has no NATS user any more; it is out of the fleet."""

    node_id: str
    public_key: str
    reason: str = ""


class ForgedEventRefused(Event, frozen=True):
    """A gateway did not apply an event or telemetry sample whose subject is `node_id`'s (the only
    node whose NATS user may publish there) but whose payload names `claimed_node_id` (or one of that
    node's accelerators). The content is not kept: only where it came from and what it claimed."""

    node_id: str  # the sender: the node the subject belongs to
    claimed_node_id: str
    subject: str
    refused_type: str  # the refused event's type ("AcceleratorTelemetry" for a telemetry sample)
    refused_sequence: int = 0  # its sequence in MF_EVENTS (MF_TELEMETRY for a sample)
