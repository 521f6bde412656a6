"""One stream of a replay, in a process of its own: `python -m projections.replay_worker`.

`modelforge replay` rebuilds MF_EVENTS and MF_REQUESTS side by side, one worker each (the streams
touch disjoint tables, see `projections.supervisor`), so each has its own GIL and its own
PostgreSQL backend. A worker tells its parent on stdout, one line each: `applied N` after every
commit, then `checkpoint SEQ`, or `halted {json}` for an event it cannot apply (exit status 2).
It stops when its stdin (a pipe from the parent) closes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import psycopg

from projections import source
from projections.batch import Catalog, ProjectionHalted
from projections.pipeline import Pipeline
from projections.supervisor import stop_when_stdin_closes
from projections.writer import Writer

READ_AHEAD_CHUNKS = 64  # chunks of up to one socket read each: backpressure on the reader


async def _read_ahead(
    chunks: AsyncIterator[list[source.Delivery]],
) -> AsyncGenerator[list[source.Delivery], None]:
    """`chunks`, read by a task of its own into a bounded queue: the stream keeps arriving while
    this coroutine awaits a prepare or a commit, instead of only between them."""
    queue: asyncio.Queue[list[source.Delivery] | BaseException | None] = asyncio.Queue(READ_AHEAD_CHUNKS)

    async def pump() -> None:
        try:
            async for chunk in chunks:
                await queue.put(chunk)
            await queue.put(None)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # handed to the reader, which raises it
            await queue.put(exc)

    task = asyncio.create_task(pump())
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


def _tell(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def apply_stream(
    writer: Writer, stream: str, until_seq: int, until_ns: int | None, nats_urls: str | None, batch: int
) -> int:
    """Apply `stream` from sequence 1 up to `until_seq` (and stored at or before `until_ns`);
    returns its checkpoint. Batch n+1 is read (in its own task, see `_read_ahead`) and prepared
    while batch n commits (projections.pipeline)."""
    pipeline = Pipeline(writer, {})
    deliveries: list[source.Delivery] = []
    reading = _read_ahead(source.read(stream, 1, until_seq, urls=nats_urls))

    def applied(count: int) -> None:
        if count:
            _tell(f"applied {count}")

    try:
        async for chunk in reading:
            cut = False
            if until_ns is not None:  # up to the first message stored after the cut
                for index, delivery in enumerate(chunk):
                    if delivery.stored_ns > until_ns:
                        chunk, cut = chunk[:index], True
                        break
            deliveries += chunk
            if len(deliveries) >= batch or (cut and deliveries):
                applied(await pipeline.submit([(stream, deliveries)]))
                deliveries = []
            if cut:
                break
        if deliveries:
            applied(await pipeline.submit([(stream, deliveries)]))
        applied(await pipeline.finish())
    finally:
        await reading.aclose()  # stops the reader task now, not when the generator is collected
        await pipeline.close()
    return pipeline.expected.get(stream, 0)


async def _main(args: argparse.Namespace) -> int:
    conn = await psycopg.AsyncConnection.connect(
        os.environ["DATABASE_URL"], autocommit=True, prepare_threshold=None
    )
    try:
        # The rebuilt schema is not live until verified and swapped: a crash loses only the replay.
        await conn.execute("SET synchronous_commit TO off")
        writer = Writer(conn, args.schema, await Catalog.load(conn, args.schema), notify=False)
        work = asyncio.create_task(
            apply_stream(
                writer, args.stream, args.until_seq, args.until_ns, os.environ.get("NATS_URL"), args.batch
            )
        )
        watch = asyncio.create_task(stop_when_stdin_closes(asyncio.Event()))
        await asyncio.wait([work, watch], return_when=asyncio.FIRST_COMPLETED)
        watch.cancel()
        if not work.done():  # the parent is gone: nobody wants this replay any more
            work.cancel()
            return 1
        try:
            checkpoint = work.result()
        except ProjectionHalted as halted:
            fields = {"seq": halted.seq, "event_type": halted.event_type, "cause": halted.cause}
            _tell(f"halted {json.dumps(fields)}")
            return 2
        _tell(f"checkpoint {checkpoint}")
        return 0
    finally:
        await conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--until-seq", type=int, required=True)
    parser.add_argument("--until-ns", type=int)
    parser.add_argument("--batch", type=int, required=True)
    return asyncio.run(_main(parser.parse_args()))


def halted_from(stream: str, line: str) -> ProjectionHalted:
    fields: dict[str, Any] = json.loads(line)
    return ProjectionHalted(stream, int(fields["seq"]), str(fields["event_type"]), str(fields["cause"]))


if __name__ == "__main__":
    sys.exit(main())
