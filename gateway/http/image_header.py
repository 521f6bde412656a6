"""A page image's kind and size read from its first bytes, without decoding a pixel (the gateway
carries no image library: the agent decodes). PNG keeps the size in its IHDR chunk, right after the
signature; JPEG in its start-of-frame segment, found by walking the segments before it."""

from __future__ import annotations

import struct
from typing import Literal

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_START = b"\xff\xd8\xff"
# Start-of-frame markers (baseline, progressive, lossless, arithmetic …): all but DHT (C4), JPG
# (C8) and DAC (CC), which share the range.
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers that stand alone, with no length after them: TEM and the restart markers.
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})

ImageKind = Literal["image/png", "image/jpeg"]


def image_kind(data: bytes) -> ImageKind | None:
    """The image's MIME type from its signature; None when it is neither PNG nor JPEG."""
    if data.startswith(PNG_SIGNATURE):
        return "image/png"
    if data.startswith(JPEG_START):
        return "image/jpeg"
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the header; None when the header does not say (truncated, or odd)."""
    kind = image_kind(data)
    if kind == "image/png":
        return _png_size(data)
    if kind == "image/jpeg":
        return _jpeg_size(data)
    return None


def _png_size(data: bytes) -> tuple[int, int] | None:
    # signature (8) | chunk length (4) | "IHDR" | width (4) | height (4)
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return (width, height) if width and height else None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    at = 2  # past SOI
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte before a marker
            at += 1
            continue
        if marker in _JPEG_STANDALONE:
            at += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, or scan data: no frame header before them
            return None
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in _JPEG_FRAMES:
            # length (2) | precision (1) | height (2) | width (2)
            if at + 9 > len(data):
                return None
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return (width, height) if width and height else None
        if length < 2:
            return None
        at += 2 + length
    return None
