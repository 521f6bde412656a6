"""Invoking a resident model: one core-NATS request to the agent that holds it.

Content travels only in flight (no stream captures `mf.invoke.>`); a missing agent shows at
once as no-responders, and one lost while it runs the request (`gateway.serving.node_loss`) as
soon as its accelerator is reconciled. An invoke in flight when this gateway's own NATS connection
drops, or when the agent's samples report a drop of its connection (`gateway.state.reconnects`), is
given up at once (`InvokeCutOff`): its request or reply may be lost with that server. The gateway
owns the deadline.
"""

from __future__ import annotations

import asyncio
import time
from typing import Generic

import msgspec
from nats.errors import MaxPayloadError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from opentelemetry.trace import SpanKind

from eventstore.replies import inbox_of, resend_while_leaderless
from gateway.serving.capacity import Grant
from gateway.serving.context import ServingContext
from gateway.serving.outputs import Output, OutputReader
from streams import subjects
from streams.codes import ServingError
from streams.messages import InvokeRequest, WorkerTimings
from streams.tracing import inject, span

# An invoke whose node was lost mid-flight: its result never comes. Every capability's invoke is a
# pure function of its input, so the pipeline tries it once more elsewhere.
NODE_LOST = "WORKER_RESTART_RECONCILED"
# How long an invoke that finds no responder is sent again (50 ms, doubling) before its agent counts
# as unreachable: an agent reconnects to another server of the cluster within this (bench.fleet).
NO_RESPONDER_WAIT_S = 1.0
# What the invocation adds around the contract input (request id, capability, deployment id,
# deadline, field names): a few hundred bytes, with room to spare.
ENVELOPE_BYTES = 1024
_encoder = msgspec.json.Encoder()


class NodeUnreachable(ServingError):
    """No agent listens for the deployment on the node the lease is on (its agent died, and the
    node is not declared lost yet): the request never ran there, so it may run on another copy."""


class InvokeCutOff(NodeUnreachable):
    """This gateway's NATS connection, or the agent's, dropped while the invoke was in flight: the
    request or its reply may be lost with the server it went through, and nothing would say so
    before the deadline. Every invoke is a pure function, so it runs once more, as for an
    unreachable agent."""


# Whose NATS connection dropped while an invoke was in flight (`InvokeCutOff`'s message).
_CUT_OFF = {
    "gateway": "the gateway's NATS connection dropped",
    "agent": "the node's agent reported a drop of its NATS connection",
}


class Invoked(msgspec.Struct, Generic[Output], frozen=True):
    result: Output  # the contract's output, as the caller's reader reads it
    worker: WorkerTimings
    payload_ms: float
    round_trip_ms: float


async def invoke(
    ctx: ServingContext,
    grant: Grant,
    capability: str,
    request_id: str,
    payload: bytes,
    deadline: float,
    output: OutputReader[Output],
    input_type: str = "",
) -> Invoked[Output]:
    """The model's answer; the request's trace goes along in the NATS headers (`traceparent`)."""
    attributes: dict[str, str | int] = {
        "modelforge.node_id": grant.node_id,
        "modelforge.deployment_id": grant.deployment_id,
        "modelforge.payload_bytes": len(payload),
    }
    with span("invoke", kind=SpanKind.CLIENT, attributes=attributes):
        started = time.perf_counter()
        request = InvokeRequest(
            request_id=request_id,
            capability=capability,
            deployment_id=grant.deployment_id,
            deadline_unix_ms=int(deadline * 1000),
            payload=msgspec.Raw(payload),
            input_type=input_type,
        )
        return await _invoke(ctx, grant, request, deadline, started, output)


async def _invoke(
    ctx: ServingContext,
    grant: Grant,
    request: InvokeRequest,
    deadline: float,
    started: float,
    output: OutputReader[Output],
) -> Invoked[Output]:
    """`request` sent to the agent holding `grant` (encoded here: `payload_ms` counts it from
    `started`), its reply awaited until `deadline` or the lease leaves the books, and read by
    `output`."""
    data = _encoder.encode(request)
    encoded = time.perf_counter()
    subject = subjects.invoke_subject(grant.node_id, grant.deployment_id)
    task, ended = asyncio.current_task(), list[str]()

    def stop_waiting(why: str) -> None:  # no reply will come: stop waiting for one
        if not ended:
            ended.append(why)
            if task is not None:
                task.cancel()

    on_books = grant.standby_lease_id or grant.lease_id  # under a slot: its standby lease's fate
    ctx.live.lease_watches.watch(grant.lease_id, lambda: stop_waiting(NODE_LOST), on_books)
    ctx.store.connection.watch_drop(grant.lease_id, lambda: stop_waiting(_CUT_OFF["gateway"]))
    ctx.live.reconnects.watch(grant.node_id, grant.lease_id, lambda: stop_waiting(_CUT_OFF["agent"]))
    inbox, headers = inbox_of(ctx.client), inject({})
    try:
        # No responder can be an agent between two connections (a NATS server lost, its reconnect
        # under way): asked again for a moment before it counts as unreachable.
        msg = await resend_while_leaderless(
            lambda: inbox.request(subject, data, max(0.001, deadline - time.time()), headers=headers),
            min(NO_RESPONDER_WAIT_S, max(0.0, deadline - time.time())),
        )
    except asyncio.CancelledError:
        if not ended or task is None or task.uncancel():
            raise  # cancelled by someone else too
        if ended[0] != NODE_LOST:
            raise InvokeCutOff(
                "CAPABILITY_UNAVAILABLE", f"{ended[0]} while {grant.node_id} had the request", http_status=503
            ) from None
        raise ServingError(
            NODE_LOST,
            f"node {grant.node_id} was lost while it ran the request (its accelerator was reconciled)",
            http_status=503,
        ) from None
    except MaxPayloadError:
        raise ServingError(
            "PAYLOAD_TOO_LARGE",
            f"the request ({len(data)} bytes) is larger than NATS carries ({ctx.client.max_payload})",
            http_status=413,
        ) from None
    except NoRespondersError:
        raise NodeUnreachable(
            "CAPABILITY_UNAVAILABLE",
            f"no agent answers for {grant.deployment_id} on {grant.node_id}",
            http_status=503,
        ) from None
    except (NatsTimeoutError, TimeoutError):
        raise ServingError(
            "REQUEST_TIMEOUT", "the model did not answer before the request's deadline"
        ) from None
    finally:
        ctx.live.lease_watches.unwatch(grant.lease_id)
        ctx.store.connection.unwatch_drop(grant.lease_id)
        ctx.live.reconnects.unwatch(grant.node_id, grant.lease_id)
    done = time.perf_counter()
    result, timings = output.read(msg.data)
    return Invoked(
        result=result,
        worker=timings,
        payload_ms=(encoded - started) * 1000,
        round_trip_ms=(done - encoded) * 1000,
    )
