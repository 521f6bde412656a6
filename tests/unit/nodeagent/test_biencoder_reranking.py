"""MiniLM as a bi-encoder reranker: a document's score is the cosine of its embedding and the
query's, computed from one encoder pass over the distinct texts of a batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nodeagent.adapters.base import run_rows
from nodeagent.adapters.biencoder_reranking import BiEncoderRerankingAdapter
from nodeagent.adapters.embedding import EmbeddingAdapter
from nodeagent.adapters.reranking import RerankingConfig
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from nodeagent.worker.loading import reranking_adapter
from streams.codes import ServingError


@pytest.fixture(scope="module")
def biencoder(minilm_dir: Path) -> BiEncoderRerankingAdapter:
    return BiEncoderRerankingAdapter(minilm_dir / "tokenizer.json", RerankingConfig(scoring="biencoder"))


def test_the_relevant_document_scores_highest(
    biencoder: BiEncoderRerankingAdapter, minilm_runtime: OnnxRuntimeCpu
) -> None:
    documents = ["Stocks fell sharply on Tuesday.", "My cat sleeps on the sofa all day.", "Rain is forecast."]
    scores = run_rows(biencoder, minilm_runtime, [("Which pet naps a lot?", d) for d in documents])
    assert int(np.argmax(scores)) == 1


def test_scores_are_the_cosine_of_the_embedding_models_vectors(
    biencoder: BiEncoderRerankingAdapter, embedding_adapter: EmbeddingAdapter, minilm_runtime: OnnxRuntimeCpu
) -> None:
    query, document = "capital of France", "Paris is the capital of France."
    (score,) = run_rows(biencoder, minilm_runtime, [(query, document)])
    q, d = (r.vector for r in run_rows(embedding_adapter, minilm_runtime, [query, document]))
    assert score == pytest.approx(float(q @ d), abs=1e-5)


def test_a_query_shared_by_the_pairs_is_encoded_once_and_charged_to_each(
    biencoder: BiEncoderRerankingAdapter,
) -> None:
    batch = biencoder.preprocess([("cats", "a cat"), ("cats", "a dog"), ("cats", "a cat")])
    assert batch.feeds["input_ids"].shape[0] == 3  # "cats", "a cat", "a dog"
    assert batch.token_counts == (3 + 4, 3 + 4, 3 + 4)  # [CLS] … [SEP] of the query and the document


def test_a_set_that_names_an_unknown_scoring_is_refused(minilm_dir: Path) -> None:
    with pytest.raises(ServingError, match="scoring must be one of"):
        reranking_adapter(minilm_dir / "tokenizer.json", RerankingConfig(scoring="late_interaction"))
