"""`modelforge projector`: one worker process per stream, so the streams project in parallel.

MF_EVENTS and MF_REQUESTS touch disjoint tables (request rows belong to MF_REQUESTS alone, the
audit log is keyed by stream), and each stream has its own checkpoint row and advisory lock, so
each is applied by its own process: one GIL and one PostgreSQL backend each. With one process
for both, its GIL and its backend waited on each other and a 2-core machine stayed a fifth idle
(figures in docs/performance.md).

The supervisor starts the workers (`modelforge projector --stream S`), forwards SIGINT/SIGTERM,
and ends when any worker ends, stopping the others, with the first non-zero exit status. Each
worker's stdin is a pipe from the supervisor and a worker stops when it closes, so workers never
outlive a supervisor that was killed outright.

`modelforge projector` execs this module (`python -m projections.supervisor WORKER_ARGS...`) in
its own process: the supervisor only starts and waits, and a fresh interpreter that imports only
this keeps ~20 MiB resident where the CLI process it replaces held ~90 MiB of modules (the CLI's
other subcommands, NATS and PostgreSQL drivers) it never uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from streams.subjects import PROJECTED_STREAMS

STOP_GRACE_S = 30.0  # a worker finishing its commit in flight; then it is killed


async def supervise(streams: Sequence[str], worker_args: Sequence[str]) -> int:
    """Run `modelforge projector --stream S --supervised <worker_args>` for each stream."""
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "modelforge.cli",
            "projector",
            "--stream",
            stream,
            "--supervised",
            *worker_args,
            stdin=asyncio.subprocess.PIPE,
        )
        for stream in streams
    ]
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    ends = [asyncio.create_task(worker.wait()) for worker in workers]
    stop_asked = asyncio.create_task(stopping.wait())
    try:
        await asyncio.wait([*ends, stop_asked], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop_asked.cancel()
        for worker in workers:
            if worker.returncode is None:
                with contextlib.suppress(ProcessLookupError):  # it exited just now
                    worker.terminate()
        for worker, end in zip(workers, ends, strict=True):
            try:
                async with asyncio.timeout(STOP_GRACE_S):
                    await asyncio.shield(end)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    worker.kill()
                await end
    codes = [end.result() for end in ends]
    failed = next((code for code in codes if code not in (0, -signal.SIGTERM)), 0)
    return 128 - failed if failed < 0 else failed  # a worker killed by signal N: the shell's 128 + N


def exec_supervisor(worker_args: Sequence[str]) -> NoReturn:
    """Replace this process (same pid, environment and signals' targets) with the supervisor."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", __name__, *worker_args])


def main() -> int:
    return asyncio.run(supervise(PROJECTED_STREAMS, sys.argv[1:]))


async def stop_when_stdin_closes(stop: asyncio.Event) -> None:
    """A supervised worker's watch on its supervisor: stdin reaches EOF when the supervisor is gone."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await reader.read()
    stop.set()


if __name__ == "__main__":
    sys.exit(main())
