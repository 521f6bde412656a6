"""Text line recognition for document.ocr: a CRNN/SVTR model read out with greedy CTC.

Each line crop is scaled to the model's height keeping its aspect ratio, normalised, and padded
on the right to the widest line of the batch; the model emits one character distribution per
horizontal step, which greedy CTC turns into text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nodeagent.adapters.base import PreparedBatch, invalid_output, pick_output
from nodeagent.adapters.ctc import greedy_ctc, tokens_to_text
from nodeagent.adapters.imaging import RgbImage, resize, to_chw_float
from nodeagent.runtimes.base import Tensor

BLANK = "<blank>"


@dataclass(frozen=True)
class RecognitionConfig:
    height: int = 48
    min_width: int = 320  # PP-OCR pads every batch to at least its training width
    max_width: int = 2400  # longer lines are squeezed rather than fed unbounded
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    bgr: bool = True
    output_name: str | None = None


@dataclass(frozen=True)
class RecognizedLine:
    text: str
    confidence: float  # mean best-class probability of the emitted characters; 0 when empty


def load_vocabulary(keys_path: Path, *, use_space_char: bool = True) -> tuple[str, ...]:
    """Class index → character: blank first, then one character per line of the keys file, then space."""
    characters = keys_path.read_text(encoding="utf-8").split("\n")
    if characters and characters[-1] == "":
        characters.pop()  # the file's final newline ends the last line, it is not an entry
    return (BLANK, *characters, *([" "] if use_space_char else []))


class TextRecognitionAdapter:
    """Rows are line crops (RGB uint8); results are their text and confidence."""

    capability = "document.ocr"
    stage = "recognition"

    def __init__(self, vocabulary: Sequence[str], config: RecognitionConfig) -> None:
        if not vocabulary or vocabulary[0] != BLANK:
            raise ValueError("the vocabulary must start with the CTC blank")
        self.vocabulary = tuple(vocabulary)
        self.config = config

    def line_width(self, item: RgbImage) -> int:
        height, width = int(item.shape[0]), int(item.shape[1])
        return min(self.config.max_width, max(1, math.ceil(self.config.height * width / max(1, height))))

    def count_tokens(self, item: RgbImage) -> int:
        return self.line_width(item)

    def preprocess(self, items: Sequence[RgbImage]) -> PreparedBatch:
        widths = [self.line_width(item) for item in items]
        batch_width = max([self.config.min_width, *widths])
        pixels = np.zeros((len(items), 3, self.config.height, batch_width), dtype=np.float32)
        for row, (item, width) in enumerate(zip(items, widths, strict=True)):
            line = resize(item, width, self.config.height)
            pixels[row, :, :, :width] = to_chw_float(
                line, self.config.mean, self.config.std, bgr=self.config.bgr
            )
        return PreparedBatch(feeds={"x": pixels}, token_counts=tuple(widths))

    def postprocess(self, batch: PreparedBatch, outputs: Mapping[str, Tensor]) -> list[RecognizedLine]:
        scores = np.asarray(pick_output(outputs, self.config.output_name), dtype=np.float32)
        if scores.ndim != 3 or scores.shape[0] != batch.rows or scores.shape[2] != len(self.vocabulary):
            raise invalid_output(
                f"recognition output {scores.shape} does not fit {batch.rows} lines "
                f"and {len(self.vocabulary)} classes"
            )
        if not np.all(np.isfinite(scores)):
            raise invalid_output("recognition output has non-finite values")
        batch_width = batch.feeds["x"].shape[3]
        lines: list[RecognizedLine] = []
        for row, width in enumerate(batch.token_counts):
            steps = math.ceil(scores.shape[1] * width / batch_width)  # the rest only saw padding
            tokens = greedy_ctc(scores[row], blank=0, steps=steps)
            confidence = min(1.0, float(np.mean([t.score for t in tokens]))) if tokens else 0.0
            lines.append(RecognizedLine(tokens_to_text(tokens, self.vocabulary).strip(), confidence))
        return lines

    def validate_output(self, batch: PreparedBatch, results: Sequence[RecognizedLine]) -> None:
        if len(results) != batch.rows:
            raise invalid_output(f"expected {batch.rows} recognised lines, got {len(results)}")
        for line in results:
            if not (math.isfinite(line.confidence) and 0.0 <= line.confidence <= 1.0 + 1e-6):
                raise invalid_output(f"line confidence {line.confidence} is not a probability")
