"""A request record the gateway's recorder could not write (`eventstore.recorder`) is tried again, in
a task of its own with the same id, until the stream takes it."""

from __future__ import annotations

from eventstore.connection import connect, write_held
from eventstore.provision import provision
from eventstore.recorder import RequestRecorder
from eventstore.store import EventStore
from gateway.serving.background import record_request
from gateway.serving.context import ServingContext
from gateway.state.live import LiveState
from modelforge.devstack.nats_server import NatsServer
from streams import subjects
from streams.envelope import new_id
from streams.events.requests import RequestRejected

CAPABILITY = "rag.embedding@1"


async def test_a_record_no_stream_took_is_recorded_once_the_stream_is_there(private_nats: NatsServer) -> None:
    conn = await connect(private_nats.url, "records-retried-test")
    try:
        store = EventStore(conn)
        recorder = RequestRecorder(store)
        await recorder.open()
        ctx = ServingContext(store, LiveState(), conn.client, "gateway-a", recorder=recorder)
        request_id = new_id()
        event = RequestRejected(
            request_id=request_id, client_id="c", capability=CAPABILITY, code="RATE_LIMITED", http_status=429
        )
        record_request(ctx, CAPABILITY, request_id, event)  # no MF_REQUESTS yet: no stream answers
        write_held(conn.client)
        await recorder.written(5)
        assert ctx.recording  # handed on to a task that tries again
        await provision(conn.client)
        await ctx.records_written(60)
        assert not ctx.recording
        js = conn.client.jetstream()
        assert (await js.stream_info(subjects.REQUESTS_STREAM)).state.messages == 1  # one copy
        stored = await js.get_msg(subjects.REQUESTS_STREAM, store.last_request_sequence)
        assert stored.subject == subjects.request_subject(CAPABILITY, "RequestRejected")
        assert request_id.encode() in stored.data
    finally:
        await conn.close()
