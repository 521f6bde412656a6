"""`modelforge agent`'s CPU threads: a flag, else MODELFORGE_CPU_THREADS; a value that is not a
whole number ≥ 1 stops the agent before it connects, naming the setting (as does a
MODELFORGE_SPARE_WORKER other than 0 or 1). `modelforge models pull` writes each model it knows
into the artifact root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelforge import cli

_THREADS_REFUSAL = r"MODELFORGE_CPU_THREADS.*whole number ≥ 1"
_SPARE_REFUSAL = r"MODELFORGE_SPARE_WORKER must be 0 or 1"


@pytest.mark.parametrize(
    ("variable", "value", "refusal"),
    [
        *(("MODELFORGE_CPU_THREADS", value, _THREADS_REFUSAL) for value in ("0", "-2", "two", "1.5")),
        *(("MODELFORGE_SPARE_WORKER", value, _SPARE_REFUSAL) for value in ("yes", "2", " 1")),
    ],
)
def test_a_setting_out_of_its_range_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, value: str, refusal: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit, match=refusal):
        cli.main(["agent", "--node-id", "n1", "--artifact-root", str(tmp_path)])


def test_the_flag_wins_over_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MODELFORGE_CPU_THREADS", "5")
    with pytest.raises(SystemExit, match="not 0"):
        cli.main(["agent", "--node-id", "n1", "--artifact-root", str(tmp_path), "--cpu-threads", "0"])


@pytest.mark.parametrize(
    ("model", "folder", "capability"),
    [
        ("minilm", "all-MiniLM-L6-v2", "rag.embedding@1"),
        ("minilm-rerank", "minilm-biencoder-rerank", "rag.reranking@1"),
        ("ppocr", "pp-ocrv4", "document.ocr@1"),
        ("whisper-tiny-en", "whisper-tiny-en", "speech.transcription@1"),
    ],
)
def test_models_pull_writes_a_servable_folder_under_the_artifact_root(
    model: str, folder: str, capability: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["models", "pull", model, "--artifact-root", str(tmp_path)]) == 0
    config = json.loads((tmp_path / folder / "serving_config.json").read_text())
    assert config["capability"] == capability.partition("@")[0]
    assert f"({capability})" in capsys.readouterr().out
