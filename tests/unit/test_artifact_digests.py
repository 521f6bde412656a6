"""The artifact bucket's object digests (`SHA-256=` base64url) and the manifest's hex sha256 agree
exactly when they name the same bytes."""

from __future__ import annotations

import base64
import hashlib

from hypothesis import given
from hypothesis import strategies as st

from artifacts.objects import digests_agree, object_digest, object_name, sha256_of_digest


@given(st.binary(max_size=256))
def test_the_object_digest_of_a_files_sha256_is_what_the_object_store_computes(content: bytes) -> None:
    hex_digest = hashlib.sha256(content).hexdigest()
    store_digest = "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(content).digest()).decode()
    assert object_digest(hex_digest) == store_digest
    assert sha256_of_digest(store_digest) == hex_digest
    assert digests_agree(store_digest, hex_digest.upper())


def test_a_digest_of_other_bytes_does_not_agree() -> None:
    assert not digests_agree(
        object_digest(hashlib.sha256(b"a").hexdigest()), hashlib.sha256(b"b").hexdigest()
    )


def test_a_missing_or_malformed_digest_agrees_with_nothing() -> None:
    sha = hashlib.sha256(b"a").hexdigest()
    for digest in (
        None,
        "",
        "SHA-256=!!",
        "MD5=abc",
        "SHA-256=" + base64.urlsafe_b64encode(b"short").decode(),
    ):
        assert not digests_agree(digest, sha)


def test_objects_are_named_by_sha256_so_a_shared_file_is_stored_once() -> None:
    assert object_name("ABC123") == object_name("abc123") == "sha256/abc123"
