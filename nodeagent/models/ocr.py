"""Assemble a servable PP-OCRv4 model directory from the `rapidocr-onnxruntime` wheel (no model hub).

The wheel ships the ONNX detector, recogniser and angle classifier under `rapidocr_onnxruntime/models/`.
The recogniser's character dictionary is not a file in the wheel: it is stored in the ONNX model's
own metadata (key `character`, one character per line), so it is written out as `keys.txt` here.
Only the ONNX files are used; rapidocr's Python code (and its opencv dependency) is not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import onnxruntime as ort

from nodeagent.models.pull import _copy_if_changed, _installed_file
from streams import codes
from streams.codes import ServingError

OCR_PACKAGE = "rapidocr-onnxruntime"
MODEL_ID = "PaddlePaddle/PP-OCRv4 (ch, mobile)"
WHEEL_FILES = {
    "detection": "models/ch_PP-OCRv4_det_infer.onnx",
    "recognition": "models/ch_PP-OCRv4_rec_infer.onnx",
    "classifier": "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
}
DETECTION_FILE = "det.onnx"
RECOGNITION_FILE = "rec.onnx"
CLASSIFIER_FILE = "cls.onnx"
KEYS_FILE = "keys.txt"
SERVING_CONFIG_FILE = "serving_config.json"
CHARACTER_METADATA_KEY = "character"


def locate_ppocr_sources(*, install_missing: bool = True) -> dict[str, Path]:
    """Paths of the wheel's detector, recogniser and classifier ONNX files."""
    found = {key: _installed_file(OCR_PACKAGE, f"/{suffix}") for key, suffix in WHEEL_FILES.items()}
    if install_missing and any(path is None for path in found.values()):
        # --no-deps: opencv, shapely and pyclipper serve rapidocr's own pipeline, which we never import.
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", OCR_PACKAGE], check=True)
        found = {key: _installed_file(OCR_PACKAGE, f"/{suffix}") for key, suffix in WHEEL_FILES.items()}
    missing = sorted(key for key, path in found.items() if path is None)
    if len(missing) == len(found):
        raise ServingError(
            codes.ARTIFACT_INCOMPLETE.code,
            f"{OCR_PACKAGE} is not installed (pip install --no-deps {OCR_PACKAGE})",
            param=OCR_PACKAGE,
        )
    if missing:
        raise ServingError(
            codes.ARTIFACT_INCOMPLETE.code, f"{OCR_PACKAGE} lacks the {missing} model(s)", param=OCR_PACKAGE
        )
    return {key: path for key, path in found.items() if path is not None}


def recognition_characters(recognition_onnx: Path) -> list[str]:
    """The recogniser's dictionary from its ONNX metadata, in class order (without blank and space)."""
    session = ort.InferenceSession(str(recognition_onnx), providers=["CPUExecutionProvider"])
    text: str | None = session.get_modelmeta().custom_metadata_map.get(CHARACTER_METADATA_KEY)
    if not text:
        raise ServingError(
            codes.ARTIFACT_INCOMPLETE.code, f"{recognition_onnx.name} carries no character dictionary"
        )
    classes = int(session.get_outputs()[0].shape[-1])
    characters = text.split("\n")
    if len(characters) + 2 != classes:  # + CTC blank in front and space at the end
        raise ServingError(
            codes.ARTIFACT_INCOMPLETE.code,
            f"dictionary has {len(characters)} characters but the model emits {classes} classes",
        )
    return characters


def ppocr_serving_config() -> dict[str, Any]:
    """The OCR settings the adapter reads (OcrConfig); PP-OCR's published inference settings."""
    return {
        "capability": "document.ocr",
        "model_id": MODEL_ID,
        "detection_file": DETECTION_FILE,
        "recognition_file": RECOGNITION_FILE,
        "classifier_file": CLASSIFIER_FILE,
        "keys_file": KEYS_FILE,
        "use_space_char": True,
        "text_score": 0.5,
        "recognition_batch": 8,
        "detection": {
            "limit_side_len": 736,
            "max_side_len": 2016,
            "thresh": 0.3,
            "box_thresh": 0.5,
            "unclip_ratio": 1.6,
            "mean": [0.5, 0.5, 0.5],
            "std": [0.5, 0.5, 0.5],
            "bgr": True,
        },
        "recognition": {
            "height": 48,
            "min_width": 320,
            "max_width": 2400,
            "mean": [0.5, 0.5, 0.5],
            "std": [0.5, 0.5, 0.5],
            "bgr": True,
        },
        "sources": {OCR_PACKAGE: version(OCR_PACKAGE)},
    }


def _write_text_if_changed(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(path)


def pull_ppocr(dest_dir: Path, *, install_missing: bool = True) -> Path:
    """Write det.onnx, rec.onnx, cls.onnx, keys.txt and serving_config.json into `dest_dir`; return it."""
    sources = locate_ppocr_sources(install_missing=install_missing)
    characters = recognition_characters(sources["recognition"])
    dest_dir.mkdir(parents=True, exist_ok=True)
    _copy_if_changed(sources["detection"], dest_dir / DETECTION_FILE)
    _copy_if_changed(sources["recognition"], dest_dir / RECOGNITION_FILE)
    _copy_if_changed(sources["classifier"], dest_dir / CLASSIFIER_FILE)
    _write_text_if_changed(dest_dir / KEYS_FILE, "\n".join(characters) + "\n")
    config_text = json.dumps(ppocr_serving_config(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    _write_text_if_changed(dest_dir / SERVING_CONFIG_FILE, config_text)
    return dest_dir
