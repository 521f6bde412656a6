"""Capability adapters: request rows ↔ runtime tensors, with output validation."""

from nodeagent.adapters.base import CapabilityAdapter, PreparedBatch, batch_runner, run_rows
from nodeagent.adapters.embedding import EmbeddingAdapter, EmbeddingConfig, EmbeddingResult
from nodeagent.adapters.reranking import RankedDocument, RerankDocument, RerankingAdapter, RerankingConfig

__all__ = [
    "CapabilityAdapter",
    "EmbeddingAdapter",
    "EmbeddingConfig",
    "EmbeddingResult",
    "PreparedBatch",
    "RankedDocument",
    "RerankDocument",
    "RerankingAdapter",
    "RerankingConfig",
    "batch_runner",
    "run_rows",
]
