"""`POST /v1/ocr`, Mistral-style (what the `mistralai` package's `ocr.process` sends): one page
image, inline as a `data:` URL, in `document` as `{"type": "image_url", "image_url": ...}` (a
string or `{"url": ...}`) or `{"type": "document_url", "document_url": ...}`. The gateway never
fetches a URL (a server-side fetch of a client's URL is SSRF), so an http(s) URL is refused with
the fix: send the image inline. Other Mistral fields (`include_image_base64`, `image_limit`, `id`,
annotation formats, …) are accepted and ignored (no images are extracted), and null stands for
"not given".

The answer is Mistral's shape, one page of markdown (the recognised lines, one per line), plus
`ocr_lines` on the page: each line's text, box and confidence, as the contract gives them."""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.body import JsonValue, convert
from gateway.http.checks import checked_image, decoded_base64
from gateway.http.edge import Edge
from gateway.http.flow import Prepared, Render, Route, run_capability
from gateway.http.image_header import ImageKind
from gateway.serving.requests import RequestShape, Served
from streams.codes import ServingError
from streams.contracts import OCR, CapabilityContract, OcrInput, OcrOutput

_output = msgspec.json.Decoder(OcrOutput)
SUPPORTED = ("image/png", "image/jpeg")
# A pixel image carries no page size: one pixel per point (72 dpi), as PDF maps an image unscaled.
PIXEL_IMAGE_DPI = 72


class ImageURL(msgspec.Struct, frozen=True):
    url: str
    detail: str | None = None


class OcrDocument(msgspec.Struct, frozen=True):
    type: str | None = None
    image_url: str | ImageURL | None = None
    document_url: str | None = None
    document_name: str | None = None


class MistralOcrRequest(msgspec.Struct, frozen=True):
    document: OcrDocument | None = None
    model: str | None = None
    pages: list[int] | None = None  # an image is one page: index 0


class InlineImage(msgspec.Struct, frozen=True):
    """A document's image, decoded from its data URL and checked against the contract."""

    base64: str
    mime_type: ImageKind  # read from the image's signature, whatever the URL declares
    size_bytes: int
    dimensions: tuple[int, int] | None  # (width, height), where the header says


def _refused(message: str) -> ServingError:
    return ServingError("INVALID_INPUT", message, param="document", http_status=400)


def document_url(document: OcrDocument | None) -> str:
    """The URL a Mistral `document` names."""
    if document is None:
        raise ServingError("INVALID_INPUT", "`document` is required", param="document")
    if document.type == "file":
        raise _refused(
            "`document` of type file names a file uploaded to Mistral; send the image inline as "
            "a data URL (data:image/png;base64,...) in image_url"
        )
    image_url = document.image_url
    url = image_url.url if isinstance(image_url, ImageURL) else image_url
    url = url if url is not None else document.document_url
    if url is None:
        raise ServingError(
            "INVALID_INPUT",
            "`document` needs an image_url (or document_url) holding a data: URL",
            param="document",
        )
    return url


def inline_image(url: str) -> InlineImage:
    """The image a `data:` URL holds; any other URL, MIME type or encoding is refused, saying what
    is supported."""
    scheme, _, rest = url.partition(":")
    if scheme.lower() != "data" or not rest:
        raise _refused(
            f"this gateway never fetches URLs ({scheme.lower() or 'a'} URL given); send the image "
            "inline as a data URL: data:image/png;base64,... or data:image/jpeg;base64,..."
        )
    header, comma, data = rest.partition(",")
    media, *parameters = [part.strip().lower() for part in header.split(";")]
    supported = "send one page as a data URL of image/png or image/jpeg"
    if media == "application/pdf":
        raise _refused(f"PDF documents are not supported; {supported}")
    if media not in SUPPORTED:
        raise _refused(f"the data URL's type {media or '(none)'!r} is not supported; {supported}")
    if not comma or "base64" not in parameters:
        raise _refused("the data URL must be base64-encoded: data:image/png;base64,...")
    decoded = decoded_base64(data, "the data URL's image", "document", http_status=400)
    image = checked_image(decoded, "the data URL", "document", 400)
    return InlineImage(data, image.kind, len(decoded), image.size)


def parse_ocr(raw: JsonValue, contract: CapabilityContract, route: Route) -> Prepared:
    # (`route` unused: no check here depends on the deployment the call is served by)
    call = convert(raw, MistralOcrRequest, "OCR request")
    image = inline_image(document_url(call.document))
    if call.pages is not None and 0 not in call.pages:
        raise ServingError(
            "INVALID_INPUT", "an image is one page: `pages` must include 0 (or be left out)", param="pages"
        )
    payload = msgspec.json.encode(OcrInput(image_base64=image.base64, mime_type=image.mime_type))
    shape = RequestShape(items=1, chars=len(image.base64))
    return Prepared(payload, shape, _render(call, image), call.model or "")


def _render(call: MistralOcrRequest, image: InlineImage) -> Render:
    dimensions = (
        {"dpi": PIXEL_IMAGE_DPI, "height": image.dimensions[1], "width": image.dimensions[0]}
        if image.dimensions
        else None
    )

    def render(result: bytes, served: Served[bytes], request_id: str) -> dict[str, object]:
        output = _output.decode(result)
        page = {
            "index": 0,
            "markdown": output.text,
            "images": [],
            "dimensions": dimensions,
            "ocr_lines": [
                {"text": b.text, "bbox": list(b.bbox), "confidence": b.confidence} for b in output.blocks
            ],
        }
        return {
            "pages": [page],
            "model": served.model_name,
            "document_annotation": None,
            "usage_info": {"pages_processed": 1, "doc_size_bytes": image.size_bytes},
        }

    return render


async def ocr(request: Request) -> Response:
    edge: Edge = request.app.state.edge
    return await run_capability(edge, request, OCR, parse_ocr)
