"""Text detection for document.ocr: a DB (differentiable binarisation) model's probability map → line boxes.

PP-OCR's detector outputs, per pixel of the (resized) page, the probability that it lies inside a
text region. Boxes are the connected components of the thresholded map, scored by their mean
probability and grown back by the "unclip" margin, because DB is trained on shrunk text regions.
Axis-aligned boxes suffice for the upright pages this capability serves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from nodeagent.adapters.base import PreparedBatch, invalid_output, pick_output
from nodeagent.adapters.imaging import RgbImage, resize, to_chw_float
from nodeagent.runtimes.base import Tensor

STRIDE = 32  # the detector's input sides must be multiples of its total downsampling


@dataclass(frozen=True)
class DetectionConfig:
    limit_side_len: int = 736  # the short side is scaled up to at least this…
    max_side_len: int = 2016  # …and the long side down to at most this
    thresh: float = 0.3  # pixel probability that counts as text
    box_thresh: float = 0.5  # mean probability a component needs to become a box
    unclip_ratio: float = 1.6
    min_box_side: int = 3  # on the probability map; smaller components are noise
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    bgr: bool = True  # PaddleOCR models were trained on OpenCV's BGR channel order
    output_name: str | None = None


@dataclass(frozen=True)
class TextBox:
    x0: float
    y0: float
    x1: float
    y1: float
    score: float

    @property
    def height(self) -> float:
        return self.y1 - self.y0


@dataclass(frozen=True)
class DetectionBatch(PreparedBatch):
    image_sizes: tuple[tuple[int, int], ...] = ()  # (width, height) of each original page


def detector_input_size(width: int, height: int, config: DetectionConfig) -> tuple[int, int]:
    """(width, height) to resize a page to: short side ≥ limit, long side ≤ max, multiples of 32."""
    scale = max(1.0, config.limit_side_len / min(width, height))
    scale = min(scale, config.max_side_len / max(width, height))
    return (
        max(STRIDE, round(width * scale / STRIDE) * STRIDE),
        max(STRIDE, round(height * scale / STRIDE) * STRIDE),
    )


def _runs(mask: NDArray[np.bool_]) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.intp]]:
    """Horizontal runs of True as (row, start, end-exclusive), in row-major order."""
    padded = np.pad(mask.astype(np.int8), ((0, 0), (1, 1)))
    edges = np.diff(padded, axis=1)
    rows, starts = np.nonzero(edges == 1)
    _, ends = np.nonzero(edges == -1)
    return rows, starts, ends


def _find(parent: list[int], index: int) -> int:
    while parent[index] != index:
        parent[index] = parent[parent[index]]
        index = parent[index]
    return index


def label_runs(rows: NDArray[np.intp], starts: NDArray[np.intp], ends: NDArray[np.intp]) -> NDArray[np.intp]:
    """Component label of each run: runs on adjacent rows that overlap (4-connectivity) are joined."""
    parent = list(range(len(rows)))
    row_first = np.searchsorted(rows, np.arange(int(rows.max(initial=0)) + 2))
    for row in range(1, len(row_first) - 1):
        above = range(row_first[row - 1], row_first[row])
        here = range(row_first[row], row_first[row + 1])
        if not above or not here:
            continue
        i, j = above.start, here.start
        while i < above.stop and j < here.stop:  # both rows' runs are sorted by start: sweep
            if starts[i] < ends[j] and starts[j] < ends[i]:
                a, b = _find(parent, i), _find(parent, j)
                if a != b:
                    parent[max(a, b)] = min(a, b)
            if ends[i] < ends[j]:
                i += 1
            else:
                j += 1
    return np.asarray([_find(parent, index) for index in range(len(parent))], dtype=np.intp)


def boxes_from_probability_map(probability: NDArray[Any], config: DetectionConfig) -> list[TextBox]:
    """Boxes in probability-map pixels: threshold, dilate, connect, score, unclip."""
    text = probability > config.thresh
    dilated = text.copy()  # a 2x2 dilation joins characters the map separates by one pixel
    dilated[1:, :] |= text[:-1, :]
    dilated[:, 1:] |= text[:, :-1]
    dilated[1:, 1:] |= text[:-1, :-1]
    rows, starts, ends = _runs(dilated)
    if len(rows) == 0:
        return []
    labels = label_runs(rows, starts, ends)
    prefix = np.pad(np.cumsum(probability, axis=1, dtype=np.float64), ((0, 0), (1, 0)))
    run_sums = prefix[rows, ends] - prefix[rows, starts]
    roots, component = np.unique(labels, return_inverse=True)
    count = len(roots)
    x0 = np.full(count, np.iinfo(np.intp).max)
    y0 = np.full(count, np.iinfo(np.intp).max)
    x1 = np.zeros(count, dtype=np.intp)
    y1 = np.zeros(count, dtype=np.intp)
    np.minimum.at(x0, component, starts)
    np.minimum.at(y0, component, rows)
    np.maximum.at(x1, component, ends)
    np.maximum.at(y1, component, rows + 1)
    sums = np.bincount(component, weights=run_sums, minlength=count)
    pixels = np.bincount(component, weights=ends - starts, minlength=count)
    height, width = probability.shape
    boxes: list[TextBox] = []
    for k in range(count):
        box_w, box_h = float(x1[k] - x0[k]), float(y1[k] - y0[k])
        score = float(sums[k] / pixels[k])
        if min(box_w, box_h) < config.min_box_side or score < config.box_thresh:
            continue
        margin = box_w * box_h * config.unclip_ratio / (2.0 * (box_w + box_h))
        boxes.append(
            TextBox(
                max(0.0, float(x0[k]) - margin),
                max(0.0, float(y0[k]) - margin),
                min(float(width), float(x1[k]) + margin),
                min(float(height), float(y1[k]) + margin),
                score,
            )
        )
    return boxes


def reading_order(boxes: Sequence[TextBox]) -> list[list[TextBox]]:
    """Boxes grouped into lines (vertical overlap over half the smaller height), top to bottom, left to right."""
    lines: list[list[TextBox]] = []
    for box in sorted(boxes, key=lambda b: (b.y0 + b.y1) / 2):
        if lines:
            last = lines[-1][-1]
            overlap = min(last.y1, box.y1) - max(last.y0, box.y0)
            if overlap > 0.5 * min(last.height, box.height):
                lines[-1].append(box)
                continue
        lines.append([box])
    return [sorted(line, key=lambda b: b.x0) for line in lines]


class TextDetectionAdapter:
    """Rows are decoded pages (RGB uint8); results are each page's text boxes in page pixels."""

    capability = "document.ocr"
    stage = "detection"

    def __init__(self, config: DetectionConfig) -> None:
        self.config = config

    def count_tokens(self, item: RgbImage) -> int:
        width, height = detector_input_size(item.shape[1], item.shape[0], self.config)
        return (width // STRIDE) * (height // STRIDE)

    def preprocess(self, items: Sequence[RgbImage]) -> PreparedBatch:
        sizes = [detector_input_size(page.shape[1], page.shape[0], self.config) for page in items]
        batch_w = max(width for width, _ in sizes)
        batch_h = max(height for _, height in sizes)
        pixels = np.zeros((len(items), 3, batch_h, batch_w), dtype=np.float32)
        for row, (page, (width, height)) in enumerate(zip(items, sizes, strict=True)):
            pixels[row, :, :height, :width] = to_chw_float(
                resize(page, width, height), self.config.mean, self.config.std, bgr=self.config.bgr
            )
        return DetectionBatch(
            feeds={"x": pixels},
            token_counts=tuple((w // STRIDE) * (h // STRIDE) for w, h in sizes),
            image_sizes=tuple((page.shape[1], page.shape[0]) for page in items),
        )

    def postprocess(self, batch: PreparedBatch, outputs: Mapping[str, Tensor]) -> list[list[TextBox]]:
        if not isinstance(batch, DetectionBatch):
            raise TypeError("TextDetectionAdapter.postprocess needs the DetectionBatch it prepared")
        maps = np.asarray(pick_output(outputs, self.config.output_name), dtype=np.float32)
        if maps.ndim == 4 and maps.shape[1] == 1:
            maps = maps[:, 0]
        if maps.ndim != 3 or maps.shape[0] != batch.rows:
            raise invalid_output(f"detection output shape {maps.shape} does not fit {batch.rows} pages")
        if not np.all(np.isfinite(maps)):
            raise invalid_output("detection output has non-finite values")
        results: list[list[TextBox]] = []
        for row, (width, height) in enumerate(batch.image_sizes):
            fed_w, fed_h = detector_input_size(width, height, self.config)
            scale_x, scale_y = width / fed_w, height / fed_h
            found = boxes_from_probability_map(maps[row, :fed_h, :fed_w], self.config)
            results.append(
                [
                    TextBox(b.x0 * scale_x, b.y0 * scale_y, b.x1 * scale_x, b.y1 * scale_y, b.score)
                    for b in found
                ]
            )
        return results

    def validate_output(self, batch: PreparedBatch, results: Sequence[list[TextBox]]) -> None:
        if len(results) != batch.rows:
            raise invalid_output(f"expected boxes for {batch.rows} pages, got {len(results)}")
        sizes = batch.image_sizes if isinstance(batch, DetectionBatch) else ()
        for boxes, (width, height) in zip(results, sizes, strict=True):
            for box in boxes:
                if not (0 <= box.x0 < box.x1 <= width + 1e-3 and 0 <= box.y0 < box.y1 <= height + 1e-3):
                    raise invalid_output(f"text box {box} lies outside its {width}x{height} page")
                if not math.isfinite(box.score):
                    raise invalid_output("text box has a non-finite score")
