"""Whisper's log-mel front end in numpy, held to onnx-asr's Whisper feature graph (an independent
implementation) on a known signal."""

from __future__ import annotations

from importlib.resources import files

import numpy as np
import onnx_asr.preprocessors
import onnxruntime as ort

from nodeagent.adapters.whisper_features import (
    SAMPLE_RATE,
    WINDOW_FRAMES,
    WINDOW_SAMPLES,
    log_mel_window,
    windows,
)


def _chirp(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.3 * np.sin(2 * np.pi * (200 + 400 * t) * t)).astype(np.float32)


def test_features_match_onnx_asrs_whisper_graph_on_a_chirp() -> None:
    graph = files(onnx_asr.preprocessors).joinpath("data").joinpath("whisper80.onnx")
    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    signal = _chirp(2.5)
    (reference, _) = session.run(None, {"waveforms": signal[None], "waveforms_lens": np.array([signal.size])})
    ours = log_mel_window(signal)
    assert ours.shape == reference[0].shape == (80, WINDOW_FRAMES)
    difference = np.abs(ours - reference[0])
    assert float(difference.mean()) < 1e-4  # float32 rounding in the quietest bands alone
    assert float(difference.max()) < 0.02


def test_a_long_recording_is_cut_into_thirty_second_windows_the_last_one_shorter() -> None:
    cut = windows(np.zeros(WINDOW_SAMPLES * 2 + 16_000, dtype=np.float32))
    assert [w.size for w in cut] == [WINDOW_SAMPLES, WINDOW_SAMPLES, 16_000]
    assert len(windows(np.zeros(10, dtype=np.float32))) == 1
