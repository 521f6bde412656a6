"""Groups of requests sharing a run: nobody waits while fewer than `after` runs are in flight;
past that, requests wait in their key's group, which departs, oldest first, as soon as a run ends
or once it is full. Every request departs exactly once, in its arrival order within its key."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.serving.coalescing import Coalescer, Room

ROOM = Room(items=8, bytes=1_000)

# An arrival (deployment, key within it, items) or the end of a run of a deployment.
Arrival = tuple[str, int, int]
steps = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["emb", "other"]), st.integers(0, 1), st.integers(1, ROOM.items)),
        st.sampled_from(["emb", "other"]),
    ),
    max_size=40,
)


class Gateway:
    """The pipeline's use of a coalescer: a request goes alone unless its deployment is busy;
    a run in flight ends when the test says so."""

    def __init__(self, after: int) -> None:
        self.coalescer: Coalescer[int] = Coalescer(after)
        self.arrivals: list[Arrival] = []
        self.runs: dict[str, list[list[int]]] = {"emb": [], "other": []}  # in flight, oldest first
        self.departed: list[list[int]] = []
        self.waited: set[int] = set()

    def arrive(self, deployment: str, key: int, items: int) -> None:
        member = len(self.arrivals)
        self.arrivals.append((deployment, key, items))
        if not self.coalescer.busy(deployment):
            self.coalescer.started(deployment)
            self._run(deployment, [member])
            return
        self.waited.add(member)
        for group in self.coalescer.join((deployment, key), deployment, member, items, items * 100, ROOM):
            self._run(deployment, group)

    def play(self, step: Arrival | str) -> None:
        if isinstance(step, str):
            self.finish(step)
        else:
            self.arrive(*step)

    def finish(self, deployment: str) -> None:
        if self.runs[deployment]:
            self.runs[deployment].pop(0)
            for group in self.coalescer.finished(deployment):
                self._run(deployment, group)

    def drain(self) -> None:
        for deployment in self.runs:
            while self.runs[deployment]:
                self.finish(deployment)

    def _run(self, deployment: str, group: list[int]) -> None:
        self.runs[deployment].append(group)
        self.departed.append(group)


def played(after: int, script: list[Arrival | str]) -> Gateway:
    gateway = Gateway(after)
    for step in script:
        gateway.play(step)
    return gateway


@given(st.integers(0, 3), steps)
def test_every_request_departs_exactly_once(after: int, script: list[Arrival | str]) -> None:
    gateway = played(after, script)
    gateway.drain()
    departed = [member for group in gateway.departed for member in group]
    assert sorted(departed) == list(range(len(gateway.arrivals)))


@given(st.integers(0, 3), steps)
def test_a_group_holds_one_key_in_arrival_order_within_a_run_s_room(
    after: int, script: list[Arrival | str]
) -> None:
    gateway = played(after, script)
    gateway.drain()
    for group in gateway.departed:
        keys = {gateway.arrivals[m][:2] for m in group}
        assert len(keys) == 1
        assert group == sorted(group)
        assert sum(gateway.arrivals[m][2] for m in group) <= ROOM.items


@given(st.integers(0, 3), steps)
def test_requests_of_a_key_depart_in_their_arrival_order(after: int, script: list[Arrival | str]) -> None:
    gateway = played(after, script)
    gateway.drain()
    for deployment, key in {a[:2] for a in gateway.arrivals}:
        order = [
            m for group in gateway.departed for m in group if gateway.arrivals[m][:2] == (deployment, key)
        ]
        assert order == sorted(order)


@given(st.integers(0, 3), steps)
def test_nobody_waits_while_fewer_than_after_runs_are_in_flight(
    after: int, script: list[Arrival | str]
) -> None:
    gateway = Gateway(after)
    for step in script:
        in_flight = None if isinstance(step, str) else len(gateway.runs[step[0]])
        gateway.play(step)
        if in_flight is not None and (after == 0 or in_flight < after):
            assert len(gateway.arrivals) - 1 not in gateway.waited


@given(st.integers(1, 3), steps)
def test_a_group_forms_only_while_its_deployment_has_after_runs_in_flight(
    after: int, script: list[Arrival | str]
) -> None:
    gateway = Gateway(after)
    for step in script:
        gateway.play(step)
        departed = {m for group in gateway.departed for m in group}
        for deployment in gateway.runs:
            forming = [m for m in gateway.waited - departed if gateway.arrivals[m][0] == deployment]
            assert not forming or len(gateway.runs[deployment]) >= after


def busy() -> Coalescer[str]:
    """Sharing runs from one in flight, with one in flight."""
    coalescer: Coalescer[str] = Coalescer(1)
    coalescer.started("emb")
    return coalescer


def test_a_request_that_leaves_its_forming_group_never_departs() -> None:
    coalescer = busy()
    assert coalescer.join("k", "emb", "a", 1, 10, ROOM) == []
    assert coalescer.join("k", "emb", "b", 1, 10, ROOM) == []
    assert coalescer.leave("k", "a")
    assert coalescer.finished("emb") == [["b"]]
    assert not coalescer.leave("k", "b")  # departed: its run answers it


def test_a_group_departs_once_its_bytes_fill_a_run() -> None:
    coalescer = busy()
    assert coalescer.join("k", "emb", "a", 1, 600, ROOM) == []
    assert coalescer.join("k", "emb", "b", 1, 600, ROOM) == [["a"]]  # b would not fit beside a
    assert coalescer.join("k", "emb", "c", 1, 400, ROOM) == [["b", "c"]]
