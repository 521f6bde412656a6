"""speech.transcription over a generated CTC model (no small real ASR model ships in a wheel).

The generated acoustic model is one linear layer and a log-softmax over log-mel frames: class k
(a character) scores the energy of mel band 20 + 2(k-1), the blank a constant. A recording made
of one pure tone per character, at the frequency where that band peaks, therefore spells a known
text, and every stage (WAV decoding, resampling, mel features, ONNX Runtime, greedy CTC, segment
timing) is exercised for real.
"""

from __future__ import annotations

import base64
import io
import json
import wave
from pathlib import Path

import msgspec
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from nodeagent.adapters.audio import FeatureConfig, mel_filterbank
from nodeagent.adapters.base import run_rows
from nodeagent.adapters.speech import SpeechTranscriptionAdapter, validate_transcription
from nodeagent.runtimes.base import RuntimeOptions
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from streams.codes import ServingError
from streams.contracts import TranscriptionInput, TranscriptionOutput, TranscriptSegment

VOCABULARY = ["<blank>", " ", *"abcdefghijklmnopqrstuvwxyz", "'"]
FEATURES = FeatureConfig()
TONE_S, GAP_S, PAUSE_S = 0.08, 0.04, 0.8


def _band(index: int) -> int:
    return 20 + 2 * (index - 1)


def _tone_hz(index: int) -> float:
    """The FFT bin frequency where the character's mel band peaks."""
    peak_bin = int(np.argmax(mel_filterbank(FEATURES)[_band(index)]))
    return peak_bin * FEATURES.sample_rate / FEATURES.n_fft


