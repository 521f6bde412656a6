"""The artifact bucket's edge: put an imported set's files in, get one file out.

Every object's digest is checked against the manifest's sha256 both ways: after a put (a file that
changed while it was read is refused) and before a get (an object that is not the manifest's file is
never fetched); nats-py checks the fetched bytes against the object's digest as they arrive.
"""

from __future__ import annotations

from pathlib import Path

from nats.aio.client import Client
from nats.js.api import ObjectInfo, ObjectMeta, ObjectMetaOptions
from nats.js.errors import BucketNotFoundError, DigestMismatchError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from artifacts.manifest import ArtifactManifest, ManifestFile
from artifacts.objects import digests_agree, object_name
from artifacts.paths import resolve_artifact_path
from streams import codes, subjects
from streams.codes import ServingError

# Chunks well under the servers' max_payload (1 MB by default; 8 MB in deploy/nats/nats.conf).
CHUNK_BYTES = 512 * 1024


def _fetch_failed(entry: ManifestFile, why: str) -> ServingError:
    return ServingError(codes.ARTIFACT_FETCH_FAILED.code, f"{entry.path}: {why}", param=entry.path)


async def open_bucket(client: Client) -> ObjectStore:
    try:
        return await client.jetstream().object_store(subjects.ARTIFACTS_BUCKET)
    except BucketNotFoundError:
        raise ServingError(
            codes.ARTIFACT_FETCH_FAILED.code,
            f"the artifact bucket {subjects.ARTIFACTS_BUCKET} is missing: run `modelforge provision`",
        ) from None


def holds(info: ObjectInfo | None, entry: ManifestFile) -> bool:
    """Whether the object `info` describes is the manifest's file (digest and size)."""
    return info is not None and info.size == entry.size_bytes and digests_agree(info.digest, entry.sha256)


async def _info(bucket: ObjectStore, entry: ManifestFile) -> ObjectInfo | None:
    try:
        return await bucket.get_info(object_name(entry.sha256))
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
            info = await bucket.put(meta.name or "", stream, meta=meta)
        if not holds(info, entry):
            raise ServingError(
                codes.ARTIFACT_NOT_VERIFIED.code,
                f"{entry.path} changed while it was stored (digest {info.digest}); import again",
                param=entry.path,
            )
        sent += entry.size_bytes
    return sent


async def get_file(bucket: ObjectStore, entry: ManifestFile, target: Path) -> None:
    """Write the manifest file `entry` to `target` from the bucket, or raise ARTIFACT_FETCH_FAILED."""
    info = await _info(bucket, entry)
    if info is None:
        raise _fetch_failed(entry, f"not in the artifact bucket (sha256 {entry.sha256})")
    if not holds(info, entry):
        raise _fetch_failed(
            entry, f"the bucket's object ({info.digest}, {info.size} bytes) is not the manifest's"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as stream:
        try:
            await bucket.get(object_name(entry.sha256), writeinto=stream)
        except DigestMismatchError:
            raise _fetch_failed(entry, "the fetched bytes do not match the object's digest") from None
