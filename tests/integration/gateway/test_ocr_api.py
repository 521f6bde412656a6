"""`POST /v1/ocr` through the whole system, Mistral-style, with the `mistralai` package unchanged:
a page with known text, read by the real PP-OCRv4 model (from the rapidocr-onnxruntime wheel) on a
real agent, says what the native contract says for the same image. Bad documents are refused at
the edge, recording nothing but the refusal."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import msgspec
import pytest
from mistralai.client import Mistral

from eventstore.connection import Connection
from gateway.http.answers import OcrAnswer
from modelforge.devstack.nats_server import NatsServer
from nodeagent.models.ocr import pull_ppocr
from streams.contracts import OCR
from tests.integration.gateway.conftest import one_model_stack, refused_leaving_no_trace
from tests.support.answers import conforms
from tests.support.images import text_page
from tests.support.serving import InProcessGateway

LINES = ["Invoice number 4821", "Shipping to Berlin"]
MODEL = "pp-ocrv4"
PNG, _ = text_page(LINES)  # base64
PAGE_URL = f"data:image/png;base64,{PNG}"


class OcrStack(msgspec.Struct):
    url: str
    key: str
    connection: Connection
    gateway: InProcessGateway
    native: dict[str, object]  # what the native route read on PNG


@pytest.fixture(scope="module")
async def ocr_stack(module_nats: NatsServer, scratch: Path) -> AsyncIterator[OcrStack]:
    """PP-OCRv4 promoted from a real probe on its own agent, loaded by one native call (the slow
    part, done once): its answer is what /v1/ocr must match."""
    root = scratch / "ocr-artifacts"
    pull_ppocr(root / MODEL, install_missing=False)
    async with one_model_stack(module_nats.url, root, scratch, MODEL, OCR.capability) as stack:
        native = await _post(
            stack.url, stack.key, f"/v1/capabilities/{OCR.capability}:invoke", {"image_base64": PNG}
        )
        assert native.status_code == 200, native.text
        yield OcrStack(stack.url, stack.key, stack.connection, stack.gateway, native.json()["output"])


async def _post(url: str, key: str, path: str, body: object) -> httpx.Response:
    async with httpx.AsyncClient(timeout=120) as http:
        return await http.post(f"{url}{path}", json=body, headers={"authorization": f"Bearer {key}"})


async def _ocr(stack: OcrStack, body: object) -> dict[str, object]:
    response = await _post(stack.url, stack.key, "/v1/ocr", body)
    assert response.status_code == 200, response.text
    answer: dict[str, object] = response.json()
    return answer


async def test_the_page_text_is_read_as_the_native_route_reads_it(ocr_stack: OcrStack) -> None:
    answer = await _ocr(ocr_stack, {"model": MODEL, "document": {"type": "image_url", "image_url": PAGE_URL}})
    [page] = answer["pages"]  # type: ignore[misc]
    assert page["markdown"] == "\n".join(LINES)
    assert page["markdown"] == ocr_stack.native["text"]
    assert page["ocr_lines"] == ocr_stack.native["blocks"]
    assert [line["text"] for line in page["ocr_lines"]] == LINES


async def test_the_mistral_client_gets_the_page_with_its_size_and_usage(ocr_stack: OcrStack) -> None:
    async with Mistral(api_key=ocr_stack.key, server_url=ocr_stack.url) as client:
        response = await client.ocr.process_async(
            model=MODEL, document={"type": "image_url", "image_url": PAGE_URL}
        )
    [page] = response.pages
    assert (page.index, page.markdown, page.images) == (0, "\n".join(LINES), [])
    assert page.dimensions is not None
    assert (page.dimensions.width, page.dimensions.height) == (960, 120 + 110 * len(LINES))
    assert response.model == MODEL
    assert response.usage_info.pages_processed == 1
    assert response.usage_info.doc_size_bytes == len(base64.b64decode(PNG))


@pytest.mark.parametrize(
    "document",
    [
        {"type": "image_url", "image_url": {"url": PAGE_URL, "detail": None}},
        {"type": "document_url", "document_url": PAGE_URL, "document_name": "page.png"},
    ],
    ids=["image_url object", "document_url"],
)
async def test_each_document_shape_and_mistrals_other_fields_are_accepted(
    ocr_stack: OcrStack, document: dict[str, object]
) -> None:
    body = {
        "model": None,
        "id": "my-id",
        "document": document,
        "pages": [0],
        "include_image_base64": True,
        "image_limit": None,
        "image_min_size": 10,
        "bbox_annotation_format": None,
    }
    answer = await _ocr(ocr_stack, body)
    assert answer["pages"][0]["markdown"] == ocr_stack.native["text"]  # type: ignore[index]
    assert answer["model"] == MODEL


def _oversized() -> bytes:
    return b'{"document": {"type": "image_url", "image_url": "' + b"A" * OCR.limits.max_request_bytes + b'"}}'


REFUSED = [  # (case, body, status, code, param, what the message says)
    ("an http URL", {"document": {"type": "image_url", "image_url": "http://example.com/p.png"}}, 400, "INVALID_INPUT", "document", "send the image inline as a data URL"),
    ("a PDF", {"document": {"type": "document_url", "document_url": "data:application/pdf;base64,JVBERi0xLjcK"}}, 400, "INVALID_INPUT", "document", "image/png or image/jpeg"),
    ("bad base64", {"document": {"type": "image_url", "image_url": "data:image/png;base64,%%%"}}, 400, "INVALID_INPUT", "document", "not valid base64"),
    ("no document", {"model": MODEL}, 422, "INVALID_INPUT", "document", "`document` is required"),
    ("a page past the image's one", {"document": {"type": "image_url", "image_url": PAGE_URL}, "pages": [1]}, 422, "INVALID_INPUT", "pages", "must include 0"),
    ("oversized", _oversized(), 413, "PAYLOAD_TOO_LARGE", None, "larger than"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "body", "status", "code", "param", "says"), REFUSED, ids=[r[0] for r in REFUSED]
)
async def test_bad_documents_are_refused_and_leave_no_trace(
    ocr_stack: OcrStack, case: str, body: object, status: int, code: str, param: str | None, says: str
) -> None:
    response = await refused_leaving_no_trace(
        ocr_stack.connection,
        ocr_stack.gateway,
        "/v1/ocr",
        ocr_stack.key,
        None if isinstance(body, bytes) else body,
        content=body if isinstance(body, bytes) else None,
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == (code, param)
    assert says in error["message"]


async def test_an_ocr_answer_is_as_the_openapi_document_says(ocr_stack: OcrStack) -> None:
    answer = await _ocr(ocr_stack, {"model": MODEL, "document": {"type": "image_url", "image_url": PAGE_URL}})
    conforms(answer, OcrAnswer)
