"""The reranking adapter on a tiny cross-encoder-shaped ONNX graph built here.

No reranker model ships in a wheel we can use, so the graph stands in for one: its score is
how many document tokens (segment 1) are in a "relevant" vocabulary — enough to check that
pairs are encoded, scored per row, sorted and cut correctly through real ONNX Runtime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nodeagent.adapters.base import run_rows
from nodeagent.adapters.reranking import (
    RankedDocument,
    RerankDocument,
    RerankingAdapter,
    RerankingConfig,
    expected_ranking_length,
    query_document_pairs,
    rank_documents,
    validate_ranking,
)
from nodeagent.runtimes.base import RuntimeOptions
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from streams.codes import ServingError
from tests.support.models import write_tiny_cross_encoder


@pytest.fixture(scope="module")
def reranker(
    minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[RerankingAdapter, OnnxRuntimeCpu]:
    model_path = tmp_path_factory.mktemp("reranker") / "tiny_cross_encoder.onnx"
    write_tiny_cross_encoder(model_path, minilm_dir / "tokenizer.json")
    runtime = OnnxRuntimeCpu()
    runtime.load(model_path, RuntimeOptions(intra_op_threads=1))
    adapter = RerankingAdapter(minilm_dir / "tokenizer.json", RerankingConfig(max_length=64))
    return adapter, runtime


DOCUMENTS = [
    RerankDocument("d-dogs", "Dogs bark at the postman."),
    RerankDocument("d-two", "A cat and her kitten sleep."),
    RerankDocument("d-one", "The cat sat on the mat."),
    RerankDocument("d-three", "Cats: a cat, a kitten and more cats."),
]


def test_documents_are_scored_and_ranked(reranker: tuple[RerankingAdapter, OnnxRuntimeCpu]) -> None:
    adapter, runtime = reranker
    scores = run_rows(adapter, runtime, query_document_pairs("cat", DOCUMENTS))
    assert scores == [0.0, 2.0, 1.0, 4.0]  # only document tokens count, not the query's "cat"
    ranking = rank_documents(DOCUMENTS, scores, top_n=3)
    assert [(r.id, r.rank, r.index) for r in ranking] == [("d-three", 1, 3), ("d-two", 2, 1), ("d-one", 3, 2)]
    validate_ranking(ranking, expected_ids={d.id for d in DOCUMENTS}, expected_count=3)


def test_sigmoid_activation_maps_scores_into_unit_interval(
    reranker: tuple[RerankingAdapter, OnnxRuntimeCpu], minilm_dir: Path
) -> None:
    _, runtime = reranker
    adapter = RerankingAdapter(minilm_dir / "tokenizer.json", RerankingConfig(score_activation="sigmoid"))
    scores = run_rows(adapter, runtime, query_document_pairs("cat", DOCUMENTS[:2]))
    assert scores == pytest.approx([0.5, 1 / (1 + np.exp(-2.0))])


def test_ties_keep_request_order_and_top_n_larger_than_documents() -> None:
    documents = [RerankDocument(str(i), "x") for i in range(3)]
    ranking = rank_documents(documents, [1.0, 1.0, 2.0], top_n=10)
    assert [r.id for r in ranking] == ["2", "0", "1"]
    assert expected_ranking_length(3, 10) == 3 == len(ranking)


@pytest.mark.parametrize(
    "ranking",
    [
        [RankedDocument("a", 1.0, 1, 0)],  # too short
        [RankedDocument("a", 1.0, 1, 0), RankedDocument("a", 0.5, 2, 0)],  # repeated id
        [RankedDocument("a", 1.0, 1, 0), RankedDocument("zzz", 0.5, 2, 1)],  # unknown id
        [RankedDocument("a", 1.0, 1, 0), RankedDocument("b", 2.0, 2, 1)],  # out of order
        [RankedDocument("a", 1.0, 1, 0), RankedDocument("b", float("nan"), 2, 1)],  # non-finite
        [RankedDocument("a", 1.0, 2, 0), RankedDocument("b", 0.5, 1, 1)],  # wrong ranks
    ],
)
def test_bad_rankings_are_invalid_output(ranking: list[RankedDocument]) -> None:
    with pytest.raises(ServingError) as raised:
        validate_ranking(ranking, expected_ids={"a", "b"}, expected_count=2)
    assert raised.value.code == "INVALID_OUTPUT"


def test_wrong_output_shape_is_invalid_output(reranker: tuple[RerankingAdapter, OnnxRuntimeCpu]) -> None:
    adapter, _ = reranker
    batch = adapter.preprocess(query_document_pairs("q", DOCUMENTS[:2]))
    with pytest.raises(ServingError) as raised:
        adapter.postprocess(batch, {"logits": np.zeros((3, 1), dtype=np.float32)})
    assert raised.value.code == "INVALID_OUTPUT"


def test_top_n_must_be_positive() -> None:
    with pytest.raises(ServingError) as raised:
        rank_documents(DOCUMENTS, [0.0] * 4, top_n=0)
    assert raised.value.code == "INVALID_INPUT"
