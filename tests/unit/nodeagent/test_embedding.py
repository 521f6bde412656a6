from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

from nodeagent.adapters.base import PreparedBatch, run_rows
from nodeagent.adapters.embedding import EmbeddingAdapter, EmbeddingResult, validate_embeddings
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from streams.codes import ServingError


def _embed(adapter: EmbeddingAdapter, runtime: OnnxRuntimeCpu, texts: list[str]) -> np.ndarray:
    return np.stack([result.vector for result in run_rows(adapter, runtime, texts)])


def test_similar_sentences_rank_above_dissimilar(
    embedding_adapter: EmbeddingAdapter, minilm_runtime: OnnxRuntimeCpu
) -> None:
    query, similar, dissimilar = _embed(
        embedding_adapter,
        minilm_runtime,
        [
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "The stock market fell sharply on Tuesday.",
        ],
    )
    assert float(query @ similar) > float(query @ dissimilar) + 0.3


def test_vectors_are_unit_length_384_and_token_counts_are_reported(
    embedding_adapter: EmbeddingAdapter, minilm_runtime: OnnxRuntimeCpu
) -> None:
    results = run_rows(
        embedding_adapter, minilm_runtime, ["hello world", "a much longer input sentence here"]
    )
    assert [r.vector.shape for r in results] == [(384,), (384,)]
    assert [round(float(np.linalg.norm(r.vector)), 4) for r in results] == [1.0, 1.0]
    assert [r.token_count for r in results] == [4, 8]  # [CLS] … [SEP]


def test_adapter_equals_direct_onnxruntime_on_the_same_tokens(
    embedding_adapter: EmbeddingAdapter, minilm_runtime: OnnxRuntimeCpu, minilm_dir
) -> None:
    texts = ["Paris is the capital of France.", "short", "Tokenizers pad to the longest row in a batch."]
    tokenizer = Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    tokenizer.no_padding()
    encodings = tokenizer.encode_batch(texts)
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(texts), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, encoding in enumerate(encodings):
        ids[row, : len(encoding.ids)] = encoding.ids
        mask[row, : len(encoding.ids)] = 1
    session = ort.InferenceSession(str(minilm_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    (hidden,) = session.run(
        ["last_hidden_state"],
        {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
    )
    pooled = (hidden * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    expected = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    np.testing.assert_allclose(_embed(embedding_adapter, minilm_runtime, texts), expected, atol=1e-5)


def test_padding_does_not_change_a_vector(
    embedding_adapter: EmbeddingAdapter, minilm_runtime: OnnxRuntimeCpu
) -> None:
    alone = _embed(embedding_adapter, minilm_runtime, ["cats"])[0]
    padded = _embed(
        embedding_adapter, minilm_runtime, ["cats", "a far longer sentence that forces padding " * 3]
    )[0]
    np.testing.assert_allclose(alone, padded, atol=1e-4)


def test_inputs_are_truncated_to_max_length(embedding_adapter: EmbeddingAdapter) -> None:
    batch = embedding_adapter.preprocess(["word " * 1000])
    assert embedding_adapter.config.max_length == 256
    assert batch.feeds["input_ids"].shape == (1, 256)
    assert batch.token_counts == (256,)


def test_non_string_input_is_invalid(embedding_adapter: EmbeddingAdapter) -> None:
    with pytest.raises(ServingError) as raised:
        embedding_adapter.preprocess([42])  # type: ignore[list-item]
    assert raised.value.code == "INVALID_INPUT"


@pytest.mark.parametrize(
    ("vector", "why"),
    [
        (np.ones(383, dtype=np.float32) / np.sqrt(383), "shape"),
        (np.full(384, np.nan, dtype=np.float32), "non-finite"),
        (np.ones(384, dtype=np.float32), "unit length"),
    ],
)
def test_invalid_vectors_are_invalid_output(vector: np.ndarray, why: str) -> None:
    with pytest.raises(ServingError, match=why) as raised:
        validate_embeddings([vector], expected_count=1, dimension=384, normalized=True)
    assert raised.value.code == "INVALID_OUTPUT"


def test_wrong_row_count_is_invalid_output(embedding_adapter: EmbeddingAdapter) -> None:
    batch = PreparedBatch(feeds={}, token_counts=(3, 3))
    result = EmbeddingResult(vector=np.ones(384, dtype=np.float32) / np.sqrt(384), token_count=3)
    with pytest.raises(ServingError) as raised:
        embedding_adapter.validate_output(batch, [result])
    assert raised.value.code == "INVALID_OUTPUT"


def test_nan_model_output_is_invalid_output(embedding_adapter: EmbeddingAdapter) -> None:
    batch = embedding_adapter.preprocess(["x"])
    width = batch.feeds["input_ids"].shape[1]
    outputs = {"last_hidden_state": np.full((1, width, 384), np.nan, dtype=np.float32)}
    with pytest.raises(ServingError) as raised:
        embedding_adapter.validate_output(batch, embedding_adapter.postprocess(batch, outputs))
    assert raised.value.code == "INVALID_OUTPUT"
