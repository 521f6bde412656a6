"""Image inputs of `POST /v1/embeddings`, in Jina's shape: `input` items `{"image": ...}`, each a
`data:image/png;base64,...` / `data:image/jpeg;base64,...` URL or bare base64, served by
`vision.embedding@1`; `{"text": ...}` items are texts (`rag.embedding@1`).

Texts and images are separate embedding spaces here, so one request holds one or the other. The
gateway never fetches an image from a URL (a fetch the client controls reaches wherever the gateway
can: SSRF); images come inline, and are checked as the native route checks them.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from gateway.http.checks import check_base64, checked_dimensions, checked_image
from gateway.http.edge import Edge
from gateway.serving.requests import RequestShape
from streams.codes import ServingError
from streams.contracts import VISION_EMBEDDING, VisionEmbeddingInput

IMAGE_TYPES = ("image/png", "image/jpeg")


class InputObject(msgspec.Struct, frozen=True):
    """One item of Jina's `input`: a text or an image (other fields are ignored)."""

    text: str | None = None
    image: str | None = None


def is_image_request(raw: object) -> bool:
    """Whether the body's (first) input is an image: a mix is refused by either side's parse, so
    the texts' side never looks past what it reads anyway."""
    items = raw.get("input") if isinstance(raw, dict) else None
    first = items[0] if isinstance(items, list) and items else items
    return isinstance(first, dict) and "image" in first


def mixed_inputs() -> ServingError:
    return ServingError(
        "INVALID_INPUT",
        "`input` mixes images and texts; send them in separate requests (texts and images are "
        "embedded by separate models, into separate embedding spaces)",
        param="input",
        http_status=400,
    )


def image_payload(
    edge: Edge, items: Sequence[object], model: str, dimensions: int | None
) -> tuple[bytes, RequestShape]:
    """The `vision.embedding@1` input for `items`, all images, checked at the edge."""
    images = [inline_base64(item, index) for index, item in enumerate(items)]
    shape = check_base64(images, VISION_EMBEDDING, "input", listed=True, each=_an_image)
    kept = checked_dimensions(edge, VISION_EMBEDDING.capability, model, dimensions)
    return msgspec.json.encode(VisionEmbeddingInput(images_base64=images, dimensions=kept)), shape


def _an_image(decoded: bytes, where: str) -> None:
    checked_image(decoded, where, "input", 422)


def object_text(item: InputObject, index: int) -> str:
    """A `{"text": ...}` item's text, among texts."""
    if _image_of(item, index) is not None:
        raise mixed_inputs()
    assert item.text is not None  # (`_image_of` refuses an object with neither)
    return item.text


def _image_of(item: InputObject, index: int) -> str | None:
    """The object's image, None for a text; one with both or neither is refused."""
    if (item.image is None) == (item.text is None):
        raise _invalid(f"`input[{index}]` must have either `text` or `image`", 400)
    return item.image


def inline_base64(item: object, index: int) -> str:
    """An image item's base64: a data URL's payload, or the item as sent."""
    image = _image_of(item, index) if isinstance(item, InputObject) else None
    if image is None:
        raise mixed_inputs()
    scheme = image[:8].lower()
    if scheme.startswith(("http://", "https://")):
        raise _invalid(
            f"`input[{index}]` is a URL; this server does not fetch images: send it inline, as a "
            "data URL (data:image/png;base64,...) or as bare base64",
            400,
        )
    if not scheme.startswith("data:"):
        return image
    header, comma, payload = image[5:].partition(",")
    media_type, *parameters = (part.strip().lower() for part in header.split(";"))
    if not comma or "base64" not in parameters:
        raise _invalid(f"`input[{index}]` is a data URL that is not base64 (data:<type>;base64,<data>)")
    if media_type not in IMAGE_TYPES:
        shown = media_type or "of no media type"
        raise _invalid(f"`input[{index}]` is {shown}; images are {' or '.join(IMAGE_TYPES)}")
    return payload


def _invalid(message: str, status: int = 422) -> ServingError:
    return ServingError("INVALID_INPUT", message, param="input", http_status=status)
