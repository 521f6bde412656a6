"""A gateway tells the bus's silence from a node's: while MF_TELEMETRY elects a leader after the
server leading it is lost, its feed is down and no node's silence counts against the node."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from eventstore.connection import connect
from eventstore.provision import provision
from gateway.state.live import LiveState
from streams import subjects
from streams.messages import AcceleratorTelemetry
from tests.support.cluster import running_cluster

# Short, so that the feed's watch asks the stream (after a quarter of it without a sample) well
# within the election: one takes seconds.
STALE_S = 2.0


def sample(node: str) -> AcceleratorTelemetry:
    return AcceleratorTelemetry(
        node_id=node, accelerator_id=f"{node}-cpu0", generation=1, total_bytes=1 << 34, used_bytes=1 << 30,
        process_bytes=1 << 29, observed_at_unix_ms=int(time.time() * 1000), residencies=[], healthy=True,
    )  # fmt: skip


async def test_a_node_silent_while_its_telemetry_stream_elects_a_leader_stays_live(scratch: Path) -> None:
    with running_cluster(scratch / "feed-cluster") as cluster:
        conn = await connect(cluster.urls, "feed-watch-test")
        live = LiveState(telemetry_stale_s=STALE_S)
        try:
            await provision(conn.client, 3)
            js = conn.client.jetstream()
            stored = sample("node-a")
            await js.publish(
                subjects.telemetry_subject(stored.node_id, stored.accelerator_id), msgspec.json.encode(stored)
            )
            await live.start(conn.client)
            info = await js.stream_info(subjects.TELEMETRY_STREAM)
            assert info.cluster is not None
            assert info.cluster.leader is not None
            cluster.kill(info.cluster.leader)
            assert await live.wait_for(lambda: live.feed.down_since is not None, 30)
            assert live.node_live("node-a", now=time.time() + 600)  # however long the election lasts
            assert await live.wait_for(lambda: live.feed.down_since is None, 60)  # a leader again
        finally:
            await live.stop()
            await conn.close()
