"""A worker loads a speech.transcription artifact set (verified, warmed up on silence) and serves
the contract: TranscriptionInput JSON in, TranscriptionOutput JSON out."""

from __future__ import annotations

import base64
from pathlib import Path

import msgspec

from artifacts import verify_artifact_set
from nodeagent.agent.residency import manifest_from_job
from nodeagent.worker.loading import load_blocking
from streams.contracts import TranscriptionInput, TranscriptionOutput
from tests.support.agents import manifest_records
from tests.support.speech import speak, wav, write_speech_model


async def test_a_speech_artifact_set_loads_and_serves_the_contract(tmp_path: Path) -> None:
    write_speech_model(tmp_path / "tiny-ctc")
    verified = verify_artifact_set(
        tmp_path / "tiny-ctc", manifest_from_job(manifest_records(tmp_path / "tiny-ctc"))
    )
    warm = load_blocking(verified, "speech.transcription@1", None, max_batch=4, cpu_threads=1)
    try:
        recording = base64.b64encode(wav(speak(["hello world"]))).decode()
        body, timings = await warm.server.serve(
            msgspec.json.encode(TranscriptionInput(audio_base64=recording))
        )
        output = msgspec.json.decode(body, type=TranscriptionOutput)
        assert (output.text, [s.text for s in output.segments]) == ("hello world", ["hello world"])
        assert timings.batch_size == 1
    finally:
        await warm.server.close()
        warm.runtime.unload()
