"""How an artifact file is named and digested in the artifact bucket (a JetStream Object Store).

Objects are named by the file's sha256, so a file shared by several sets is stored once and a name
always means the same bytes. The Object Store states each object's digest as `SHA-256=` and the
base64url of the raw digest; the manifest states it as hex. They must agree, on put and on get.
"""

from __future__ import annotations

import base64
import binascii

DIGEST_PREFIX = "SHA-256="
_HEX_SHA256_LENGTH = 64


def object_name(sha256_hex: str) -> str:
    return f"sha256/{sha256_hex.lower()}"


def object_digest(sha256_hex: str) -> str:
    """The Object Store's spelling of a manifest's hex sha256."""
    return DIGEST_PREFIX + base64.urlsafe_b64encode(bytes.fromhex(sha256_hex)).decode()


def sha256_of_digest(digest: str) -> str | None:
    """The hex sha256 an Object Store digest states; None for a digest of another kind or form."""
    if not digest.upper().startswith(DIGEST_PREFIX):
        return None
    try:
        raw = base64.urlsafe_b64decode(digest[len(DIGEST_PREFIX) :])
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) * 2 == _HEX_SHA256_LENGTH else None


def digests_agree(object_digest_text: str | None, sha256_hex: str) -> bool:
    return sha256_of_digest(object_digest_text or "") == sha256_hex.lower()
