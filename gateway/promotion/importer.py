"""Importing a local model directory: its manifest, and optionally a copy onto an artifact root on
this machine (the embedded stack shares a machine with its first agent, which then need not fetch
it; every other node fetches the set from the artifact bucket). Blocking: callers run it on a
worker thread.

The source is walked with the agent's own manifest builder (symlinks that leave it are refused);
the copy goes to a hidden folder beside the destination, is checked against the source manifest,
then renamed into place, so a node never sees a half-copied set.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from artifacts import ArtifactManifest, build_manifest, resolve_artifact_path
from streams import subjects
from streams.codes import ServingError
from streams.envelope import new_id


def _invalid(message: str, param: str) -> ServingError:
    return ServingError("ARTIFACT_PATH_INVALID", message, param)


def destination(artifact_root: Path, folder: str) -> Path:
    try:
        subjects.token(folder, "folder")
    except subjects.InvalidSubjectToken:
        raise _invalid(f"{folder!r} is not a plain folder name (letters, digits, - _ = ~)", "name") from None
    if not artifact_root.is_dir():
        raise _invalid(f"the node's artifact root {str(artifact_root)!r} is not a folder", "artifact_root")
    root = artifact_root.resolve(strict=True)
    target = (root / folder).resolve(strict=False)
    if target.parent != root:
        raise _invalid(f"{folder!r} resolves outside the artifact root", "name")
    return target


def source_manifest(source: Path, artifact_root: Path | None, folder: str) -> ArtifactManifest:
    """What importing `source` as `folder` would register; nothing is copied yet."""
    if not source.is_dir():
        raise _invalid(f"{str(source)!r} is not a folder", "source")
    if artifact_root is not None:
        destination(artifact_root, folder)
    manifest = build_manifest(source)
    if not manifest.files:
        raise ServingError("ARTIFACT_INCOMPLETE", f"{str(source)!r} holds no files", "source")
    return manifest


def import_directory(source: Path, manifest: ArtifactManifest, artifact_root: Path, folder: str) -> None:
    """Copy the files `source_manifest` read into place (the caller has checked that registering
    them is allowed: the folder of a registered set is never replaced with other files)."""
    target = destination(artifact_root, folder)
    if target.exists() and build_manifest(target) == manifest:
        return  # already imported, byte for byte
    staging = target.parent / f".import-{folder}-{new_id()[:8]}"
    try:
        real_source = source.resolve(strict=True)
        for entry in manifest.files:
            origin = resolve_artifact_path(real_source, entry.path)
            copy = staging / entry.path
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(origin, copy)
        if build_manifest(staging) != manifest:
            raise ServingError(
                "ARTIFACT_NOT_VERIFIED", "the source changed while it was copied; import again"
            )
        if target.exists():
            retired = target.parent / f".retired-{folder}-{new_id()[:8]}"
            os.rename(target, retired)
            os.rename(staging, target)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
