"""The Whisper adapter's own logic, without the model: decoder prompts, segments from timestamp
tokens (offset by their window), and what it refuses before anything runs."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from nodeagent.adapters.audio import silent_wav
from nodeagent.adapters.whisper import (
    TIMESTAMP_S,
    WhisperBatch,
    WhisperConfig,
    WhisperTokens,
    WhisperTranscriptionAdapter,
)
from nodeagent.models.whisper import locate_whisper_sources
from streams.codes import ServingError
from streams.contracts import TranscriptionInput, TranscriptSegment


@pytest.fixture(scope="module")
def tokens() -> WhisperTokens:
    return WhisperTokens(locate_whisper_sources(install_missing=False)["tokenizer.json"])


def _at(tokens: WhisperTokens, seconds: float) -> int:
    return tokens.first_timestamp + round(seconds / TIMESTAMP_S)


def _text(tokens: WhisperTokens, text: str) -> list[int]:
    return list(tokens.tokenizer.encode(text, add_special_tokens=False).ids)


def test_the_prompt_goes_before_the_start_of_transcript(tokens: WhisperTokens) -> None:
    assert tokens.prompt(None) == [tokens.start]
    prompted = tokens.prompt("ModelForge, NATS.")
    assert (prompted[0], prompted[-1]) == (tokens.previous, tokens.start)
    assert tokens.text(prompted[1:-1]) == "ModelForge, NATS."


def test_timestamp_pairs_become_segments_offset_by_their_window(tokens: WhisperTokens) -> None:
    ids = [_at(tokens, 0.0), *_text(tokens, " Hello there."), _at(tokens, 2.4), _at(tokens, 2.4)]
    ids += [*_text(tokens, " Goodbye."), _at(tokens, 4.0), tokens.end]
    assert tokens.segments(ids, offset_s=30.0, end_s=40.0) == [
        TranscriptSegment(start_s=30.0, end_s=32.4, text="Hello there."),
        TranscriptSegment(start_s=32.4, end_s=34.0, text="Goodbye."),
    ]


def test_text_after_the_last_timestamp_runs_to_the_windows_end(tokens: WhisperTokens) -> None:
    ids = [_at(tokens, 1.0), *_text(tokens, " cut off")]
    assert tokens.segments(ids, offset_s=0.0, end_s=3.5) == [TranscriptSegment(1.0, 3.5, "cut off")]


def _adapter(tokens: WhisperTokens) -> WhisperTranscriptionAdapter:
    return WhisperTranscriptionAdapter(tokens, WhisperConfig())


def _recording(seconds: float, **fields: object) -> TranscriptionInput:
    audio = base64.b64encode(silent_wav(seconds)).decode("ascii")
    return TranscriptionInput(audio_base64=audio, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"language": "de"}, "transcribes 'en' only"),
        ({"temperature": 1.5}, "temperature must be from 0 to 1"),
    ],
)
def test_what_the_model_cannot_honour_is_refused_as_invalid_input(
    tokens: WhisperTokens, fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ServingError, match=message) as refused:
        _adapter(tokens).preprocess([_recording(1.0, **fields)])
    assert refused.value.code == "INVALID_INPUT"


def test_each_window_is_a_row_with_its_recordings_prompt_and_temperature(tokens: WhisperTokens) -> None:
    batch = _adapter(tokens).preprocess(
        [_recording(61.0, language="en-US", prompt="hi", temperature=0.4), _recording(2.0)]
    )
    assert isinstance(batch, WhisperBatch)
    assert (batch.windows, batch.rows) == ((3, 1), 2)
    assert batch.feeds["features"].shape == (4, 80, 3000)
    assert batch.feeds["temperature"].tolist() == pytest.approx([0.4, 0.4, 0.4, 0.0])
    assert np.all(batch.feeds["prompt_ids"][3, 1:] == -1)  # the unprompted row's padding
