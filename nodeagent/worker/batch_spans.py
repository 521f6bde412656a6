"""Spans of the dynamic batcher, for each traced submission in a batch: `batch` from when it was
queued until its batch's runtime call returned, and under it `runtime`, the call itself. A batch
serves several requests (several traces) at once, so each gets its own pair, with the batch's size.
Only while spans are exported (`streams.tracing.exporting`): otherwise nothing is captured."""

from __future__ import annotations

import time

from opentelemetry import context, trace

from streams import tracing


def submitted() -> tuple[context.Context | None, int]:
    """What a submission keeps for its spans: the submitter's context and the time, when traced."""
    return (context.get_current(), time.time_ns()) if tracing.exporting() else (None, 0)


def record(traced: list[tuple[context.Context, int]], rows: int, ran_ns: int, done_ns: int, ok: bool) -> None:
    """The `batch` and `runtime` spans of each traced submission (its context, when it was queued)."""
    attributes = {"modelforge.batch_rows": rows, "modelforge.batch_submissions": len(traced)}
    for parent, queued_ns in traced:
        batch = tracing.TRACER.start_span("batch", parent, start_time=queued_ns, attributes=attributes)
        runtime = tracing.TRACER.start_span(
            "runtime", trace.set_span_in_context(batch, parent), start_time=ran_ns, attributes=attributes
        )
        if not ok:
            runtime.set_status(trace.Status(trace.StatusCode.ERROR))
        runtime.end(done_ns)
        batch.end(done_ns)