def _write_ctc_model(path: Path, *, poison_with_nan: bool = False) -> None:
    weights = np.zeros((FEATURES.n_mels, len(VOCABULARY)), dtype=np.float32)
    for index in range(1, len(VOCABULARY)):
        weights[_band(index), index] = 1.0
    bias = np.zeros(len(VOCABULARY), dtype=np.float32)  # blank scores 0: above silence, below a tone
    nodes = [
        helper.make_node("MatMul", ["features", "weights"], ["projected"]),
        helper.make_node("Add", ["projected", "bias"], ["logits"]),
        helper.make_node("LogSoftmax", ["logits"], ["log_probs_clean"], axis=-1),
    ]
    initializers = [numpy_helper.from_array(weights, "weights"), numpy_helper.from_array(bias, "bias")]
    if poison_with_nan:
        initializers.append(numpy_helper.from_array(np.array([np.nan], dtype=np.float32), "nan"))
        nodes.append(helper.make_node("Mul", ["log_probs_clean", "nan"], ["log_probs"]))
    else:
        nodes.append(helper.make_node("Identity", ["log_probs_clean"], ["log_probs"]))
    graph = helper.make_graph(
        nodes,
        "tiny_ctc",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", "time", FEATURES.n_mels])],
        [helper.make_tensor_value_info("log_probs", TensorProto.FLOAT, ["batch", "time", len(VOCABULARY)])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _model_dir(root: Path, **config: object) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    _write_ctc_model(root / "model.onnx", poison_with_nan=bool(config.pop("poison_with_nan", False)))
    (root / "vocabulary.json").write_text(json.dumps(VOCABULARY), encoding="utf-8")
    settings = {"capability": "speech.transcription", "language": "en", "input_name": "features", **config}
    (root / "serving_config.json").write_text(json.dumps(settings), encoding="utf-8")
    return root


def _speak(phrases: list[str], rate: int = 16_000) -> np.ndarray:
    """Tones spelling each phrase; phrases are separated by a long pause."""
    rng = np.random.default_rng(7)
    parts = [np.zeros(int(0.2 * rate))]
    for number, phrase in enumerate(phrases):
        if number:
            parts.append(np.zeros(int(PAUSE_S * rate)))
        for character in phrase:
            t = np.arange(int(TONE_S * rate)) / rate
            parts.append(0.5 * np.sin(2 * np.pi * _tone_hz(VOCABULARY.index(character)) * t))
            parts.append(np.zeros(int(GAP_S * rate)))
    parts.append(np.zeros(int(0.2 * rate)))
    signal = np.concatenate(parts)
    return signal + rng.normal(0.0, 1e-4, signal.shape)


def _wav(signal: np.ndarray, rate: int = 16_000, channels: int = 1, width: int = 2) -> bytes:
    scale = float(1 << (8 * width - 1)) - 1
    values = np.round(np.clip(signal, -1.0, 1.0) * scale).astype(np.int64)
    interleaved = np.repeat(values, channels)
    if width == 1:
        raw = (interleaved + 128).astype(np.uint8).tobytes()
    else:
        raw = b"".join(int(v).to_bytes(width, "little", signed=True) for v in interleaved)
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(width)
        writer.setframerate(rate)
        writer.writeframes(raw)
    return buffer.getvalue()


def _request(data: bytes, language: str | None = None) -> TranscriptionInput:
    return TranscriptionInput(audio_base64=base64.b64encode(data).decode("ascii"), language=language)


def _runtime(model_dir: Path) -> OnnxRuntimeCpu:
    runtime = OnnxRuntimeCpu()
    runtime.load(model_dir / "model.onnx", RuntimeOptions(intra_op_threads=1))
    return runtime


@pytest.fixture(scope="module")
def speech_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _model_dir(tmp_path_factory.mktemp("speech") / "tiny-ctc")


@pytest.fixture(scope="module")
def adapter(speech_dir: Path) -> SpeechTranscriptionAdapter:
    return SpeechTranscriptionAdapter.from_model_dir(speech_dir)


@pytest.fixture(scope="module")
def runtime(speech_dir: Path) -> OnnxRuntimeCpu:
    return _runtime(speech_dir)


def test_tones_spelling_a_phrase_are_transcribed_to_it(
    adapter: SpeechTranscriptionAdapter, runtime: OnnxRuntimeCpu
) -> None:
    (result,) = run_rows(adapter, runtime, [_request(_wav(_speak(["hello world"])))])
    assert result.text == "hello world"
    assert [segment.text for segment in result.segments] == ["hello world"]


def test_a_long_pause_splits_the_transcript_into_timed_segments(
    adapter: SpeechTranscriptionAdapter, runtime: OnnxRuntimeCpu
) -> None:
    signal = _speak(["good day", "it's me"])
    (result,) = run_rows(adapter, runtime, [_request(_wav(signal))])
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
    wav = _wav(_speak(["quiet fox"], rate=rate), rate=rate, channels=channels, width=width)
    (result,) = run_rows(adapter, runtime, [_request(wav)])
    assert result.text == "quiet fox"


def test_recordings_of_different_lengths_share_a_batch(
    adapter: SpeechTranscriptionAdapter, runtime: OnnxRuntimeCpu
) -> None:
    requests = [_request(_wav(_speak(["a"]))), _request(_wav(_speak(["a much longer one"])))]
    assert [r.text for r in run_rows(adapter, runtime, requests)] == ["a", "a much longer one"]


def test_output_round_trips_through_the_contract_json(
    adapter: SpeechTranscriptionAdapter, runtime: OnnxRuntimeCpu
) -> None:
    (result,) = run_rows(adapter, runtime, [_request(_wav(_speak(["ok"])))])
    encoded = msgspec.json.encode(result)
    assert msgspec.json.decode(encoded, type=TranscriptionOutput) == result


def test_silence_transcribes_to_no_segments(
    adapter: SpeechTranscriptionAdapter, runtime: OnnxRuntimeCpu
) -> None:
    (result,) = run_rows(adapter, runtime, [_request(_wav(np.zeros(8_000)))])
    assert (result.text, result.segments, result.duration_s) == ("", [], 0.5)


def test_audio_over_120_seconds_is_invalid_input(adapter: SpeechTranscriptionAdapter) -> None:
    long_silence = _wav(np.zeros(121 * 8_000), rate=8_000, width=1)
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
        adapter.preprocess([_request(_wav(_speak(["hi"])), language="fr")])
    assert raised.value.code == "INVALID_INPUT"


def test_non_finite_model_scores_are_invalid_output(tmp_path: Path) -> None:
    model_dir = _model_dir(tmp_path / "nan", poison_with_nan=True)
    adapter = SpeechTranscriptionAdapter.from_model_dir(model_dir)
    with pytest.raises(ServingError) as raised:
        run_rows(adapter, _runtime(model_dir), [_request(_wav(_speak(["hi"])))])
    assert raised.value.code == "INVALID_OUTPUT"


def test_scores_over_a_different_vocabulary_are_invalid_output(
    speech_dir: Path, runtime: OnnxRuntimeCpu
) -> None:
    adapter = SpeechTranscriptionAdapter(
        VOCABULARY[:-1], SpeechTranscriptionAdapter.from_model_dir(speech_dir).config
    )
    with pytest.raises(ServingError) as raised:
        run_rows(adapter, runtime, [_request(_wav(_speak(["hi"])))])
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
