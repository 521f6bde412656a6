"""From a manifest to the control-plane fact that registers it: content-addressed, so the same
files make the same artifact set id on every node."""

from __future__ import annotations

import hashlib

from artifacts.manifest import ArtifactManifest
from streams.events.control import ArtifactFile, ArtifactSetRegistered


def content_id(manifest: ArtifactManifest, prefix: str) -> str:
    digest = hashlib.sha256()
    for entry in manifest.files:
        digest.update(f"{entry.path}\0{entry.sha256}\0{entry.size_bytes}\n".encode())
    return f"{prefix}-{digest.hexdigest()[:16]}"


def manifest_sha256(manifest: ArtifactManifest) -> str:
    return hashlib.sha256(
        "".join(f"{f.path}\0{f.sha256}\0{f.size_bytes}\n" for f in manifest.files).encode()
    ).hexdigest()


def registration(
    manifest: ArtifactManifest,
    *,
    set_id: str,
    name: str,
    capability: str,
    node_id: str,
    folder: str,
    source: str,
) -> ArtifactSetRegistered:
    return ArtifactSetRegistered(
        artifact_set_id=set_id,
        name=name,
        capability=capability,
        node_id=node_id,
        root=folder,
        files=tuple(
            ArtifactFile(path=f.path, sha256=f.sha256, size=f.size_bytes, format=f.format.value)
            for f in manifest.files
        ),
        risk_flags=tuple(manifest.risk_flags),
        manifest_sha256=manifest_sha256(manifest),
        source=source,
    )
