"""Artifact sets: manifests, path confinement, verification."""

from artifacts.manifest import ArtifactFormat, ArtifactManifest, ManifestFile, build_manifest
from artifacts.paths import resolve_artifact_path
from artifacts.verify import VerifiedArtifactSet, verify_artifact_set

__all__ = [
    "ArtifactFormat",
    "ArtifactManifest",
    "ManifestFile",
    "VerifiedArtifactSet",
    "build_manifest",
    "resolve_artifact_path",
    "verify_artifact_set",
]
