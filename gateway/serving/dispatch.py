"""Invoking a resident model: one core-NATS request to the agent that holds it.

Content travels only in flight (no stream captures `mf.invoke.>`); a missing agent shows at
once as no-responders. The gateway owns the deadline.
"""

from __future__ import annotations

import time

import msgspec
from nats.errors import MaxPayloadError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from eventstore.replies import inbox_of
from gateway.serving.capacity import Grant
from gateway.serving.context import ServingContext
from streams import codes, subjects
from streams.codes import ServingError
from streams.messages import InvokeReply, InvokeRequest, WorkerTimings

_reply_decoder = msgspec.json.Decoder(InvokeReply)
_encoder = msgspec.json.Encoder()


class Invoked(msgspec.Struct, frozen=True):
    result: bytes  # the contract's output, JSON
    worker: WorkerTimings
    payload_ms: float
    round_trip_ms: float


async def invoke(
    ctx: ServingContext, grant: Grant, capability: str, request_id: str, payload: bytes, deadline: float
) -> Invoked:
    started = time.perf_counter()
    request = InvokeRequest(
        request_id=request_id,
        capability=capability,
        deployment_id=grant.deployment_id,
        deadline_unix_ms=int(deadline * 1000),
        payload=msgspec.Raw(payload),
    )
    data = _encoder.encode(request)
    encoded = time.perf_counter()
    subject = subjects.invoke_subject(grant.node_id, grant.deployment_id)
    try:
        msg = await inbox_of(ctx.client).request(subject, data, max(0.001, deadline - time.time()))
    except MaxPayloadError:
        raise ServingError(
            "PAYLOAD_TOO_LARGE",
            f"the request ({len(data)} bytes) is larger than NATS carries ({ctx.client.max_payload})",
            http_status=413,
        ) from None
    except NoRespondersError:
        raise ServingError(
            "CAPABILITY_UNAVAILABLE",
            f"no agent answers for {grant.deployment_id} on {grant.node_id}",
            http_status=503,
        ) from None
    except (NatsTimeoutError, TimeoutError):
        raise ServingError(
            "REQUEST_TIMEOUT", "the model did not answer before the request's deadline"
        ) from None
    done = time.perf_counter()
    try:
        reply = _reply_decoder.decode(msg.data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise ServingError("INVALID_OUTPUT", "the worker's reply is not an InvokeReply") from None
    if not reply.ok:
        code = reply.code if reply.code in codes.ERROR_CODES else "INFERENCE_FAILED"
        raise ServingError(code, reply.message or "the worker failed to run the request")
    return Invoked(
        result=bytes(reply.result),
        worker=reply.timings,
        payload_ms=(encoded - started) * 1000,
        round_trip_ms=(done - encoded) * 1000,
    )
