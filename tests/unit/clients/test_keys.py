"""API keys: `mf_` + 256 random bits, stored as sha256, never shown by repr."""

from __future__ import annotations

import base64
import hashlib
import math
from collections import Counter

from gateway.clients import keys


def test_a_new_key_is_mf_and_43_urlsafe_characters_carrying_256_random_bits() -> None:
    key = keys.new_key()
    assert key.secret.startswith("mf_")
    body = key.secret[3:]
    assert len(body) == 43
    assert len(base64.urlsafe_b64decode(body + "=")) == 32
    assert keys.well_formed(key.secret)


def test_a_key_is_stored_as_its_sha256_hex_and_a_short_prefix() -> None:
    key = keys.new_key()
    assert key.sha256 == hashlib.sha256(key.secret.encode()).hexdigest()
    assert key.prefix == key.secret[: keys.DISPLAY_PREFIX_CHARS]
    assert key.secret not in repr(key)
    assert key.sha256 not in repr(key)


def test_keys_do_not_repeat_and_their_characters_are_spread_evenly() -> None:
    secrets = [keys.new_key().secret[3:] for _ in range(2000)]
    assert len(set(secrets)) == len(secrets)
    # 2000 keys x 42 full characters: each of the 64 symbols should appear ~1312 times.
    counts = Counter(ch for s in secrets for ch in s[:42])
    assert len(counts) == 64
    expected = 2000 * 42 / 64
    chi_square = sum((n - expected) ** 2 / expected for n in counts.values())
    assert chi_square < 140  # 63 degrees of freedom; p < 1e-7 above this
    assert math.log2(64) * 42 + 4 >= 256  # 42 six-bit characters + 4 bits of the last one


def test_bearer_header_parsing() -> None:
    assert keys.bearer_secret("Bearer mf_abc") == "mf_abc"
    assert keys.bearer_secret("bearer   mf_abc  ") == "mf_abc"
    assert keys.bearer_secret(None) is None
    assert keys.bearer_secret("") is None
    assert keys.bearer_secret("Basic xyz") is None
    assert keys.bearer_secret("Bearer ") is None


def test_malformed_keys_are_recognised_without_a_lookup() -> None:
    good = keys.new_key().secret
    assert not keys.well_formed(good[:-1])
    assert not keys.well_formed("sk_" + good[3:])
    assert not keys.well_formed(good + "x")
    assert not keys.well_formed(good[:-1] + "!")


def test_hash_comparison_is_exact() -> None:
    digest = keys.key_sha256("mf_x")
    assert keys.same_hash(digest, digest)
    assert not keys.same_hash(digest, keys.key_sha256("mf_y"))
