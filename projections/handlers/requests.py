"""Request events (MF_REQUESTS) -> the request history, with the full latency breakdown.

These rows are touched by no MF_EVENTS handler, so the two streams project independently.
"""

from __future__ import annotations

from typing import Any

from msgspec.structs import asdict

from projections.handlers.ops import Op
from streams.events import requests as r
from streams.events.base import Event

_RequestEvent = r.RequestAccepted | r.RequestCompleted | r.RequestFailed | r.RequestRejected


def _request(event: _RequestEvent, status: str, columns: dict[str, Any]) -> list[Op]:
    """The request's row: every request event names its client and capability and sets a status.

    `columns` is the handler's own fresh dict (the hottest rows of the projector: one dict per
    event, no keyword-argument copies)."""
    columns["client_id"] = event.client_id
    columns["capability"] = event.capability
    columns["status"] = status
    if event.trace_id:  # (events from before tracing leave the row's as it is)
        columns["trace_id"] = event.trace_id
    return [Op("requests", (event.request_id,), columns)]


def _finished(event: r.RequestCompleted | r.RequestFailed, columns: dict[str, Any]) -> dict[str, Any]:
    """`columns` plus the latency breakdown: every latency field is a column of the same name."""
    row = asdict(event.latency)
    row.update(columns)
    return row


def _accepted(
    acceptance: r.RequestAccepted | r.Acceptance, at: str | None, columns: dict[str, Any]
) -> dict[str, Any]:
    """`columns` plus the acceptance's: from a `RequestAccepted`, or carried by the end event of a
    request that ended before its acceptance was recorded (one row either way)."""
    columns["input_sha256"] = acceptance.input_sha256
    columns["shape_bucket"] = acceptance.shape_bucket
    columns["items"] = acceptance.items
    columns["input_type"] = acceptance.input_type
    columns["accepted_at"] = at
    if acceptance.gateway_id:  # (events from before it was kept leave the column null)
        columns["accepted_by"] = acceptance.gateway_id
    return columns


def _carried(event: r.RequestCompleted | r.RequestFailed, columns: dict[str, Any]) -> dict[str, Any]:
    accepted = event.accepted
    return columns if accepted is None else _accepted(accepted, accepted.accepted_at.isoformat(), columns)


def ops(event: Event, seq: int, at: str | None) -> list[Op] | None:
    match event:
        case r.RequestAccepted():
            return _request(event, "accepted", _accepted(event, at, {}))
        case r.RequestCompleted():
            done = {
                "deployment_id": event.deployment_id,
                "node_id": event.node_id,
                "accelerator_id": event.accelerator_id,
                "cold": event.cold,
                "usage_items": event.usage.items,
                "usage_input_tokens": event.usage.input_tokens,
                "finished_at": at,
            }
            if event.standby_lease_id:  # (ran under its gateway's standby lease: no lease of its own)
                done["standby_lease_id"] = event.standby_lease_id
            return _request(event, "completed", _finished(event, _carried(event, done)))
        case r.RequestFailed():
            return _request(
                event,
                "failed",
                _finished(
                    event,
                    _carried(
                        event,
                        {
                            "code": event.code,
                            "http_status": event.http_status,
                            "deployment_id": event.deployment_id or None,
                            "finished_at": at,
                        },
                    ),
                ),
            )
        case r.RequestRejected():
            return _request(
                event,
                "rejected",
                {"code": event.code, "http_status": event.http_status, "finished_at": at},
            )
        case r.ClientKeyUsed():  # own tables: no MF_EVENTS handler writes them
            return [
                Op("client_usage", (event.client_id,), {"last_used_at": at}),
                Op(
                    "credential_usage",
                    (event.credential_id,),
                    {"client_id": event.client_id, "last_used_at": at},
                ),
            ]
    return None
