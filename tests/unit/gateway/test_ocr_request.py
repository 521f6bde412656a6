"""`POST /v1/ocr`'s request reading, pure: the image a Mistral `document` holds, and its size read
from the PNG or JPEG header."""

from __future__ import annotations

import base64
import io
import struct

import pytest
from PIL import Image

from gateway.http.image_header import image_kind, image_size
from gateway.http.ocr import ImageURL, OcrDocument, document_url, inline_image
from streams.codes import ServingError


def _encoded(width: int, height: int, image_format: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(buffer, image_format, **options)
    return buffer.getvalue()


def _data_url(data: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64,{base64.b64encode(data).decode()}"


def _refusal(url: str) -> ServingError:
    with pytest.raises(ServingError) as raised:
        inline_image(url)
    assert (raised.value.code, raised.value.param, raised.value.http_status) == (
        "INVALID_INPUT",
        "document",
        400,
    )
    return raised.value


def test_a_png_header_gives_its_width_and_height() -> None:
    assert image_size(_encoded(321, 47, "PNG")) == (321, 47)


def test_a_jpeg_header_gives_its_size_past_the_segments_before_the_frame() -> None:
    exif = Image.Exif()
    exif[0x010E] = "a description long enough to make a segment of its own" * 20
    jpeg = _encoded(640, 9, "JPEG", exif=exif.tobytes(), progressive=True)
    assert image_kind(jpeg) == "image/jpeg"
    assert image_size(jpeg) == (640, 9)


def test_a_header_cut_short_gives_no_size() -> None:
    assert image_size(_encoded(30, 20, "PNG")[:20]) is None
    assert image_size(b"\xff\xd8\xff\xe0" + struct.pack(">H", 200) + b"\x00" * 10) is None


def test_bytes_of_neither_kind_have_none() -> None:
    assert image_kind(b"%PDF-1.7 ...") is None
    assert image_size(b"GIF89a....") is None


def test_a_data_url_gives_the_image_its_kind_size_and_byte_count() -> None:
    png = _encoded(200, 100, "PNG")
    image = inline_image(_data_url(png))
    assert (image.mime_type, image.size_bytes, image.dimensions) == ("image/png", len(png), (200, 100))
    assert base64.b64decode(image.base64) == png


def test_the_image_kind_is_read_from_its_bytes_not_the_declared_type() -> None:
    assert inline_image(_data_url(_encoded(8, 8, "JPEG"), "image/png")).mime_type == "image/jpeg"


def test_the_url_is_found_in_each_shape_mistral_sends() -> None:
    url = _data_url(b"x")
    assert document_url(OcrDocument(type="image_url", image_url=url)) == url
    assert document_url(OcrDocument(type="image_url", image_url=ImageURL(url=url))) == url
    assert document_url(OcrDocument(type="document_url", document_url=url)) == url


@pytest.mark.parametrize(
    "url", ["https://example.com/page.png", "http://169.254.169.254/latest", "file:///etc/passwd"]
)
def test_a_url_to_fetch_is_refused_naming_the_inline_data_url(url: str) -> None:
    message = _refusal(url).message
    assert "never fetches URLs" in message
    assert "data:image/png;base64," in message


def test_a_pdf_is_refused_naming_the_supported_types() -> None:
    message = _refusal(_data_url(b"%PDF-1.7", "application/pdf")).message
    assert "PDF documents are not supported" in message
    assert "image/png or image/jpeg" in message


def test_another_image_type_is_refused_naming_the_supported_types() -> None:
    message = _refusal(_data_url(b"GIF89a", "image/gif")).message
    assert "'image/gif' is not supported" in message
    assert "image/png or image/jpeg" in message


def test_a_data_url_that_is_not_base64_is_refused() -> None:
    assert "base64-encoded" in _refusal("data:image/png,%89PNG").message


def test_bad_base64_is_refused() -> None:
    assert "not valid base64" in _refusal("data:image/png;base64,@@not base64@@").message


def test_bytes_that_are_no_png_or_jpeg_are_refused() -> None:
    assert "neither a PNG nor a JPEG" in _refusal(_data_url(b"GIF89a....")).message


def test_a_document_without_a_url_is_refused() -> None:
    with pytest.raises(ServingError) as raised:
        document_url(OcrDocument(type="image_url"))
    assert raised.value.param == "document"
