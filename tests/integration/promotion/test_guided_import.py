"""`modelforge models import` and `modelforge pipeline run` against a real gateway and agent: a
MiniLM folder goes from files to the stable embedding deployment, each gate said in words; a broken
folder records nothing; a pipeline stops at the first refusal with what to do next."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gateway.admin.client import AdminClient
from gateway.admin.models_cli import import_model, run_pipeline
from tests.integration.promotion.conftest import TOKEN, Stack

pytestmark = pytest.mark.timeout(300)
EMBEDDING = "rag.embedding@1"
REVIEW = "tests: MiniLM from its PyPI wheels, hashed at import"


def _admin(stack: Stack) -> AdminClient:
    return AdminClient(stack.gateway.url, TOKEN, operator="tests")


async def _import(stack: Stack, folder: Path, name: str, said: list[str]) -> str | None:
    return await asyncio.to_thread(
        import_model,
        _admin(stack),
        folder,
        EMBEDDING,
        name,
        stack.node,
        said.append,
        str(stack.artifact_root),
    )


async def _pipeline(stack: Stack, candidate: str, said: list[str]) -> bool:
    return await asyncio.to_thread(run_pipeline, _admin(stack), candidate, stack.node, REVIEW, said.append)


async def test_an_imported_minilm_folder_reaches_production_gate_by_gate(
    stack: Stack, minilm_source: Path
) -> None:
    said: list[str] = []
    candidate = await _import(stack, minilm_source, "minilm-imported", said)
    assert candidate == "cand-minilm-imported"
    assert said[-2].endswith(
        "profile read from the files: dimension=384, input_semantics=symmetric, max_length=256, "
        "normalized=true, pooling=mean"
    )
    said.clear()
    assert await _pipeline(stack, candidate, said)
    assert [line.split(" ")[1] for line in said] == ["lab", "probe", "production", "promotion:"]
    assert all(line.startswith("✓") for line in said)
    assert said[-1].endswith(f"serves {EMBEDDING} as minilm-imported (stable)")


async def test_a_broken_folder_is_refused_with_every_problem_and_records_nothing(
    stack: Stack, model_copy: Path
) -> None:
    (model_copy / "tokenizer.json").unlink()
    config = json.loads((model_copy / "serving_config.json").read_text())
    (model_copy / "serving_config.json").write_text(json.dumps({**config, "pooling": "max"}))
    head = await stack.events_head()
    said: list[str] = []
    assert await _import(stack, model_copy, "broken", said) is None
    assert said[1:] == [
        "  - tokenizer.json: expected a file (named by `tokenizer_file`) in the folder, found none",
        '  - serving_config.json: `pooling`: expected "mean" or "cls", found "max"',
    ]
    assert await stack.events_head() == head


async def test_the_pipeline_stops_at_the_first_refusal_and_says_what_to_do(stack: Stack) -> None:
    said: list[str] = []
    assert not await _pipeline(stack, "cand-never-imported", said)
    assert said[0].startswith(
        "✗ lab approval refused: CANDIDATE_NOT_FOUND: no candidate 'cand-never-imported'"
    )
    assert said[1:] == ["next: create it: `modelforge models import DIR --capability CAP`"]
