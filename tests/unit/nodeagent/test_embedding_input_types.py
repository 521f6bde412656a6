"""An embedding request's `input_type` (query | document): the worker puts the prefix the model's
serving config declares for it (`input_type_prefixes`) before each text, and nothing otherwise."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from nodeagent.adapters.embedding import EmbeddingAdapter, EmbeddingConfig
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from nodeagent.worker.capabilities import EmbeddingServer
from streams.contracts import EmbeddingInput

E5_PREFIXES = {"query": "query: ", "document": "passage: "}
TEXT = "How long do llamas live?"


def _server(minilm_dir: Path, runtime: OnnxRuntimeCpu, prefixes: dict[str, str]) -> EmbeddingServer:
    config = dataclasses.replace(
        EmbeddingConfig.from_file(minilm_dir / "serving_config.json"), input_type_prefixes=prefixes
    )
    return EmbeddingServer(EmbeddingAdapter(minilm_dir / config.tokenizer_file, config), runtime, 8)


@pytest.fixture
async def prefixed(minilm_dir: Path, minilm_runtime: OnnxRuntimeCpu) -> AsyncIterator[EmbeddingServer]:
    server = _server(minilm_dir, minilm_runtime, E5_PREFIXES)
    yield server
    await server.close()


@pytest.fixture
async def plain(minilm_dir: Path, minilm_runtime: OnnxRuntimeCpu) -> AsyncIterator[EmbeddingServer]:
    server = _server(minilm_dir, minilm_runtime, {})
    yield server
    await server.close()


async def _vector(server: EmbeddingServer, text: str, input_type: str = "") -> list[float]:
    body, _ = await server.serve(msgspec.json.encode(EmbeddingInput(texts=[text])), input_type)
    (vector,) = json.loads(body)["embeddings"]
    return list(vector)


async def test_a_query_is_embedded_with_the_query_prefix_the_config_declares(
    prefixed: EmbeddingServer, plain: EmbeddingServer
) -> None:
    assert await _vector(prefixed, TEXT, "query") == pytest.approx(
        await _vector(plain, "query: " + TEXT), abs=1e-6
    )


async def test_a_document_is_embedded_with_the_document_prefix(
    prefixed: EmbeddingServer, plain: EmbeddingServer
) -> None:
    assert await _vector(prefixed, TEXT, "document") == pytest.approx(
        await _vector(plain, "passage: " + TEXT), abs=1e-6
    )


async def test_a_request_without_an_input_type_is_embedded_as_sent(
    prefixed: EmbeddingServer, plain: EmbeddingServer
) -> None:
    assert await _vector(prefixed, TEXT) == pytest.approx(await _vector(plain, TEXT), abs=1e-6)


async def test_a_model_without_prefixes_embeds_queries_as_sent(plain: EmbeddingServer) -> None:
    assert await _vector(plain, TEXT, "query") == pytest.approx(await _vector(plain, TEXT), abs=1e-6)


def test_a_serving_config_with_prefixes_for_an_unknown_input_type_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "serving_config.json"
    path.write_text(json.dumps({"input_type_prefixes": {"search": "search: "}}))

    with pytest.raises(ValueError, match="input_type_prefixes"):
        EmbeddingConfig.from_file(path)


def test_a_serving_config_with_prefixes_loads_them(tmp_path: Path) -> None:
    path = tmp_path / "serving_config.json"
    path.write_text(json.dumps({"input_type_prefixes": E5_PREFIXES}))

    assert EmbeddingConfig.from_file(path).input_type_prefixes == E5_PREFIXES
