"""speech.transcription over a generated CTC model (tests/support/speech.py): tones that spell a
known text, through WAV decoding, resampling, mel features, ONNX Runtime, greedy CTC and segment
timing."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from nodeagent.adapters.base import run_rows
from nodeagent.adapters.speech import SpeechTranscriptionAdapter, validate_transcription
from nodeagent.runtimes.base import RuntimeOptions
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from streams.codes import ServingError
from streams.contracts import TranscriptionInput, TranscriptionOutput, TranscriptSegment
from tests.support.speech import GAP_S, PAUSE_S, TONE_S, VOCABULARY, speak, wav, write_speech_model


def _request(data: bytes, **fields: Any) -> TranscriptionInput:
    return TranscriptionInput(audio_base64=base64.b64encode(data).decode("ascii"), **fields)


def _runtime(model_dir: Path) -> OnnxRuntimeCpu:
    runtime = OnnxRuntimeCpu()
    runtime.load(model_dir / "model.onnx", RuntimeOptions(intra_op_threads=1))
    return runtime


@pytest.fixture(scope="module")
def speech_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_speech_model(tmp_path_factory.mktemp("speech") / "tiny-ctc")


@pytest.fixture(scope="module")
def adapter(speech_dir: Path) -> SpeechTranscriptionAdapter:
    return SpeechTranscriptionAdapter.from_model_dir(speech_dir)


@pytest.fixture(scope="module")
def runtime(speech_dir: Path) -> OnnxRuntimeCpu:
    return _runtime(speech_dir)


def test_tones_spelling_a_phrase_are_transcribed_to_it(
    adapter: SpeechTranscriptionAdapter, runtime: OnnxRuntimeCpu
) -> None:
    (result,) = run_rows(adapter, runtime, [_request(wav(speak(["hello world"])))])
    assert result.text == "hello world"
    assert [segment.text for segment in result.segments] == ["hello world"]


def test_a_long_pause_splits_the_transcript_into_timed_segments(
    adapter: SpeechTranscriptionAdapter, runtime: OnnxRuntimeCpu
) -> None:
    signal = speak(["good day", "it's me"])
    (result,) = run_rows(adapter, runtime, [_request(wav(signal))])
    assert result.text == "good day it's me"
    first, second = result.segments
    assert (first.text, second.text) == ("good day", "it's me")
    first_end = 0.2 + len("good day") * (TONE_S + GAP_S) - GAP_S
    assert first.start_s == pytest.approx(0.2, abs=0.03)
    assert first.end_s == pytest.approx(first_end, abs=0.03)
    assert second.start_s == pytest.approx(first_end + GAP_S + PAUSE_S, abs=0.03)
    assert result.duration_s == pytest.approx(len(signal) / 16_000)


@pytest.mark.parametrize(
    ("rate", "channels", "width"), [(44_100, 2, 2), (22_050, 1, 3), (48_000, 1, 4), (32_000, 1, 1)]
)
def test_other_rates_widths_and_stereo_are_converted_to_16k_mono(
    adapter: SpeechTranscriptionAdapter, runtime: OnnxRuntimeCpu, rate: int, channels: int, width: int
) -> None:
    recording = wav(speak(["quiet fox"], rate=rate), rate=rate, channels=channels, width=width)
    (result,) = run_rows(adapter, runtime, [_request(recording)])
    assert result.text == "quiet fox"


def test_recordings_of_different_lengths_share_a_batch(
    adapter: SpeechTranscriptionAdapter, runtime: OnnxRuntimeCpu
) -> None:
    requests = [_request(wav(speak(["a"]))), _request(wav(speak(["a much longer one"])))]
    assert [r.text for r in run_rows(adapter, runtime, requests)] == ["a", "a much longer one"]


def test_output_round_trips_through_the_contract_json(
    adapter: SpeechTranscriptionAdapter, runtime: OnnxRuntimeCpu
) -> None:
    (result,) = run_rows(adapter, runtime, [_request(wav(speak(["ok"])))])
    encoded = msgspec.json.encode(result)
    assert msgspec.json.decode(encoded, type=TranscriptionOutput) == result


def test_silence_transcribes_to_no_segments(
    adapter: SpeechTranscriptionAdapter, runtime: OnnxRuntimeCpu
) -> None:
    (result,) = run_rows(adapter, runtime, [_request(wav(np.zeros(8_000)))])
    assert (result.text, result.segments, result.duration_s) == ("", [], 0.5)


def test_audio_over_120_seconds_is_invalid_input(adapter: SpeechTranscriptionAdapter) -> None:
    long_silence = wav(np.zeros(121 * 8_000), rate=8_000, width=1)
    with pytest.raises(ServingError) as raised:
        adapter.preprocess([_request(long_silence)])
    assert raised.value.code == "INVALID_INPUT"
    assert "120" in raised.value.message


@pytest.mark.parametrize(
    "payload",
    ["not base64 at all!", base64.b64encode(b"RIFF\x00\x00\x00\x00WAVEjunk").decode(), ""],
    ids=["bad-base64", "broken-wav", "empty"],
)
def test_undecodable_audio_is_invalid_input(adapter: SpeechTranscriptionAdapter, payload: str) -> None:
    with pytest.raises(ServingError) as raised:
        adapter.preprocess([TranscriptionInput(audio_base64=payload)])
    assert raised.value.code == "INVALID_INPUT"


def test_a_language_the_model_does_not_know_is_invalid_input(adapter: SpeechTranscriptionAdapter) -> None:
    with pytest.raises(ServingError) as raised:
        adapter.preprocess([_request(wav(speak(["hi"])), language="fr")])
    assert raised.value.code == "INVALID_INPUT"


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"prompt": "context"}, "leave `prompt` out"), ({"temperature": 0.4}, "decodes greedily")],
)
def test_a_prompt_or_sampling_a_ctc_model_cannot_honour_is_refused_saying_so(
    adapter: SpeechTranscriptionAdapter, fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ServingError, match=message) as raised:
        adapter.preprocess([_request(wav(speak(["hi"])), **fields)])
    assert raised.value.code == "INVALID_INPUT"


def test_non_finite_model_scores_are_invalid_output(tmp_path: Path) -> None:
    model_dir = write_speech_model(tmp_path / "nan", poison_with_nan=True)
    adapter = SpeechTranscriptionAdapter.from_model_dir(model_dir)
    with pytest.raises(ServingError) as raised:
        run_rows(adapter, _runtime(model_dir), [_request(wav(speak(["hi"])))])
    assert raised.value.code == "INVALID_OUTPUT"


def test_scores_over_a_different_vocabulary_are_invalid_output(
    speech_dir: Path, runtime: OnnxRuntimeCpu
) -> None:
    adapter = SpeechTranscriptionAdapter(
        VOCABULARY[:-1], SpeechTranscriptionAdapter.from_model_dir(speech_dir).config
    )
    with pytest.raises(ServingError) as raised:
        run_rows(adapter, runtime, [_request(wav(speak(["hi"])))])
    assert raised.value.code == "INVALID_OUTPUT"


@pytest.mark.parametrize(
    "output",
    [
        TranscriptionOutput(text="", segments=[], duration_s=0.0),
        TranscriptionOutput(text="x", segments=[], duration_s=121.0),
        TranscriptionOutput(text="x", segments=[TranscriptSegment(0.5, 2.5, "x")], duration_s=2.0),
        TranscriptionOutput(
            text="a b",
            segments=[TranscriptSegment(1.0, 1.5, "a"), TranscriptSegment(0.2, 0.4, "b")],
            duration_s=2.0,
        ),
        TranscriptionOutput(text="", segments=[TranscriptSegment(0.1, 0.2, "")], duration_s=1.0),
        TranscriptionOutput(text="x", segments=[TranscriptSegment(float("nan"), 0.2, "x")], duration_s=1.0),
    ],
    ids=["zero-duration", "over-limit", "past-the-end", "out-of-order", "empty-segment", "nan-time"],
)
def test_transcripts_that_break_the_contract_are_invalid_output(output: TranscriptionOutput) -> None:
    with pytest.raises(ServingError) as raised:
        validate_transcription(output)
    assert raised.value.code == "INVALID_OUTPUT"
