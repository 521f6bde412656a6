"""The projector: MF_EVENTS and MF_REQUESTS into the read model, exactly once, one active
instance per stream.

`run` projects the streams it is given (`modelforge projector` runs one worker process per
stream, see projections.supervisor; the two touch disjoint tables). Start: migrate, then take
each stream's advisory lock (a second projector blocks there until the first one's session ends,
e.g. it dies), then follow the streams from their checkpoints + 1; the first commit waits until
each stream followed has handed over what it held at the start.
Messages are queued as they arrive; the applier takes whatever is queued (up to `batch_max`) as
one batch and commits rows, audit log and checkpoints in one transaction, so batches grow with
load and shrink to one event when idle. Commits start at most once per `commit_interval`, and
less often as traffic falls (`projections.pace`): a transaction costs far more than an event in it
(bench/trickle.py), so at a steady trickle the events of an interval share one, and the read model
lags by at most that interval; after a quiet spell the first event commits after a short linger for
the rest of its request (`QUIET_LINGER_S`). A
reader waiting for a sequence asks for it (`projections.wanted`): until it is committed, nothing
waits out the interval, so read-your-writes never pays for it.
Meanwhile the readers leave what arrives in their sockets and take it in one read when the wait
ends, or once a socket fills (`projections.swell`): then, if a commit's worth of events
(`EVENTS_PER_COMMIT`) came in, traffic rose, and the wait ends early. A lost stream connection or a moved checkpoint (replay swapped in) resumes from the stored checkpoint; so does a
lost database session, once a new one (bounded back-off, see projections.reconnect) holds the
locks again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import psycopg

from projections import halts, source
from projections.batch import Catalog, ProjectionHalted
from projections.migrate import LIVE_SCHEMA, check_schema, lock_key, migrate
from projections.pace import EVENTS_PER_COMMIT, QUIET_LINGER_S, Pace
from projections.pipeline import Chunk, Pipeline
from projections.reconnect import lost, reconnect
from projections.wanted import Asks, listen
from projections.writer import CheckpointMoved, Writer
from streams import subjects

log = logging.getLogger("modelforge.projector")
BATCH_MAX = 10_000
COMMIT_INTERVAL_S = 1.0  # 0.05, then 0.25 until asks (docs/performance.md, "At a trickle")
QUEUE_CHUNKS = 64  # chunks of up to one socket read each: backpressure on the readers
RETRY_S = 1.0
READER_STOP_S = 10.0  # a cancelled reader deletes its consumer and closes its socket: milliseconds

_Item = tuple[str, list[source.Delivery]] | BaseException


async def connect(database_url: str) -> psycopg.AsyncConnection[tuple[object, ...]]:
    # No server-side prepared statements: `replay --swap` renames schemas under a running projector,
    # and every statement must resolve its tables by name again.
    return await psycopg.AsyncConnection.connect(database_url, autocommit=True, prepare_threshold=None)


async def run(
    database_url: str,
    nats_urls: str | None = None,
    schema: str = LIVE_SCHEMA,
    *,
    stop: asyncio.Event | None = None,
    batch_max: int = BATCH_MAX,
    commit_interval: float = COMMIT_INTERVAL_S,
    telemetry: bool = True,
    on_batch: Callable[[dict[str, int]], None] | None = None,
    streams: tuple[str, ...] = subjects.PROJECTED_STREAMS,
) -> None:
    """Project `streams` until `stop` is set; raises ProjectionHalted on an event it cannot apply."""
    check_schema(schema)
    stop = stop or asyncio.Event()
    conn = await connect(database_url)
    extras: list[asyncio.Task[None]] = []
    names = ", ".join(streams)
    asks = Asks(schema, streams)
    try:
        await migrate(conn, schema)
        await _lock(conn, schema, streams)
        extras.append(asyncio.create_task(listen(database_url, asks, stop)))
        if telemetry:
            from projections.telemetry import follow_telemetry

            follower = asyncio.create_task(follow_telemetry(database_url, nats_urls, schema, stop))
            follower.add_done_callback(_report_telemetry_end)
            extras.append(follower)

        async def follow(writer: Writer, checkpoints: dict[str, int]) -> None:
            await _follow(
                writer,
                checkpoints,
                nats_urls,
                stop,
                _Batching(batch_max, commit_interval),
                on_batch,
                streams,
                asks,
            )

        while not stop.is_set():
            try:
                await _project(conn, schema, streams, stop, follow)
            except ProjectionHalted as halt:
                await halts.record(conn, schema, halt)  # for the gateway to show: this process exits
                raise
            except psycopg.Error as exc:
                if not lost(exc):
                    raise
                # Nothing of the batch in flight committed without its checkpoint: a new session
                # takes the locks again (another projector may have them by now) and resumes there.
                log.warning("projector of %s lost its database session (%s)", names, exc)
                await conn.close()
                again = await reconnect(
                    lambda: _session(database_url, schema, streams), f"projector of {names}", stop
                )
                if again is None:
                    break
                conn = again
    finally:
        for task in extras:
            task.cancel()
        for task in extras:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await conn.close()


async def _lock(conn: psycopg.AsyncConnection[Any], schema: str, streams: tuple[str, ...]) -> None:
    names = ", ".join(streams)
    log.info("projector of %s for schema %s waiting for the projection lock", names, schema)
    for stream in sorted(streams):  # one lock per stream, always taken in the same order
        await conn.execute(
            "SELECT pg_advisory_lock(hashtext(%s))", (lock_key(schema, f"projector.{stream}"),)
        )
    log.info("projector of %s for schema %s is the active instance", names, schema)


async def _session(database_url: str, schema: str, streams: tuple[str, ...]) -> psycopg.AsyncConnection[Any]:
    conn = await connect(database_url)
    try:
        await _lock(conn, schema, streams)
    except BaseException:
        await conn.close()
        raise
    return conn


async def _project(
    conn: psycopg.AsyncConnection[Any],
    schema: str,
    streams: tuple[str, ...],
    stop: asyncio.Event,
    follow: Callable[[Writer, dict[str, int]], Awaitable[None]],
) -> None:
    """Follow the streams from the stored checkpoints on this session (its locks held) until `stop`."""
    writer = Writer(conn, schema, await Catalog.load(conn, schema))
    while not stop.is_set():
        checkpoints = await writer.read_checkpoints(streams)
        try:
            await follow(writer, checkpoints)
        except CheckpointMoved as exc:
            log.warning("checkpoint moved (%s): resuming from the stored checkpoint", exc)
            writer = Writer(conn, schema, await Catalog.load(conn, schema))
        except source.SourceLost as exc:
            log.warning("stream reader lost (%s): resuming in %.0f s", exc, RETRY_S)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RETRY_S):
                    await stop.wait()


async def _follow(
    writer: Writer,
    checkpoints: dict[str, int],
    nats_urls: str | None,
    stop: asyncio.Event,
    batching: _Batching,
    on_batch: Callable[[dict[str, int]], None] | None,
    streams: tuple[str, ...],
    asks: Asks,
) -> None:
    queue: asyncio.Queue[_Item] = asyncio.Queue(QUEUE_CHUNKS)
    loop = asyncio.get_running_loop()
    # Closed while events wait for the commit interval: the readers leave what arrives meanwhile
    # unread in their sockets (no wake-up per message) and, when it opens, take it in one chunk, up to
    # a PING's PONG (`source.read`'s hold). Until each has, it is `behind` and the applier waits;
    # every reader is behind at the start, until it has handed over its stream's backlog (so that
    # the first commit holds all of it, not what one socket read or the first linger caught).
    reading = asyncio.Event()
    reading.set()
    behind: set[str] = set(streams)
    caught_up = asyncio.Event()
    arrived = 0  # events queued and not yet taken into a batch

    def catch_up(stream: str) -> None:
        behind.discard(stream)
        if not behind:
            caught_up.set()

    async def read(stream: str) -> None:
        nonlocal arrived
        start = checkpoints.get(stream, 0) + 1
        try:
            async for chunk in source.read(stream, start, urls=nats_urls, hold=reading):
                # Before the put: the applier, woken, takes this chunk with the rest of the queue
                # (a put into a full queue would wait for an applier that waits for this reader).
                catch_up(stream)
                if chunk:
                    await queue.put((stream, chunk))
                    arrived += len(chunk)
                    if not reading.is_set() and arrived >= EVENTS_PER_COMMIT:
                        rose()  # read during a hold, its socket filling: traffic rose
                if not reading.is_set():  # source.read holds before the next chunk (no await between)
                    behind.add(stream)
                    caught_up.clear()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # handed to the applier, which raises it
            catch_up(stream)
            await queue.put(exc)

    readers = [asyncio.create_task(read(stream)) for stream in streams]
    stopping = asyncio.create_task(stop.wait())
    pipeline = Pipeline(writer, checkpoints)
    getting: asyncio.Task[_Item] | None = None
    # Set while events wait for the commit interval to pass (the queue keeps filling meanwhile).
    lingering: asyncio.Future[None] | None = None
    timer: asyncio.TimerHandle | None = None  # the one that ends `lingering`
    pace = Pace(batching.commit_interval, loop.time())

    def applied() -> None:
        if on_batch is not None:
            on_batch(pipeline.expected)

    def asked() -> None:  # a reader waits for events held back: commit them now
        if lingering is not None and timer is not None and asks.pending(pipeline.prepared):
            timer.cancel()
            _settle(lingering, reading)

    def rose() -> None:
        """A commit's worth came in while events wait for the interval: commit them as soon as the
        commit interval allows (it stays the least time between commit starts)."""
        nonlocal timer
        if lingering is None or timer is None:
            return
        allowed = pace.started + pace.base
        if timer.when() > allowed:
            timer.cancel()
            timer = loop.call_at(allowed, _settle, lingering, reading)

    asks.on_ask = asked

    try:
        while True:
            getting = getting or asyncio.create_task(queue.get())
            waiting: set[asyncio.Future[Any]] = {getting if lingering is None else lingering, stopping}
            if pipeline.committing is not None:
                waiting.add(pipeline.committing)
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if pipeline.ready():  # report a batch as soon as it commits, not when the next one comes
                await pipeline.finish()
                applied()
            if lingering is None:
                if not getting.done():
                    if stopping.done():
                        break
                    continue
                now = loop.time()
                early = pace.next_start - now
                if asks.pending(pipeline.prepared):
                    early = 0.0
                elif pace.quiet(now):  # a lone event lingers for the rest of its request; more go now
                    alone = pipeline.committing is None and queue.empty()
                    early = min(QUIET_LINGER_S, batching.commit_interval) if alone else 0.0
                if early > 0 and not queue.full() and not stopping.done():
                    lingering = loop.create_future()
                    reading.clear()
                    timer = loop.call_later(early, _settle, lingering, reading)
                    continue
            elif not lingering.done() and not stopping.done():
                continue
            if reading.is_set():  # at the start, or the interval passed (or was asked away): what
                await caught_up.wait()  # arrived meanwhile is read within a PING's round trip to NATS
            lingering = None
            items, getting = [getting.result()], None
            count = _size(items[0])
            while count < batching.batch_max and not queue.empty():
                item = queue.get_nowait()
                items.append(item)
                count += _size(item)
            arrived -= count
            pace.start(count, loop.time())
            chunks: list[Chunk] = []
            for item in items:
                if isinstance(item, BaseException):
                    raise item
                chunks.append(item)
            if await pipeline.submit(chunks):
                applied()
        if await pipeline.finish():
            applied()
    finally:
        asks.on_ask = lambda: None
        if timer is not None:
            timer.cancel()
        if getting is not None:
            getting.cancel()
        await pipeline.close()
        stopping.cancel()
        for task in readers:
            task.cancel()
        # Bounded and loud: a reader that outlives its cancellation (one did after a swap, see
        # source.RawNats.read_messages) would keep this worker here for good, holding its lock and
        # projecting nothing. It exits non-zero instead, and the projector with it, to be restarted.
        # (asyncio.wait, unlike awaiting each reader under suppress(CancelledError), also lets this
        # task's own cancellation through.)
        _, running = await asyncio.wait(readers, timeout=READER_STOP_S)
        if running:
            stuck = ", ".join(
                stream for stream, task in zip(streams, readers, strict=True) if task in running
            )
            raise RuntimeError(f"the stream reader of {stuck} did not stop within {READER_STOP_S:.0f} s")


class _Batching(NamedTuple):
    batch_max: int  # most events per transaction
    commit_interval: float  # seconds from one commit's start to the next one's, at the least (`Pace`)


def _settle(future: asyncio.Future[None], reading: asyncio.Event) -> None:
    reading.set()  # first, so that the readers take what waits in their sockets before the applier runs
    if not future.done():
        future.set_result(None)


def _report_telemetry_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error(
            "telemetry follower stopped: %r (the scheduler view shows attribution UNKNOWN)", task.exception()
        )


def _size(item: _Item) -> int:
    return 1 if isinstance(item, BaseException) else len(item[1])


__all__ = ["BATCH_MAX", "COMMIT_INTERVAL_S", "ProjectionHalted", "run"]
