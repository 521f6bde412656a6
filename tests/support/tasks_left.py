"""Asyncio tasks a test leaves behind: started by the test (or its function-scoped fixtures) and
still pending once its module's fixtures are torn down too.

The suite shares one event loop for the session, so a task a test forgets (a follower never
stopped, a subscription never ended, a waiter never closed) runs on into later tests: it logs
against their databases, takes their messages, and fails one of them by chance.

Which tasks are a test's: pytest-asyncio runs each test and each async fixture (setup and
teardown) as a root task, created while the loop is not running. A task created by a task
belongs to its creator's root. A module or session fixture's objects keep making tasks during a
test (a subscription's iterator makes one per message it waits for): their root is that
fixture's setup, created before the test began, so they are not the test's. A task a callback
creates (no current task: a server's connection handler) has no known root and is not checked.

A test's task still pending after the test is only a suspect: a module fixture's object may have
made it on the test's behalf and own it (a gateway's reply subscription, made on its first
request; its background writes, which its stop settles). It is a leak if it is still pending
once the module's fixtures are torn down as well, unless the test used a session fixture: that
one's objects may own it too (the session connection's reply subscription, made on the first
request of whichever test came first), and the session's end decides.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import weakref
from collections.abc import Coroutine, Generator
from contextvars import Context
from typing import Any

import pytest

SETTLE_ITERATIONS = 20  # a cancelled or finishing task needs a few turns of the loop to end
SETTLE_S = 2.0  # then a bounded wait on the tasks themselves (one closing a socket awaits the server)
UNKNOWN = 0  # the root of a task created by a callback or by a task made before the factory

_roots: weakref.WeakKeyDictionary[asyncio.Task[Any], int] = weakref.WeakKeyDictionary()
_serials = itertools.count(1)


def _factory(
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any],
    context: Context | None = None,
) -> asyncio.Task[Any]:
    parent = asyncio.current_task(loop)
    task = asyncio.Task(coro, loop=loop, context=context)
    if parent is not None:
        _roots[task] = _roots.get(parent, UNKNOWN)
    else:
        _roots[task] = UNKNOWN if loop.is_running() else next(_serials)
    return task


def watching() -> int:
    """Start attributing tasks (once per loop); roots from now on have serials above the one returned."""
    loop = asyncio.get_running_loop()
    if loop.get_task_factory() is not _factory:
        loop.set_task_factory(_factory)
    return next(_serials)


suspects: dict[asyncio.Task[Any], str] = {}  # a test's task pending after the test -> that test's id
carried: dict[asyncio.Task[Any], str] = {}  # suspects a session fixture may own: checked at its end
sessions_used: set[str] = set()  # the tests that used a session-scoped fixture


def _since(first: int) -> set[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return {
        task
        for task in asyncio.all_tasks()
        if task is not current and not task.done() and _roots.get(task, UNKNOWN) > first
    }


def started_since(first: int) -> set[asyncio.Task[Any]]:
    """The pending tasks whose root came after serial `first`."""
    return _since(first)


async def settled(tasks: set[asyncio.Task[Any]], wait_s: float = SETTLE_S) -> set[asyncio.Task[Any]]:
    """Those of `tasks` still pending after a bounded settle: a few loop iterations, then a wait on
    the tasks themselves of at most `wait_s`."""
    for _ in range(SETTLE_ITERATIONS):
        if not (tasks := {task for task in tasks if not task.done()}):
            return tasks
        await asyncio.sleep(0)
    if wait_s > 0:
        await asyncio.wait(tasks, timeout=wait_s)
    return {task for task in tasks if not task.done()}


def uses_async_session_fixture(request: pytest.FixtureRequest, besides: set[str]) -> bool:
    """Whether the test used an async session-scoped fixture (one whose objects can make tasks)."""
    definitions = request.node._fixtureinfo.name2fixturedefs  # the definitions in effect come last
    for name in request.fixturenames:
        if name in besides or not definitions.get(name):
            continue
        fixture = definitions[name][-1]
        if fixture.scope == "session" and (
            inspect.iscoroutinefunction(fixture.func) or inspect.isasyncgenfunction(fixture.func)
        ):
            return True
    return False


async def fail_on_leaks(tasks: dict[asyncio.Task[Any], str]) -> None:
    """Fail naming the tests whose `tasks` are still pending after a bounded settle, and cancel
    those tasks; at a module's end, a task of a test that used a session fixture is carried to the
    session's end instead."""
    left = await settled(set(tasks))
    blamed = {task: tasks[task] for task in left}
    tasks.clear()
    if tasks is suspects:
        carried.update({task: test for task, test in blamed.items() if test in sessions_used})
        blamed = {task: test for task, test in blamed.items() if test not in sessions_used}
    if blamed:
        await cancelled(set(blamed))
        lines = sorted(f"{test}: {describe(task)}" for task, test in blamed.items())
        pytest.fail("tests left tasks running:\n" + "\n".join(lines), pytrace=False)


async def cancelled(tasks: set[asyncio.Task[Any]]) -> None:
    """Cancel `tasks` so the next test starts without them (bounded: one may refuse to end)."""
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks, timeout=SETTLE_S)


def describe(task: asyncio.Task[Any]) -> str:
    """The task's name and its coroutine's, with where that coroutine is defined."""
    coro = task.get_coro()
    code = getattr(coro, "cr_code", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"{task.get_name()}: {getattr(coro, '__qualname__', repr(coro))}{where}"
