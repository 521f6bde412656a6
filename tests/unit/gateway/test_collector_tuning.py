"""The gateway process's cyclic collector: start-up's objects frozen, the young generation run
every GC_YOUNG_THRESHOLD allocations rather than Python's 700."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.cli import GC_YOUNG_THRESHOLD, tune_collector


@pytest.fixture
def collector_restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_start_up_objects_are_frozen_and_the_young_generation_runs_less_often(
    collector_restored: None,
) -> None:
    _, older, oldest = gc.get_threshold()
    tune_collector()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, older, oldest)
