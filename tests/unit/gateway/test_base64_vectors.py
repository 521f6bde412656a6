"""`encoding_format: base64` vectors are the float32 values, little-endian, as OpenAI sends them."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from gateway.http.embeddings import _little_endian_float32

_FLOAT32 = st.floats(width=32, allow_nan=False)


@given(st.lists(_FLOAT32, max_size=64))
def test_a_vector_is_its_float32_values_little_endian(values: list[float]) -> None:
    assert _little_endian_float32(values) == struct.pack(f"<{len(values)}f", *values)
