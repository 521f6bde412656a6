"""Contract-level serving of `document.ocr`: one page in, its text lines out, over two runtimes.

Each page's reading goes through a DynamicBatcher as the other capabilities' rows do: it runs them
one call at a time off the event loop, so the health check's inference never races a serving one.
A batch of pages is read page by page (the detector takes one page size at a time).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from nodeagent.adapters.base import run_rows
from nodeagent.adapters.ocr import OcrPipeline, validate_ocr_output
from nodeagent.runtimes.base import Runtime
from nodeagent.worker.batching import DynamicBatcher
from nodeagent.worker.capabilities import BATCH_WAIT_S, MeasuredOutput, Timed, decode_input, served_alone
from streams import contracts
from streams.messages import WorkerTimings

# A white page and a white line: the test inference runs both models whatever the detector finds.
_TEST_PAGE = np.full((64, 256, 3), 255, dtype=np.uint8)
_TEST_LINE = np.full((48, 160, 3), 255, dtype=np.uint8)


PageReading = Callable[[], contracts.OcrOutput]  # one page's blocking read, for the batcher to run


def _read_pages(readings: Sequence[PageReading]) -> list[Timed[contracts.OcrOutput]]:
    started = time.perf_counter()
    outputs = [read() for read in readings]
    elapsed = (time.perf_counter() - started) * 1000
    return [Timed(output, len(readings), elapsed, 0) for output in outputs]


class OcrServer:
    capability = contracts.OCR.capability

    def __init__(
        self, pipeline: OcrPipeline, detector: Runtime, recognizer: Runtime, max_batch_size: int
    ) -> None:
        self.pipeline, self.detector, self.recognizer = pipeline, detector, recognizer
        self.batcher: DynamicBatcher[PageReading, Timed[contracts.OcrOutput]] = DynamicBatcher(
            _read_pages, max_batch_size=max_batch_size, max_wait_s=BATCH_WAIT_S
        )

    async def serve(self, payload: bytes, input_type: str = "") -> tuple[bytes, WorkerTimings]:
        started = time.perf_counter()
        request: contracts.OcrInput = decode_input(payload, contracts.OcrInput)
        page: PageReading = partial(self.pipeline.recognize, request, self.detector, self.recognizer)
        return await served_alone(self.batcher, page, started, time.perf_counter())

    def test_inference(self) -> MeasuredOutput:
        self._read_test_page()
        return MeasuredOutput()

    def _read_test_page(self) -> contracts.OcrOutput:
        output = self.pipeline.recognize_page(_TEST_PAGE, self.detector, self.recognizer)
        height, width = _TEST_PAGE.shape[:2]
        validate_ocr_output(output, width=width, height=height)
        run_rows(self.pipeline.recognition, self.recognizer, [_TEST_LINE])
        return output

    async def check(self) -> None:
        await self.batcher.submit([self._read_test_page])

    async def close(self) -> None:
        await self.batcher.close()
