"""speech.transcription@1 on the agent (a CTC model or Whisper): one recording a row through the dynamic batcher, each
transcript checked against the contract with its batch; warmed up and health-checked on half a
second of silence. Content is never logged."""

from __future__ import annotations

import base64
import time

from nodeagent.adapters.audio import silent_wav
from nodeagent.adapters.base import CapabilityAdapter, run_rows
from nodeagent.runtimes.base import Runtime
from nodeagent.worker.batching import DynamicBatcher
from nodeagent.worker.capabilities import (
    BATCH_WAIT_S,
    MeasuredOutput,
    Timed,
    decode_input,
    served_alone,
    timed_runner,
)
from streams import contracts
from streams.messages import WorkerTimings

_TEST_RECORDING = contracts.TranscriptionInput(
    audio_base64=base64.b64encode(silent_wav(0.5)).decode("ascii")  # transcribes to no segments
)


class TranscriptionServer:
    capability = contracts.TRANSCRIPTION.capability

    def __init__(
        self,
        adapter: CapabilityAdapter[contracts.TranscriptionInput, contracts.TranscriptionOutput],
        runtime: Runtime,
        max_batch_size: int,
    ) -> None:
        self.adapter, self.runtime = adapter, runtime
        self.batcher: DynamicBatcher[contracts.TranscriptionInput, Timed[contracts.TranscriptionOutput]] = (
            DynamicBatcher(
                timed_runner(adapter, runtime), max_batch_size=max_batch_size, max_wait_s=BATCH_WAIT_S
            )
        )

    async def serve(self, payload: bytes, input_type: str = "") -> tuple[bytes, WorkerTimings]:
        started = time.perf_counter()
        request: contracts.TranscriptionInput = decode_input(payload, contracts.TranscriptionInput)
        return await served_alone(self.batcher, request, started, time.perf_counter())

    def test_inference(self) -> MeasuredOutput:
        run_rows(self.adapter, self.runtime, [_TEST_RECORDING])
        return MeasuredOutput()

    async def check(self) -> None:
        await self.batcher.submit([_TEST_RECORDING])

    async def close(self) -> None:
        await self.batcher.close()
