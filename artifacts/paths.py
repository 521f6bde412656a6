"""Confine manifest paths to their artifact root.

A manifest comes from outside the node, so each of its paths is untrusted: absolute paths, `..`
and symlinks that lead out of the root would let a manifest make the agent read (and hash, and
load) any file on the machine.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from streams import codes
from streams.codes import ServingError

# Where a node keeps its artifact sets (the agent's root; the importer's default).
ARTIFACT_ROOT_ENV = "MODELFORGE_ARTIFACT_ROOT"


def _invalid(relative_path: str, why: str) -> ServingError:
    return ServingError(codes.ARTIFACT_PATH_INVALID.code, f"{relative_path!r}: {why}", param=relative_path)


def check_relative_path(relative_path: str) -> PurePosixPath:
    """Validate the form of a manifest path (POSIX, relative, no `..`) without touching disk."""
    if not relative_path or "\x00" in relative_path:
        raise _invalid(relative_path, "empty or contains NUL")
    if "\\" in relative_path:
        # Backslashes are separators on Windows and a way to smuggle `..\` past POSIX checks.
        raise _invalid(relative_path, "backslashes are not allowed; use '/'")
    candidate = PurePosixPath(relative_path)
    if candidate.is_absolute() or (len(relative_path) > 1 and relative_path[1] == ":"):
        raise _invalid(relative_path, "absolute paths are not allowed")
    if any(part in ("..", "") for part in candidate.parts):
        raise _invalid(relative_path, "'..' is not allowed")
    if candidate.parts in ((), (".",)):
        raise _invalid(relative_path, "names no file")
    return candidate


def resolve_artifact_path(root: Path, relative_path: str) -> Path:
    """Return the real path of `relative_path` under `root`, refusing anything that escapes it."""
    candidate = check_relative_path(relative_path)
    real_root = root.resolve(strict=True)
    # resolve() follows every symlink on the way, so an escaping link shows up as a path
    # outside the real root whatever component it sits at.
    real_path = (real_root / candidate).resolve(strict=False)
    if not real_path.is_relative_to(real_root) or real_path == real_root:
        raise _invalid(relative_path, "resolves outside the artifact root")
    return real_path


def relative_posix_path(root: Path, path: Path) -> str:
    """The manifest form of `path` (a file under `root`): POSIX separators, relative to root."""
    return path.relative_to(root).as_posix()
