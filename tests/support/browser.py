"""Headless Chromium (Debian's `chromium`, which `./dev test` installs where it can) driven over its
DevTools protocol: a small client on aiohttp's WebSocket (no selenium), enough to open a page at a
given size, run script in it, wait on what it shows, collect its console errors and screenshot it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (apt-get install chromium chromium-driver; `./dev test` does it as root)",
)
LISTENING = re.compile(rb"DevTools listening on (ws://\S+)")
START_S = 60.0  # a cold start on a busy machine


def artefacts(tmp_path: Path) -> Path:
    """Where a test keeps what it made for people to look at: $MODELFORGE_TEST_ARTEFACTS, else its tmp dir."""
    folder = Path(os.environ.get("MODELFORGE_TEST_ARTEFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Page:
    """One tab, attached with a flat session; its console errors and exceptions are collected."""

    def __init__(self, browser: DevTools, session_id: str) -> None:
        self.browser, self.session_id = browser, session_id
        self.errors: list[str] = []
        self.loaded = asyncio.Event()

    def event(self, method: str, params: dict[str, Any]) -> None:
        match method:
            case "Runtime.consoleAPICalled" if params["type"] in ("error", "assert"):
                self.errors.append(
                    " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
                )
            case "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                self.errors.append(details.get("exception", {}).get("description") or details["text"])
            case "Log.entryAdded" if params["entry"]["level"] == "error":
                self.errors.append(f"{params['entry']['source']}: {params['entry']['text']}")
            case "Page.loadEventFired":
                self.loaded.set()

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        return await self.browser.send(method, params, self.session_id)

    async def open(self, url: str, width: int, height: int) -> None:
        for domain in ("Runtime", "Log", "Page"):
            await self.send(f"{domain}.enable")
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.loaded.clear()
        await self.send("Page.navigate", url=url)
        await asyncio.wait_for(self.loaded.wait(), START_S)

    async def evaluate(self, expression: str, timeout: float = 60.0) -> Any:
        """The value of `expression` (awaited when it is a promise); a thrown error fails the test."""
        answer = await asyncio.wait_for(
            self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True),
            timeout,
        )
        if "exceptionDetails" in answer:
            raise AssertionError(f"{expression!r} threw: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    async def screenshot(self, path: Path) -> Path:
        shot = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))
        return path


class DevTools:
    """The browser's DevTools connection: commands answered by id, events routed to their page."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.pages: dict[str, Page] = {}
        self.last_id = 0
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.socket:
            data = json.loads(message.data)
            if "id" in data:
                waiter = self.pending.pop(data["id"])
                if waiter.done():  # its caller stopped waiting
                    continue
                if "error" in data:
                    waiter.set_exception(AssertionError(f"DevTools: {data['error']}"))
                else:
                    waiter.set_result(data.get("result", {}))
            elif data.get("sessionId") in self.pages:
                self.pages[data["sessionId"]].event(data["method"], data.get("params", {}))
        for waiter in self.pending.values():
            if not waiter.done():
                waiter.set_exception(AssertionError("the browser closed its DevTools connection"))

    async def send(
        self, method: str, params: dict[str, Any], session_id: str | None = None
    ) -> dict[str, Any]:
        self.last_id += 1
        waiter = asyncio.get_running_loop().create_future()
        self.pending[self.last_id] = waiter
        message: dict[str, Any] = {"id": self.last_id, "method": method, "params": params}
        if session_id:
            message["sessionId"] = session_id
        await self.socket.send_str(json.dumps(message))
        return await waiter

    async def new_page(self) -> Page:
        target = await self.send("Target.createTarget", {"url": "about:blank"})
        attached = await self.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        page = Page(self, attached["sessionId"])
        self.pages[page.session_id] = page
        return page


async def _devtools_url(stderr: asyncio.StreamReader) -> str:
    while line := await stderr.readline():
        found = LISTENING.search(line)
        if found:
            return found.group(1).decode()
    raise AssertionError("chromium exited before it opened its DevTools port")


async def _drain(stderr: asyncio.StreamReader) -> None:
    while await stderr.read(1 << 16):  # keep its log from filling the pipe and stalling it
        pass


@contextlib.asynccontextmanager
async def chromium(profile: Path) -> AsyncIterator[DevTools]:
    """A headless Chromium with a fresh profile under `profile`, stopped (and waited for) after."""
    assert CHROMIUM is not None
    process = await asyncio.create_subprocess_exec(
        CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--no-default-browser-check", "--disable-extensions", "--remote-debugging-port=0",
        f"--user-data-dir={profile}", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    drain: asyncio.Task[None] | None = None
    try:
        url = await asyncio.wait_for(_devtools_url(process.stderr), START_S)
        drain = asyncio.create_task(_drain(process.stderr))
        async with aiohttp.ClientSession() as http, http.ws_connect(url, max_msg_size=0) as socket:
            devtools = DevTools(socket)
            try:
                yield devtools
            finally:
                await socket.close()
                await devtools.reader
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()
        if drain is not None:
            await drain


def shown(selectors: str) -> str:
    """A promise (for Runtime.evaluate) settled once every selector matches: it waits on the
    page's own changes (a MutationObserver), never on a timer."""
    wanted = json.dumps([s.strip() for s in selectors.split(",")])
    return f"""new Promise((resolve) => {{
      const all = () => {wanted}.every((s) => document.querySelector(s));
      if (all()) return resolve(true);
      new MutationObserver((_, observer) => {{ if (all()) {{ observer.disconnect(); resolve(true); }} }})
        .observe(document.body, {{ childList: true, subtree: true }});
    }})"""


async def log_in(page: Page, token: str) -> None:
    """Type the operator token into the console's form and submit it."""
    await page.evaluate(
        f"document.getElementById('token').value = {json.dumps(token)};"
        " document.getElementById('login').requestSubmit(); true"
    )
