"""Small models the tests build: a cross-encoder whose score counts cat words in the document, and
an embedder that answers a poisoned word with non-finite vectors (INVALID_OUTPUT)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from tokenizers import Tokenizer

RELEVANT_WORDS = ("cat", "cats", "kitten")


def write_tiny_cross_encoder(path: Path, tokenizer_path: Path) -> None:
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    weights = np.zeros(tokenizer.get_vocab_size(), dtype=np.float32)
    for word in RELEVANT_WORDS:
        weights[tokenizer.token_to_id(word)] = 1.0
    int_input = [
        helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
        for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    nodes = [
        helper.make_node("Gather", ["weights", "input_ids"], ["token_scores"]),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["token_type_ids"], ["segment_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["token_scores", "mask_f"], ["masked"]),
        helper.make_node("Mul", ["masked", "segment_f"], ["document_scores"]),
        helper.make_node("ReduceSum", ["document_scores", "axes"], ["logits"], keepdims=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_cross_encoder",
        int_input,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])],
        initializer=[
            helper.make_tensor("weights", TensorProto.FLOAT, weights.shape, weights),
            helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def write_poisoned_embedder(folder: Path, minilm: Path, poisoned_word: str) -> None:
    """An embedding model in `folder` (MiniLM's tokenizer and serving config) whose vectors are all
    one direction, except that a text holding `poisoned_word` comes out non-finite: the worker
    answers it INVALID_OUTPUT. Its warm-up texts do not hold the word, so it loads and probes."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer.from_file(str(minilm / "tokenizer.json"))
    scale = np.ones(tokenizer.get_vocab_size(), dtype=np.float32)
    poisoned = tokenizer.token_to_id(poisoned_word)
    assert poisoned is not None, f"{poisoned_word!r} is not one token of the tokenizer"
    scale[poisoned] = np.nan
    config = json.loads((minilm / "serving_config.json").read_text())
    dimension = int(config["dimension"])
    direction = np.full(dimension, 1.0 / np.sqrt(dimension), dtype=np.float32)
    nodes = [
        helper.make_node("Gather", ["scale", "input_ids"], ["token_scale"]),
        helper.make_node("Unsqueeze", ["token_scale", "last_axis"], ["token_column"]),
        helper.make_node("Mul", ["token_column", "direction"], ["last_hidden_state"]),
    ]
    graph = helper.make_graph(
        nodes,
        "poisoned_embedder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])],
        [
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", dimension]
            )
        ],
        initializer=[
            helper.make_tensor("scale", TensorProto.FLOAT, scale.shape, scale),
            helper.make_tensor("last_axis", TensorProto.INT64, [1], [2]),
            helper.make_tensor("direction", TensorProto.FLOAT, direction.shape, direction),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "model.onnx"))
    shutil.copy(minilm / "tokenizer.json", folder / "tokenizer.json")
    config.update(model_id="tests/poisoned-embedder", onnx_file="model.onnx", sources={})
    (folder / "serving_config.json").write_text(json.dumps(config, indent=2))
