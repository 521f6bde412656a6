"""vision.embedding: images → L2-normalised vectors in the deployment's embedding space.

Rows are single base64 images (a request's `images_base64` splits into rows, so images of several
requests can share a batch). Preprocessing is CLIP's: shortest side to the model's size, centre
crop, scale to 0..1, per-channel mean/std, NCHW float32. The model may return pooled vectors
[batch, dim], token states [batch, tokens, dim] (pooled here by `pooling`) or feature maps
[batch, channels, h, w] (averaged over space).

No real image-embedding model ships in a small wheel (CLIP's image tower is ~90 MB even as int8
and is only published on model hubs), so the unit tests run a small generated ONNX graph; see
docs/models.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from nodeagent.adapters.base import PreparedBatch, invalid_output, pick_output
from nodeagent.adapters.embedding import l2_normalize, validate_embeddings
from nodeagent.adapters.imaging import center_crop, decode_base64_image, resize_shortest_side, to_chw_float
from nodeagent.runtimes.base import Tensor
from streams.contracts import VisionEmbeddingOutput

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
POOLING_MODES = frozenset({"cls", "mean"})


@dataclass(frozen=True)
class VisionEmbeddingConfig:
    dimension: int = 512
    image_size: int = 224
    mean: tuple[float, float, float] = CLIP_MEAN
    std: tuple[float, float, float] = CLIP_STD
    pooling: str = "cls"  # for token-state outputs only
    normalize: bool = True  # False only for models whose output is already unit length
    input_name: str = "pixel_values"
    output_name: str | None = None
    onnx_file: str = "model.onnx"

    @classmethod
    def from_file(cls, path: Path) -> VisionEmbeddingConfig:
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VisionEmbeddingConfig:
        """The fields this config has (a serving config names others, `capability` among them)."""
        known: dict[str, Any] = {
            name: tuple(value) if isinstance(value, list) else value
            for name, value in data.items()
            if name in cls.__dataclass_fields__
        }
        config = cls(**known)
        if config.pooling not in POOLING_MODES:
            raise ValueError(f"pooling must be one of {sorted(POOLING_MODES)}")
        return config


@dataclass(frozen=True)
class VisionEmbeddingResult:
    vector: NDArray[np.float32]


class VisionEmbeddingAdapter:
    capability = "vision.embedding"

    def __init__(self, config: VisionEmbeddingConfig) -> None:
        self.config = config

    @classmethod
    def from_model_dir(
        cls, model_dir: Path, config_file: str = "serving_config.json"
    ) -> VisionEmbeddingAdapter:
        return cls(VisionEmbeddingConfig.from_file(model_dir / config_file))

    def count_tokens(self, item: str) -> int:
        return 1  # every image is fed at the same fixed size

    def preprocess(self, items: Sequence[str]) -> PreparedBatch:
        size = self.config.image_size
        pixels = np.empty((len(items), 3, size, size), dtype=np.float32)
        for row, encoded in enumerate(items):
            image = center_crop(resize_shortest_side(decode_base64_image(encoded), size), size)
            pixels[row] = to_chw_float(image, self.config.mean, self.config.std)
        return PreparedBatch(feeds={self.config.input_name: pixels}, token_counts=(1,) * len(items))

    def postprocess(self, batch: PreparedBatch, outputs: Mapping[str, Tensor]) -> list[VisionEmbeddingResult]:
        output = np.asarray(pick_output(outputs, self.config.output_name), dtype=np.float32)
        if output.shape[:1] != (batch.rows,):
            raise invalid_output(f"vision output {output.shape} does not fit {batch.rows} images")
        pooled = self._pool(output)
        vectors = l2_normalize(pooled) if self.config.normalize else pooled
        return [VisionEmbeddingResult(vector=vectors[row]) for row in range(batch.rows)]

    def _pool(self, output: NDArray[np.float32]) -> NDArray[np.float32]:
        if output.ndim == 2:  # already pooled (and usually projected) by the model
            return output
        if output.ndim == 3:  # token states [batch, tokens, dim]
            return output[:, 0, :] if self.config.pooling == "cls" else output.mean(axis=1)
        if output.ndim == 4:  # feature maps [batch, channels, h, w]
            return np.asarray(output.mean(axis=(2, 3)), dtype=np.float32)
        raise invalid_output(f"vision output has rank {output.ndim}")

    def validate_output(self, batch: PreparedBatch, results: Sequence[VisionEmbeddingResult]) -> None:
        validate_embeddings(
            [result.vector for result in results],
            expected_count=batch.rows,
            dimension=self.config.dimension,
            normalized=True,  # the contract's vision vectors are unit length, whoever normalised them
        )


def vision_output(results: Sequence[VisionEmbeddingResult], dimension: int) -> VisionEmbeddingOutput:
    """The contract's output for one request's rows, in request order."""
    return VisionEmbeddingOutput(
        embeddings=[[float(value) for value in result.vector] for result in results], dimension=dimension
    )
