"""`modelforge up` / `down`: the embedded stack on a fresh folder, reused on a second run."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import msgspec

from eventstore.connection import Connection, connect
from modelforge.devstack.processes import free_port, pid_alive, stop_pid, tail
from modelforge.devstack.stack import StackState
from streams import subjects
from streams.events.control import NodeLost
from streams.events.requests import RequestCompleted
from tests.support.images import text_page
from tests.support.serving import events_until


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "DATABASE_URL")}
    env["MODELFORGE_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "modelforge.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )


def test_up_starts_nats_and_postgres_reuses_them_down_stops_them_and_up_again_keeps_data_and_key(
    scratch: Path,
) -> None:
    # One fresh `up` for the whole life cycle: a fresh one imports and probes every model, the
    # costliest step of this file (a second test with its own fresh `up` took ~2.5 min loaded).
    home = scratch / "devstack-up"
    first = run(home, "up", "--gateway-port", str(free_port()))  # not 8080: another stack may hold it
    try:  # an `up` that fails half-way has started some of the stack: `down` stops it too
        assert first.returncode == 0, first.stderr
        state = msgspec.json.decode((home / "stack.json").read_bytes(), type=StackState)
        assert state.nats
        assert state.postgres
        assert "MF_EVENTS" in first.stdout
        _embed_with_the_printed_key(first.stdout)
        _ocr_with_the_printed_command(first.stdout, scratch / "page.png")
        # Operator commands find the running stack without NATS_URL / DATABASE_URL (as the README says).
        listed = run(home, "clients", "list")
        assert listed.returncode == 0, listed.stderr
        assert "demo" in listed.stdout
        verified = run(home, "replay", "--verify")
        assert verified.returncode == 0, verified.stderr
        _status_fails_while_a_component_is_stopped(home, state)
        second = run(home, "up")  # starts the stopped component again
        assert second.returncode == 0, second.stderr
        assert "imported" not in second.stdout  # nothing new: the same deployments and demo client
        assert "promoted" not in second.stdout
        assert "(document.ocr@1, pp-ocrv4)" in second.stdout
        assert "(rag.reranking@1, minilm-biencoder-rerank)" in second.stdout
        again = msgspec.json.decode((home / "stack.json").read_bytes(), type=StackState)
        assert (again.nats, again.postgres) == (state.nats, state.postgres)
    finally:
        down = run(home, "down")
    assert down.returncode == 0, down.stderr
    assert not pid_alive(state.nats.pid)
    assert not pid_alive(state.postgres.pid)
    _up_after_down_restarts_on_the_same_data_and_the_same_demo_key(home, first.stdout)


def _status_fails_while_a_component_is_stopped(home: Path, state: StackState) -> None:
    """`status`: every part up, the gateway ready, the projection running; then, the projector
    stopped, a line saying so and exit status 1."""
    healthy = run(home, "status")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    lines = {line.split()[0]: line.split()[1] for line in healthy.stdout.splitlines()}
    assert lines == dict.fromkeys(
        ("nats", "postgres", "projector", "agent", "gateway", "readyz", "projection"), "ok"
    )
    running = msgspec.json.decode((home / "stack.json").read_bytes(), type=StackState)
    (projector,) = [c for c in running.components if c.name == "projector"]
    stop_pid(projector.pid)
    stopped = run(home, "status")
    assert stopped.returncode == 1
    assert f"projector   DOWN  down (pid {projector.pid} is gone)" in stopped.stdout
    as_json = json.loads(run(home, "status", "--json").stdout)
    assert as_json["nats"] == msgspec.to_builtins(state.nats)  # stack.json's fields, as before
    assert [c["component"] for c in as_json["checks"] if not c["ok"]] == ["projector"]


def _embed_with_the_printed_key(stdout: str) -> str:
    """What a new user does next: call the model with the key `up` printed."""
    key = _printed_key(stdout)
    url = next(
        line.split()[1] for line in stdout.splitlines() if line.startswith("gateway ") and "http" in line
    )
    response = httpx.post(
        f"{url}/v1/embeddings",
        json={"model": "all-MiniLM-L6-v2", "input": ["hello world"]},
        headers={"authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert len(response.json()["data"][0]["embedding"]) == 384
    return response.headers["x-request-id"]


def _ocr_with_the_printed_command(stdout: str, page: Path) -> None:
    """The OCR example `up` prints, run as printed with a rendered page's path put in."""
    lines = stdout.splitlines()
    printed = [
        n for n, line in enumerate(lines) if line.startswith("  printf ") and "/v1/ocr" in lines[n + 1]
    ]
    assert printed, "no OCR example: " + " / ".join(
        line for line in lines if line.startswith("document.ocr@1 ")
    )
    start = printed[0]
    command = "\n".join(lines[start : start + 3]).replace("page.png", str(page))
    image, _ = text_page(["Invoice number 4821"])
    page.write_bytes(base64.b64decode(image))
    answer = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(answer.stdout)["pages"][0]["markdown"] == "Invoice number 4821", answer.stdout


