"""A client that disconnects stops its request while it waits: in the capacity queue, for its
lease, for a load. Not once its model runs: the lease must last as long as the work on the node
(its memory is in use until the worker answers), so from then on the request runs to its end and
is recorded as it ends; only its answer goes nowhere.

uvicorn does not cancel a handler whose client went away, so a request waiting in the capacity
queue would keep its place (counted against `global_queue_limit` on every replica), then take a
lease and run the model for nobody, until its deadline. Once the body is read, the ASGI `receive`
has nothing more to say but `http.disconnect`, which it says when the client goes (or once the
response is complete): one watcher task waits for it and cancels the handler, which serves in its
own task as before (no second task on the hot path).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

from streams.codes import ServingError

T = TypeVar("T")


class Interruption:
    """Whether the client leaving may still stop its request, and whether it did."""

    __slots__ = ("allowed", "stopped")

    def __init__(self) -> None:
        self.allowed = True
        self.stopped = False

    def forbid(self) -> None:
        """The model is about to run: from now on the request runs to its end."""
        self.allowed = False


async def _cancel_when_gone(
    request: Request, handler: asyncio.Task[object], interruption: Interruption
) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
    if interruption.allowed:
        interruption.stopped = True
        handler.cancel()


async def while_connected(request: Request, work: Awaitable[T], interruption: Interruption) -> T:
    """`work`'s outcome, or REQUEST_CANCELLED once it was cancelled because the client left first
    while `interruption` allowed it (the body must have been read: what the client sends after it
    is not looked at)."""
    handler = asyncio.current_task()
    assert handler is not None
    watcher = asyncio.ensure_future(_cancel_when_gone(request, handler, interruption))
    try:
        return await work
    except asyncio.CancelledError:
        if not interruption.stopped:
            raise  # cancelled from elsewhere (a shutdown): not ours to answer
        handler.uncancel()  # the watcher's cancel is answered here
        raise ServingError(
            "REQUEST_CANCELLED", "the client disconnected before the request finished"
        ) from None
    finally:
        watcher.cancel()
