"""The spare: a worker process started ahead of the next load. An agent starts it before it takes
jobs, and its first load runs in it; a load takes it (named by that load) while it lives; one that
died is replaced by a new worker; a closing agent kills it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from eventstore.connection import Connection
from nodeagent.agent.spare import SpareWorker
from nodeagent.agent.workers import Worker
from nodeagent.settings import SPARE_WORKER_ENV
from streams.envelope import new_id
from streams.events import serving as s
from tests.integration.nodeagent.test_agent_serving import load
from tests.support.agents import AgentProcess, minilm_load, spare_pids, worker_pids


async def test_an_agents_first_load_runs_in_the_spare_it_started_before_taking_jobs(
    connection: Connection, agents: Callable[..., AgentProcess], minilm_manifest: list[dict[str, object]]
) -> None:
    agent = agents(f"node-{new_id()[:8]}", env={SPARE_WORKER_ENV: "1"})
    await agent.start(connection)
    (spare,) = spare_pids(agent.pid)
    assert isinstance(await load(connection, agent, "dep-in-the-spare", minilm_manifest), s.ResidencyLoaded)
    assert agent.workers() == {"dep-in-the-spare": spare}


async def _with_a_spare() -> tuple[SpareWorker, Worker]:
    spare = SpareWorker()
    spare.refill()
    ahead = await spare.started()
    assert ahead is not None
    return spare, ahead


async def test_a_load_takes_the_spare_and_names_it(
    artifact_root: Path, minilm_manifest: list[dict[str, object]]
) -> None:
    spare, ahead = await _with_a_spare()
    worker = await spare.take("dep-spare")
    try:
        assert worker is ahead
        assert worker.name == "dep-spare"
        assert await spare.started() is None  # the next one starts once this load has ended
        await worker.load(minilm_load(artifact_root, minilm_manifest, 8, cpu_threads=1, serves="dep-spare"))
        assert worker_pids(os.getpid()) == {"dep-spare": worker.pid}  # its process title says so
    finally:
        await worker.kill()


async def test_two_loads_at_once_never_share_the_spare() -> None:
    spare = SpareWorker()
    spare.refill()  # both ask while it is still starting
    first, second = await asyncio.gather(spare.take("dep-one"), spare.take("dep-two"))
    try:
        assert first is not second
    finally:
        await first.kill()
        await second.kill()


async def test_a_load_given_up_while_the_spare_starts_leaves_it_the_spare() -> None:
    spare = SpareWorker()
    spare.refill()
    taking = asyncio.ensure_future(spare.take("dep-given-up"))
    await asyncio.sleep(0)  # one turn: the take is waiting for the spare's process to start
    taking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await taking
    ahead = await spare.started()
    assert ahead is not None
    await spare.close()  # and so ended with the agent, as any spare
    assert not ahead.alive


async def test_a_load_given_up_after_a_newer_spare_started_ends_the_older(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spare = SpareWorker()
    spare.refill()
    older = spare._next
    assert older is not None
    taking = asyncio.ensure_future(spare.take("dep-given-up"))
    await asyncio.sleep(0)
    spare.refill()  # another load ended meanwhile: the next spare starts
    taking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await taking
    abandoned = await older
    await abandoned.ended.wait()
    assert "died" not in caplog.text  # ended on purpose, not reported as a crash
    newer = await spare.started()
    assert newer is not None
    assert newer is not abandoned
    assert newer.alive
    await spare.close()


async def test_a_spare_that_died_is_replaced_by_a_new_worker() -> None:
    spare, ahead = await _with_a_spare()
    await ahead.kill()
    worker = await spare.take("dep-after-a-dead-spare")
    try:
        assert worker is not ahead
        assert worker.alive
    finally:
        await worker.kill()


async def test_closing_kills_the_spare() -> None:
    spare, ahead = await _with_a_spare()
    await spare.close()
    assert not ahead.alive
    assert ahead.how == "killed by SIGKILL"


async def test_with_the_spare_off_nothing_is_started_ahead() -> None:
    spare = SpareWorker(enabled=False)
    spare.refill()
    assert await spare.started() is None
