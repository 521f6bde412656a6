"""speech.transcription: a WAV recording → text with timed segments, over a CTC acoustic model.

Audio is decoded (stdlib `wave`), mixed to mono, resampled to the model's rate and turned into
log-mel frames (adapters/audio.py). The model maps frames to per-step class scores; greedy CTC
gives characters with the steps they cover, and pauses of at least `segment_gap_s` between
characters split the transcript into segments.

No real CTC speech model ships in a small wheel (the ONNX ASR packages fetch their weights from
model hubs at run time), so the unit tests run a small generated ONNX graph; see docs/models.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from nodeagent.adapters.audio import LOG_FLOOR, FeatureConfig, decode_wav, frame_count, log_mel, resample
from nodeagent.adapters.base import PreparedBatch, invalid_output, pick_output
from nodeagent.adapters.ctc import CtcToken, greedy_ctc
from nodeagent.adapters.imaging import decode_base64, invalid_input
from nodeagent.runtimes.base import Tensor
from streams.contracts import TranscriptionInput, TranscriptionOutput, TranscriptSegment

MAX_DURATION_S = 120.0  # docs/reference-behaviour.md §2 and §3: 0 < duration ≤ 120 s


@dataclass(frozen=True)
class SpeechConfig:
    onnx_file: str = "model.onnx"
    vocabulary_file: str = "vocabulary.json"  # JSON list: class index → text, the blank included
    blank: int = 0
    word_delimiter: str = " "  # wav2vec-style models use "|"; it becomes a space
    language: str | None = None  # the one language a CTC model knows; None accepts any request
    input_name: str = "features"
    length_input_name: str | None = None  # models that take the unpadded frame counts
    time_major_features: bool = False  # False: [batch, time, mels]; True: [batch, mels, time]
    output_name: str | None = None
    frame_stride: int = 1  # feature frames per output step (the model's time downsampling)
    normalize_features: bool = False  # per-utterance, per-mel mean/variance normalisation
    segment_gap_s: float = 0.5
    max_duration_s: float = MAX_DURATION_S
    features: FeatureConfig = field(default_factory=FeatureConfig)

    @classmethod
    def from_file(cls, path: Path) -> SpeechConfig:
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpeechConfig:
        """The fields it knows from a serving config (which names other things too)."""
        names = {f.name for f in fields(cls)} - {"features"}
        feature_names = {f.name for f in fields(FeatureConfig)}
        return cls(
            **{name: value for name, value in data.items() if name in names},
            features=FeatureConfig(
                **{name: value for name, value in data.get("features", {}).items() if name in feature_names}
            ),
        )


@dataclass(frozen=True)
class SpeechBatch(PreparedBatch):
    durations_s: tuple[float, ...] = ()


def load_vocabulary(path: Path) -> tuple[str, ...]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, list) or not all(isinstance(entry, str) for entry in data):
        raise ValueError(f"{path.name} must be a JSON list of strings")
    return tuple(data)


class SpeechTranscriptionAdapter:
    """Rows are transcription requests; results are their `TranscriptionOutput`s."""

    capability = "speech.transcription"

    def __init__(self, vocabulary: Sequence[str], config: SpeechConfig) -> None:
        if not 0 <= config.blank < len(vocabulary):
            raise ValueError("the blank index lies outside the vocabulary")
        self.vocabulary = tuple(vocabulary)
        self.config = config

    @classmethod
    def from_model_dir(
        cls, model_dir: Path, config_file: str = "serving_config.json"
    ) -> SpeechTranscriptionAdapter:
        config = SpeechConfig.from_file(model_dir / config_file)
        return cls(load_vocabulary(model_dir / config.vocabulary_file), config)

    def _features(self, item: TranscriptionInput) -> tuple[np.ndarray[Any, np.dtype[np.float32]], float]:
        if item.format != "wav":
            raise invalid_input(f"audio format {item.format!r} is not supported")
        if item.language is not None and self.config.language not in (None, item.language):
            raise invalid_input(
                f"this deployment transcribes {self.config.language!r}, not {item.language!r}"
            )
        if item.prompt:
            raise invalid_input("this deployment's model (CTC) has no text context: leave `prompt` out")
        if item.temperature:
            raise invalid_input(
                "this deployment's model (CTC) decodes greedily: send `temperature` 0 or none"
            )
        audio = decode_wav(decode_base64(item.audio_base64, "audio"))
        if audio.duration_s > self.config.max_duration_s:
            raise invalid_input(
                f"audio lasts {audio.duration_s:.1f} s; the limit is {self.config.max_duration_s:g} s"
            )
        features = log_mel(resample(audio, self.config.features.sample_rate).samples, self.config.features)
        if self.config.normalize_features:
            features = (features - features.mean(axis=0)) / (features.std(axis=0) + 1e-5)
        return features, audio.duration_s

    def count_tokens(self, item: TranscriptionInput) -> int:
        # Frames from the payload size alone (16-bit mono assumed): cheap, for batch planning only.
        seconds = len(item.audio_base64) * 3 / 4 / 2 / self.config.features.sample_rate
        return frame_count(int(seconds * self.config.features.sample_rate), self.config.features)

    def preprocess(self, items: Sequence[TranscriptionInput]) -> PreparedBatch:
        decoded = [self._features(item) for item in items]
        frames = [features.shape[0] for features, _ in decoded]
        pad = 0.0 if self.config.normalize_features else math.log(LOG_FLOOR)  # padding reads as silence
        batch = np.full((len(items), max(frames), self.config.features.n_mels), pad, dtype=np.float32)
        for row, (features, _) in enumerate(decoded):
            batch[row, : features.shape[0]] = features
        feeds: dict[str, Tensor] = {
            self.config.input_name: batch.transpose(0, 2, 1).copy()
            if self.config.time_major_features
            else batch
        }
        if self.config.length_input_name is not None:
            feeds[self.config.length_input_name] = np.asarray(frames, dtype=np.int64)
        return SpeechBatch(
            feeds=feeds, token_counts=tuple(frames), durations_s=tuple(duration for _, duration in decoded)
        )

    def postprocess(self, batch: PreparedBatch, outputs: Mapping[str, Tensor]) -> list[TranscriptionOutput]:
        if not isinstance(batch, SpeechBatch):
            raise TypeError("SpeechTranscriptionAdapter.postprocess needs the SpeechBatch it prepared")
        scores = np.asarray(pick_output(outputs, self.config.output_name), dtype=np.float32)
        if scores.ndim != 3 or scores.shape[0] != batch.rows or scores.shape[2] != len(self.vocabulary):
            raise invalid_output(
                f"acoustic model output {scores.shape} does not fit {batch.rows} recordings "
                f"and {len(self.vocabulary)} classes"
            )
        if not np.all(np.isfinite(scores)):
            raise invalid_output("acoustic model output has non-finite values")
        step_s = self.config.frame_stride * self.config.features.hop_length / self.config.features.sample_rate
        results = []
        for row, (frames, duration) in enumerate(zip(batch.token_counts, batch.durations_s, strict=True)):
            steps = min(scores.shape[1], math.ceil(frames / self.config.frame_stride))
            tokens = greedy_ctc(scores[row], blank=self.config.blank, steps=steps)
            segments = self._segments(tokens, step_s, duration)
            text = " ".join(segment.text for segment in segments)
            results.append(TranscriptionOutput(text=text, segments=segments, duration_s=duration))
        return results

    def _segments(
        self, tokens: Sequence[CtcToken], step_s: float, duration: float
    ) -> list[TranscriptSegment]:
        groups: list[list[CtcToken]] = []
        for token in tokens:
            if (
                groups
                and (token.first_step - groups[-1][-1].last_step - 1) * step_s < self.config.segment_gap_s
            ):
                groups[-1].append(token)
            else:
                groups.append([token])
        segments = []
        for group in groups:
            raw = "".join(self.vocabulary[token.index] for token in group)
            text = " ".join(raw.replace(self.config.word_delimiter, " ").split())
            if text:
                start = min(duration, group[0].first_step * step_s)
                end = min(duration, (group[-1].last_step + 1) * step_s)
                segments.append(TranscriptSegment(start_s=start, end_s=end, text=text))
        return segments

    def validate_output(self, batch: PreparedBatch, results: Sequence[TranscriptionOutput]) -> None:
        validate_transcripts(batch, results, self.config.max_duration_s)


def validate_transcripts(
    batch: PreparedBatch, results: Sequence[TranscriptionOutput], max_duration_s: float
) -> None:
    """One valid transcript per recording of the batch."""
    if len(results) != batch.rows:
        raise invalid_output(f"expected {batch.rows} transcripts, got {len(results)}")
    for result in results:
        validate_transcription(result, max_duration_s=max_duration_s)


def validate_transcription(output: TranscriptionOutput, *, max_duration_s: float = MAX_DURATION_S) -> None:
    """INVALID_OUTPUT unless 0 < duration ≤ limit and segments are non-empty, ordered and inside the audio."""
    if not isinstance(output.text, str):
        raise invalid_output("transcript text must be a string")
    if not (math.isfinite(output.duration_s) and 0.0 < output.duration_s <= max_duration_s):
        raise invalid_output(f"duration {output.duration_s} s is outside (0, {max_duration_s:g}]")
    previous_end = 0.0
    for index, segment in enumerate(output.segments):
        start, end = segment.start_s, segment.end_s
        if not (math.isfinite(start) and math.isfinite(end)) or not (
            previous_end <= start <= end <= output.duration_s
        ):
            raise invalid_output(f"segment {index} [{start}, {end}] is out of order or outside the audio")
        if not segment.text:
            raise invalid_output(f"segment {index} has no text")
        previous_end = end
