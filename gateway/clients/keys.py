"""API keys: `mf_` + 256 random bits, shown once, stored as sha256, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

KEY_PREFIX = "mf_"
KEY_RANDOM_BYTES = 32  # 256 bits from the OS CSPRNG
# What a list shows to recognise a key: "mf_" and 7 characters (42 bits); the other 36 characters
# (216 bits) are never shown or stored anywhere.
DISPLAY_PREFIX_CHARS = 10
_KEY_SHAPE = re.compile(r"^mf_[A-Za-z0-9_\-]{43}$")


@dataclass(frozen=True, slots=True)
class PlainKey:
    """A freshly generated key. `repr` never shows the secret."""

    secret: str
    sha256: str
    prefix: str

    def __repr__(self) -> str:
        return f"PlainKey(prefix={self.prefix!r}, sha256=…)"


def new_key() -> PlainKey:
    secret = KEY_PREFIX + secrets.token_urlsafe(KEY_RANDOM_BYTES)
    return PlainKey(secret, key_sha256(secret), secret[:DISPLAY_PREFIX_CHARS])


def key_sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def well_formed(secret: str) -> bool:
    return bool(_KEY_SHAPE.match(secret))


def same_hash(stored_sha256: str, presented_sha256: str) -> bool:
    return hmac.compare_digest(stored_sha256.encode(), presented_sha256.encode())


def bearer_secret(authorization: str | None) -> str | None:
    """The key in an `Authorization: Bearer <key>` header, or None when there is none."""
    if not authorization:
        return None
    scheme, _, secret = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    secret = secret.strip()
    return secret or None
