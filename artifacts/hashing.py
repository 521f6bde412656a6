"""Streaming sha256 of artifact files: models are gigabytes, so never read a file whole."""

from __future__ import annotations

import hashlib
from pathlib import Path

HASH_CHUNK_BYTES = 1024 * 1024


def sha256_of_file(path: Path) -> tuple[str, int]:
    """Return (hex sha256, bytes hashed) of `path`, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as stream:
        while chunk := stream.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size
