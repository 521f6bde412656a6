"""Image items of `/v1/embeddings` (Jina's shape): which capability a body calls, and what an
image item may be (inline only: a data URL of PNG or JPEG, or bare base64)."""

from __future__ import annotations

import pytest

from gateway.http.image_inputs import InputObject, inline_base64, is_image_request, object_text
from streams.codes import ServingError


@pytest.mark.parametrize(
    ("body", "images"),
    [
        ({"input": [{"image": "QUJD"}, "text"]}, True),
        ({"input": {"image": "QUJD"}}, True),
        ({"input": ["text", {"image": "QUJD"}]}, False),  # a mix: the texts' parse refuses it
        ({"input": [{"text": "a cat"}]}, False),
        ({"input": "a cat"}, False),
        ({"input": []}, False),
        (["not an object"], False),
    ],
)
def test_a_body_calls_the_image_capability_when_its_first_input_is_an_image(
    body: object, images: bool
) -> None:
    assert is_image_request(body) is images


@pytest.mark.parametrize(
    ("image", "base64"),
    [
        ("data:image/png;base64,iVBORw0K", "iVBORw0K"),
        ("data:image/jpeg;base64,/9j/4AAQ", "/9j/4AAQ"),
        ("DATA:Image/PNG;charset=x;Base64,iVBORw0K", "iVBORw0K"),
        ("iVBORw0K", "iVBORw0K"),
    ],
)
def test_an_image_is_a_data_urls_payload_or_bare_base64(image: str, base64: str) -> None:
    assert inline_base64(InputObject(image=image), 0) == base64


@pytest.mark.parametrize(
    ("item", "status", "says"),
    [
        (InputObject(image="https://example.com/cat.png"), 400, "data URL (data:image/png;base64,...)"),
        (InputObject(image="HTTP://example.com/cat.png"), 400, "does not fetch images"),
        (InputObject(image="data:image/gif;base64,R0lG"), 422, "image/gif; images are image/png or"),
        (InputObject(image="data:;base64,iVBO"), 422, "of no media type"),
        (InputObject(image="data:image/png,iVBO"), 422, "not base64"),
        (InputObject(image="data:image/png;base64"), 422, "not base64"),
        (InputObject(text="a cat"), 400, "separate requests"),
        ("a cat", 400, "separate requests"),
        (InputObject(), 400, "either `text` or `image`"),
        (InputObject(image="iVBO", text="a cat"), 400, "either `text` or `image`"),
    ],
)
def test_what_is_not_an_inline_image_is_refused_saying_why(item: object, status: int, says: str) -> None:
    with pytest.raises(ServingError) as refused:
        inline_base64(item, 3)
    assert (refused.value.code, refused.value.http_status, refused.value.param) == (
        "INVALID_INPUT",
        status,
        "input",
    )
    assert says in refused.value.message


def test_an_image_among_texts_is_a_mix() -> None:
    assert object_text(InputObject(text="a cat"), 0) == "a cat"
    with pytest.raises(ServingError, match="separate requests"):
        object_text(InputObject(image="iVBO"), 1)
