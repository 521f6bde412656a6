"""What a model folder must hold to serve each capability (docs/models.md), checked before import.

Pure: given the capability, the folder's file names and its parsed `serving_config.json`, the
problems (each naming the file, the key and what was expected) and, for a folder with none, the
candidate's runtime profile read from the config (an embedding's dimension, normalisation, input
semantics, max length and pooling, from which its embedding space is derived). `read_folder` is the I/O edge.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVING_CONFIG = "serving_config.json"
Config = Mapping[str, Any]


@dataclass(frozen=True)
class Problem:
    file: str
    key: str  # "" when the file itself is missing or unreadable
    expected: str
    found: str = ""

    def __str__(self) -> str:
        where = f"{self.file}: `{self.key}`" if self.key else self.file
        found = f", found {self.found}" if self.found else ""
        return f"{where}: expected {self.expected}{found}"


def _whole(config: Config, key: str, default: int | None, low: int) -> Problem | None:
    value = config.get(key, default)
    if isinstance(value, int) and not isinstance(value, bool) and value >= low:
        return None
    found = "nothing" if value is None else json.dumps(value)
    return Problem(SERVING_CONFIG, key, f"a whole number ≥ {low}", found)


def _one_of(config: Config, key: str, default: str, allowed: tuple[str, ...]) -> Problem | None:
    value = config.get(key, default)
    if value in allowed:
        return None
    return Problem(SERVING_CONFIG, key, " or ".join(json.dumps(a) for a in allowed), json.dumps(value))


def _file(config: Config, key: str, default: str, present: frozenset[str]) -> Problem | None:
    name = config.get(key, default)
    if isinstance(name, str) and name in present:
        return None
    named = f"(named by `{key}`)" if key in config else f"(the default of `{key}`)"
    return Problem(str(name), "", f"a file {named} in the folder", "none")


def _prefixes(config: Config) -> Problem | None:
    """`input_type_prefixes`, if given: "query" and/or "document" -> the text put before each input
    of a request with that `input_type`."""
    value = config.get("input_type_prefixes", {})
    if isinstance(value, dict) and all(
        k in ("query", "document") and isinstance(v, str) for k, v in value.items()
    ):
        return None
    expected = 'an object mapping "query" and/or "document" to a prefix text'
    return Problem(SERVING_CONFIG, "input_type_prefixes", expected, json.dumps(value))


def _embedding(config: Config, present: frozenset[str]) -> list[Problem | None]:
    return [
        _file(config, "onnx_file", "model.onnx", present),
        _file(config, "tokenizer_file", "tokenizer.json", present),
        _whole(config, "dimension", None, 1),
        _whole(config, "max_length", 256, 2),
        _one_of(config, "pooling", "mean", ("mean", "cls")),
        _prefixes(config),
    ]


def _reranking(config: Config, present: frozenset[str]) -> list[Problem | None]:
    return [
        _file(config, "onnx_file", "model.onnx", present),
        _file(config, "tokenizer_file", "tokenizer.json", present),
        _one_of(config, "scoring", "cross_encoder", ("cross_encoder", "biencoder")),
        _whole(config, "max_length", 512, 2),
    ]


def _ocr(config: Config, present: frozenset[str]) -> list[Problem | None]:
    return [
        _file(config, "detection_file", "det.onnx", present),
        _file(config, "recognition_file", "rec.onnx", present),
        _file(config, "keys_file", "keys.txt", present),
    ]


def _vision(config: Config, present: frozenset[str]) -> list[Problem | None]:
    return [
        _file(config, "onnx_file", "model.onnx", present),
        _whole(config, "dimension", None, 1),
        _whole(config, "image_size", 224, 1),
    ]


def _speech(config: Config, present: frozenset[str]) -> list[Problem | None]:
    if config.get("architecture") == "whisper":
        return [
            _file(config, "model_file", "model.bin", present),
            _file(config, "tokenizer_file", "tokenizer.json", present),
            _file({}, "config.json", "config.json", present),
            _file({}, "vocabulary.txt", "vocabulary.txt", present),
        ]
    return [
        _file(config, "onnx_file", "model.onnx", present),
        _file(config, "vocabulary_file", "vocabulary.json", present),
    ]


LAYOUTS: dict[str, Callable[[Config, frozenset[str]], list[Problem | None]]] = {
    "rag.embedding": _embedding,
    "rag.reranking": _reranking,
    "document.ocr": _ocr,
    "vision.embedding": _vision,
    "speech.transcription": _speech,
}


def problems(capability: str, config: Config | None, present: frozenset[str]) -> list[Problem]:
    """Everything wrong with the folder for `capability` (name@version or name), in file order."""
    name = capability.partition("@")[0]
    if name not in LAYOUTS:
        return [Problem("--capability", "", " or ".join(sorted(LAYOUTS)), json.dumps(capability))]
    if config is None:
        return [Problem(SERVING_CONFIG, "", "a JSON object describing the model (docs/models.md)", "none")]
    declared = config.get("capability")
    if declared is not None and str(declared).partition("@")[0] != name:
        return [Problem(SERVING_CONFIG, "capability", json.dumps(name), json.dumps(declared))]
    return [found for found in LAYOUTS[name](config, present) if found is not None]


def profile(capability: str, config: Config) -> dict[str, str]:
    """The candidate's runtime profile the config implies (empty but for embeddings; the space's id
    is derived from it at promotion)."""
    name = capability.partition("@")[0]
    if name not in ("rag.embedding", "vision.embedding"):
        return {}
    # The vision contract's vectors are unit length whoever normalised them.
    normalized = name == "vision.embedding" or config.get("normalize", True)
    declared = {
        "dimension": str(config["dimension"]),
        "normalized": "true" if normalized else "false",
        "input_semantics": str(config.get("input_semantics", "symmetric")),
        "max_length": str(config.get("max_length", "")),
        "pooling": str(config.get("pooling", "")),
    }
    return {key: value for key, value in declared.items() if value}


def read_folder(folder: Path) -> tuple[Config | None, frozenset[str], Problem | None]:
    """The folder's serving config (None if absent), its file names, and a problem reading it."""
    present = frozenset(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    if SERVING_CONFIG not in present:
        return None, present, None
    try:
        data = json.loads((folder / SERVING_CONFIG).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return None, present, Problem(SERVING_CONFIG, "", "valid JSON", f"{type(error).__name__}: {error}")
    if not isinstance(data, dict):
        return None, present, Problem(SERVING_CONFIG, "", "a JSON object", type(data).__name__)
    return data, present, None
