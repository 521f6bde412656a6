"""A limit stream found leaderless: when the replica admits from its shares, and how the probe
notices the stream's return."""

from __future__ import annotations

import asyncio

import pytest
from nats.errors import NoRespondersError

from gateway.clients.outage import DEGRADED_MOST_S, Leaderless, LimitMetrics, StreamOutage


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def _outage(probe_fails: int = 0) -> tuple[StreamOutage, list[str], Clock, LimitMetrics]:
    probed: list[str] = []
    clock, metrics = Clock(), LimitMetrics()

    async def probe(subject: str) -> None:
        probed.append(subject)
        if len(probed) <= probe_fails:
            raise NoRespondersError
        outage.answered()

    outage = StreamOutage("MF_LIMITS_RATE", metrics, probe, clock)
    return outage, probed, clock, metrics


def _sample(metrics: LimitMetrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"stream": "MF_LIMITS_RATE"})


async def test_a_stream_that_answers_is_not_degraded() -> None:
    outage, *_ = _outage()
    assert not outage.degraded()


async def test_no_responders_makes_the_stream_degraded_for_the_whole_replica() -> None:
    outage, _, _, metrics = _outage(probe_fails=1000)
    outage.failed("mf.limit.rate.cl_a.1")
    assert outage.degraded()
    assert _sample(metrics, "modelforge_limit_stream_leaderless") == 1
    outage.close()


async def test_an_answer_ends_the_outage_and_calls_back() -> None:
    outage, _, _, metrics = _outage(probe_fails=1000)
    back: list[bool] = []
    outage.back.append(lambda: back.append(True))
    outage.failed("mf.limit.rate.cl_a.1")
    outage.answered()
    assert not outage.degraded()
    assert back == [True]
    assert _sample(metrics, "modelforge_limit_stream_leaderless") == 0
    outage.close()


async def test_the_probe_sends_to_the_failed_subject_until_the_stream_answers() -> None:
    outage, probed, _, _ = _outage(probe_fails=2)
    returned = asyncio.Event()
    outage.back.append(returned.set)
    outage.failed("mf.limit.rate.cl_a.1")
    async with asyncio.timeout(30):
        await returned.wait()
    assert probed == ["mf.limit.rate.cl_a.1"] * 3
    assert not outage.degraded()


async def test_an_outage_longer_than_any_election_no_longer_admits_from_shares() -> None:
    outage, _, clock, _ = _outage(probe_fails=1000)
    outage.failed("mf.limit.rate.cl_a.1")
    clock.now += DEGRADED_MOST_S
    assert not outage.degraded()
    assert outage.since is not None  # still leaderless: the probe goes on
    outage.close()


async def test_each_outage_is_counted_once() -> None:
    outage, _, _, metrics = _outage(probe_fails=1000)
    outage.failed("mf.limit.rate.cl_a.1")
    outage.failed("mf.limit.rate.cl_b.1")
    assert _sample(metrics, "modelforge_limit_stream_outages_total") == 1
    outage.close()


async def test_a_found_outage_ends_the_wait_of_messages_still_unanswered() -> None:
    outage, *_ = _outage(probe_fails=1000)
    unanswered: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    outage.waiting.add(unanswered)
    outage.failed("mf.limit.rate.cl_b.1")
    with pytest.raises(Leaderless):
        await unanswered
    outage.close()
