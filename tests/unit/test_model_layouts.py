"""`models import` checks a folder against its capability's layout before anything is recorded:
each broken layout gets its own message naming the file, the key and what was expected; a valid
one yields the candidate's profile read from the files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from artifacts.layouts import problems, profile, read_folder

MINILM = {"capability": "rag.embedding", "dimension": 384, "max_length": 256, "pooling": "mean"}
EMBEDDING_FILES = frozenset({"serving_config.json", "model.onnx", "tokenizer.json"})
WHISPER = {"capability": "speech.transcription", "architecture": "whisper"}
WHISPER_FILES = frozenset(
    {"serving_config.json", "model.bin", "config.json", "vocabulary.txt", "tokenizer.json"}
)


@pytest.mark.parametrize(
    ("capability", "config", "files", "message"),
    [
        ("rag.embedding@1", None, EMBEDDING_FILES - {"serving_config.json"},
         "serving_config.json: expected a JSON object describing the model (docs/models.md), found none"),
        ("rag.embedding@1", MINILM, EMBEDDING_FILES - {"model.onnx"},
         "model.onnx: expected a file (the default of `onnx_file`) in the folder, found none"),
        ("rag.embedding@1", {**MINILM, "tokenizer_file": "tok.json"}, EMBEDDING_FILES,
         "tok.json: expected a file (named by `tokenizer_file`) in the folder, found none"),
        ("rag.embedding@1", {**MINILM, "dimension": "384"}, EMBEDDING_FILES,
         'serving_config.json: `dimension`: expected a whole number ≥ 1, found "384"'),
        ("rag.embedding@1", {k: v for k, v in MINILM.items() if k != "dimension"}, EMBEDDING_FILES,
         "serving_config.json: `dimension`: expected a whole number ≥ 1, found nothing"),
        ("rag.embedding@1", {**MINILM, "pooling": "max"}, EMBEDDING_FILES,
         'serving_config.json: `pooling`: expected "mean" or "cls", found "max"'),
        ("rag.embedding@1", {**MINILM, "max_length": 1}, EMBEDDING_FILES,
         "serving_config.json: `max_length`: expected a whole number ≥ 2, found 1"),
        ("rag.reranking@1", MINILM, EMBEDDING_FILES,
         'serving_config.json: `capability`: expected "rag.reranking", found "rag.embedding"'),
        ("rag.embedding@1", {**MINILM, "input_type_prefixes": {"search": "search: "}}, EMBEDDING_FILES,
         'serving_config.json: `input_type_prefixes`: expected an object mapping "query" and/or "document" '
         'to a prefix text, found {"search": "search: "}'),
        ("rag.reranking@1", {"scoring": "colbert"}, EMBEDDING_FILES,
         'serving_config.json: `scoring`: expected "cross_encoder" or "biencoder", found "colbert"'),
        ("document.ocr@1", {}, frozenset({"serving_config.json", "det.onnx", "rec.onnx"}),
         "keys.txt: expected a file (the default of `keys_file`) in the folder, found none"),
        ("speech.transcription@1", WHISPER, WHISPER_FILES - {"vocabulary.txt"},
         "vocabulary.txt: expected a file (the default of `vocabulary.txt`) in the folder, found none"),
        ("image.captioning@1", {}, frozenset(),
         '--capability: expected document.ocr or rag.embedding or rag.reranking or speech.transcription or '
         'vision.embedding, found "image.captioning@1"'),
    ],
)  # fmt: skip
def test_a_broken_layout_is_refused_naming_what_is_wrong(
    capability: str, config: dict[str, object] | None, files: frozenset[str], message: str
) -> None:
    assert [str(problem) for problem in problems(capability, config, files)] == [message]


@pytest.mark.parametrize(
    ("capability", "config", "files"),
    [
        ("rag.embedding@1", MINILM, EMBEDDING_FILES),
        (
            "rag.embedding@1",
            {**MINILM, "input_type_prefixes": {"query": "query: ", "document": "passage: "}},
            EMBEDDING_FILES,
        ),
        ("rag.reranking@1", {"capability": "rag.reranking", "scoring": "biencoder"}, EMBEDDING_FILES),
        ("speech.transcription@1", WHISPER, WHISPER_FILES),
        ("vision.embedding@1", {"dimension": 512}, frozenset({"serving_config.json", "model.onnx"})),
    ],
)
def test_a_valid_layout_has_no_problems(
    capability: str, config: dict[str, object], files: frozenset[str]
) -> None:
    assert problems(capability, config, files) == []


def test_an_embeddings_profile_is_read_from_its_serving_config() -> None:
    assert profile("rag.embedding@1", MINILM) == {
        "dimension": "384",
        "normalized": "true",
        "input_semantics": "symmetric",
        "max_length": "256",
        "pooling": "mean",
    }
    assert profile("speech.transcription@1", WHISPER) == {}


def test_a_serving_config_that_is_not_json_is_a_problem_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "serving_config.json").write_text("{dimension: 384")
    config, present, problem = read_folder(tmp_path)
    assert (config, present) == (None, frozenset({"serving_config.json"}))
    assert str(problem).startswith("serving_config.json: expected valid JSON, found JSONDecodeError")


def test_a_folders_files_are_listed_with_their_subfolders(tmp_path: Path) -> None:
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text("{}")
    (tmp_path / "serving_config.json").write_text(json.dumps(MINILM))
    config, present, problem = read_folder(tmp_path)
    assert (config, problem) == (MINILM, None)
    assert present == {"serving_config.json", "1_Pooling/config.json"}
