"""An admin read through one gateway shows what any gateway recorded before it, however long the
projector waits between commits at a trickle (up to a minute): it waits for the streams' ends, not
only for this gateway's own appends."""

from __future__ import annotations

from streams.envelope import new_id
from streams.events.requests import RequestRejected
from tests.integration.gateway.conftest import Stack, stack_admin
from tests.integration.projections.helpers import projecting

TOKEN = "operator-token-for-fleet-read-tests"
CAPABILITY = "rag.embedding@1"


async def test_an_admin_read_shows_a_request_another_gateway_recorded_a_moment_before(
    stack: Stack, read_model_database: str
) -> None:
    async with projecting(read_model_database, stack.nats_url), stack_admin(stack, TOKEN) as admin:
        first = await admin.get("/requests", params={"limit": 1})  # the projector has caught up
        assert first.status_code == 200, first.text
        # Recorded by another writer than this gateway (as another replica would): after the
        # projector's catch-up commit, its next one is up to a minute away.
        request_id = new_id()
        refused = RequestRejected(request_id, "another-gateways-client", CAPABILITY, "UNAUTHENTICATED", 401)
        await stack.store.record_request(CAPABILITY, request_id, refused)

        read = await admin.get("/requests", params={"limit": 1000})

    assert read.status_code == 200, read.text
    assert "x-read-model-stale" not in read.headers
    assert request_id in [row["request_id"] for row in read.json()]
