"""rag.reranking: a cross-encoder scores (query, document) pairs; documents come back ranked.
(`biencoder_reranking.py` scores them with a sentence encoder instead.)"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nodeagent.adapters.base import PreparedBatch, invalid_output, pick_output
from nodeagent.adapters.tokenization import TextEncoder
from nodeagent.runtimes.base import Tensor
from streams import codes
from streams.codes import ServingError

SCORE_ACTIVATIONS = frozenset({"none", "sigmoid"})
SCORINGS = frozenset({"cross_encoder", "biencoder"})


@dataclass(frozen=True)
class RerankDocument:
    id: str
    text: str


@dataclass(frozen=True)
class RankedDocument:
    id: str
    score: float
    rank: int  # 1 = most relevant
    index: int  # position in the request's document list


@dataclass(frozen=True)
class RerankingConfig:
    max_length: int = 512
    output_name: str | None = None
    score_activation: str = "none"  # "sigmoid" maps logits to 0..1
    scoring: str = "cross_encoder"  # or "biencoder": cosine of query and document embeddings
    pooling: str = "mean"  # the bi-encoder's token pooling ("mean" or "cls")


def query_document_pairs(query: str, documents: Sequence[RerankDocument]) -> list[tuple[str, str]]:
    return [(query, document.text) for document in documents]


class RerankingAdapter:
    """Rows are (query, document) pairs; results are one relevance score per pair."""

    capability = "rag.reranking"

    def __init__(self, tokenizer_path: Path, config: RerankingConfig) -> None:
        if config.score_activation not in SCORE_ACTIVATIONS:
            raise ValueError(f"score_activation must be one of {sorted(SCORE_ACTIVATIONS)}")
        self.config = config
        self.encoder = TextEncoder(tokenizer_path, config.max_length)

    def count_tokens(self, item: tuple[str, str]) -> int:
        return self.encoder.count_tokens(item)

    def preprocess(self, items: Sequence[tuple[str, str]]) -> PreparedBatch:
        if any(not (isinstance(pair, tuple) and len(pair) == 2) for pair in items):
            raise ServingError(codes.INVALID_INPUT.code, "reranking rows must be (query, document) pairs")
        encoded = self.encoder.encode(items)
        return PreparedBatch(feeds=dict(encoded.feeds()), token_counts=encoded.token_counts)

    def postprocess(self, batch: PreparedBatch, outputs: Mapping[str, Tensor]) -> list[float]:
        logits = np.asarray(pick_output(outputs, self.config.output_name), dtype=np.float64)
        if logits.ndim == 2 and logits.shape[1] in (1, 2):
            # [n, 1]: one relevance logit; [n, 2]: binary classifier, column 1 is "relevant".
            logits = logits[:, -1]
        if logits.shape != (batch.rows,):
            raise invalid_output(f"reranker output shape {logits.shape} does not fit {batch.rows} pairs")
        if self.config.score_activation == "sigmoid":
            logits = 1.0 / (1.0 + np.exp(-logits))
        return [float(score) for score in logits]

    def validate_output(self, batch: PreparedBatch, results: Sequence[float]) -> None:
        check_scores(batch, results)


def check_scores(batch: PreparedBatch, results: Sequence[float]) -> None:
    """INVALID_OUTPUT unless there is one finite score per pair."""
    if len(results) != batch.rows:
        raise invalid_output(f"expected {batch.rows} scores, got {len(results)}")
    if not all(math.isfinite(score) for score in results):
        raise invalid_output("reranker returned non-finite scores")


def rank_documents(
    documents: Sequence[RerankDocument], scores: Sequence[float], top_n: int | None = None
) -> list[RankedDocument]:
    """Highest score first (ties keep request order), ranks 1..n, cut to `top_n`."""
    if len(scores) != len(documents):
        raise invalid_output(f"{len(scores)} scores for {len(documents)} documents")
    if top_n is not None and top_n < 1:
        raise ServingError(codes.INVALID_INPUT.code, "top_n must be at least 1")
    order = sorted(range(len(documents)), key=lambda index: (-scores[index], index))
    kept = order if top_n is None else order[:top_n]
    return [
        RankedDocument(id=documents[index].id, score=float(scores[index]), rank=rank, index=index)
        for rank, index in enumerate(kept, start=1)
    ]


def validate_ranking(
    ranking: Sequence[RankedDocument], *, expected_ids: set[str], expected_count: int
) -> None:
    """INVALID_OUTPUT unless the ranking is complete, unique, finite, ordered and ranked 1..n."""
    if len(ranking) != expected_count:
        raise invalid_output(f"ranking has {len(ranking)} entries, expected {expected_count}")
    seen: set[str] = set()
    previous = math.inf
    for position, item in enumerate(ranking, start=1):
        if item.id in seen or item.id not in expected_ids:
            raise invalid_output(f"ranking entry {position} has an unknown or repeated id")
        if not math.isfinite(item.score) or item.score > previous:
            raise invalid_output(f"ranking entry {position} is non-finite or out of order")
        if item.rank != position:
            raise invalid_output(f"ranking entry {position} carries rank {item.rank}")
        seen.add(item.id)
        previous = item.score


def expected_ranking_length(document_count: int, top_n: int | None) -> int:
    return document_count if top_n is None else min(top_n, document_count)
