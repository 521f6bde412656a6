"""The agent process holds no model runtime: its workers do, so that its own memory stays small and
an unload (killing the worker) gives back all a model held."""

from __future__ import annotations

from tests.support.imports import imported_along


def test_the_agent_imports_no_runtime_numpy_or_tokenizer() -> None:
    watched = ["onnxruntime", "numpy", "tokenizers", "tensorrt"]
    assert imported_along(["nodeagent.agent.process", "nodeagent.cli"], watched) == []
