"""Image embeddings on `POST /v1/embeddings` in Jina's shape (`input: [{"image": ...}]`), served by
`vision.embedding@1` through gateway, scheduler and a real agent running a generated image encoder
in ONNX Runtime (no image-embedding model ships in a wheel: `tests/support/vision.py`)."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import msgspec
import numpy as np
import openai
import pytest
from PIL import Image

from eventstore.connection import Connection
from eventstore.store import EventStore
from gateway.clients.service import ClientService
from modelforge.devstack.nats_server import NatsServer
from streams.envelope import new_id
from streams.events import serving as s
from tests.integration.gateway.conftest import one_model_stack, refused_leaving_no_trace
from tests.support.serving import InProcessGateway
from tests.support.vision import DIMENSION, encode_image, gradient, write_tiny_vision_model

VISION = "vision.embedding@1"
MODEL = "tiny-vision"
PNG = encode_image(gradient(64, 48))
JPEG = encode_image(gradient(40, 90, flip=True), "JPEG")


class VisionStack(msgspec.Struct):
    url: str
    key: str  # scoped to vision.embedding@1 alone
    text_key: str  # scoped to rag.embedding@1 alone
    connection: Connection
    gateway: InProcessGateway


@pytest.fixture(scope="module")
async def vision_stack(
    module_nats: NatsServer, minilm_root: Path, scratch: Path
) -> AsyncIterator[VisionStack]:
    if not (minilm_root / MODEL).exists():
        write_tiny_vision_model(minilm_root / MODEL)
    space = s.EmbeddingSpace(
        space_id=MODEL,
        dimension=DIMENSION,
        normalized=True,
        input_semantics="image",
        truncatable_dimensions=(8,),
    )
    async with one_model_stack(module_nats.url, minilm_root, scratch, MODEL, VISION, space) as stack:
        text_key = await ClientService(EventStore(stack.connection)).create(
            f"txt-{new_id()[:6]}", ["rag.embedding@1"]
        )
        yield VisionStack(stack.url, stack.key, text_key.key, stack.connection, stack.gateway)


async def _post(stack: VisionStack, path: str, body: object) -> dict[str, object]:
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{stack.url}{path}", json=body, headers={"authorization": f"Bearer {stack.key}"}
        )
    assert response.status_code == 200, response.text
    answer: dict[str, object] = response.json()
    return answer


async def _native_vectors(stack: VisionStack, images: list[str]) -> np.ndarray:
    answer = await _post(stack, f"/v1/capabilities/{VISION}:invoke", {"images_base64": images})
    return np.array(answer["output"]["embeddings"])  # type: ignore[index]


async def test_images_get_the_native_routes_vectors_in_the_embeddings_shape(
    vision_stack: VisionStack,
) -> None:
    body = {"model": MODEL, "input": [{"image": f"data:image/png;base64,{PNG}"}, {"image": JPEG}]}
    answer = await _post(vision_stack, "/v1/embeddings", body)
    data = answer["data"]
    assert isinstance(data, list)
    assert [(d["object"], d["index"]) for d in data] == [("embedding", 0), ("embedding", 1)]
    got = np.array([d["embedding"] for d in data])
    assert got.shape == (2, DIMENSION)
    np.testing.assert_allclose(got, await _native_vectors(vision_stack, [PNG, JPEG]), atol=1e-6)
    assert (answer["object"], answer["model"]) == ("list", MODEL)
    assert answer["usage"] == {"prompt_tokens": 0, "total_tokens": 0}


async def test_base64_vectors_are_the_float_vectors_as_little_endian_float32(
    vision_stack: VisionStack,
) -> None:
    image = {"image": f"data:image/jpeg;base64,{JPEG}"}
    floats = await _post(vision_stack, "/v1/embeddings", {"input": [image]})
    packed = await _post(vision_stack, "/v1/embeddings", {"input": [image], "encoding_format": "base64"})
    vector = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")  # type: ignore[index]
    np.testing.assert_allclose(vector, floats["data"][0]["embedding"], atol=1e-6)  # type: ignore[index]


async def test_the_openai_client_sends_image_items_unchanged(vision_stack: VisionStack) -> None:
    client = openai.AsyncOpenAI(base_url=f"{vision_stack.url}/v1", api_key=vision_stack.key, max_retries=0)
    response = await client.embeddings.create(
        model=MODEL,
        input=[{"image": f"data:image/png;base64,{PNG}"}],  # type: ignore[list-item]
    )
    np.testing.assert_allclose(
        response.data[0].embedding, (await _native_vectors(vision_stack, [PNG]))[0], atol=1e-6
    )


async def test_a_declared_dimension_cuts_the_vectors_and_others_are_refused(
    vision_stack: VisionStack,
) -> None:
    full = (await _native_vectors(vision_stack, [PNG]))[0]
    cut = await _post(vision_stack, "/v1/embeddings", {"input": [{"image": PNG}], "dimensions": 8})
    head = full[:8] / np.linalg.norm(full[:8])
    np.testing.assert_allclose(cut["data"][0]["embedding"], head, atol=1e-6)  # type: ignore[index]
    refused = await refused_leaving_no_trace(
        vision_stack.connection,
        vision_stack.gateway,
        "/v1/embeddings",
        vision_stack.key,
        {"input": [{"image": PNG}], "dimensions": 5},
    )
    assert refused.status_code == 400
    assert "supported: 8, 16" in refused.json()["error"]["message"]


def _gif() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buffer, "GIF")
    return base64.b64encode(buffer.getvalue()).decode()


REFUSED = [  # (case, input, status, what the message says)
    ("an image then a text", [{"image": PNG}, "a cat"], 400, "separate requests"),
    ("an image then a text object", [{"image": PNG}, {"text": "a cat"}], 400, "separate requests"),
    ("an http url", [{"image": "https://example.com/cat.png"}], 400, "does not fetch"),
    ("an item with image and text", [{"image": PNG, "text": "a cat"}], 400, "either `text` or `image`"),
    ("bad base64", [{"image": PNG}, {"image": "%%% not base64"}], 422, "`input[1]` is not valid base64"),
    ("bad base64 in a data url", [{"image": "data:image/png;base64,%%%"}], 422, "not valid base64"),
    ("a gif data url", [{"image": f"data:image/gif;base64,{_gif()}"}], 422, "image/png or image/jpeg"),
    ("bytes that are no image", [{"image": base64.b64encode(b"not an image").decode()}], 422, "neither a PNG nor a JPEG"),
    ("a gif as bare base64", [{"image": _gif()}], 422, "`input[0]` holds neither a PNG nor a JPEG"),
    ("a data url not in base64", [{"image": "data:image/png,rawbytes"}], 422, "not base64"),
    ("more images than the contract takes", [{"image": PNG}] * 65, 422, "at most 64"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "items", "status", "says"), REFUSED, ids=[r[0] for r in REFUSED])
async def test_bad_image_input_is_refused_before_anything_is_recorded(
    vision_stack: VisionStack, case: str, items: list[object], status: int, says: str
) -> None:
    response = await refused_leaving_no_trace(
        vision_stack.connection, vision_stack.gateway, "/v1/embeddings", vision_stack.key, {"input": items}
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("INVALID_INPUT", "input")
    assert says in error["message"]


async def test_a_text_then_an_image_is_refused_as_a_mix(vision_stack: VisionStack) -> None:
    response = await refused_leaving_no_trace(
        vision_stack.connection,
        vision_stack.gateway,
        "/v1/embeddings",
        vision_stack.text_key,
        {"input": ["a cat", {"image": PNG}]},
    )
    assert response.status_code == 400
    assert "separate requests" in response.json()["error"]["message"]


async def test_a_body_past_the_image_contracts_limit_is_refused_as_too_large(
    vision_stack: VisionStack,
) -> None:
    body = {"input": [{"image": "A" * (32 << 20)}]}
    response = await refused_leaving_no_trace(
        vision_stack.connection, vision_stack.gateway, "/v1/embeddings", vision_stack.key, body
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"


@pytest.mark.parametrize(
    ("key", "body", "capability"),
    [
        ("text_key", {"input": [{"image": PNG}]}, VISION),
        ("key", {"input": ["a cat"]}, "rag.embedding@1"),
    ],
    ids=["images-with-a-text-key", "texts-with-an-image-key"],
)
async def test_the_key_needs_the_scope_of_the_capability_the_input_calls(
    vision_stack: VisionStack, key: str, body: dict[str, object], capability: str
) -> None:
    response = await refused_leaving_no_trace(
        vision_stack.connection, vision_stack.gateway, "/v1/embeddings", getattr(vision_stack, key), body
    )
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "CAPABILITY_NOT_AUTHORIZED"
    assert capability in error["message"]


async def test_images_within_the_body_limit_but_past_what_nats_carries_are_refused_at_the_edge(
    vision_stack: VisionStack,
) -> None:
    # The contract reads bodies of up to 32 MiB; NATS carries 8 MiB a message: the payload is
    # refused before a lease is taken for it, not by the dispatch after one
    image = base64.b64encode(base64.b64decode(PNG) + bytes(7 << 20)).decode()
    response = await refused_leaving_no_trace(
        vision_stack.connection,
        vision_stack.gateway,
        "/v1/embeddings",
        vision_stack.key,
        {"input": [{"image": image}]},
    )
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "PAYLOAD_TOO_LARGE"
    assert "NATS" in error["message"]
