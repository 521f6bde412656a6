"""Image decoding and tensor layout shared by the OCR and vision adapters.

Pillow decodes PNG and JPEG; everything after decoding is numpy. Dimensions are checked from the
header before any pixel is decoded, so a decompression bomb is refused without being expanded.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from PIL import Image, UnidentifiedImageError

from streams import codes
from streams.codes import ServingError
from streams.contracts import MAX_IMAGE_SIDE_PX

MAX_SIDE_PX = MAX_IMAGE_SIDE_PX  # the gateway checks the header against the same bound
ACCEPTED_FORMATS = frozenset({"PNG", "JPEG"})

RgbImage = NDArray[np.uint8]  # [height, width, 3]


def invalid_input(message: str) -> ServingError:
    return ServingError(codes.INVALID_INPUT.code, message)


def decode_base64(data: str, what: str = "image") -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as error:
        raise invalid_input(f"{what} is not valid base64") from error


def decode_image(data: bytes, *, max_side: int = MAX_SIDE_PX) -> RgbImage:
    """PNG or JPEG bytes → RGB uint8 [height, width, 3]; INVALID_INPUT for anything else."""
    try:
        image = Image.open(io.BytesIO(data))  # reads the header only
        if image.format not in ACCEPTED_FORMATS:
            raise invalid_input(f"image format {image.format!r} is not PNG or JPEG")
        width, height = image.size
        if not (1 <= width <= max_side and 1 <= height <= max_side):
            raise invalid_input(f"image is {width}x{height} px; each side must be 1..{max_side}")
        rgb = image.convert("RGB")  # decodes; palette, grey and alpha images become RGB
    except ServingError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as error:
        raise invalid_input("image cannot be decoded as PNG or JPEG") from error
    return np.asarray(rgb, dtype=np.uint8)


def decode_base64_image(data: str, *, max_side: int = MAX_SIDE_PX) -> RgbImage:
    return decode_image(decode_base64(data), max_side=max_side)


def resize(image: RgbImage, width: int, height: int) -> RgbImage:
    """Bilinear resize to exactly width x height (Pillow does the filtering)."""
    resized = Image.fromarray(image).resize((max(1, width), max(1, height)), Image.Resampling.BILINEAR)
    return np.asarray(resized, dtype=np.uint8)


def resize_shortest_side(image: RgbImage, side: int) -> RgbImage:
    height, width = image.shape[:2]
    scale = side / min(height, width)
    return resize(image, round(width * scale), round(height * scale))


def center_crop(image: RgbImage, size: int) -> RgbImage:
    height, width = image.shape[:2]
    top = max(0, (height - size) // 2)
    left = max(0, (width - size) // 2)
    return image[top : top + size, left : left + size]


def to_chw_float(
    image: RgbImage, mean: Sequence[float], std: Sequence[float], *, bgr: bool = False
) -> NDArray[np.float32]:
    """uint8 HWC → float32 CHW scaled to 0..1, then (x - mean) / std per channel."""
    pixels = image[:, :, ::-1] if bgr else image
    scaled = pixels.astype(np.float32) / 255.0
    normalised = (scaled - np.asarray(mean, dtype=np.float32)) / np.asarray(std, dtype=np.float32)
    return np.ascontiguousarray(normalised.transpose(2, 0, 1), dtype=np.float32)
