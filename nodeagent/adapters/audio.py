"""Audio decoding and features for speech.transcription: WAV → 16 kHz mono → log-mel frames.

The stdlib `wave` module reads PCM WAV (8-bit unsigned, 16/24/32-bit signed); everything after
is numpy. Resampling is band-limited (FFT), features are the usual ASR front end: a Hann-windowed
STFT, HTK mel filterbank, natural log of the power.
"""

from __future__ import annotations

import io
import math
import struct
import wave
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from nodeagent.adapters.imaging import invalid_input

Samples = NDArray[np.float32]  # mono, -1..1
LOG_FLOOR = 1e-10


@dataclass(frozen=True)
class Audio:
    samples: Samples
    sample_rate: int

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate


def _pcm_to_float(frames: bytes, sample_width: int) -> Samples:
    if sample_width == 1:  # unsigned 8-bit, silence at 128
        return (np.frombuffer(frames, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    if sample_width == 2:
        return np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0
    if sample_width == 3:  # no 24-bit dtype: widen each little-endian triple to int32
        triples = np.frombuffer(frames, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        values = triples[:, 0] | (triples[:, 1] << 8) | (triples[:, 2] << 16)
        values = np.where(values >= 1 << 23, values - (1 << 24), values)
        return values.astype(np.float32) / float(1 << 23)
    if sample_width == 4:
        return (np.frombuffer(frames, dtype="<i4").astype(np.float64) / float(1 << 31)).astype(np.float32)
    raise invalid_input(f"WAV sample width of {sample_width} bytes is not supported")


def decode_wav(data: bytes) -> Audio:
    """PCM WAV bytes → mono float samples at the file's rate; INVALID_INPUT for anything else."""
    try:
        with wave.open(io.BytesIO(data), "rb") as reader:
            channels, width, rate = reader.getnchannels(), reader.getsampwidth(), reader.getframerate()
            frames = reader.readframes(reader.getnframes())
    except (wave.Error, EOFError, ValueError, struct.error) as error:
        raise invalid_input(f"audio cannot be decoded as PCM WAV: {error}") from error
    if channels < 1 or rate < 1:
        raise invalid_input("WAV header has no channels or no sample rate")
    usable = len(frames) - len(frames) % (channels * width)
    samples = _pcm_to_float(frames[:usable], width).reshape(-1, channels).mean(axis=1)
    if samples.size == 0:
        raise invalid_input("WAV file holds no samples")
    return Audio(np.asarray(samples, dtype=np.float32), rate)


def silent_wav(seconds: float, rate: int = 16_000) -> bytes:
    """A 16-bit mono PCM WAV of silence: a fixed recording for warm-ups and health checks."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(rate)
        writer.writeframes(bytes(2 * round(seconds * rate)))
    return buffer.getvalue()


def resample(audio: Audio, rate: int) -> Audio:
    """Band-limited resampling by zero-padding or truncating the spectrum."""
    if audio.sample_rate == rate:
        return audio
    count = max(1, round(len(audio.samples) * rate / audio.sample_rate))
    # Zero-padded to a length whose FFT is fast (the ratio's unit times a power of two) and whose
    # resampled length is whole: a prime-sized FFT of a long recording takes seconds.
    unit = audio.sample_rate // math.gcd(audio.sample_rate, rate)
    padded = unit << max(0, math.ceil(math.log2(max(1, len(audio.samples)) / unit)))
    padded_count = padded * rate // audio.sample_rate
    spectrum = np.fft.rfft(audio.samples.astype(np.float64), n=padded)
    bins = padded_count // 2 + 1
    if bins <= spectrum.shape[0]:
        spectrum = spectrum[:bins]
    else:
        spectrum = np.concatenate((spectrum, np.zeros(bins - spectrum.shape[0], dtype=spectrum.dtype)))
    samples = np.fft.irfft(spectrum, n=padded_count)[:count] * (padded_count / padded)
    return Audio(samples.astype(np.float32), rate)


@dataclass(frozen=True)
class FeatureConfig:
    sample_rate: int = 16_000
    n_fft: int = 512
    win_length: int = 400  # 25 ms
    hop_length: int = 160  # 10 ms
    n_mels: int = 80
    f_min: float = 0.0
    f_max: float = 8_000.0


def _hz_to_mel(hz: float | NDArray[np.float64]) -> NDArray[np.float64]:
    return np.asarray(2595.0 * np.log10(1.0 + hz / 700.0), dtype=np.float64)


def _mel_to_hz(mel: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.asarray(700.0 * (10.0 ** (mel / 2595.0) - 1.0), dtype=np.float64)


@lru_cache(maxsize=8)
def mel_filterbank(config: FeatureConfig) -> NDArray[np.float32]:
    """[n_mels, n_fft // 2 + 1] triangular filters, evenly spaced on the HTK mel scale."""
    edges = _mel_to_hz(np.linspace(_hz_to_mel(config.f_min), _hz_to_mel(config.f_max), config.n_mels + 2))
    bins = np.linspace(0.0, config.sample_rate / 2, config.n_fft // 2 + 1)
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins[None, :] - lower) / (centre - lower)
    falling = (upper - bins[None, :]) / (upper - centre)
    return np.asarray(np.clip(np.minimum(rising, falling), 0.0, None), dtype=np.float32)


def frame_count(samples: int, config: FeatureConfig) -> int:
    return 1 + max(0, samples - config.win_length) // config.hop_length


def log_mel(samples: Samples, config: FeatureConfig) -> NDArray[np.float32]:
    """[frames, n_mels] natural-log mel power; frame t covers samples [t·hop, t·hop + win)."""
    padded = (
        samples
        if len(samples) >= config.win_length
        else np.pad(samples, (0, config.win_length - len(samples)))
    )
    frames = frame_count(len(padded), config)
    starts = np.arange(frames)[:, None] * config.hop_length
    windows = padded[starts + np.arange(config.win_length)[None, :]] * np.hanning(config.win_length).astype(
        np.float32
    )
    power = np.abs(np.fft.rfft(windows, n=config.n_fft, axis=1)) ** 2
    mel = power.astype(np.float32) @ mel_filterbank(config).T
    return np.asarray(np.log(np.maximum(mel, LOG_FLOOR)), dtype=np.float32)
