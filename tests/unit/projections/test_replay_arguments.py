"""`modelforge replay --until-time` takes a time only with its UTC offset."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from modelforge.cli import build_parser


def until_time(text: str) -> datetime:
    until: datetime = build_parser().parse_args(["replay", "--until-time", text]).until_time
    return until


def test_until_time_with_an_offset_is_that_instant() -> None:
    assert until_time("2026-11-30T10:00:00Z") == datetime(2026, 11, 30, 10, tzinfo=UTC)
    assert until_time("2026-11-30T11:00:00+01:00") == datetime(
        2026, 11, 30, 11, tzinfo=timezone(timedelta(hours=1))
    )


def test_until_time_without_an_offset_is_refused_saying_how_to_write_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        until_time("2026-11-30T10:00:00")
    assert exited.value.code == 2
    assert (
        "'2026-11-30T10:00:00' has no UTC offset: add one, e.g. 2026-11-30T10:00:00Z"
        in capsys.readouterr().err
    )
