"""Per-request events (MF_REQUESTS): hashes, shape buckets and timings — never content."""

from __future__ import annotations

from datetime import datetime

import msgspec

from streams.events.base import Event


class LatencyBreakdown(msgspec.Struct, frozen=True, kw_only=True):
    """Milliseconds spent in each stage; `total_ms` is wall time at the gateway."""

    validation_ms: float = 0.0
    resolution_ms: float = 0.0
    scheduling_ms: float = 0.0
    load_ms: float = 0.0
    queue_ms: float = 0.0
    payload_ms: float = 0.0
    dispatch_ms: float = 0.0
    worker_preprocess_ms: float = 0.0
    worker_inference_ms: float = 0.0
    worker_serialize_ms: float = 0.0
    transport_ms: float = 0.0
    gateway_ms: float = 0.0
    total_ms: float = 0.0


class Usage(msgspec.Struct, frozen=True):
    items: int
    input_tokens: int = 0


class RequestAccepted(Event, frozen=True):
    request_id: str
    client_id: str
    capability: str
    input_sha256: str
    shape_bucket: str  # e.g. "items:1-4/chars:0-512"
    items: int
    trace_id: str = ""  # the request's W3C trace (32 hex digits): joins traces, logs and events
    input_type: str = ""  # an embedding request's "query" | "document" ("": not given, or before it was kept)
    # the gateway replica that accepted it and serves it ("": before it was kept); should that
    # replica vanish, a survivor fails what it left open (gateway.serving.vanished)
    gateway_id: str = ""


class Acceptance(msgspec.Struct, frozen=True, kw_only=True):
    """What `RequestAccepted` says of a request, carried by its end event (`RequestCompleted`,
    `RequestFailed`) instead when it ended before its acceptance was recorded: a gateway holds an
    acceptance for a moment (`gateway.serving.acceptances`), and a request that ends within it is
    one message in MF_REQUESTS, not two. Every request still has its acceptance in the log once."""

    input_sha256: str
    shape_bucket: str
    items: int
    input_type: str = ""
    gateway_id: str = ""
    accepted_at: datetime  # when it was accepted (a `RequestAccepted`'s is its envelope's time)

    def alone(self, request_id: str, client_id: str, capability: str, trace_id: str) -> RequestAccepted:
        """This acceptance as a record of its own (stamped `accepted_at` by its envelope)."""
        return RequestAccepted(
            request_id=request_id,
            client_id=client_id,
            capability=capability,
            input_sha256=self.input_sha256,
            shape_bucket=self.shape_bucket,
            items=self.items,
            trace_id=trace_id,
            input_type=self.input_type,
            gateway_id=self.gateway_id,
        )


class RequestCompleted(Event, frozen=True):
    request_id: str
    client_id: str
    capability: str
    deployment_id: str
    node_id: str
    accelerator_id: str
    cold: bool
    latency: LatencyBreakdown
    usage: Usage
    trace_id: str = ""
    # the standby lease it ran under (a slot of its gateway's: no lease of its own was appended);
    # "" for a request that had its own lease, and in older events
    standby_lease_id: str = ""
    accepted: Acceptance | None = None  # None: its `RequestAccepted` was recorded before it


class RequestFailed(Event, frozen=True):
    request_id: str
    client_id: str
    capability: str
    code: str
    http_status: int
    deployment_id: str = ""
    latency: LatencyBreakdown = LatencyBreakdown()
    trace_id: str = ""
    accepted: Acceptance | None = None  # None: its `RequestAccepted` was recorded (or it never was accepted)


class RequestRejected(Event, frozen=True):
    """Refused before acceptance (bad input, auth, limits): the request's only event."""

    request_id: str
    client_id: str
    capability: str
    code: str
    http_status: int
    trace_id: str = ""


class ClientKeyUsed(Event, frozen=True):
    """A client's key authenticated a request: written at most once a minute per credential and
    gateway replica (`gateway.clients.usage`), never once per request; it carries the client's and
    the credential's `last_used_at` (the event's time) into the read model."""

    client_id: str
    credential_id: str
    capability: str  # the call's, naming the event's MF_REQUESTS subject
