"""The client APIs at their edges, as real callers send them: the fields and nulls OpenAI's API takes
(accepted or ignored), bodies that are not what they should be, the native contract checked at the
edge like the dialects, unknown capabilities, and `/v1/models` as one key sees it. A refusal is in
the one error shape and leaves no trace but the request's own `RequestRejected`."""

from __future__ import annotations

import base64
import logging
import struct

import httpx
import numpy as np
import openai
import pytest

from gateway.clients.service import IssuedKey
from streams import subjects
from streams.envelope import new_id
from streams.events.requests import RequestCompleted
from tests.integration.gateway.conftest import Stack, another_deployment, key_issued, refused_leaving_no_trace
from tests.support.serving import events_until

EMBEDDINGS = "/v1/embeddings"
NATIVE = "/v1/capabilities/rag.embedding@1:invoke"
MODALITIES = ["document.ocr@1", "vision.embedding@1", "speech.transcription@1", "rag.reranking@1"]


def _auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def _other_key(stack: Stack, scopes: list[str]) -> IssuedKey:
    """A key for `scopes`, none of which has a deployment on this stack."""
    return await key_issued(stack, f"edge-{new_id()[:6]}", scopes)


async def _vector(stack: Stack, text: str) -> list[float]:
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{stack.gateway.url}{EMBEDDINGS}", json={"input": text}, headers=_auth(stack.key.key)
        )
    assert response.status_code == 200, response.text
    vector: list[float] = response.json()["data"][0]["embedding"]
    return vector


ACCEPTED = [
    ("openai's user field", {"input": "hello", "model": "all-MiniLM-L6-v2", "user": "end-user-1"}),
    (
        "null for every optional field",
        {"input": "hello", "model": None, "encoding_format": None, "dimensions": None, "user": None},
    ),
    ("dimensions at the vectors' full size", {"input": "hello", "dimensions": 384}),
    ("fields of other vendors", {"input": "hello", "input_type": "query", "truncate": "END"}),
    ("jina's text objects", {"input": [{"text": "hello"}]}),
]


@pytest.mark.parametrize("body", [a[1] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
async def test_what_openai_callers_send_besides_the_input_is_accepted(
    stack: Stack, body: dict[str, object]
) -> None:
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{stack.gateway.url}{EMBEDDINGS}", json=body, headers=_auth(stack.key.key)
        )
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(
        response.json()["data"][0]["embedding"], await _vector(stack, "hello"), atol=1e-6
    )


async def test_the_openai_client_may_ask_for_the_full_size_and_name_its_user(stack: Stack) -> None:
    client = openai.AsyncOpenAI(base_url=f"{stack.gateway.url}/v1", api_key=stack.key.key, max_retries=0)
    response = await client.embeddings.create(
        model="all-MiniLM-L6-v2", input="hello", dimensions=384, user="end-user-1"
    )
    np.testing.assert_allclose(response.data[0].embedding, await _vector(stack, "hello"), atol=1e-5)


@pytest.mark.parametrize(
    ("case", "content", "headers"),
    [
        ("a duplicate key: the last one counts", b'{"input": 42, "input": "hello"}', {}),
        ("json sent as text/plain", b'{"input": "hello"}', {"content-type": "text/plain"}),
        ("json with no content type", b'{"input": "hello"}', {"content-type": ""}),
    ],
)
async def test_a_json_body_is_read_as_json_whatever_it_is_labelled(
    stack: Stack, case: str, content: bytes, headers: dict[str, str]
) -> None:
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{stack.gateway.url}{EMBEDDINGS}", content=content, headers={**_auth(stack.key.key), **headers}
        )
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(
        response.json()["data"][0]["embedding"], await _vector(stack, "hello"), atol=1e-6
    )


