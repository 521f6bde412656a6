"""The commit interval bounds how often a projector commits under steady traffic, never how long
the first events after a quiet spell wait: those commit after a short linger for the rest of
their request (`projections.projector.QUIET_LINGER_S`)."""

from __future__ import annotations

from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from projections.scenario import traffic

from .helpers import project_until, publish

AN_HOUR_S = 3600.0


async def test_a_request_after_a_quiet_spell_is_applied_without_waiting_out_the_commit_interval(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    target = await publish(private_store, traffic("quiet", 1))

    await project_until(fresh_database, private_nats.url, target, timeout=30.0, commit_interval=AN_HOUR_S)