async def _served_by(connection: Connection, request_id: str) -> str:
    """The node that served request `request_id` (its RequestCompleted)."""
    completed = await events_until(
        connection,
        subjects.REQUESTS_STREAM,
        lambda e: isinstance(e, RequestCompleted) and e.request_id == request_id,
    )
    assert isinstance(completed[-1], RequestCompleted)
    return completed[-1].node_id


async def _declared_lost(connection: Connection, node_id: str, home: Path) -> None:
    """Read from the event log, so an event appended before this reads it counts too."""
    try:
        await events_until(
            connection,
            subjects.EVENTS_STREAM,
            lambda e: isinstance(e, NodeLost) and e.node_id == node_id,
            timeout=60,
        )
    except TimeoutError:
        raise AssertionError(
            f"{node_id} not declared lost in 60 s; gateway log:\n{tail(home / 'logs' / 'gateway.log', 40)}"
        ) from None


def _printed_key(stdout: str) -> str:
    return next(line.split()[2] for line in stdout.splitlines() if line.startswith("demo key"))


def _up_after_down_restarts_on_the_same_data_and_the_same_demo_key(home: Path, first_stdout: str) -> None:
    again = run(home, "up")
    try:
        assert again.returncode == 0, again.stderr
        state = msgspec.json.decode((home / "stack.json").read_bytes(), type=StackState)
        assert state.postgres is not None
        assert (Path(state.postgres.data_dir) / "PG_VERSION").exists()
        _embed_with_the_printed_key(again.stdout)  # the same deployment
        assert _printed_key(again.stdout) == _printed_key(first_stdout)  # an app keeps working
        assert (home / "demo-key").stat().st_mode & 0o777 == 0o600
    finally:
        run(home, "down")


async def test_up_with_two_nodes_serves_from_the_other_once_the_serving_one_is_lost(scratch: Path) -> None:
    home = scratch / "devstack-nodes"
    started = await asyncio.to_thread(run, home, "up", "--nodes", "2", "--gateway-port", str(free_port()))
    try:
        assert started.returncode == 0, started.stderr
        state = msgspec.json.decode((home / "stack.json").read_bytes(), type=StackState)
        agents = {c.name: c.pid for c in state.components if c.name.startswith("agent")}
        assert set(agents) == {"agent", "agent-2"}
        assert state.nats is not None
        connection = await connect(state.nats.url, "devstack-nodes-test")
        try:
            first = await _served_by(
                connection, await asyncio.to_thread(_embed_with_the_printed_key, started.stdout)
            )
            other = {"local": "local-2", "local-2": "local"}[first]
            os.kill(agents["agent" if first == "local" else "agent-2"], signal.SIGKILL)  # it dies
            await _declared_lost(connection, first, home)  # once its telemetry stopped
            served = await asyncio.to_thread(_embed_with_the_printed_key, started.stdout)
            assert await _served_by(connection, served) == other
        finally:
            await connection.close()
    finally:
        await asyncio.to_thread(run, home, "down")
