"""The raw limits a served request is built from, measured on a bench's own nats-server.

A warm `/v1/embeddings` call is an HTTP round trip, a few acknowledged JetStream publishes and
one NATS request–reply to the agent around the engine call. Measuring those alone, in the same
run and on the same machine, says what the gateway's overhead is *in units of its parts*.
"""

from __future__ import annotations

import statistics
import time

from nats.aio.msg import Msg
from nats.js.api import StorageType, StreamConfig

from eventstore.connection import connect

PAYLOAD = b'{"texts": ["A cat sits on the mat."]}' + b" " * 120  # about an invoke request's size
RAW_STREAM = "BENCH_RAW"


async def nats_round_trips(url: str, seconds: float) -> list[float]:
    """Sequential core-NATS request–reply (ms each) to a responder on another connection."""
    responder, requester = await connect(url, "bench-responder"), await connect(url, "bench-requester")

    async def echo(msg: Msg) -> None:
        await responder.client.publish(msg.reply, msg.data)

    out: list[float] = []
    try:
        await responder.client.subscribe("bench.echo", cb=echo)
        await responder.client.flush()
        end = time.perf_counter() + seconds
        while (started := time.perf_counter()) < end:
            await requester.client.request("bench.echo", PAYLOAD, 2)
            out.append((time.perf_counter() - started) * 1000)
    finally:
        await requester.close()
        await responder.close()
    return out


async def acked_publishes(url: str, seconds: float) -> list[float]:
    """Sequential JetStream publishes (ms each) to a file stream, each waiting for its ack."""
    connection = await connect(url, "bench-publisher")
    js = connection.client.jetstream()
    out: list[float] = []
    try:
        await js.add_stream(StreamConfig(name=RAW_STREAM, subjects=["bench.raw.>"], storage=StorageType.FILE))
        end = time.perf_counter() + seconds
        while (started := time.perf_counter()) < end:
            await js.publish("bench.raw.x", PAYLOAD)
            out.append((time.perf_counter() - started) * 1000)
    finally:
        await js.delete_stream(RAW_STREAM)
        await connection.close()
    return out


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