REFUSED = [  # (case, path, raw body, status, code, param)
    ("nested too deep", EMBEDDINGS, b'{"input": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, "INVALID_INPUT", None),
    ("not UTF-8", EMBEDDINGS, b'{"input": "caf\xe9"}', 400, "INVALID_INPUT", None),
    ("UTF-16", EMBEDDINGS, '{"input": "hello"}'.encode("utf-16"), 400, "INVALID_INPUT", None),
    ("a JSON array", EMBEDDINGS, b'["hello"]', 422, "INVALID_INPUT", None),
    ("no input", EMBEDDINGS, b'{"model": "all-MiniLM-L6-v2"}', 422, "INVALID_INPUT", None),
    ("a number for the model", EMBEDDINGS, b'{"input": "x", "model": 7}', 422, "INVALID_INPUT", "model"),
    ("a float among token ids", EMBEDDINGS, b'{"input": [1.5]}', 422, "INVALID_INPUT", "input"),
    ("a number among texts", EMBEDDINGS, b'{"input": ["x", 1]}', 400, "INVALID_INPUT", "input"),
    ("dimensions as a string", EMBEDDINGS, b'{"input": "x", "dimensions": "128"}', 422, "INVALID_INPUT", "dimensions"),
    ("dimensions of zero", EMBEDDINGS, b'{"input": "x", "dimensions": 0}', 400, "INVALID_INPUT", "dimensions"),
    ("a blank item in a list", EMBEDDINGS, b'{"input": ["x", ""]}', 422, "INVALID_INPUT", "input"),
    ("native: dimensions not declared", NATIVE, b'{"texts": ["x"], "dimensions": 128}', 400, "INVALID_INPUT", "dimensions"),
    ("native: dimensions of zero", NATIVE, b'{"texts": ["x"], "dimensions": 0}', 400, "INVALID_INPUT", "dimensions"),
    ("native: a field it does not have", NATIVE, b'{"texts": ["x"], "input": "x"}', 422, "INVALID_INPUT", None),
    ("native: no texts", NATIVE, b'{"texts": []}', 422, "INVALID_INPUT", "texts"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "path", "content", "status", "code", "param"), REFUSED, ids=[r[0] for r in REFUSED]
)
async def test_bad_input_is_refused_with_its_code_and_leaves_no_trace(
    stack: Stack, case: str, path: str, content: bytes, status: int, code: str, param: str | None
) -> None:
    response = await refused_leaving_no_trace(
        stack.connection, stack.gateway, path, stack.key.key, content=content
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == (code, param)


async def test_a_number_among_texts_is_refused_as_such_not_as_token_ids(stack: Stack) -> None:
    response = await refused_leaving_no_trace(
        stack.connection, stack.gateway, EMBEDDINGS, stack.key.key, {"input": ["x", 1]}
    )
    assert "`input[1]` is a number among texts" in response.json()["error"]["message"]


async def test_too_many_texts_are_refused_naming_langchains_setting(stack: Stack) -> None:
    response = await refused_leaving_no_trace(
        stack.connection, stack.gateway, EMBEDDINGS, stack.key.key, {"input": ["x"] * 257}
    )
    assert response.status_code == 422
    assert "chunk_size=256" in response.json()["error"]["message"]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"  # a PNG as far as the edge reads it (the agent would decode it)


def _png_header(width: int, height: int) -> bytes:
    return PNG_SIGNATURE + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", width, height)


MODALITY_REFUSED = [  # (capability, body, param, what the message says)
    ("document.ocr@1", {"image_base64": "not base64!"}, "image_base64", "not valid base64"),
    ("document.ocr@1", {"image_base64": ""}, "image_base64", "is empty"),
    ("document.ocr@1", {"image_base64": _b64(b"GIF89a....")}, "image_base64", "neither a PNG nor a JPEG"),
    ("document.ocr@1", {"image_base64": _b64(_png_header(5000, 20))}, "image_base64", "at most 4096"),
    ("vision.embedding@1", {"images_base64": []}, "images_base64", "must not be empty"),
    (
        "vision.embedding@1",
        {"images_base64": [_b64(PNG_SIGNATURE), "%%%"]},
        "images_base64",
        "[1]` is not valid",
    ),
    ("vision.embedding@1", {"images_base64": [_b64(PNG_SIGNATURE)] * 65}, "images_base64", "at most 64"),
    ("vision.embedding@1", {"images_base64": [_b64(b"no image")]}, "images_base64", "neither a PNG"),
    ("speech.transcription@1", {"audio_base64": "QUJ"}, "audio_base64", "not valid base64"),
    ("rag.reranking@1", {"query": "q", "documents": ["d"], "top_n": 0}, "top_n", "at least 1"),
    ("rag.reranking@1", {"query": "q" * 32_769, "documents": ["d"]}, "query", "at most 32768"),
]


@pytest.mark.parametrize(
    ("capability", "body", "param", "says"),
    MODALITY_REFUSED,
    ids=[f"{m[0]}-{m[2]}" for m in MODALITY_REFUSED],
)
async def test_the_native_contract_is_checked_at_the_edge_before_anything_is_recorded(
    stack: Stack, capability: str, body: dict[str, object], param: str, says: str
) -> None:
    key = await _other_key(stack, MODALITIES)
    response = await refused_leaving_no_trace(
        stack.connection, stack.gateway, f"/v1/capabilities/{capability}:invoke", key.key, body
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("INVALID_INPUT", param)
    assert says in error["message"]


async def test_native_input_that_passes_the_edge_goes_on_to_routing(stack: Stack) -> None:
    key = await _other_key(stack, MODALITIES)
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{stack.gateway.url}/v1/capabilities/document.ocr@1:invoke",
            json={"image_base64": _b64(PNG_SIGNATURE)},
            headers=_auth(key.key),
        )
    assert response.status_code == 503  # no OCR deployment here: routing's refusal, not the input's
    assert response.json()["error"]["code"] == "CAPABILITY_UNAVAILABLE"


async def test_reranking_text_over_the_total_is_refused_with_the_rerank_code(stack: Stack) -> None:
    key = await _other_key(stack, ["rag.reranking@1"])
    documents = ["d" * 32_768] * 65  # each within the item limit, together past 2 Mi characters
    response = await refused_leaving_no_trace(
        stack.connection, stack.gateway, "/v1/rerank", key.key, {"query": "q", "documents": documents}
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "RERANK_REQUEST_TOO_LARGE"


@pytest.mark.parametrize(
    ("capability", "says"),
    [
        ("rag.embedding", "name it as name@version"),
        ("rag.embedding@v1", "name it as name@version"),
        ("rag.embedding@2", "rag.embedding has no version 2; it has version 1"),
        ("chat.completion@1", "unknown capability 'chat.completion@1'; known: document.ocr@1"),
    ],
)
async def test_an_unknown_capability_is_404_naming_what_exists(
    stack: Stack, capability: str, says: str
) -> None:
    response = await refused_leaving_no_trace(
        stack.connection, stack.gateway, f"/v1/capabilities/{capability}:invoke", stack.key.key, {},
        recorded=False,  # (no capability to record it under)
    )  # fmt: skip
    assert response.status_code == 404
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("UNKNOWN_CAPABILITY", "capability")
    assert says in error["message"]


async def test_without_a_key_an_unknown_capability_is_401_like_any_other(stack: Stack) -> None:
    response = await refused_leaving_no_trace(
        stack.connection, stack.gateway, "/v1/capabilities/chat.completion@1:invoke", None, {}
    )
    assert response.status_code == 401
    assert "known" not in response.json()["error"]["message"]
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_models_lists_what_each_key_may_call_experiments_included(stack: Stack) -> None:
    await another_deployment(stack, "minilm-edge", "minilm-edge")
    other = await _other_key(stack, ["rag.reranking@1", "rag.embedding@1"])
    async with httpx.AsyncClient(timeout=60) as http:
        mine = (await http.get(f"{stack.gateway.url}/v1/models", headers=_auth(stack.key.key))).json()
        theirs = (await http.get(f"{stack.gateway.url}/v1/models", headers=_auth(other.key))).json()
    assert [(m["id"], m["capability"], m["available"]) for m in mine["data"]] == [
        ("all-MiniLM-L6-v2", "rag.embedding@1", True),
        ("minilm-edge", "rag.embedding@1", True),
    ]
    assert [(m["id"], m["available"]) for m in theirs["data"]] == [
        ("all-MiniLM-L6-v2", True),
        ("minilm-edge", True),
        ("rag.reranking@1", False),  # in its scopes, nothing serves it yet
    ]
    client = openai.AsyncOpenAI(base_url=f"{stack.gateway.url}/v1", api_key=stack.key.key, max_retries=0)
    listed = await client.models.list()
    first = listed.data[0]
    assert (first.id, first.created, first.owned_by) == ("all-MiniLM-L6-v2", 0, "modelforge")


MARKER = "quokka-zebra-71830 is a secret sentence"


async def test_request_content_reaches_no_log_served_refused_or_failed(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    ocr = await _other_key(stack, MODALITIES)
    caplog.set_level(logging.DEBUG)
    async with httpx.AsyncClient(timeout=60) as http:
        served = await http.post(
            f"{stack.gateway.url}{EMBEDDINGS}", json={"input": [MARKER] * 3}, headers=_auth(stack.key.key)
        )
        refused = await http.post(
            f"{stack.gateway.url}{EMBEDDINGS}",
            json={"input": MARKER, "dimensions": 7},
            headers=_auth(stack.key.key),
        )
        unavailable = await http.post(
            f"{stack.gateway.url}/v1/capabilities/document.ocr@1:invoke",
            json={"image_base64": _b64(PNG_SIGNATURE + MARKER.encode())},
            headers=_auth(ocr.key),
        )
        malformed = await http.post(
            f"{stack.gateway.url}{EMBEDDINGS}",
            content=f'{{"input": "{MARKER}"'.encode(),
            headers=_auth(stack.key.key),
        )
    assert [r.status_code for r in (served, refused, unavailable, malformed)] == [200, 400, 503, 400]
    await events_until(
        stack.connection,
        subjects.REQUESTS_STREAM,
        lambda e: isinstance(e, RequestCompleted) and e.request_id == served.headers["x-request-id"],
    )
    await stack.gateway.settled()
    assert "quokka" not in caplog.text
    assert "quokka" not in stack.agent.log.read_text(errors="replace")
