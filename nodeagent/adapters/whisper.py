"""speech.transcription with Whisper (an encoder–decoder): a WAV recording → text with timed segments.

Audio is decoded and resampled to 16 kHz (adapters/audio.py), cut into 30 s windows (Whisper's
context), each window a row of log-mel features (whisper_features.py). The decoder starts from
`<|startoftranscript|>` (an English-only model takes no language or task token), after
`<|startofprev|>` and the client's `prompt` when one is given; it emits timestamp tokens around each
segment, which are turned into seconds and offset by the window's start. A window the model finds
no speech in adds no segment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from nodeagent.adapters.audio import decode_wav, resample
from nodeagent.adapters.base import PreparedBatch, invalid_output
from nodeagent.adapters.imaging import decode_base64, invalid_input
from nodeagent.adapters.speech import MAX_DURATION_S, validate_transcripts
from nodeagent.adapters.whisper_features import SAMPLE_RATE, WINDOW_S, log_mel_window, windows
from nodeagent.runtimes.base import Tensor
from streams.contracts import TranscriptionInput, TranscriptionOutput, TranscriptSegment

TIMESTAMP_S = 0.02  # one timestamp token's step
MAX_PROMPT_TOKENS = 223  # Whisper keeps half its 448-token context for the prompt
NO_SPEECH_THRESHOLD = 0.6  # Whisper's own


@dataclass(frozen=True)
class WhisperConfig:
    model_file: str = "model.bin"
    tokenizer_file: str = "tokenizer.json"
    language: str = "en"  # an English-only (".en") model: the one language it transcribes
    n_mels: int = 80
    max_duration_s: float = MAX_DURATION_S

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WhisperConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{name: value for name, value in data.items() if name in names})


@dataclass(frozen=True)
class WhisperBatch(PreparedBatch):
    windows: tuple[int, ...] = ()  # how many window rows each recording has, in order
    durations_s: tuple[float, ...] = ()


class WhisperTokens:
    """The tokenizer and the special tokens the decoder is driven by."""

    def __init__(self, tokenizer_path: Path) -> None:
        self.tokenizer = Tokenizer.from_file(str(tokenizer_path))

        def special(name: str) -> int:
            found = self.tokenizer.token_to_id(name)
            if found is None:
                raise ValueError(f"{tokenizer_path.name} has no {name} token")
            return int(found)

        self.end = special("<|endoftext|>")
        self.start = special("<|startoftranscript|>")
        self.previous = special("<|startofprev|>")
        self.first_timestamp = special("<|notimestamps|>") + 1  # <|0.00|>, <|0.02|>, ... follow it

    def prompt(self, text: str | None) -> list[int]:
        if not text or not text.strip():
            return [self.start]
        ids = self.tokenizer.encode(" " + text.strip(), add_special_tokens=False).ids
        return [self.previous, *ids[-MAX_PROMPT_TOKENS:], self.start]

    def text(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids))).strip()

    def segments(self, ids: Sequence[int], offset_s: float, end_s: float) -> list[TranscriptSegment]:
        """Timestamp-delimited segments of one window, in the recording's seconds."""
        found: list[tuple[float, float, list[int]]] = []
        start: float | None = None
        words: list[int] = []
        for token in ids:
            if token >= self.first_timestamp:
                at = offset_s + (token - self.first_timestamp) * TIMESTAMP_S
                if start is not None and words:
                    found.append((start, at, words))
                    start, words = None, []
                else:
                    start = at
            elif token < self.end:
                words.append(token)
        if words:  # text after the last timestamp (or none at all) runs to the window's end
            found.append((offset_s if start is None else start, end_s, words))
        segments = []
        for begin, end, tokens in found:
            text = self.text(tokens)
            if text:
                low = min(max(begin, offset_s), end_s)
                segments.append(TranscriptSegment(start_s=low, end_s=min(max(end, low), end_s), text=text))
        return segments


