"""Control jobs: a durable pull consumer per node on MF_WORK (`mf.job.<node>.>`).

Jobs run one at a time, so each load's memory measurement is its own. A job is acked only after its
outcome event is appended; while it runs, in-progress acks keep its lease alive. An agent that dies
mid-job stops renewing, so the server redelivers the job after `ack_wait` (to this node's next
generation). A job runs at most `attempts` times: a delivery past them is not run but records the
job's failure event (`LEASE_TIMEOUT`) and acks, so a job that keeps killing its agent ends visibly
instead of vanishing. The consumer allows `RECORD_DELIVERIES` deliveries past the attempts for that
record alone, so a failure record that is itself refused (NATS away, a stream full) is tried again
rather than left on a message the server will never deliver again.

A job whose outcome this agent recorded but whose ack was lost is delivered again; it is acked
without running a second time (`FinishedJobs`), since a repeated unload would unload a copy loaded
since, and a repeated probe or verify would redo the work. Job ids are unique per job (a TTL unload's
id is deterministic on purpose, so its duplicates are dropped too). The memory is per agent process:
a job finished just before its agent died can still run again in the next generation.

A failed fetch (not an expired one) binds the consumer again after `FETCH_RETRY_S`, making it anew
if it was deleted, so an agent whose consumer vanished goes on receiving its jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext
from nats.js.errors import BadRequestError

from nodeagent.agent.metrics import AgentMetrics
from nodeagent.agent.operations import Operations
from streams import codes, subjects
from streams.messages import AnyJob

log = logging.getLogger("modelforge.agent.jobs")
FETCH_RETRY_S = 1.0  # before binding again after a failed fetch (not an expired one)
RECORD_DELIVERIES = 5  # deliveries past a job's run attempts, each only to record its failure
FINISHED_JOBS_KEPT = 4096  # far more jobs than a node finishes while a lost ack's job waits

_job_decoder = msgspec.json.Decoder(AnyJob)


def consumer_name(node_id: str) -> str:
    return f"agent-{subjects.token(node_id, 'node id')}"


def consumer_config(node_id: str, ack_wait_s: float, attempts: int) -> ConsumerConfig:
    # Named as well as durable: the create request's subject then carries the filter, which a
    # node's NATS user may send only for its own jobs (deploy/nats/nats.conf).
    return ConsumerConfig(
        name=consumer_name(node_id),
        durable_name=consumer_name(node_id),
        filter_subject=subjects.node_jobs_filter(node_id),
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_deliver=attempts + RECORD_DELIVERIES,
        max_ack_pending=16,
    )


@contextlib.asynccontextmanager
async def kept_alive(msg: Msg, every_s: float) -> AsyncIterator[None]:
    """Send in-progress acks on a timer while the body runs, so a long load keeps its lease."""
    done = asyncio.Event()

    async def renew() -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(every_s):
                    await done.wait()
            if done.is_set():
                return
            with contextlib.suppress(Exception):  # a missed renewal only risks a redelivery
                await msg.in_progress()

    task = asyncio.get_running_loop().create_task(renew())
    try:
        yield
    finally:
        done.set()
        await task


class FinishedJobs:
    """The ids of the last `keep` jobs whose outcome this agent recorded, oldest forgotten first."""

    def __init__(self, keep: int = FINISHED_JOBS_KEPT) -> None:
        self.keep = keep
        self._ids: dict[str, None] = {}  # insertion-ordered: the first key is the oldest

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._ids

    def add(self, job_id: str) -> None:
        self._ids.pop(job_id, None)
        self._ids[job_id] = None
        if len(self._ids) > self.keep:
            del self._ids[next(iter(self._ids))]


class JobConsumer:
    def __init__(
        self,
        client: Client,
        node_id: str,
        operations: Operations,
        *,
        ack_wait_s: float = 30.0,
        attempts: int = 4,
        fetch_expiry_s: float = 5.0,
        metrics: AgentMetrics | None = None,
    ) -> None:
        self.js = client.jetstream()
        self.metrics = metrics or AgentMetrics()
        self.node_id = node_id
        self.operations = operations
        self.ack_wait_s = ack_wait_s
        self.attempts = attempts
        self.fetch_expiry_s = fetch_expiry_s
        self.finished = FinishedJobs()

    async def bind(self) -> JetStreamContext.PullSubscription:
        config = consumer_config(self.node_id, self.ack_wait_s, self.attempts)
        try:
            await self.js.add_consumer(subjects.WORK_STREAM, config)
        except BadRequestError:
            # Settings changed since the consumer was made: replace it. Jobs live in the work-queue
            # stream, not in the consumer, so nothing is lost; unacked ones are delivered again.
            await self.js.delete_consumer(subjects.WORK_STREAM, consumer_name(self.node_id))
            await self.js.add_consumer(subjects.WORK_STREAM, config)
        return await self.js.pull_subscribe_bind(consumer_name(self.node_id), stream=subjects.WORK_STREAM)

    async def run(self, stop: asyncio.Event, bound: JetStreamContext.PullSubscription | None = None) -> None:
        """Take jobs until `stop`; `bound`: the subscription `bind()` made, else bind now."""
        subscription: JetStreamContext.PullSubscription | None = bound or await self.bind()
        try:
            while not stop.is_set():
                try:
                    if subscription is None:
                        subscription = await self.bind()
                    # A long-poll pull: the server holds it open until a job arrives or it expires.
                    messages = await subscription.fetch(1, timeout=self.fetch_expiry_s)
                except (NatsTimeoutError, TimeoutError):
                    continue
                except NatsError as error:
                    # A 503 while the consumer elects a leader, or on every fetch once the consumer is
                    # gone (deleted by an operator, its stream made anew): bind again, which makes
                    # the consumer if it is missing. Not fatal either way.
                    log.warning("fetching jobs failed (%r); binding again in %.0f s", error, FETCH_RETRY_S)
                    if subscription is not None:
                        with contextlib.suppress(Exception):
                            await subscription.unsubscribe()
                        subscription = None
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(FETCH_RETRY_S):
                            await stop.wait()
                    continue
                for msg in messages:
                    await self.handle(msg)
        finally:
            if subscription is not None:
                with contextlib.suppress(Exception):
                    await subscription.unsubscribe()

    async def handle(self, msg: Msg) -> None:
        deliveries = msg.metadata.num_delivered
        try:
            job = _job_decoder.decode(msg.data)
        except (msgspec.ValidationError, msgspec.DecodeError):
            log.error("undecodable job on %s: terminated", msg.subject)
            await msg.term()
            self.metrics.job_ended("unknown", "undecodable", 0.0)
            return
        op, outcome, started = str(type(job).__struct_config__.tag), "not_recorded", time.perf_counter()
        try:
            if job.job_id in self.finished:
                log.info(
                    "job %s: %s delivery %d: already finished here (its ack was lost); not run again",
                    job.job_id,
                    msg.subject,
                    deliveries,
                )
                outcome = "already_finished"
            else:
                await self.record_outcome(job, msg, deliveries)
                self.finished.add(job.job_id)
                outcome = "recorded"
            await msg.ack_sync()
        except asyncio.CancelledError:
            raise  # stopping: the job stays unacked and is delivered again
        except Exception:
            # Its outcome could not be recorded (NATS unreachable, an append refused), or its ack was
            # not sent: it comes back, to be tried again or, already finished, only acked.
            log.exception("job %s: outcome or ack not sent; it will be delivered again", job.job_id)
            outcome = "not_recorded" if outcome != "recorded" else "not_acked"
            with contextlib.suppress(Exception):
                await msg.nak(delay=min(5.0, self.ack_wait_s))
        finally:
            self.metrics.job_ended(op, outcome, time.perf_counter() - started)

    async def record_outcome(self, job: AnyJob, msg: Msg, deliveries: int) -> None:
        """Run the job, or record why it is not run; either way its outcome event is appended."""
        if job.node_id != self.node_id:
            detail = f"job for node {job.node_id} arrived at {self.node_id}"
            await self.operations.fail(job, codes.NODE_OWNERSHIP_MISMATCH.code, detail, deliveries)
        elif deliveries > self.attempts:
            detail = f"delivered {deliveries} times; its {self.attempts} attempt(s) died or stalled"
            log.error("job %s (%s): %s", job.job_id, msg.subject, detail)
            await self.operations.fail(job, codes.LEASE_TIMEOUT.code, detail, deliveries)
        else:
            log.info("job %s: %s delivery %d", job.job_id, msg.subject, deliveries)
            async with kept_alive(msg, self.ack_wait_s / 3):
                await self.operations.run(job)
