"""Verify an artifact set on disk against its manifest before anything loads it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from artifacts.hashing import sha256_of_file
from artifacts.manifest import (
    RISK_PICKLE_PRESENT,
    RISK_REMOTE_CODE_REQUIRED,
    ArtifactFormat,
    ArtifactManifest,
    ManifestFile,
    detect_format,
    risk_flags_for,
)
from artifacts.paths import resolve_artifact_path
from streams import codes
from streams.codes import ServingError


@dataclass(frozen=True)
class VerifiedArtifactSet:
    root: Path
    manifest: ArtifactManifest
    bytes_verified: int

    def path_of(self, relative_path: str) -> Path:
        return resolve_artifact_path(self.root, relative_path)


def _not_verified(entry: ManifestFile, why: str) -> ServingError:
    return ServingError(codes.ARTIFACT_NOT_VERIFIED.code, f"{entry.path}: {why}", param=entry.path)


def _verify_file(root: Path, entry: ManifestFile) -> Path:
    path = resolve_artifact_path(root, entry.path)
    if not path.is_file():
        raise _not_verified(entry, "missing or not a regular file")
    actual_size = path.stat().st_size
    if actual_size != entry.size_bytes:
        # Cheap check first: a size mismatch needs no hashing.
        raise _not_verified(entry, f"size {actual_size} != manifest {entry.size_bytes}")
    sha256, hashed_size = sha256_of_file(path)
    if hashed_size != entry.size_bytes:
        raise _not_verified(entry, "file changed while it was being hashed")
    if sha256 != entry.sha256.lower():
        raise _not_verified(entry, f"sha256 {sha256} != manifest {entry.sha256}")
    return path


def _refuse_risks(flags: set[str], *, allow_pickle: bool, allow_remote_code: bool, where: str) -> None:
    if RISK_PICKLE_PRESENT in flags and not allow_pickle:
        raise ServingError(codes.PICKLE_PRESENT.code, f"pickle artifacts are refused ({where})", param=where)
    if RISK_REMOTE_CODE_REQUIRED in flags and not allow_remote_code:
        raise ServingError(
            codes.REMOTE_CODE_REQUIRED.code, f"remote-code artifacts are refused ({where})", param=where
        )


def verify_artifact_set(
    root: Path,
    manifest: ArtifactManifest,
    *,
    allow_pickle: bool = False,
    allow_remote_code: bool = False,
) -> VerifiedArtifactSet:
    """Check every manifest file's size and sha256, then refuse pickle and remote code.

    Risks are judged from the manifest's flags *and* from the verified bytes themselves, so a
    manifest that under-declares its risks gains nothing.
    """
    if not manifest.files:
        raise ServingError(codes.ARTIFACT_NOT_VERIFIED.code, "manifest lists no files")
    _refuse_risks(
        set(manifest.risk_flags),
        allow_pickle=allow_pickle,
        allow_remote_code=allow_remote_code,
        where="manifest risk flags",
    )
    real_root = root.resolve(strict=True)
    total = 0
    for entry in manifest.files:
        path = _verify_file(real_root, entry)
        flags = risk_flags_for(path, detect_format(path))
        if entry.format is ArtifactFormat.PICKLE:
            flags.add(RISK_PICKLE_PRESENT)
        _refuse_risks(flags, allow_pickle=allow_pickle, allow_remote_code=allow_remote_code, where=entry.path)
        total += entry.size_bytes
    return VerifiedArtifactSet(root=real_root, manifest=manifest, bytes_verified=total)
