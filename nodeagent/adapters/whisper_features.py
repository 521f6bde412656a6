"""Whisper's log-mel front end in numpy: 16 kHz audio → [80, 3000] per 30 s window.

As OpenAI's `whisper.audio.log_mel_spectrogram`: a 400-point periodic Hann STFT with a 160-sample
hop (centred, reflect padding, the last frame dropped), power spectrum, Slaney-scale mel filters
with Slaney area normalisation (librosa's defaults), log10 clamped at 1e-10, floored at 8 below
the window's maximum, then (x + 4) / 4. Tested against onnx-asr's Whisper feature graph.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numpy.typing import NDArray

SAMPLE_RATE = 16_000
N_FFT = 400
HOP_LENGTH = 160
WINDOW_S = 30
WINDOW_SAMPLES = WINDOW_S * SAMPLE_RATE
WINDOW_FRAMES = WINDOW_SAMPLES // HOP_LENGTH  # 3000
FRAME_S = HOP_LENGTH / SAMPLE_RATE

_F_SP = 200.0 / 3  # Slaney scale: linear below 1 kHz ...
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOG_STEP = np.log(6.4) / 27.0  # ... logarithmic above


def _hz_to_mel(hz: NDArray[np.float64]) -> NDArray[np.float64]:
    linear = hz / _F_SP
    logarithmic = _MIN_LOG_MEL + np.log(np.maximum(hz, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOG_STEP
    return np.where(hz >= _MIN_LOG_HZ, logarithmic, linear)


def _mel_to_hz(mel: NDArray[np.float64]) -> NDArray[np.float64]:
    linear = mel * _F_SP
    logarithmic = _MIN_LOG_HZ * np.exp(_LOG_STEP * (mel - _MIN_LOG_MEL))
    return np.where(mel >= _MIN_LOG_MEL, logarithmic, linear)


@cache
def mel_filters(n_mels: int = 80) -> NDArray[np.float32]:
    """[n_mels, N_FFT // 2 + 1] triangular filters from 0 Hz to Nyquist (librosa.filters.mel)."""
    bins = np.linspace(0.0, SAMPLE_RATE / 2, N_FFT // 2 + 1)
    edges = _mel_to_hz(
        np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(SAMPLE_RATE / 2)), n_mels + 2)
    )
    widths = np.diff(edges)
    ramps = edges[:, None] - bins[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]  # Slaney: each filter has unit area
    return weights.astype(np.float32)


@cache
def _hann() -> NDArray[np.float32]:
    return np.hanning(N_FFT + 1)[:-1].astype(np.float32)  # periodic, as torch.hann_window


def log_mel_window(samples: NDArray[np.float32], n_mels: int = 80) -> NDArray[np.float32]:
    """One window's features, [n_mels, 3000]: `samples` (at most 30 s at 16 kHz) padded with silence."""
    if samples.shape[0] > WINDOW_SAMPLES:
        raise ValueError("a window holds at most 30 s")
    audio = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
    audio[: samples.shape[0]] = samples
    padded = np.pad(audio, N_FFT // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_LENGTH][:WINDOW_FRAMES]
    power = np.abs(np.fft.rfft(frames * _hann(), axis=1)) ** 2
    log_spec = np.log10(np.maximum(power.astype(np.float32) @ mel_filters(n_mels).T, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return np.ascontiguousarray(((log_spec + 4.0) / 4.0).T, dtype=np.float32)


def windows(samples: NDArray[np.float32]) -> list[NDArray[np.float32]]:
    """The recording cut into consecutive 30 s windows (the last one shorter); one at the least."""
    count = max(1, -(-samples.shape[0] // WINDOW_SAMPLES))
    return [samples[index * WINDOW_SAMPLES : (index + 1) * WINDOW_SAMPLES] for index in range(count)]
