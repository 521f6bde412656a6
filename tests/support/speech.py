"""A generated CTC speech model (no small real ASR model ships in a wheel) and recordings it
transcribes to a known text.

The acoustic model is one linear layer and a log-softmax over log-mel frames: class k (a character)
scores the energy of mel band 20 + 2(k-1), the blank a constant. A recording made of one pure tone
per character, at the frequency where that band peaks, therefore spells a known text, and every
stage (WAV decoding, resampling, mel features, ONNX Runtime, greedy CTC, segment timing) runs for
real.
"""

from __future__ import annotations

import io
import json
import wave
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from nodeagent.adapters.audio import FeatureConfig, mel_filterbank

VOCABULARY = ["<blank>", " ", *"abcdefghijklmnopqrstuvwxyz", "'"]
FEATURES = FeatureConfig()
TONE_S, GAP_S, PAUSE_S = 0.08, 0.04, 0.8


def _band(index: int) -> int:
    return 20 + 2 * (index - 1)


def _tone_hz(index: int) -> float:
    """The FFT bin frequency where the character's mel band peaks."""
    peak_bin = int(np.argmax(mel_filterbank(FEATURES)[_band(index)]))
    return peak_bin * FEATURES.sample_rate / FEATURES.n_fft


def write_ctc_model(path: Path, *, poison_with_nan: bool = False) -> None:
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


def write_speech_model(root: Path, **config: object) -> Path:
    """A model folder (ONNX graph, vocabulary, serving config) the speech adapter and agent load;
    `config` overrides serving-config fields, `poison_with_nan` makes every score NaN."""
    root.mkdir(parents=True, exist_ok=True)
    write_ctc_model(root / "model.onnx", poison_with_nan=bool(config.pop("poison_with_nan", False)))
    (root / "vocabulary.json").write_text(json.dumps(VOCABULARY), encoding="utf-8")
    settings = {"capability": "speech.transcription", "language": "en", "input_name": "features", **config}
    (root / "serving_config.json").write_text(json.dumps(settings), encoding="utf-8")
    return root


def speak(phrases: list[str], rate: int = 16_000) -> np.ndarray:
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


def wav(signal: np.ndarray, rate: int = 16_000, channels: int = 1, width: int = 2) -> bytes:
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
