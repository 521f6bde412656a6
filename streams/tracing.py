"""Tracing: W3C trace context (`traceparent`, `tracestate`) carried from the client through the
gateway, NATS message headers and the agent to its workers, with spans exported over OTLP/HTTP.

Every process calls `install(service)` once at start. With `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `MODELFORGE_OTLP_ENDPOINT`) set, it installs the
OpenTelemetry SDK, batching spans to that collector (the SDK reads the rest of the standard
`OTEL_*` settings: sampler, service name, batch delays). Unset, the SDK is never imported and
`span` and `continued` make no span at all; the gateway's edge still names each request's trace
(`untraced_span`) and hands it on in the invoke's headers, so a process that does export (an
agent) continues it. Spans carry ids, codes, sizes and buckets, never request content.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from contextlib import AbstractContextManager

from opentelemetry import context, trace
from opentelemetry.trace import INVALID_SPAN, NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes

from streams.ids import random_bits

TRACER = trace.get_tracer("modelforge")  # a proxy: it becomes the SDK's tracer once `install` runs
_PROPAGATOR = TraceContextTextMapPropagator()
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
ENDPOINT_ALIAS = "MODELFORGE_OTLP_ENDPOINT"  # the same, under the project's own prefix
_exporting = False
_NO_SPAN = contextlib.nullcontext(INVALID_SPAN)  # (a nullcontext may be entered again and again)


def exporting() -> bool:
    """Whether this process records spans (an OTLP endpoint was configured at `install`)."""
    return _exporting


def install(service: str) -> bool:
    """Export this process's spans over OTLP/HTTP when an endpoint is configured; `service` names
    the process unless `OTEL_SERVICE_NAME` does. Returns whether it exports."""
    global _exporting
    named = os.environ.get(ENDPOINT_ALIAS)
    if named and not any(os.environ.get(name) for name in _ENDPOINTS):
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = named  # for the exporter, and the workers this starts
    if _exporting or not any(os.environ.get(name) for name in _ENDPOINTS):
        return _exporting
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or service})
    provider = TracerProvider(resource=resource)  # flushes its batches at interpreter exit
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _exporting = True
    return True


def span(
    name: str,
    parent: context.Context | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Attributes = None,
) -> AbstractContextManager[Span]:
    """A span of the current trace (or of `parent`'s) while the block runs, made current; when
    nothing exports, no span at all (the context stays the caller's, as it would through a no-op
    span), which keeps a request that is not traced within a few µs of one without tracing."""
    if not _exporting:
        return _NO_SPAN
    return TRACER.start_as_current_span(name, parent, kind, attributes)


def continued(
    name: str, carrier: Mapping[str, str] | None, kind: SpanKind, attributes: Attributes = None
) -> AbstractContextManager[Span]:
    """`span`, continuing the trace whose context came in `carrier` (a message's headers)."""
    if not _exporting:
        return _NO_SPAN
    return TRACER.start_as_current_span(name, extract(carrier), kind, attributes)


def extract(carrier: Mapping[str, str] | None) -> context.Context:
    """The context a caller sent (`traceparent`, `tracestate`); an empty one when it sent none or a
    malformed one, which starts a new trace (W3C: not an error)."""
    return _PROPAGATOR.extract(carrier) if carrier else context.Context()


def inject(carrier: dict[str, str]) -> dict[str, str]:
    """`carrier` with the current span's `traceparent` (and `tracestate`) added, when there is one.
    (What the W3C propagator writes, without its setter indirection: this runs on every invoke.)"""
    span_context = trace.get_current_span().get_span_context()
    if span_context.is_valid:
        carrier["traceparent"] = _header(span_context)
        if span_context.trace_state:
            carrier["tracestate"] = span_context.trace_state.to_header()
    return carrier


def _header(span_context: SpanContext) -> str:
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{span_context.trace_flags:02x}"


def traceparent() -> str:
    """The current span as a `traceparent` value, or "" outside any trace."""
    return inject({}).get("traceparent", "")


def untraced_span(parent: context.Context) -> Span:
    """A span that records nothing but names the request in a trace all the same: the caller's
    trace id (or a new one) with a span id of its own. When nothing exports, the edge starts this
    instead of a real span, so a client always gets a trace id to quote and the agent's logs and
    the request's events still join on it."""
    caller = trace.get_current_span(parent).get_span_context()
    rng = random_bits
    span_context = SpanContext(
        trace_id=caller.trace_id if caller.is_valid else rng(128) or 1,
        span_id=rng(64) or 1,
        is_remote=False,
        trace_flags=caller.trace_flags if caller.is_valid else TraceFlags(TraceFlags.DEFAULT),
        trace_state=caller.trace_state if caller.is_valid else None,
    )
    return NonRecordingSpan(span_context)


def trace_id_of(span: Span) -> str:
    """The span's trace id as 32 hex digits, or "" for an invalid span."""
    span_context = span.get_span_context()
    return trace.format_trace_id(span_context.trace_id) if span_context.is_valid else ""


def current_trace_id() -> str:
    """The trace id of the current span (32 hex digits), or "" outside any trace."""
    return trace_id_of(trace.get_current_span())


def traceresponse(span: Span) -> str:
    """The `traceresponse` header value (W3C Trace Context level 2) naming `span`."""
    return _header(span.get_span_context())
