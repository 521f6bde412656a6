"""`modelforge audit tail --since` takes a stream sequence, or a time only with its UTC offset."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from modelforge.cli import build_parser


def since(*args: str) -> tuple[int, datetime | None]:
    point: tuple[int, datetime | None] = build_parser().parse_args(["audit", "tail", *args]).since
    return point


def test_tail_starts_at_the_beginning_by_default() -> None:
    assert since() == (1, None)


def test_since_a_number_is_a_stream_sequence() -> None:
    assert since("--since", "1200") == (1200, None)


def test_since_a_time_with_an_offset_is_that_instant() -> None:
    assert since("--since", "2026-12-01T09:00Z") == (1, datetime(2026, 12, 1, 9, tzinfo=UTC))


def test_since_a_time_without_an_offset_is_refused_saying_how_to_write_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        since("--since", "2026-12-01T09:00")
    assert exited.value.code == 2
    assert "has no UTC offset" in capsys.readouterr().err
