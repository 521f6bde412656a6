"""The agent's side of a worker process: spawn it, call it over its socket, see it die, kill it.

Each call is numbered; its answer resolves the caller's future, so invokes run concurrently and the
worker batches them. When the worker's socket ends (it exited, crashed or was killed), `on_exit`
runs first, so that the agent can take the residency off its books, and then every call still
waiting fails (WorkerDied, INFERENCE_FAILED): the caller hears at once that the work was lost.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec

from nodeagent.worker.protocol import (
    Call,
    Checked,
    Failed,
    FrameReader,
    FrameWriter,
    Invoke,
    Load,
    Loaded,
    Reply,
    Request,
    Served,
    Tested,
    TestInference,
    answer_decoder,
)
from nodeagent.worker.protocol import Check as CheckCall
from streams import codes
from streams.codes import ServingError
from streams.tracing import traceparent

log = logging.getLogger("modelforge.agent.workers")
ReplyT = TypeVar("ReplyT", Loaded, Served, Tested, Checked)


class WorkerDied(ServingError):
    """A call its worker died under. Not WORKER_RESTART_RECONCILED, on which the gateway tries an
    invoke once more: the input itself may be what crashed the runtime."""

    def __init__(self, name: str, how: str) -> None:
        message = f"the worker process of {name} died ({how}); the work it had was lost"
        super().__init__(codes.INFERENCE_FAILED.code, message)


def _how(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit status {returncode}"


class Worker:
    def __init__(self, name: str, process: asyncio.subprocess.Process) -> None:
        self.name = name
        self.process = process
        self.pid = process.pid
        self.on_exit: Callable[[Worker], Awaitable[None]] | None = None
        self.stopping = False  # killed on purpose: an unload, a probe's end, a shutdown
        self.ended = asyncio.Event()  # set once it has exited, been reaped and reported
        self.how = ""  # how it exited, once it has
        self._pending: dict[int, asyncio.Future[Reply]] = {}
        self._numbers = itertools.count()
        self._transport: asyncio.BaseTransport | None = None
        self._out = FrameWriter()
        self._ending: asyncio.Task[None] | None = None

    @classmethod
    async def spawn(cls, name: str | None) -> Worker:
        """Start a worker for `name` (None: a spare, named by the load that takes it), for the
        agent's messages (its process title says what it serves once its `Load` does); it imports
        its runtime while the caller gets on (verifying)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "nodeagent.worker",
                "--fd",
                str(theirs.fileno()),
                "--parent",
                str(os.getpid()),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        worker = cls(name or "a spare", process)
        # Answers are read in the event loop's own read callback (FrameReader), not by a task.
        transport, _ = await asyncio.get_running_loop().create_unix_connection(
            lambda: FrameReader(worker._answered, worker._closed, worker._out), sock=ours
        )
        worker._transport = transport
        return worker

    @property
    def alive(self) -> bool:
        return not self.ended.is_set()

    async def load(self, request: Load) -> Loaded:
        return _expect(await self.call(request), Loaded)

    async def invoke(self, payload: bytes, timeout_s: float, input_type: str = "") -> Served:
        return _expect(await self.call(Invoke(payload, timeout_s, traceparent(), input_type)), Served)

    async def check(self) -> None:
        _expect(await self.call(CheckCall()), Checked)

    async def test_inference(self) -> Tested:
        return _expect(await self.call(TestInference()), Tested)

    async def call(self, request: Request) -> Reply:
        if self.how:  # it has exited (its socket is closed or closing)
            raise WorkerDied(self.name, self.how)
        number = next(self._numbers)
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending[number] = future
        try:
            self._out.send(Call(number, request))
            return await future
        finally:
            del self._pending[number]

    async def kill(self) -> None:
        """End the worker now (SIGKILL: nothing it holds is worth waiting for) and reap it."""
        self.end()
        await self.ended.wait()

    def end(self) -> None:
        """Kill the worker on purpose (SIGKILL), without waiting for it to be reaped."""
        self.stopping = True
        if self.process.returncode is None:
            self.process.kill()

    def _answered(self, frame: memoryview) -> None:
        try:
            answer = answer_decoder.decode(frame)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            log.error(
                "the worker of %s sent a malformed frame (%s): killing it", self.name, type(error).__name__
            )
            if self._transport is not None:
                self._transport.close()  # _closed follows and ends it
            return
        waiting = self._pending.get(answer.number)
        if waiting is not None and not waiting.done():
            waiting.set_result(answer.reply)

    def _closed(self) -> None:
        if self._ending is None:
            self._ending = asyncio.get_running_loop().create_task(self._ended())

    async def _ended(self) -> None:
        if self.process.returncode is None:
            self.process.kill()  # its socket is gone or broken: it can serve nobody
        self.how = _how(await self.process.wait())
        if self._transport is not None:
            self._transport.close()
        if not self.stopping:
            log.error("the worker of %s died (%s)", self.name, self.how)
        if self.on_exit is not None:
            try:
                await self.on_exit(self)
            except Exception:
                log.exception("could not report the end of the worker of %s", self.name)
        self.ended.set()
        for waiting in self._pending.values():
            if not waiting.done():
                waiting.set_exception(WorkerDied(self.name, self.how))


def _expect(reply: Reply, kind: type[ReplyT]) -> ReplyT:
    if isinstance(reply, Failed):
        raise ServingError(reply.code, reply.message)
    if not isinstance(reply, kind):
        raise ServingError(codes.INVALID_OUTPUT.code, f"the worker answered {type(reply).__name__}")
    return reply
