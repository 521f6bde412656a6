"""The event log backed up, lost and restored: the same messages, and a replay of them gives the
same read model as before the loss."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from eventstore.backup import BACKED_UP, BackupFailed, backup, restore
from eventstore.connection import Connection, connect
from eventstore.provision import provision
from eventstore.store import EventStore
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.processes import stop_pid
from projections.replay import replay
from projections.scenario import control_plane, traffic
from streams.envelope import new_id
from tests.integration.projections.helpers import publish


@pytest.fixture
async def own_log(scratch: Path) -> AsyncIterator[tuple[str, Connection]]:
    """A server of its own (this test deletes its streams), holding a control plane and traffic."""
    server = start_nats(scratch / f"nats-backup-{new_id()[:8]}")
    connection = await connect(server.url, "backup-tests")
    try:
        await provision(connection.client)
        run = f"bk{new_id()[:6]}"
        await publish(EventStore(connection), [*control_plane(run), *traffic(run, 300)])
        yield server.url, connection
    finally:
        await connection.close()
        stop_pid(server.pid)


async def _states(connection: Connection) -> dict[str, tuple[int, int, int]]:
    js = connection.client.jetstream()
    states = {}
    for stream in BACKED_UP:
        state = (await js.stream_info(stream)).state
        states[stream] = (state.messages, state.first_seq, state.last_seq)
    return states


async def test_a_restored_backup_replays_to_the_digest_it_had_before_the_streams_were_lost(
    own_log: tuple[str, Connection], database_url: str, scratch: Path
) -> None:
    url, connection = own_log
    before = await replay(database_url, url, progress=False)
    states = await _states(connection)
    file = scratch / f"backup-{new_id()[:6]}.tar"
    seen: list[int] = []
    manifest = await backup(connection.client, file, seen.append)
    assert [entry.stream for entry in manifest.streams] == list(BACKED_UP)
    assert sum(seen) == sum(entry.size for entry in manifest.streams)

    js = connection.client.jetstream()
    for stream in BACKED_UP:  # the loss
        await js.delete_stream(stream)
    await restore(connection.client, file, lambda _: None)

    assert await _states(connection) == states
    after = await replay(database_url, url, progress=False)
    assert after.digest == before.digest
    assert after.events == before.events


async def test_a_damaged_backup_is_refused_before_anything_is_restored(
    own_log: tuple[str, Connection], scratch: Path
) -> None:
    _, connection = own_log
    file = scratch / f"backup-{new_id()[:6]}.tar"
    await backup(connection.client, file, lambda _: None)
    data = bytearray(file.read_bytes())
    middle = data.index(b"MF_EVENTS.snapshot") + 4096  # inside the first snapshot's bytes
    data[middle] ^= 0xFF
    file.write_bytes(bytes(data))
    js = connection.client.jetstream()
    for stream in BACKED_UP:
        await js.delete_stream(stream)
    with pytest.raises(BackupFailed, match="does not match the manifest"):
        await restore(connection.client, file, lambda _: None)
    names = [info.config.name for info in await js.streams_info()]
    assert not set(BACKED_UP) & set(names)


def _cli(url: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NATS_URL": url, "MODELFORGE_HOME": str(home)}
    command = [sys.executable, "-m", "modelforge.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


async def test_the_cli_writes_a_backup_with_its_digest_and_restores_it(
    own_log: tuple[str, Connection], scratch: Path
) -> None:
    url, connection = own_log
    states = await _states(connection)
    file = scratch / f"backup-{new_id()[:6]}.tar"
    made = await asyncio.to_thread(_cli, url, scratch, "backup", str(file))
    assert made.returncode == 0, made.stderr
    digest = hashlib.sha256(file.read_bytes()).hexdigest()
    assert f"sha256 {digest}" in made.stdout
    js = connection.client.jetstream()
    for stream in BACKED_UP:
        await js.delete_stream(stream)
    restored = await asyncio.to_thread(_cli, url, scratch, "restore", str(file))
    assert restored.returncode == 0, restored.stderr
    assert await _states(connection) == states
