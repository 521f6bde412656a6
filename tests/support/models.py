"""Small models the tests build: a cross-encoder whose score counts cat words in the document."""

from __future__ import annotations

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
