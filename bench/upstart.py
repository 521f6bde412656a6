"""`modelforge up` to its first 200 on /v1/embeddings, against a long history in a real home.

1. The home (`--home`) is bootstrapped by `modelforge up` as a user's is (the demo models promoted,
   the demo client's key kept in it), then `down`.
2. Its own NATS store is filled, with the stack down, until MF_EVENTS holds `--events` events (and
   MF_REQUESTS about as many): the hot-path mix of `projections.scenario` (a request's acceptance
   and completion, its lease and release) spoken for the home's own node, accelerator, embedding
   deployment and demo client, so the aggregates a gateway folds stay what a real history would
   make them (every lease granted is released; the scenario's pressure changes are left out, since
   they would leave the real accelerator's pressure level the fill's). As `bench.startup` does, the
   fill folds its events onto the home's live view and stores that as the snapshot a gateway
   following the log would have stored, then `--tail` events more (the most a snapshot lags).
3. `up` again, timed: each line it prints and what its components log as they start, each with
   the seconds since `up` began, and the demo key's first 200 on /v1/embeddings, asked from the
   start in a loop. The projector's read model is behind by the whole fill at that first `up`;
   `--caught-up` then waits for the projector to catch up, `down`s and times `up` once more (what a
   stack that was serving all along starts from).

    nice -n 10 .venv/bin/python -m bench.upstart --home /tmp/start-home --events 1000000 \\
        --gateway-port 18531 [--tail 5000] [--caught-up]

A store already filled to `--events` is measured as it is. The target (issue 20): `up` to its
first 200 <= 3 s with 10 million events in MF_EVENTS and MF_REQUESTS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from bench import startup
from eventstore.connection import connect
from gateway.clients.service import client_id_for
from gateway.state.live import LiveState
from gateway.state.snapshots import read_snapshot, replay
from modelforge.devstack import demo, stack
from modelforge.devstack.bootstrap import DEMO_CLIENT, EMBEDDING
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.processes import stop_pid
from projections.scenario import Item, traffic
from streams import subjects
from streams.configs import DUPLICATE_WINDOW_S
from streams.events import serving as s

TARGET_S = 3.0
ASK_EVERY_S = 0.05  # between two asks for the first 200 while the gateway refuses or is not up
CATCH_UP_CHECK_S = 10.0  # between two looks at the projector's lag
LOGGED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ (.*)$")
BODY = json.dumps({"model": "all-MiniLM-L6-v2", "input": ["hello world"]}).encode()


@dataclass(frozen=True)
class Home:
    """The ids the fill speaks for: what the home's own `up` made."""

    node: str
    accelerator: str
    deployment: str
    client: str


def home_ids(view: LiveState) -> Home:
    """The embedded node's first accelerator and the stable embedding deployment resident on it."""
    node = view.catalog.nodes[stack.NODE_ID]
    accelerator = node.accelerators[0].accelerator_id
    resident = {r.deployment_id for r in view.accelerators[accelerator].residents}
    (deployment,) = (
        d.deployment_id
        for d in view.catalog.deployments.values()
        if d.capability == EMBEDDING and d.channel == "stable" and d.deployment_id in resident
    )
    return Home(stack.NODE_ID, accelerator, deployment, client_id_for(DEMO_CLIENT))


def home_traffic(home: Home, run: str) -> Iterator[Item]:
    """The scenario's requests, without end, on the home's ids (its one deployment, accelerator
    and client stand for the scenario's first)."""
    names = {
        "node_id": home.node,
        "accelerator_id": home.accelerator,
        "deployment_id": home.deployment,
        "client_id": home.client,
    }
    for aggregate, ident, event in traffic(run, 1 << 62, accelerators=1, deployments=1, clients=1):
        if isinstance(event, s.PressureChanged):
            continue
        fields = {name: value for name, value in names.items() if hasattr(event, name)}
        owner = home.accelerator if aggregate is subjects.Aggregate.ACCELERATOR else ident
        yield aggregate, owner, msgspec.structs.replace(event, **fields)


async def fill_home(home: Path, events: int, tail: int) -> bool:
    """Fill the home's store (its stack down) to `events` MF_EVENTS events, snapshot, then `tail`;
    false when it held as many already."""
    nats = start_nats(home)
    conn = await connect(nats.url, "bench-upstart")
    client = conn.client
    try:
        last = (await client.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq
        if last >= events:
            print(f"MF_EVENTS already holds {last:,} events: measured as it is", flush=True)
            return False
        view, _ = await replay(client, await read_snapshot(client), last)
        messages = startup.encoded(home_traffic(home_ids(view), f"fill{time.time_ns()}"))
        started = time.perf_counter()
        last = await startup.fill(client, messages, events - last, view)
        await startup.first_snapshot(client, view, await startup.event_id_at(client, last), verify=False)
        if tail:
            await startup.fill(client, messages, tail)
        info = {n: (await client.jetstream().stream_info(n)).state.messages for n in startup.STREAMS}
        filled = time.perf_counter() - started
        print(
            f"filled in {filled:.0f} s: "
            + ", ".join(f"{name} {count:,} messages" for name, count in info.items())
            + f"; store {startup.stream_mib(nats.store_dir):,.0f} MiB",
            flush=True,
        )
        return True
    finally:
        await conn.close()
        stop_pid(nats.pid)


def modelforge(home: Path, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-u", "-m", "modelforge.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "MODELFORGE_HOME": str(home)},
    )


