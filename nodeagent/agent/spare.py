"""The spare: a worker process started ahead of the next load, so that a load's time is the
model's alone. A worker's interpreter start and runtime imports take ~0.25 s of CPU on a quiet
machine and ~0.6 s while a stack starts; a load that takes the spare finds them done.

A load takes the spare, and the next spare starts once that load has ended, not during it (both
would want the same cores). The spare holds no model and no device memory, and is on no
accelerator's books until a load takes it; that load's measurement then counts its memory from
the process's start, as for any worker. `MODELFORGE_SPARE_WORKER=0` turns it off.
"""

from __future__ import annotations

import asyncio
import contextlib

from nodeagent.agent.workers import Worker


class SpareWorker:
    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._next: asyncio.Task[Worker] | None = None

    def refill(self) -> None:
        """Start the next spare, where none is started."""
        if self.enabled and self._next is None:
            self._next = asyncio.get_running_loop().create_task(Worker.spawn(None))

    async def fill(self) -> None:
        """Start the spare, where none is started, and return once its process is (an agent does
        so before it takes jobs: its first load finds it)."""
        self.refill()
        await self.started()

    async def started(self) -> Worker | None:
        """The spare, once its process is started; None where there is none."""
        return await _worker_of(self._next)

    async def take(self, name: str) -> Worker:
        """The spare, named `name`, where one is alive; else a new worker for `name`."""
        spare = await self._taken_off()
        if spare is not None and spare.alive and spare.process.returncode is None:
            spare.name = name
            return spare
        return await Worker.spawn(name)

    async def _taken_off(self) -> Worker | None:
        """The spare, no longer the spare (taken off before any wait: two loads at once never
        share it), once its process is started. Given up meanwhile (a load cancelled), it stays the
        spare or, where a newer one started meanwhile, ends once started."""
        ready, self._next = self._next, None
        try:
            return await _worker_of(ready)
        except asyncio.CancelledError:
            if self._next is None:
                self._next = ready
            elif ready is not None:
                ready.add_done_callback(_kill_started)
            raise

    async def close(self) -> None:
        spare = await self._taken_off()
        if spare is not None:
            await spare.kill()


def _kill_started(starting: asyncio.Task[Worker]) -> None:
    """Ends a spare nobody will take (a newer one started meanwhile) once its process is."""
    if not starting.cancelled() and starting.exception() is None:
        starting.result().end()


async def _worker_of(starting: asyncio.Task[Worker] | None) -> Worker | None:
    if starting is None:
        return None
    with contextlib.suppress(Exception):  # it could not start: whoever asked starts their own
        return await asyncio.shield(starting)
    return None
