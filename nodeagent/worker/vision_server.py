"""Serving `vision.embedding@1`: the contract's images in, one unit vector per image out.

Each image is a row of the deployment's dynamic batcher, so images of several requests share a
runtime call, as texts do for `rag.embedding@1`.
"""

from __future__ import annotations

import base64
import io
import time
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np
from PIL import Image

from nodeagent.adapters.base import run_rows
from nodeagent.adapters.embedding import validate_embeddings
from nodeagent.adapters.vision import VisionEmbeddingAdapter, VisionEmbeddingResult
from nodeagent.runtimes.base import Runtime
from nodeagent.worker.batching import DynamicBatcher
from nodeagent.worker.capabilities import (
    BATCH_WAIT_S,
    MeasuredOutput,
    Timed,
    VectorsReply,
    check_items,
    decode_input,
    float32_rows,
    measured_vectors,
    reply,
    served_vectors,
    timed_runner,
)
from streams import contracts
from streams.messages import WorkerTimings


@cache
def _test_images() -> tuple[str, ...]:
    """Two small PNGs (a colour gradient and its turn) for the warm-up, health and probe inference."""
    x = np.linspace(0, 255, 48, dtype=np.float32)[None, :].repeat(40, axis=0)
    y = np.linspace(0, 255, 40, dtype=np.float32)[:, None].repeat(48, axis=1)
    encoded = []
    for channels in ([x, y, 255 - x], [255 - y, x, y]):
        buffer = io.BytesIO()
        Image.fromarray(np.stack(channels, axis=2).astype(np.uint8)).save(buffer, "PNG")
        encoded.append(base64.b64encode(buffer.getvalue()).decode("ascii"))
    return tuple(encoded)


class VisionEmbeddingServer:
    capability = contracts.VISION_EMBEDDING.capability

    def __init__(self, adapter: VisionEmbeddingAdapter, runtime: Runtime, max_batch_size: int) -> None:
        self.adapter, self.runtime = adapter, runtime
        self.batcher: DynamicBatcher[str, Timed[VisionEmbeddingResult]] = DynamicBatcher(
            timed_runner(adapter, runtime), max_batch_size=max_batch_size, max_wait_s=BATCH_WAIT_S
        )

    async def serve(self, payload: bytes, input_type: str = "") -> tuple[bytes, WorkerTimings]:
        started = time.perf_counter()
        request: contracts.VisionEmbeddingInput = decode_input(payload, contracts.VisionEmbeddingInput)
        check_items(len(request.images_base64), contracts.VISION_EMBEDDING.limits)
        served = await served_vectors(
            self.batcher,
            request.images_base64,
            request.dimensions,
            dimension=self.adapter.config.dimension,
            normalize=True,  # the contract's image vectors are unit length, whoever normalised them
            started=started,
        )
        vectors = served.vectors
        output = VectorsReply(embeddings=float32_rows(vectors), dimension=vectors.shape[1])
        return reply(output, served.timings, served.ran)

    def test_inference(self) -> MeasuredOutput:
        vectors = [r.vector for r in run_rows(self.adapter, self.runtime, _test_images())]
        self._validate(vectors)
        return measured_vectors(vectors)

    async def check(self) -> None:
        self._validate([t.result.vector for t in await self.batcher.submit(list(_test_images()))])

    def _validate(self, vectors: Sequence[Any]) -> None:
        validate_embeddings(
            vectors,
            expected_count=len(_test_images()),
            dimension=self.adapter.config.dimension,
            normalized=True,
        )

    async def close(self) -> None:
        await self.batcher.close()
