"""rag.reranking with a sentence encoder as a bi-encoder: a document's score is the cosine of its
embedding and the query's. Weaker than a cross-encoder (query and document never attend to each
other) but a real model, and labelled as such where it is served (`minilm-biencoder-rerank`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nodeagent.adapters.base import PreparedBatch, invalid_output, pick_output
from nodeagent.adapters.embedding import POOLING_MODES, l2_normalize, mean_pool
from nodeagent.adapters.reranking import RerankingConfig, check_scores
from nodeagent.adapters.tokenization import TextEncoder
from nodeagent.runtimes.base import Tensor
from streams import codes
from streams.codes import ServingError


@dataclass(frozen=True)
class EncodedPairs(PreparedBatch):
    """Each distinct text of the pairs encoded once (a query shared by a request's documents is
    one row); `pairs` holds each pair's (query row, document row) in the feeds."""

    pairs: tuple[tuple[int, int], ...] = ()


class BiEncoderRerankingAdapter:
    """Rows are (query, document) pairs; results are their embeddings' cosine similarity."""

    capability = "rag.reranking"

    def __init__(self, tokenizer_path: Path, config: RerankingConfig) -> None:
        if config.pooling not in POOLING_MODES:
            raise ValueError(f"pooling must be one of {sorted(POOLING_MODES)}")
        self.config = config
        self.encoder = TextEncoder(tokenizer_path, config.max_length)

    def count_tokens(self, item: tuple[str, str]) -> int:
        return self.encoder.count_tokens(item[0]) + self.encoder.count_tokens(item[1])

    def preprocess(self, items: Sequence[tuple[str, str]]) -> EncodedPairs:
        if any(not (isinstance(pair, tuple) and len(pair) == 2) for pair in items):
            raise ServingError(codes.INVALID_INPUT.code, "reranking rows must be (query, document) pairs")
        rows: dict[str, int] = {}
        for query, document in items:
            rows.setdefault(query, len(rows))
            rows.setdefault(document, len(rows))
        encoded = self.encoder.encode(list(rows))
        counts = encoded.token_counts
        pairs = tuple((rows[query], rows[document]) for query, document in items)
        return EncodedPairs(
            feeds=dict(encoded.feeds()),
            token_counts=tuple(counts[q] + counts[d] for q, d in pairs),
            pairs=pairs,
        )

    def postprocess(self, batch: PreparedBatch, outputs: Mapping[str, Tensor]) -> list[float]:
        if not isinstance(batch, EncodedPairs):
            raise invalid_output("the bi-encoder was given a batch it did not prepare")
        hidden = np.asarray(pick_output(outputs, self.config.output_name))
        mask = batch.feeds["attention_mask"]
        if hidden.ndim == 3 and hidden.shape[:2] == mask.shape:
            pooled = hidden[:, 0, :] if self.config.pooling == "cls" else mean_pool(hidden, mask)
        elif hidden.ndim == 2 and hidden.shape[0] == mask.shape[0]:
            pooled = hidden  # the model already pooled
        else:
            raise invalid_output(f"encoder output {hidden.shape} does not fit the batch {mask.shape}")
        vectors = l2_normalize(pooled)
        return [float(np.dot(vectors[q], vectors[d])) for q, d in batch.pairs]

    def validate_output(self, batch: PreparedBatch, results: Sequence[float]) -> None:
        check_scores(batch, results)
