"""Node identity events -> rows: a node's nkey (never a seed: none is recorded) and the messages a
gateway refused as forged (where from and what they claimed; their content is not recorded)."""

from __future__ import annotations

from projections.handlers.ops import Op, up
from streams.events.base import Event
from streams.events.identity import ForgedEventRefused, NodeCredentialsIssued, NodeCredentialsRevoked


def _node(node_id: str, at: str | None, **columns: object) -> list[Op]:
    return [up("nodes", (node_id,), updated_at=at, **columns)]


def ops(event: Event, seq: int, at: str | None) -> list[Op] | None:
    """Rows for an identity event; None when the event is not one of this module's."""
    match event:
        case NodeCredentialsIssued():
            issued = {"nkey_public_key": event.public_key, "credentials_issued_at": at}
            return _node(
                event.node_id, at, **issued, credentials_revoked_at=None, credentials_revoked_reason=None
            )
        case NodeCredentialsRevoked():
            revoked = {"credentials_revoked_at": at, "credentials_revoked_reason": event.reason}
            return _node(event.node_id, at, nkey_public_key=None, **revoked)
        case ForgedEventRefused():
            # Each replica that refused it records it: one row, the recordings counted.
            refused = Op(
                "forged_events_refused",
                (event.subject, event.refused_sequence),
                {
                    "node_id": event.node_id,
                    "claimed_node_id": event.claimed_node_id,
                    "refused_type": event.refused_type,
                    "recorded_at": at,
                },
                {"recordings": 1},
            )
            return [refused]
    return None
