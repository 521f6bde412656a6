"""A node's row keeps the public half of its nkey while it has one and when it was revoked; each
message a gateway refused as forged is one row however many replicas recorded it."""

from __future__ import annotations

import psycopg

from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from streams.events.identity import ForgedEventRefused, NodeCredentialsIssued, NodeCredentialsRevoked
from streams.subjects import Aggregate

from .helpers import projected

KEY = "U" + "A" * 55
REFUSED = ForgedEventRefused(
    node_id="n1",
    claimed_node_id="n2",
    subject="mf.evt.node.n1.NodeRegistered",
    refused_type="NodeRegistered",
    refused_sequence=41,
)


async def test_credentials_and_forged_refusals_reach_the_read_model(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    items = [
        (Aggregate.NODE, "n1", NodeCredentialsIssued(node_id="n1", public_key=KEY)),
        (Aggregate.NODE, "n2", NodeCredentialsIssued(node_id="n2", public_key=KEY)),
        (Aggregate.NODE, "n2", NodeCredentialsRevoked(node_id="n2", public_key=KEY, reason="stolen")),
        (Aggregate.NODE, "n1", REFUSED),
        (Aggregate.NODE, "n1", REFUSED),  # a second replica's record of the same refusal
    ]
    await projected(private_store, fresh_database, private_nats.url, items)
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT node_id, nkey_public_key, credentials_revoked_reason FROM mf.nodes ORDER BY 1"
        )
        nodes = await cur.fetchall()
        cur = await conn.execute(
            "SELECT subject, refused_sequence, node_id, claimed_node_id, recordings FROM mf.forged_events_refused"
        )
        refused = await cur.fetchall()
    assert nodes == [("n1", KEY, None), ("n2", None, "stolen")]
    assert refused == [("mf.evt.node.n1.NodeRegistered", 41, "n1", "n2", 2)]
