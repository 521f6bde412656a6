"""Named operator keys: each operator authenticates as themself, so the events' actor and a
production approval's `approved_by` are who held the key, not a name the request declares.

The keys live in a file (`MODELFORGE_OPERATORS_FILE`), one `name sha256-of-key` line each; the
keys themselves are shown once, when `modelforge operators add` makes them, and never stored. The
gateway reads the file again whenever it changes (one `stat` per admin request, never on the
client path), so adding or removing an operator takes effect on every gateway reading the file
without a restart. The shared `MODELFORGE_OPERATOR_TOKEN` still works beside it, with the
self-declared `x-mf-operator` name; leave it unset to admit named operators only.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

OPERATORS_FILE_ENV = "MODELFORGE_OPERATORS_FILE"
KEY_PREFIX = "mfo_"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_DIGEST = re.compile(r"[0-9a-f]{64}")


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def parse_operators(text: str) -> dict[str, str]:
    """name -> key digest, from the file's lines (blank lines and `#` comments skipped); a line
    that is not `name digest`, or a name given twice, is a ValueError naming its line."""
    operators: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or not _NAME.fullmatch(parts[0]) or not _DIGEST.fullmatch(parts[1]):
            raise ValueError(f"line {number}: expected `name sha256-hex`")
        if parts[0] in operators:
            raise ValueError(f"line {number}: operator {parts[0]!r} is listed twice")
        operators[parts[0]] = parts[1]
    return operators


def identify(operators: dict[str, str], key: str) -> str | None:
    """The operator holding `key`, or None. Every digest is compared in constant time."""
    digest = key_digest(key).encode()
    found = None
    for name, known in operators.items():
        if hmac.compare_digest(digest, known.encode()):
            found = name
    return found


@dataclass
class OperatorFile:
    """The operators file as it stands: read again when its modification time or size changes. A
    file that cannot be read or parsed admits nobody by name (and says why in `problem`)."""

    path: Path | None
    operators: dict[str, str] = field(default_factory=dict)
    problem: str = ""
    _seen: tuple[int, int] | None = None

    def identify(self, key: str) -> str | None:
        self._refresh()
        return identify(self.operators, key)

    def _refresh(self) -> None:
        if self.path is None:
            return
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self.operators, self._seen, self.problem = {}, None, ""
            return
        seen = (stat.st_mtime_ns, stat.st_size)
        if seen == self._seen:
            return
        try:
            self.operators, self.problem = parse_operators(self.path.read_text()), ""
        except (OSError, UnicodeDecodeError, ValueError) as error:
            self.operators, self.problem = {}, f"{self.path}: {error}"
        self._seen = seen


def operator_file_from_env() -> OperatorFile:
    path = os.environ.get(OPERATORS_FILE_ENV, "")
    return OperatorFile(Path(path) if path else None)


def add_operator(path: Path, name: str) -> str:
    """A new key for `name`, appended to the file (created private); the key is returned, to be
    shown once. A name already listed is a ValueError: remove it first to replace its key."""
    if not _NAME.fullmatch(name):
        raise ValueError(
            "an operator name is 1 to 64 letters, digits or ._@- (starting with a letter or digit)"
        )
    existing = parse_operators(path.read_text()) if path.exists() else {}
    if name in existing:
        raise ValueError(f"operator {name!r} exists; remove it first to give it a new key")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(descriptor, "a") as file:
        file.write(f"{name} {key_digest(key)}\n")
    return key


def remove_operator(path: Path, name: str) -> None:
    """Drop `name`'s line; its key stops working at each gateway's next admin request."""
    operators = parse_operators(path.read_text()) if path.exists() else {}
    if name not in operators:
        raise ValueError(f"no operator {name!r} in {path}")
    del operators[name]
    temporary = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.writelines(f"{n} {d}\n" for n, d in operators.items())
    temporary.replace(path)
