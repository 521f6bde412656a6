"""Ids stay unique whatever else in the process does with the `random` module: a repeated event id
is taken by JetStream for a resend of the earlier event, and the new event is never stored."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import pytest
from opentelemetry import context

from streams import tracing
from streams.envelope import new_id


@pytest.fixture
def reseeded() -> Iterator[None]:
    """The `random` module seeded alike before each draw (as hypothesis does before each example)."""
    state = random.getstate()
    yield
    random.setstate(state)


def test_event_ids_do_not_repeat_when_the_random_module_is_seeded_again(reseeded: None) -> None:
    drawn = []
    for _ in range(3):
        random.seed(0)
        drawn.append(new_id())
    assert len(set(drawn)) == 3


def test_trace_ids_do_not_repeat_when_the_random_module_is_seeded_again(reseeded: None) -> None:
    drawn = []
    for _ in range(3):
        random.seed(0)
        drawn.append(tracing.trace_id_of(tracing.untraced_span(context.Context())))
    assert len(set(drawn)) == 3


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # the child: its first id to the parent, then out without pytest's clean-up
        os.write(writing, new_id().encode())
        os._exit(0)
    os.close(writing)
    with os.fdopen(reading) as pipe:
        from_child = pipe.read()
    os.waitpid(child, 0)
    assert from_child
    assert from_child != new_id()