def run(home: Path, *argv: str) -> None:
    done = modelforge(home, *argv)
    out, _ = done.communicate()
    if done.returncode:
        raise RuntimeError(f"modelforge {' '.join(argv)} exited {done.returncode}:\n{out}")


class FirstAnswer(threading.Thread):
    """Asks /v1/embeddings with the demo key from the moment `up` starts until it answers 200."""

    def __init__(self, url: str, key: str, began: float) -> None:
        super().__init__(daemon=True)
        self.url, self.key, self.began = f"{url}/v1/embeddings", key, began
        self.at: float | None = None
        self.refusals: dict[str, int] = {}  # what came back before: status or error, how often

    def run(self) -> None:
        headers = {"authorization": f"Bearer {self.key}", "content-type": "application/json"}
        while True:
            try:
                with urllib.request.urlopen(urllib.request.Request(self.url, BODY, headers), timeout=120):
                    self.at = time.time() - self.began
                    return
            except urllib.error.HTTPError as refused:
                what = f"HTTP {refused.code}"
            except (urllib.error.URLError, OSError) as unreachable:
                what = type(getattr(unreachable, "reason", unreachable)).__name__
            self.refusals[what] = self.refusals.get(what, 0) + 1
            time.sleep(ASK_EVERY_S)


def logged_since(home: Path, began: float) -> list[tuple[float, str]]:
    """What each component logged after `began` (epoch seconds), as (seconds since, line)."""
    lines = []
    for log in sorted((home / "logs").glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            found = LOGGED.match(line)
            if not found:
                continue
            at = time.mktime(time.strptime(found[1][:19], "%Y-%m-%d %H:%M:%S")) + int(found[1][20:]) / 1000
            if at >= began:
                lines.append((at - began, f"{log.stem}: {found[2]}"))
    return lines


def timed_up(home: Path, port: int) -> float:
    """`up`, timed to the demo key's first 200; prints the stages; returns the seconds to that 200."""
    key = (home / demo.DEMO_KEY_FILE).read_text().strip()
    began = time.time()
    asker = FirstAnswer(f"http://127.0.0.1:{port}", key, began)
    asker.start()
    up = modelforge(home, "up", "--gateway-port", str(port))
    printed = []
    assert up.stdout is not None
    for line in up.stdout:
        printed.append((time.time() - began, f"up: {line.rstrip()}"))
    returned = time.time() - began
    asker.join(timeout=300)
    if up.returncode or asker.at is None:
        raise RuntimeError(
            f"`up` exited {up.wait()}, first 200 {asker.at}:\n" + "\n".join(p for _, p in printed)
        )
    nats_log = [(0.0, f"nats: {line}") for line in (home / "nats.log").read_text().splitlines()[-3:]]
    for at, line in sorted(printed + logged_since(home, began)) + nats_log:
        print(f"{at:8.2f}  {line[:150]}")
    print(f"`up` returned after {returned:.2f} s; asks refused before: {asker.refusals}")
    print(
        f"first 200 on /v1/embeddings after {asker.at:.2f} s: {asker.at / TARGET_S:.2f} x the {TARGET_S:.0f} s target"
    )
    return asker.at


async def projector_lag(home: Path) -> int:
    """Events the projector has still to project, over both streams (GET /admin/v1/projection)."""
    from gateway.admin.client import AdminClient

    state = stack.load_state(home)
    admin = AdminClient(state.extra["gateway_url"], stack.operator_token(home), operator="bench")
    answer = await asyncio.to_thread(admin.get, "/projection")
    return sum(int(stream["lag"]) for stream in answer["streams"])


def wait_caught_up(home: Path) -> None:
    began = time.perf_counter()
    while (lag := asyncio.run(projector_lag(home))) > 0:
        print(f"  projector {lag:,} events behind after {time.perf_counter() - began:.0f} s", flush=True)
        time.sleep(CATCH_UP_CHECK_S)
    print(f"projector caught up after {time.perf_counter() - began:.0f} s", flush=True)


def main(home: Path, events: int, tail: int, port: int, caught_up: bool) -> None:
    if not (home / demo.DEMO_KEY_FILE).exists():
        run(home, "up", "--gateway-port", str(port))
        print("bootstrapped by `modelforge up`", flush=True)
    run(home, "down")
    if asyncio.run(fill_home(home, events, tail)):
        # A starting nats-server reads back every message of its last duplicate window to rebuild
        # its dedupe table: straight after the fill, all of them (7.3 s at 1 M). A stack that served
        # before its `down` holds only its last two minutes of traffic there.
        print(f"waiting out the streams' {DUPLICATE_WINDOW_S:.0f} s duplicate window", flush=True)
        time.sleep(DUPLICATE_WINDOW_S)
    try:
        timed_up(home, port)
        if caught_up:
            wait_caught_up(home)
            run(home, "down")
            timed_up(home, port)
    finally:
        run(home, "down")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", type=Path, required=True, help="the MODELFORGE_HOME (made when missing)")
    parser.add_argument("--events", type=int, default=1_000_000, help="MF_EVENTS events to fill to")
    parser.add_argument("--tail", type=int, default=5_000, help="events after the fill's snapshot")
    parser.add_argument("--gateway-port", type=int, default=18531)
    parser.add_argument(
        "--caught-up", action="store_true", help="also time `up` once the projector has caught up"
    )
    args = parser.parse_args()
    main(args.home.resolve(), args.events, args.tail, args.gateway_port, args.caught_up)
