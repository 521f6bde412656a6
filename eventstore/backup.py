"""Backing up and restoring the event log with JetStream's stream snapshot and restore APIs.

The event log is the one thing whose loss nothing can rebuild: the read model, the scheduler view
and every audit line are folds of it. A backup is one tar file holding, per stream, the server's
own snapshot archive (`<stream>.snapshot`: its messages, every header and sequence, exactly as
stored) and the config and state it was taken at (`<stream>.json`), with `manifest.json` naming
each snapshot's size and sha256. Each stream's snapshot is consistent in itself (the server takes
it at one point); the streams are taken one after the other.

Snapshot: the server streams chunks to an inbox, each with a reply subject the reader acknowledges
(flow control), then an empty message. Restore: the server names a subject to send chunks to, each
acknowledged by an empty reply; an empty chunk ends it, answered with the restored stream's info.
A restore goes into a deployment that does not hold the stream (the server refuses otherwise).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg

from streams import subjects

BACKED_UP = (subjects.EVENTS_STREAM, subjects.REQUESTS_STREAM)
CHUNK_BYTES = 128 * 1024  # well under any server's max_payload
API_TIMEOUT_S = 30.0  # one API answer, or one chunk's acknowledgement
STALL_S = 60.0  # no chunk for this long: the snapshot stalled
MANIFEST = "manifest.json"
Progress = Callable[[int], object]  # told each chunk's size as it passes


class BackupFailed(Exception):
    """The server refused a snapshot or a restore, or the backup file is not what it says."""


class StreamBackup(msgspec.Struct, frozen=True):
    stream: str
    size: int
    sha256: str
    messages: int
    last_seq: int


class Manifest(msgspec.Struct, frozen=True):
    streams: tuple[StreamBackup, ...]


class _Taken(msgspec.Struct, frozen=True):
    """The snapshot API's answer: what the stream was when the snapshot was taken."""

    config: dict[str, Any]
    state: dict[str, Any]


def _api_answer(data: bytes, what: str) -> dict[str, Any]:
    answer: dict[str, Any] = msgspec.json.decode(data) if data else {}
    error = answer.get("error")
    if error:
        raise BackupFailed(f"{what}: [{error.get('err_code', 0)}] {error.get('description', '')}")
    return answer


async def snapshot_stream(
    client: Client, stream: str, sink: IO[bytes], progress: Progress
) -> tuple[_Taken, int, str]:
    """Write the stream's snapshot archive to `sink`: (what it was taken at, bytes, sha256)."""
    chunks: asyncio.Queue[Msg] = asyncio.Queue()

    async def arrived(msg: Msg) -> None:
        chunks.put_nowait(msg)

    inbox = client.new_inbox()
    sub = await client.subscribe(inbox, cb=arrived)
    try:
        request = {"deliver_subject": inbox, "no_consumers": True, "chunk_size": CHUNK_BYTES}
        reply = await client.request(
            f"$JS.API.STREAM.SNAPSHOT.{stream}", msgspec.json.encode(request), timeout=API_TIMEOUT_S
        )
        taken = msgspec.convert(_api_answer(reply.data, f"snapshot of {stream}"), _Taken)
        digest, size = hashlib.sha256(), 0
        while True:
            try:
                async with asyncio.timeout(STALL_S):
                    msg = await chunks.get()
            except TimeoutError:
                raise BackupFailed(f"the snapshot of {stream} stalled after {size} bytes") from None
            if not msg.data:
                break  # the server's end of the snapshot
            sink.write(msg.data)
            digest.update(msg.data)
            size += len(msg.data)
            if msg.reply:
                await client.publish(msg.reply, b"")  # the acknowledgement its flow control waits for
            progress(len(msg.data))
        return taken, size, digest.hexdigest()
    finally:
        await sub.unsubscribe()


async def backup(
    client: Client, path: Path, progress: Progress, streams: Sequence[str] = BACKED_UP
) -> Manifest:
    """Write a backup of `streams` to `path` (a tar file); its manifest names each snapshot."""
    taken: list[StreamBackup] = []
    with tarfile.open(path, "w") as archive:
        for stream in streams:
            with tempfile.TemporaryFile() as spool:
                at, size, sha256 = await snapshot_stream(client, stream, spool, progress)
                spool.seek(0)
                _add(archive, f"{stream}.snapshot", spool, size)
            described = msgspec.json.encode({"config": at.config, "state": at.state})
            _add(archive, f"{stream}.json", io.BytesIO(described), len(described))
            taken.append(
                StreamBackup(
                    stream=stream,
                    size=size,
                    sha256=sha256,
                    messages=int(at.state.get("messages", 0)),
                    last_seq=int(at.state.get("last_seq", 0)),
                )
            )
        manifest = Manifest(tuple(taken))
        encoded = msgspec.json.encode(manifest)
        _add(archive, MANIFEST, io.BytesIO(encoded), len(encoded))
    return manifest


def _add(archive: tarfile.TarFile, name: str, data: IO[bytes], size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = size
    archive.addfile(info, data)


def read_manifest(path: Path) -> Manifest:
    with tarfile.open(path, "r") as archive:
        member = archive.extractfile(MANIFEST)
        if member is None:
            raise BackupFailed(f"{path} holds no {MANIFEST}: not a ModelForge backup")
        return msgspec.json.decode(member.read(), type=Manifest)


async def restore(client: Client, path: Path, progress: Progress) -> Manifest:
    """Restore every stream of the backup at `path` (each checked against its sha256 first)."""
    manifest = read_manifest(path)
    with tarfile.open(path, "r") as archive:
        for entry in manifest.streams:
            snapshot, described = (
                archive.extractfile(f"{entry.stream}.snapshot"),
                archive.extractfile(f"{entry.stream}.json"),
            )
            if snapshot is None or described is None:
                raise BackupFailed(f"{path} lacks {entry.stream}'s snapshot")
            _check(snapshot, entry)
            at = msgspec.json.decode(described.read(), type=_Taken)
            await restore_stream(client, entry.stream, at, snapshot, progress)
    return manifest


def _check(snapshot: IO[bytes], entry: StreamBackup) -> None:
    digest, size = hashlib.sha256(), 0
    while chunk := snapshot.read(1 << 20):
        digest.update(chunk)
        size += len(chunk)
    if (size, digest.hexdigest()) != (entry.size, entry.sha256):
        raise BackupFailed(f"{entry.stream}'s snapshot does not match the manifest: the file is damaged")
    snapshot.seek(0)


async def restore_stream(
    client: Client, stream: str, at: _Taken, source: IO[bytes], progress: Progress
) -> None:
    request = msgspec.json.encode({"config": at.config, "state": at.state})
    reply = await client.request(f"$JS.API.STREAM.RESTORE.{stream}", request, timeout=API_TIMEOUT_S)
    deliver = _api_answer(reply.data, f"restore of {stream}").get("deliver_subject")
    if not deliver:
        raise BackupFailed(f"restore of {stream}: the server named no subject to send the snapshot to")
    while chunk := source.read(CHUNK_BYTES):
        ack = await client.request(deliver, chunk, timeout=API_TIMEOUT_S)
        if ack.data:
            raise BackupFailed(f"restore of {stream}: {ack.data.decode(errors='replace')}")
        progress(len(chunk))
    done = await client.request(deliver, b"", timeout=STALL_S)  # the server now builds the stream
    _api_answer(done.data, f"restore of {stream}")
