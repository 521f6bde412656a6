"""`POST /v1/audio/transcriptions` served by Whisper tiny.en (CTranslate2, what `modelforge up`
serves), through the `openai` package unchanged, on sentences espeak-ng says: the words come back
within a word error rate bound, and a recording longer than Whisper's 30 s window comes back whole,
its segments timed in order."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from modelforge.devstack.nats_server import NatsServer
from nodeagent.models.whisper import pull_whisper_tiny_en
from tests.integration.gateway.conftest import ModelStack, one_model_stack
from tests.support.espeak import joined, needs_espeak, spoken, word_error_rate

pytestmark = [needs_espeak, pytest.mark.timeout(300)]
MODEL = "whisper-tiny-en"
SENTENCES = [
    "Please call me tomorrow morning.",
    "I would like a cup of coffee with milk.",
    "We will meet at the train station at noon.",
]
MAX_WORD_ERROR_RATE = 0.25  # tiny.en on espeak's robotic voice: about 0.1 measured


@pytest.fixture(scope="module")
async def whisper_stack(
    module_nats: NatsServer, minilm_root: Path, scratch: Path
) -> AsyncIterator[ModelStack]:
    pull_whisper_tiny_en(minilm_root / MODEL, install_missing=False)
    async with one_model_stack(
        module_nats.url, minilm_root, scratch, MODEL, "speech.transcription@1"
    ) as stack:
        yield stack


def _client(stack: ModelStack) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key=stack.key, max_retries=0, timeout=120)


async def test_spoken_sentences_come_back_within_the_word_error_rate_bound(whisper_stack: ModelStack) -> None:
    client = _client(whisper_stack)
    heard = [
        (await client.audio.transcriptions.create(model=MODEL, file=("s.wav", spoken(s), "audio/wav"))).text
        for s in SENTENCES
    ]
    rate = word_error_rate(" ".join(SENTENCES), " ".join(heard))
    assert rate <= MAX_WORD_ERROR_RATE, heard


async def test_a_recording_past_thirty_seconds_keeps_its_segments_in_order(whisper_stack: ModelStack) -> None:
    recording = joined([spoken(s) for s in SENTENCES * 3], pause_s=2.0)  # about 40 s
    verbose = await _client(whisper_stack).audio.transcriptions.create(
        model=MODEL, file=("long.wav", recording, "audio/wav"), response_format="verbose_json", language="en"
    )
    assert verbose.duration > 30
    segments = verbose.segments or []
    ends = [0.0, *(s.end for s in segments)]
    assert all(earlier <= s.start <= s.end for earlier, s in zip(ends, segments, strict=False))
    assert segments[-1].end > 30  # the second window was transcribed, at its place in the audio
    assert word_error_rate(" ".join(SENTENCES * 3), verbose.text) <= MAX_WORD_ERROR_RATE


async def test_a_language_the_model_does_not_know_is_refused_with_a_400(whisper_stack: ModelStack) -> None:
    with pytest.raises(openai.BadRequestError, match="English-only"):
        await _client(whisper_stack).audio.transcriptions.create(
            model=MODEL, file=("s.wav", spoken(SENTENCES[0]), "audio/wav"), language="de"
        )


async def test_subtitles_are_timed_from_the_segments(whisper_stack: ModelStack) -> None:
    subtitles = await _client(whisper_stack).audio.transcriptions.create(
        model=MODEL, file=("s.wav", spoken(SENTENCES[0]), "audio/wav"), response_format="srt", prompt="Call."
    )
    assert str(subtitles).startswith("1\n00:00:00,000 --> 00:00:0")
