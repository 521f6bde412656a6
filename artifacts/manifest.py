"""Build an artifact manifest from a model directory: what each file is, its hash, its risks."""

from __future__ import annotations

import json
import os
import struct
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from artifacts.hashing import sha256_of_file
from artifacts.paths import check_relative_path, relative_posix_path, resolve_artifact_path

RISK_PICKLE_PRESENT = "pickle_present"
RISK_REMOTE_CODE_REQUIRED = "remote_code_required"

# Extensions under which PyTorch and friends save pickles; the content decides, see _is_pickle.
_PICKLE_EXTENSIONS = frozenset({".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt"})
_PYTHON_EXTENSIONS = frozenset({".py", ".pyc"})
_JSON_PARSE_LIMIT_BYTES = 64 * 1024 * 1024


class ArtifactFormat(StrEnum):
    ONNX = "onnx"
    TOKENIZER_JSON = "tokenizer-json"
    JSON_CONFIG = "json-config"
    SAFETENSORS = "safetensors"
    PICKLE = "pickle"
    OTHER = "other"


@dataclass(frozen=True)
class ManifestFile:
    path: str  # relative, POSIX separators
    sha256: str
    size_bytes: int
    format: ArtifactFormat


@dataclass(frozen=True)
class ArtifactManifest:
    files: tuple[ManifestFile, ...]
    risk_flags: tuple[str, ...]  # sorted, unique

    def file(self, path: str) -> ManifestFile:
        for entry in self.files:
            if entry.path == path:
                return entry
        raise KeyError(path)

    def files_of_format(self, artifact_format: ArtifactFormat) -> tuple[ManifestFile, ...]:
        return tuple(entry for entry in self.files if entry.format is artifact_format)

    @property
    def total_bytes(self) -> int:
        return sum(entry.size_bytes for entry in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": [
                {"path": f.path, "sha256": f.sha256, "size_bytes": f.size_bytes, "format": f.format.value}
                for f in self.files
            ],
            "risk_flags": list(self.risk_flags),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ArtifactManifest:
        files = tuple(
            ManifestFile(
                path=str(item["path"]),
                sha256=str(item["sha256"]).lower(),
                size_bytes=int(item["size_bytes"]),
                format=ArtifactFormat(item["format"]),
            )
            for item in data["files"]
        )
        for entry in files:
            check_relative_path(entry.path)
        return cls(files=files, risk_flags=tuple(sorted(set(data.get("risk_flags", ())))))


def _read_head(path: Path, size: int = 16) -> bytes:
    with path.open("rb") as stream:
        return stream.read(size)


def _is_pickle(path: Path, head: bytes) -> bool:
    # Protocol 2+ pickles start with PROTO (0x80) and the protocol number.
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return True
    # torch.save's zip format wraps a pickle (`data.pkl`) in a zip archive.
    if head.startswith(b"PK\x03\x04") and zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith(".pkl") for name in archive.namelist())
    # Protocol 0/1 pickles have no magic; under a pickle extension assume the worst.
    return path.suffix.lower() in {".pkl", ".pickle"}


def _is_safetensors(head: bytes) -> bool:
    # An 8-byte little-endian header length followed by the JSON header.
    return len(head) >= 9 and head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] > 0


def _load_json_object(path: Path) -> dict[str, Any] | None:
    if path.stat().st_size > _JSON_PARSE_LIMIT_BYTES:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _is_tokenizer_json(data: dict[str, Any]) -> bool:
    return "model" in data and ("added_tokens" in data or "pre_tokenizer" in data)


def detect_format(path: Path) -> ArtifactFormat:
    """Classify one file by content first, extension second."""
    suffix = path.suffix.lower()
    head = _read_head(path)
    if suffix in _PICKLE_EXTENSIONS and _is_pickle(path, head):
        return ArtifactFormat.PICKLE
    if suffix == ".safetensors" or _is_safetensors(head):
        return ArtifactFormat.SAFETENSORS if _is_safetensors(head) else ArtifactFormat.OTHER
    if suffix == ".onnx":
        # A ModelProto starts with field 1 (ir_version, varint): tag byte 0x08.
        return ArtifactFormat.ONNX if head[:1] == b"\x08" else ArtifactFormat.OTHER
    if suffix == ".json":
        data = _load_json_object(path)
        if data is None:
            return ArtifactFormat.OTHER
        return ArtifactFormat.TOKENIZER_JSON if _is_tokenizer_json(data) else ArtifactFormat.JSON_CONFIG
    return ArtifactFormat.OTHER


def _requires_remote_code(path: Path, artifact_format: ArtifactFormat) -> bool:
    # Python shipped next to weights exists only to be executed by a loader.
    if path.suffix.lower() in _PYTHON_EXTENSIONS:
        return True
    if artifact_format is not ArtifactFormat.JSON_CONFIG:
        return False
    data = _load_json_object(path) or {}
    return "auto_map" in data or bool(data.get("trust_remote_code"))


def risk_flags_for(path: Path, artifact_format: ArtifactFormat) -> set[str]:
    flags: set[str] = set()
    if artifact_format is ArtifactFormat.PICKLE:
        flags.add(RISK_PICKLE_PRESENT)
    if _requires_remote_code(path, artifact_format):
        flags.add(RISK_REMOTE_CODE_REQUIRED)
    return flags


def _walk_relative_files(model_dir: Path) -> Iterable[str]:
    for dirpath, dirnames, filenames in os.walk(model_dir, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            yield relative_posix_path(model_dir, Path(dirpath) / name)
        for name in dirnames:
            linked = Path(dirpath) / name
            if linked.is_symlink():
                # Not descended into (its target, being confined, is walked anyway, and a link
                # loop would never end), but one that escapes the root is refused outright.
                resolve_artifact_path(model_dir, relative_posix_path(model_dir, linked))


def build_manifest(model_dir: Path) -> ArtifactManifest:
    """Hash and classify every file under `model_dir` (symlinks must stay inside it)."""
    root = model_dir.resolve(strict=True)
    entries: list[ManifestFile] = []
    flags: set[str] = set()
    for relative in sorted(_walk_relative_files(root)):
        real_path = resolve_artifact_path(root, relative)
        if not real_path.is_file():
            continue
        artifact_format = detect_format(real_path)
        sha256, size = sha256_of_file(real_path)
        entries.append(ManifestFile(relative, sha256, size, artifact_format))
        flags |= risk_flags_for(real_path, artifact_format)
    return ArtifactManifest(files=tuple(entries), risk_flags=tuple(sorted(flags)))