class WhisperTranscriptionAdapter:
    """Rows are transcription requests; results are their `TranscriptionOutput`s."""

    capability = "speech.transcription"

    def __init__(self, tokens: WhisperTokens, config: WhisperConfig) -> None:
        self.tokens, self.config = tokens, config

    def count_tokens(self, item: TranscriptionInput) -> int:
        # 30 s windows from the payload size alone (16-bit mono assumed): for batch planning only.
        seconds = len(item.audio_base64) * 3 / 4 / 2 / SAMPLE_RATE
        return max(1, -(-int(seconds) // WINDOW_S))

    def _checked(self, item: TranscriptionInput) -> tuple[list[np.ndarray[Any, Any]], float]:
        if item.format != "wav":
            raise invalid_input(f"audio format {item.format!r} is not supported")
        if item.language is not None and item.language.lower().partition("-")[0] != self.config.language:
            raise invalid_input(
                f"this model transcribes {self.config.language!r} only (an English-only Whisper), "
                f"not {item.language!r}; leave `language` out or send {self.config.language!r}"
            )
        if item.temperature is not None and not 0.0 <= item.temperature <= 1.0:
            raise invalid_input(f"temperature must be from 0 to 1, not {item.temperature}")
        audio = resample(decode_wav(decode_base64(item.audio_base64, "audio")), SAMPLE_RATE)
        if audio.duration_s > self.config.max_duration_s:
            raise invalid_input(
                f"audio lasts {audio.duration_s:.1f} s; the limit is {self.config.max_duration_s:g} s"
            )
        features = [log_mel_window(window, self.config.n_mels) for window in windows(audio.samples)]
        return features, audio.duration_s

    def preprocess(self, items: Sequence[TranscriptionInput]) -> WhisperBatch:
        checked = [self._checked(item) for item in items]
        prompts = [self.tokens.prompt(item.prompt) for item in items]
        rows = [(features, prompt, item.temperature or 0.0)
                for item, (windows_, _), prompt in zip(items, checked, prompts, strict=True)
                for features in windows_]  # fmt: skip
        width = max(len(prompt) for _, prompt, _ in rows)
        prompt_ids = np.full((len(rows), width), -1, dtype=np.int32)
        for row, (_, prompt, _) in enumerate(rows):
            prompt_ids[row, : len(prompt)] = prompt
        feeds: dict[str, Tensor] = {
            "features": np.stack([features for features, _, _ in rows]),
            "prompt_ids": prompt_ids,
            "temperature": np.asarray([temperature for _, _, temperature in rows], dtype=np.float32),
        }
        counts = tuple(len(features) for features, _ in checked)
        return WhisperBatch(
            feeds=feeds, token_counts=counts, windows=counts, durations_s=tuple(d for _, d in checked)
        )

    def postprocess(self, batch: PreparedBatch, outputs: Mapping[str, Tensor]) -> list[TranscriptionOutput]:
        if not isinstance(batch, WhisperBatch):
            raise TypeError("WhisperTranscriptionAdapter.postprocess needs the WhisperBatch it prepared")
        token_ids, no_speech = np.asarray(outputs.get("token_ids")), np.asarray(outputs.get("no_speech_prob"))
        if (
            token_ids.ndim != 2
            or token_ids.shape[0] != sum(batch.windows)
            or no_speech.shape != token_ids.shape[:1]
        ):
            raise invalid_output(
                f"decoder output {token_ids.shape} does not fit {sum(batch.windows)} windows"
            )
        results, row = [], 0
        for count, duration in zip(batch.windows, batch.durations_s, strict=True):
            segments: list[TranscriptSegment] = []
            for window in range(count):
                ids = [int(t) for t in token_ids[row + window] if t >= 0]
                if no_speech[row + window] <= NO_SPEECH_THRESHOLD:
                    offset = window * WINDOW_S
                    found = self.tokens.segments(ids, offset, min(duration, offset + WINDOW_S))
                    segments.extend(_after(segments[-1].end_s if segments else 0.0, found))
            row += count
            text = " ".join(segment.text for segment in segments)
            results.append(TranscriptionOutput(text=text, segments=segments, duration_s=duration))
        return results

    def validate_output(self, batch: PreparedBatch, results: Sequence[TranscriptionOutput]) -> None:
        validate_transcripts(batch, results, self.config.max_duration_s)


def _after(previous_end: float, segments: list[TranscriptSegment]) -> list[TranscriptSegment]:
    """Segments moved to start no earlier than the one before ends (a timestamp the model put
    back in time must not make the transcript go backwards)."""
    kept = []
    for segment in segments:
        start = max(segment.start_s, previous_end)
        end = max(segment.end_s, start)
        kept.append(TranscriptSegment(start_s=start, end_s=end, text=segment.text))
        previous_end = end
    return kept
