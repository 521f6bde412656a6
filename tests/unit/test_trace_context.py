"""Trace context without an exporter: a request is still named in a trace, the caller's or a new one."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams import tracing

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
WELL_FORMED = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def test_nothing_exports_while_no_otlp_endpoint_is_set() -> None:
    assert not tracing.exporting()


@given(trace_id=st.integers(1, 2**128 - 1), span_id=st.integers(1, 2**64 - 1), sampled=st.booleans())
def test_an_untraced_request_keeps_the_callers_trace_and_flags(
    trace_id: int, span_id: int, sampled: bool
) -> None:
    header = f"00-{trace_id:032x}-{span_id:016x}-{int(sampled):02x}"
    span = tracing.untraced_span(tracing.extract({"traceparent": header}))
    assert tracing.trace_id_of(span) == f"{trace_id:032x}"
    assert tracing.traceresponse(span).endswith(f"-{int(sampled):02x}")
    assert not span.is_recording()


@given(st.text(max_size=80).filter(lambda h: not WELL_FORMED.fullmatch(h)))
def test_a_traceparent_that_does_not_parse_starts_a_new_trace(header: str) -> None:
    span = tracing.untraced_span(tracing.extract({"traceparent": header}))
    assert re.fullmatch("[0-9a-f]{32}", tracing.trace_id_of(span))
    assert tracing.trace_id_of(span) != "0" * 32


def test_traceresponse_names_the_trace_and_the_span_of_the_request() -> None:
    span = tracing.untraced_span(tracing.extract({"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}))
    assert re.fullmatch(f"00-{TRACE_ID}-[0-9a-f]{{16}}-01", tracing.traceresponse(span))
    assert not tracing.traceresponse(span).startswith(f"00-{TRACE_ID}-00f067aa0ba902b7")


def exports_with(env: dict[str, str]) -> bool:
    """Whether a fresh interpreter with `env` (and no other OTEL setting) would export its spans."""
    code = "from streams import tracing; print(tracing.install('probe'))"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MODELFORGE_OTLP"))}
    ran = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True)
    return ran.stdout.strip() == "True"


@pytest.mark.parametrize(
    ("env", "exports"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"MODELFORGE_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
    ],
)
def test_a_process_exports_only_with_an_otlp_endpoint_set(env: dict[str, str], exports: bool) -> None:
    assert exports_with(env) is exports
