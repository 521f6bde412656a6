"""A client that disconnects stops its request: the serving path is cancelled, not left to run.

uvicorn does not cancel a handler whose client went away, so a request waiting in the capacity
queue would keep its place (counted against `global_queue_limit` on every replica), then take a
lease and run the model for nobody, until its deadline. Once the body is read, the ASGI `receive`
has nothing more to say but `http.disconnect`, which it says when the client goes (or once the
response is complete): the serving path races that.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from starlette.requests import Request

from streams.codes import ServingError

T = TypeVar("T")


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def while_connected(request: Request, work: Coroutine[Any, Any, T]) -> T:
    """`work`'s outcome, or REQUEST_CANCELLED once it was cancelled because the client left first
    (the body must have been read: what the client sends after it is not looked at)."""
    serving = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((serving, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not serving.done():  # the client left (or this handler was cancelled): stop serving
            serving.cancel()
            await asyncio.wait((serving,))
    if serving.cancelled():
        raise ServingError("REQUEST_CANCELLED", "the client disconnected before the request finished")
    return serving.result()
