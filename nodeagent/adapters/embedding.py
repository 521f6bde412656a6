"""rag.embedding: texts → pooled, L2-normalised vectors with per-input token counts."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from nodeagent.adapters.base import PreparedBatch, invalid_output, pick_output
from nodeagent.adapters.tokenization import TextEncoder
from nodeagent.runtimes.base import Tensor
from streams import codes
from streams.codes import ServingError

NORM_TOLERANCE = 1e-3
POOLING_MODES = frozenset({"mean", "cls"})
INPUT_TYPES = frozenset({"query", "document"})  # what a request's `input_type` may name


@dataclass(frozen=True)
class EmbeddingConfig:
    dimension: int = 384
    max_length: int = 256
    pooling: str = "mean"
    normalize: bool = True
    output_name: str | None = "last_hidden_state"
    tokenizer_file: str = "tokenizer.json"
    onnx_file: str = "model.onnx"
    # What a model that embeds queries and documents differently (E5: "query: " / "passage: ")
    # puts before each text of a request whose `input_type` names one; none for a request without.
    input_type_prefixes: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_file(cls, path: Path) -> EmbeddingConfig:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        config = cls(**known)
        if config.pooling not in POOLING_MODES:
            raise ValueError(f"pooling must be one of {sorted(POOLING_MODES)}")
        prefixes = config.input_type_prefixes
        if not isinstance(prefixes, dict) or not all(
            kind in INPUT_TYPES and isinstance(prefix, str) for kind, prefix in prefixes.items()
        ):
            raise ValueError(f"input_type_prefixes maps {' or '.join(sorted(INPUT_TYPES))} to a prefix text")
        return config


@dataclass(frozen=True)
class EmbeddingResult:
    vector: NDArray[np.float32]
    token_count: int


def mean_pool(hidden: NDArray[Any], attention_mask: NDArray[Any]) -> NDArray[np.float32]:
    """Average of the token vectors that the mask marks real (padding contributes nothing)."""
    mask = attention_mask.astype(np.float32)[:, :, None]
    summed = (hidden.astype(np.float32) * mask).sum(axis=1)
    counts = np.clip(mask.sum(axis=1), 1e-9, None)
    return np.asarray(summed / counts, dtype=np.float32)


def l2_normalize(vectors: NDArray[Any]) -> NDArray[np.float32]:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.asarray(vectors / np.clip(norms, 1e-12, None), dtype=np.float32)


class EmbeddingAdapter:
    capability = "rag.embedding"

    def __init__(self, tokenizer_path: Path, config: EmbeddingConfig) -> None:
        self.config = config
        self.encoder = TextEncoder(tokenizer_path, config.max_length)

    @classmethod
    def from_model_dir(cls, model_dir: Path, config_file: str = "serving_config.json") -> EmbeddingAdapter:
        config = EmbeddingConfig.from_file(model_dir / config_file)
        return cls(model_dir / config.tokenizer_file, config)

    def typed(self, texts: list[str], input_type: str) -> list[str]:
        """`texts` as the model embeds them for `input_type`: with the serving config's prefix for
        it, if it declares one; unchanged otherwise."""
        prefix = self.config.input_type_prefixes.get(input_type, "")
        return [prefix + text for text in texts] if prefix else texts

    def count_tokens(self, item: str) -> int:
        return self.encoder.count_tokens(item)

    def preprocess(self, items: Sequence[str]) -> PreparedBatch:
        if any(not isinstance(text, str) for text in items):
            raise ServingError(codes.INVALID_INPUT.code, "embedding inputs must be strings")
        encoded = self.encoder.encode(items)
        return PreparedBatch(feeds=dict(encoded.feeds()), token_counts=encoded.token_counts)

    def postprocess(self, batch: PreparedBatch, outputs: Mapping[str, Tensor]) -> list[EmbeddingResult]:
        output = np.asarray(pick_output(outputs, self.config.output_name))
        if output.ndim == 3:  # token states [batch, sequence, hidden]: pool them here
            if output.shape[:2] != batch.feeds["attention_mask"].shape:
                raise invalid_output(f"hidden states {output.shape} do not match the batch")
            if self.config.pooling == "cls":
                pooled = output[:, 0, :].astype(np.float32)
            else:
                pooled = mean_pool(output, batch.feeds["attention_mask"])
        elif output.ndim == 2:  # the model already pooled
            pooled = output.astype(np.float32)
        else:
            raise invalid_output(f"embedding output has rank {output.ndim}")
        vectors = l2_normalize(pooled) if self.config.normalize else pooled
        return [
            EmbeddingResult(vector=vectors[row], token_count=count)
            for row, count in enumerate(batch.token_counts)
        ]

    def validate_output(self, batch: PreparedBatch, results: Sequence[EmbeddingResult]) -> None:
        validate_embeddings(
            [result.vector for result in results],
            expected_count=batch.rows,
            dimension=self.config.dimension,
            normalized=self.config.normalize,
        )


def unit_length(vector: NDArray[Any]) -> bool:
    return abs(float(np.linalg.norm(vector)) - 1.0) <= NORM_TOLERANCE


def validate_embeddings(
    vectors: Sequence[NDArray[Any]], *, expected_count: int, dimension: int, normalized: bool
) -> None:
    """INVALID_OUTPUT unless there is one finite vector of `dimension` per input (unit norm if asked)."""
    if len(vectors) != expected_count:
        raise invalid_output(f"expected {expected_count} vectors, got {len(vectors)}")
    for index, vector in enumerate(vectors):
        if vector.ndim != 1 or vector.shape[0] != dimension:
            raise invalid_output(f"vector {index} has shape {vector.shape}, expected ({dimension},)")
        if not np.all(np.isfinite(vector)):
            raise invalid_output(f"vector {index} has non-finite values")
        if normalized and not unit_length(vector):
            raise invalid_output(f"vector {index} is not unit length")
