"""Node identity events -> rows: a node's nkey (never a seed: none is recorded) and the messages a
gateway refused as forged (where from and what they claimed; their content is not recorded)."""

from __future__ import annotations

from projections.handlers.ops import Op, up
from streams.events.base import Event
from streams.events.identity import ForgedEventRefused, NodeCredentialsIssued, NodeCredentialsRevoked


def ops(event: Event, seq: int, at: str | None) -> list[Op] | None:
    """Rows for an identity event; None when the event is not one of this module's."""
    match event:
        case NodeCredentialsIssued():
            return [
                up(
                    "nodes",
                    (event.node_id,),
                    nkey_public_key=event.public_key,
                    credentials_issued_at=at,
                    credentials_revoked_at=None,
                    credentials_revoked_reason=None,
                    updated_at=at,
                )
            ]
        case NodeCredentialsRevoked():
            return [
                up(
                    "nodes",
                    (event.node_id,),
                    nkey_public_key=None,
                    credentials_revoked_at=at,
                    credentials_revoked_reason=event.reason,
                    updated_at=at,
                )
            ]
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
