"""Client limits through the loss of the server leading both limit streams (issue 19), on a
three-server cluster of its own (TLS, streams on three, as `up --cluster`), one round a cluster.

Each round: both limit streams led from the third server, one RequestLimiter on the first, and a
paced load of requests (one every `--every` s, each of a new client, so each needs a rate count
and a slot: two limit messages; each released at once). The third server is SIGKILLed under the
load, which goes on for `--seconds`. Prints, per round: the slowest acquire started before the kill
and of those started after it, the acquire of the request sent first after the kill, how many were
admitted and refused after it, and seconds until the rate stream answered a message again (its
election, seen from another server).

    .venv/bin/python -m bench.limit_election [--rounds 3] [--seconds 12] [--every 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from eventstore.connection import Connection, connect
from gateway.clients.limit_streams import provision_limits
from gateway.clients.limits import RequestLimiter
from gateway.clients.model import ClientPrincipal
from streams import subjects
from streams.codes import ServingError
from streams.envelope import new_id
from tests.support.cluster import elected, lead_from, running_cluster


def who(rpm: int, concurrency: int) -> ClientPrincipal:
    client_id = f"cl_{new_id()}"
    return ClientPrincipal(client_id, client_id, frozenset(), rpm, concurrency, 0, None, "cred")


async def answered_again(connection: Connection, killed_at: float) -> float:
    """Seconds from the kill until the rate stream answers (a message it refuses, storing nothing)."""
    subject = subjects.rate_window_subject("cl_bench_probe", 0)
    while True:
        try:
            headers = {"Nats-Expected-Last-Subject-Sequence": "1"}
            await connection.client.request(subject, b"", timeout=2, headers=headers)
            return time.perf_counter() - killed_at
        except (NoRespondersError, NatsTimeoutError):
            await asyncio.sleep(0.05)  # a measuring probe: the election announces nothing to a client


async def timed(limiter: RequestLimiter) -> tuple[float, float, bool]:
    """When one new client's request started, how long its acquire took, and whether admitted."""
    started = time.perf_counter()
    try:
        permit = await limiter.acquire(who(rpm=6000, concurrency=64))
    except ServingError:
        return started, time.perf_counter() - started, False
    waited = time.perf_counter() - started
    await permit.release()
    return started, waited, True


async def one_round(home: Path, seconds: float, every: float) -> dict[str, str]:
    with running_cluster(home) as cluster:
        await elected(cluster)
        gateway = await connect(cluster.members[0].url, "bench-gateway")
        checker = await connect(cluster.members[1].url, "bench-checker")
        try:
            await provision_limits(gateway.client, 3)
            lost = cluster.members[2].name
            for stream in (subjects.LIMITS_RATE_STREAM, subjects.LIMITS_CONCURRENCY_STREAM):
                await lead_from(checker, stream, lost)
            await answered_again(checker, time.perf_counter())  # the step-down's election is over
            limiter = RequestLimiter(gateway.client)
            load: list[asyncio.Task[tuple[float, float, bool]]] = []
            killed_at = time.perf_counter() + 1.0
            election: asyncio.Future[float] | None = None
            while time.perf_counter() < killed_at + seconds:
                if election is None and time.perf_counter() >= killed_at:
                    killed_at = time.perf_counter()
                    cluster.kill(lost)
                    election = asyncio.ensure_future(answered_again(checker, killed_at))
                load.append(asyncio.ensure_future(timed(limiter)))
                await asyncio.sleep(every)  # the load's pace, not a wait for something
            done = await asyncio.gather(*load)
            assert election is not None
            elected_after = await election
            await limiter.close()
            before = [waited for started, waited, _ in done if started < killed_at]
            after = [(started, waited, ok) for started, waited, ok in done if started >= killed_at]
            return {
                "slowest before": f"{max(before):.3f}",
                "first after": f"{after[0][1]:.3f}",
                "slowest after": f"{max(waited for _, waited, _ in after):.3f}",
                "admitted / refused after": f"{sum(ok for *_, ok in after)} / {sum(not ok for *_, ok in after)}",
                "rate stream answers again": f"{elected_after:.2f}",
            }
        finally:
            await gateway.close()
            await checker.close()


async def main(rounds: int, seconds: float, every: float) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="mf-bench-limit-election-") as home:
        for index in range(rounds):
            rows.append(await one_round(Path(home) / f"round-{index}", seconds, every))
    print("| round | " + " | ".join(rows[0]) + " |")
    print("|---" * (len(rows[0]) + 1) + "|")
    for index, row in enumerate(rows):
        print(f"| {index} | " + " | ".join(row.values()) + " |")


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--rounds", type=int, default=3)
    cli.add_argument("--seconds", type=float, default=12.0, help="requests after the kill, this long")
    cli.add_argument("--every", type=float, default=0.1, help="seconds between the seen client's requests")
    given = cli.parse_args()
    asyncio.run(main(given.rounds, given.seconds, given.every))
