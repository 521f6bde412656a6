"""The artifact bucket's edge: put an imported set's files in, get one file out.

Every object's digest is checked against the manifest's sha256 both ways: after a put (a file that
changed while it was read is refused), and on a get before the object is read (an object that is not
the manifest's file is never fetched) and after (the bytes that arrived hash to it). A get reads the
chunks through an ordered consumer on the bucket's stream, named, so an agent needs no stream lookup.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from pathlib import Path

from nats.aio.client import Client
from nats.js.api import ObjectInfo, ObjectMeta, ObjectMetaOptions
from nats.js.client import JetStreamContext
from nats.js.errors import BucketNotFoundError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from artifacts.manifest import ArtifactManifest, ManifestFile
from artifacts.objects import digests_agree, object_name
from artifacts.paths import resolve_artifact_path
from streams import codes, subjects
from streams.codes import ServingError

# Chunks well under the servers' max_payload (1 MB by default; 8 MB in deploy/nats/nats.conf).
CHUNK_BYTES = 512 * 1024
CHUNK_WAIT_S = 30.0  # for the next chunk of an object being read: far past it, the bucket is away


def _fetch_failed(entry: ManifestFile, why: str) -> ServingError:
    return ServingError(codes.ARTIFACT_FETCH_FAILED.code, f"{entry.path}: {why}", param=entry.path)


@dataclass(frozen=True)
class Bucket:
    objects: ObjectStore  # object meta (get_info) and puts
    js: JetStreamContext  # reads of an object's chunks


async def open_bucket(client: Client) -> Bucket:
    js = client.jetstream()
    try:
        return Bucket(await js.object_store(subjects.ARTIFACTS_BUCKET), js)
    except BucketNotFoundError:
        raise ServingError(
            codes.ARTIFACT_FETCH_FAILED.code,
            f"the artifact bucket {subjects.ARTIFACTS_BUCKET} is missing: run `modelforge provision`",
        ) from None


def holds(info: ObjectInfo | None, entry: ManifestFile) -> bool:
    """Whether the object `info` describes is the manifest's file (digest and size)."""
    return info is not None and info.size == entry.size_bytes and digests_agree(info.digest, entry.sha256)


async def _info(bucket: Bucket, entry: ManifestFile) -> ObjectInfo | None:
    try:
        return await bucket.objects.get_info(object_name(entry.sha256))
    except ObjectNotFoundError:
        return None


async def put_set(client: Client, root: Path, manifest: ArtifactManifest) -> int:
    """Store each file of `manifest` (read under `root`) the bucket lacks; returns the bytes sent."""
    bucket = await open_bucket(client)
    sent = 0
    for entry in manifest.files:
        if holds(await _info(bucket, entry), entry):
            continue  # stored by an earlier import, of this set or another
        meta = ObjectMeta(
            name=object_name(entry.sha256), options=ObjectMetaOptions(max_chunk_size=CHUNK_BYTES)
        )
        with resolve_artifact_path(root, entry.path).open("rb") as stream:
            info = await bucket.objects.put(meta.name or "", stream, meta=meta)
        if not holds(info, entry):
            raise ServingError(
                codes.ARTIFACT_NOT_VERIFIED.code,
                f"{entry.path} changed while it was stored (digest {info.digest}); import again",
                param=entry.path,
            )
        sent += entry.size_bytes
    return sent


async def get_file(bucket: Bucket, entry: ManifestFile, target: Path) -> None:
    """Write the manifest file `entry` to `target` from the bucket, or raise ARTIFACT_FETCH_FAILED."""
    info = await _info(bucket, entry)
    if info is None:
        raise _fetch_failed(entry, f"not in the artifact bucket (sha256 {entry.sha256})")
    if not holds(info, entry):
        raise _fetch_failed(
            entry, f"the bucket's object ({info.digest}, {info.size} bytes) is not the manifest's"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    digest, written = hashlib.sha256(), 0
    with target.open("wb") as stream:

        def take(chunk: bytes) -> None:  # on a thread: the agent's loop serves invokes meanwhile
            stream.write(chunk)
            digest.update(chunk)

        if entry.size_bytes:
            chunks = await bucket.js.subscribe(
                f"$O.{subjects.ARTIFACTS_BUCKET}.C.{info.nuid}",
                stream=subjects.ARTIFACTS_STREAM,
                ordered_consumer=True,
            )
            try:
                while written < entry.size_bytes:  # the object's chunks, in order, then no more
                    chunk = (await chunks.next_msg(timeout=CHUNK_WAIT_S)).data
                    await asyncio.to_thread(take, chunk)
                    written += len(chunk)
            finally:
                await chunks.unsubscribe()
    if written != entry.size_bytes or digest.hexdigest() != entry.sha256.lower():
        raise _fetch_failed(entry, "the fetched bytes are not the manifest's (size or sha256)")
