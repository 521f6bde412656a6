"""`modelforge projection status` prints the projection status as a table, notes what needs the
operator, and lists the recorded gaps; `--json` prints the API's JSON instead."""

from __future__ import annotations

from typing import Any

from gateway.admin.projection_text import render
from modelforge.cli import build_parser


def stream(name: str, checkpoint: int, first: int, last: int, **extra: Any) -> dict[str, Any]:
    return {
        "stream": name,
        "checkpoint": checkpoint,
        "projected_at": "2026-11-30T10:00:00+00:00",
        "first_seq": first,
        "last_seq": last,
        "lag": last - checkpoint,
        "gone_unread": max(0, first - 1 - checkpoint),
        **extra,
    }


def gap(first: int, last: int) -> dict[str, Any]:
    return {
        "stream": "MF_REQUESTS",
        "first_seq": first,
        "last_seq": last,
        "count": last - first + 1,
        "reason": "aged out of the stream (its max age) before the projector read them",
        "detected_at": "2026-11-30T10:05:00+00:00",
    }


def test_a_caught_up_projection_is_a_table_with_one_row_per_stream_and_no_gaps() -> None:
    text = render(
        {
            "streams": [
                stream("MF_EVENTS", 1200, 1, 1200),
                stream("MF_REQUESTS", 40, 1, 40, projected_at=None),
            ],
            "gaps": [],
            "gaps_total": 0,
        }
    )
    assert text.splitlines() == [
        "stream       checkpoint  first seq  last seq  lag  projected at",
        "MF_EVENTS          1200          1      1200    0  2026-11-30T10:00:00+00:00",
        "MF_REQUESTS          40          1        40    0  never",
        "gaps: none recorded",
    ]


def test_messages_gone_unread_and_a_checkpoint_past_the_stream_are_called_out() -> None:
    text = render(
        {
            "streams": [stream("MF_EVENTS", 90, 1, 80), stream("MF_REQUESTS", 10, 16, 20)],
            "gaps": [],
            "gaps_total": 0,
        }
    )
    assert "MF_EVENTS: the checkpoint is past the stream's last sequence" in text
    assert "MF_REQUESTS: 5 message(s) after the checkpoint left the stream unread" in text


def test_gaps_are_listed_with_their_size_and_a_partial_list_says_so() -> None:
    text = render(
        {"streams": [stream("MF_REQUESTS", 30, 20, 30)], "gaps": [gap(12, 19), gap(2, 6)], "gaps_total": 3}
    )
    assert text.splitlines()[-3:] == [
        "gaps: 3 recorded, the newest 2 shown",
        "  MF_REQUESTS 12-19 (8 message(s)) detected 2026-11-30T10:05:00+00:00: aged out of the stream"
        " (its max age) before the projector read them",
        "  MF_REQUESTS 2-6 (5 message(s)) detected 2026-11-30T10:05:00+00:00: aged out of the stream"
        " (its max age) before the projector read them",
    ]


def test_projection_status_takes_json_to_print_the_apis_json() -> None:
    assert build_parser().parse_args(["projection", "status", "--json"]).json is True
    assert build_parser().parse_args(["projection", "status"]).json is False


def test_a_halted_projection_names_the_event_it_stopped_at_and_the_way_out() -> None:
    halt = {
        "stream": "MF_EVENTS",
        "seq": 81,
        "event_type": "ClientTeleported",
        "reason": "unknown event type",
        "halted_at": "2026-11-30T10:06:00+00:00",
    }
    text = render(
        {"streams": [stream("MF_EVENTS", 80, 1, 90)], "halted": [halt], "gaps": [], "gaps_total": 0}
    )
    assert (
        "MF_EVENTS: HALTED at sequence 81 (ClientTeleported) since 2026-11-30T10:06:00+00:00:"
        " unknown event type" in text.splitlines()
    )
    assert "start it; it resumes at that event" in text
