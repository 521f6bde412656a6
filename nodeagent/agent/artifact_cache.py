"""A node's artifact sets on disk: its own folders, else its cache of sets fetched from the bucket.

A job names a set by id and folder. A folder of that name under the node's artifact root (a set
imported onto this machine, or pulled by `models pull`) is used as it is. Otherwise the set comes
from `<root>/.cache/<set id>`, fetched from the artifact bucket when it is not there: into a hidden
folder beside it, renamed into place once whole, and verified (sha256, size, confinement, the pickle
and remote-code gates) before anything loads it. A cached set that fails verification (a file
tampered with, or lost) is dropped and fetched again. LRU within the budget (`cache_books`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

from nats.aio.client import Client
from nats.errors import Error as NatsError

from artifacts import ArtifactManifest, VerifiedArtifactSet, resolve_artifact_path, verify_artifact_set
from artifacts.bucket import get_file, open_bucket
from nodeagent.agent.cache_books import CacheBooks
from streams import codes, subjects
from streams.codes import ServingError
from streams.envelope import new_id

CACHE_FOLDER = ".cache"  # not a set folder name: those are subject tokens, which have no dot
_FETCHING_PREFIX = ".fetch-"
# What a cached copy that was changed on disk fails with (a file altered or lost, a link planted):
# it is dropped and fetched again. A bad manifest fails the same way again and is refused then.
_DAMAGED = frozenset({codes.ARTIFACT_NOT_VERIFIED.code, codes.ARTIFACT_PATH_INVALID.code})
log = logging.getLogger("modelforge.agent.cache")

# Told (fetched bytes, total bytes) after each file of a fetch.
Progress = Callable[[int, int], Awaitable[None]]


def _size_on_disk(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


class ArtifactCache:
    def __init__(self, node_root: Path, client: Client | None, budget_bytes: int) -> None:
        self.node_root = node_root.resolve(strict=True)
        self.folder = self.node_root / CACHE_FOLDER
        self.client = client
        self.books = CacheBooks(budget_bytes)
        self.local: set[str] = set()  # sets found in the node's own folders, this generation
        self.folder.mkdir(exist_ok=True)
        by_last_use = sorted(self.folder.iterdir(), key=lambda path: path.stat().st_mtime)
        for found in by_last_use:
            if found.name.startswith(_FETCHING_PREFIX):  # a fetch its agent did not finish
                shutil.rmtree(found, ignore_errors=True)
            elif found.is_dir():
                self.books.add(found.name, _size_on_disk(found))

    def held_set_ids(self) -> list[str]:
        """The sets this node can load without a fetch (its telemetry reports them)."""
        return sorted(self.local.union(self.books.set_ids()))

    async def verified(
        self,
        set_id: str,
        folder: str,
        manifest: ArtifactManifest,
        held: frozenset[str],
        *,
        allow_risks: bool = False,
        progress: Progress | None = None,
    ) -> VerifiedArtifactSet:
        """The set verified on disk, fetched first where this node lacks it. `held`: sets loaded
        workers hold, never evicted to make room. `allow_risks`: pickles and remote code pass."""

        def verify(root: Path) -> VerifiedArtifactSet:
            return verify_artifact_set(
                root, manifest, allow_pickle=allow_risks, allow_remote_code=allow_risks
            )

        local = resolve_artifact_path(self.node_root, folder)
        if local.is_dir():
            verified = await asyncio.to_thread(verify, local)
            self.local.add(set_id)
            return verified
        cached = self.folder / subjects.token(set_id, "artifact set id")
        if set_id in self.books and not cached.is_dir():  # removed by hand since
            self.books.remove(set_id)
        if set_id in self.books:
            try:
                verified = await asyncio.to_thread(verify, cached)
            except ServingError as error:
                if error.code not in _DAMAGED:
                    raise
                log.warning("cached set %s failed verification (%s): fetching it again", set_id, error)
                await self._drop(set_id)
            else:
                self._touch(set_id, cached)
                return verified
        await self._fetch(set_id, manifest, held, progress)
        try:
            verified = await asyncio.to_thread(verify, cached)
        except ServingError as error:
            if error.code in _DAMAGED:
                await self._drop(set_id)  # fetched bytes that do not verify are never kept
            raise
        self._touch(set_id, cached)
        return verified

    def _touch(self, set_id: str, cached: Path) -> None:
        self.books.touch(set_id)
        os.utime(cached)  # the order of last use survives a restart

    async def _drop(self, set_id: str) -> None:
        self.books.remove(set_id)
        await asyncio.to_thread(shutil.rmtree, self.folder / set_id, True)

    async def _fetch(
        self, set_id: str, manifest: ArtifactManifest, held: frozenset[str], progress: Progress | None
    ) -> None:
        if self.client is None:
            raise ServingError(
                codes.ARTIFACT_FETCH_FAILED.code, f"{set_id}: this node has no artifact bucket"
            )
        total = manifest.total_bytes
        for evicted in self.books.make_room(set_id, total, held):
            log.info("evicting cached set %s to make room for %s", evicted, set_id)
            await self._drop(evicted)
        bucket = await open_bucket(self.client)
        staging = self.folder / f"{_FETCHING_PREFIX}{set_id}-{new_id()[:8]}"
        staging.mkdir()
        try:
            fetched = 0
            if progress is not None:
                await progress(0, total)
            for entry in manifest.files:
                try:
                    await get_file(bucket, entry, resolve_artifact_path(staging, entry.path))
                except NatsError as error:  # the bucket went away mid-fetch: this fetch's outcome
                    detail = f"{set_id}: fetching {entry.path} failed: {error!r}"
                    raise ServingError(codes.ARTIFACT_FETCH_FAILED.code, detail) from None
                fetched += entry.size_bytes
                if progress is not None:
                    await progress(fetched, total)
            os.rename(staging, self.folder / set_id)
        finally:
            await asyncio.to_thread(shutil.rmtree, staging, True)
        self.books.add(set_id, total)
