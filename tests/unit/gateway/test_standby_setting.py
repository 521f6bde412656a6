"""MODELFORGE_STANDBY_LEASES: the slots of each standby lease a gateway holds (0 or unset: none)."""

from __future__ import annotations

import pytest

from gateway.process import STANDBY_LEASES_ENV, standby_slots_from_env


def test_standby_leases_are_off_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STANDBY_LEASES_ENV, raising=False)
    assert standby_slots_from_env() == 0


def test_the_setting_names_the_slots_of_each_standby_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STANDBY_LEASES_ENV, "4")
    assert standby_slots_from_env() == 4


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_a_setting_that_is_not_a_whole_number_stops_the_start(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(STANDBY_LEASES_ENV, value)
    with pytest.raises(ValueError, match=STANDBY_LEASES_ENV):
        standby_slots_from_env()
