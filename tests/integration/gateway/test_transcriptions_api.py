"""`POST /v1/audio/transcriptions` through the whole system, with the `openai` package unchanged.
The model is the generated CTC model of tests/support/speech.py (no small ASR model ships in a
wheel): recordings of pure tones spell a known text."""

from __future__ import annotations

import base64
import re
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from gateway.http.answers import TranscriptionAnswer
from modelforge.devstack.nats_server import NatsServer
from tests.integration.gateway.conftest import ModelStack, one_model_stack, refused_leaving_no_trace
from tests.support.answers import conforms
from tests.support.forms import Part, multipart
from tests.support.speech import speak, wav, write_speech_model

TRANSCRIPTIONS = "/v1/audio/transcriptions"
MODEL = "tiny-ctc"
HELLO = wav(speak(["hello world"]))
TWO_PHRASES = wav(speak(["good day", "it's me"]))
BOUNDARY = "form-boundary-7d93"


@pytest.fixture(scope="module")
async def speech_stack(
    module_nats: NatsServer, minilm_root: Path, scratch: Path
) -> AsyncIterator[ModelStack]:
    if not (minilm_root / MODEL).exists():
        write_speech_model(minilm_root / MODEL)
    async with one_model_stack(
        module_nats.url, minilm_root, scratch, MODEL, "speech.transcription@1"
    ) as stack:
        yield stack


def _client(stack: ModelStack) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key=stack.key, max_retries=0)


def _form(*parts: Part) -> bytes:
    return multipart(BOUNDARY, *parts)


async def _post_form(stack: ModelStack, *parts: Part) -> httpx.Response:
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{stack.url}{TRANSCRIPTIONS}",
            content=_form(*parts),
            headers={
                "authorization": f"Bearer {stack.key}",
                "content-type": f"multipart/form-data; boundary={BOUNDARY}",
            },
        )
    assert response.status_code == 200, response.text
    return response


async def test_the_openai_client_gets_the_text_the_recording_spells(speech_stack: ModelStack) -> None:
    transcript = await _client(speech_stack).audio.transcriptions.create(
        model=MODEL, file=("hello.wav", HELLO, "audio/wav"), language="en"
    )
    assert transcript.text == "hello world"


async def test_a_prompt_the_ctc_model_cannot_take_is_refused_with_a_400(speech_stack: ModelStack) -> None:
    with pytest.raises(openai.BadRequestError, match="leave `prompt` out"):
        await _client(speech_stack).audio.transcriptions.create(
            model=MODEL, file=("hello.wav", HELLO, "audio/wav"), prompt="greetings"
        )


async def test_the_text_equals_the_native_routes_for_the_same_recording(speech_stack: ModelStack) -> None:
    async with httpx.AsyncClient(timeout=60) as http:
        native = await http.post(
            f"{speech_stack.url}/v1/capabilities/speech.transcription@1:invoke",
            json={"audio_base64": base64.b64encode(TWO_PHRASES).decode()},
            headers={"authorization": f"Bearer {speech_stack.key}"},
        )
    assert native.status_code == 200, native.text
    openai_style = await _post_form(
        speech_stack, ("file", "a.wav", TWO_PHRASES), ("model", None, b"tiny-ctc")
    )
    assert openai_style.json()["text"] == native.json()["output"]["text"] == "good day it's me"


async def test_verbose_json_carries_the_timed_segments_duration_and_language(
    speech_stack: ModelStack,
) -> None:
    transcript = await _client(speech_stack).audio.transcriptions.create(
        model=MODEL,
        file=("two.wav", TWO_PHRASES, "audio/wav"),
        language="en",
        response_format="verbose_json",
        timestamp_granularities=["segment"],
    )
    assert transcript.text == "good day it's me"
    assert transcript.language == "en"
    assert transcript.duration == pytest.approx(len(speak(["good day", "it's me"])) / 16_000)
    segments = transcript.segments or []
    assert [(s.id, s.text) for s in segments] == [(0, "good day"), (1, "it's me")]
    assert 0 < segments[0].start < segments[0].end < segments[1].start < segments[1].end


async def test_text_format_is_the_transcript_as_plain_text(speech_stack: ModelStack) -> None:
    text = await _client(speech_stack).audio.transcriptions.create(
        model=MODEL, file=("hello.wav", HELLO), response_format="text"
    )
    assert text == "hello world\n"


_TIME = r"\d\d:\d\d:\d\d[,.]\d{3}"
_CUE = rf"{_TIME} --> {_TIME}\n"
SUBTITLES = {
    "srt": rf"1\n{_CUE}good day\n\n2\n{_CUE}it's me\n\n",
    "vtt": rf"WEBVTT\n\n{_CUE}good day\n\n{_CUE}it's me\n\n",
}


@pytest.mark.parametrize("response_format", sorted(SUBTITLES))
async def test_srt_and_vtt_render_one_cue_per_segment_as_plain_text(
    speech_stack: ModelStack, response_format: str
) -> None:
    response = await _post_form(
        speech_stack, ("file", "a.wav", TWO_PHRASES), ("response_format", None, response_format.encode())
    )
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert re.fullmatch(SUBTITLES[response_format], response.text), response.text


def _float_wav() -> bytes:
    """A WAV of 32-bit float samples (format 3): RIFF/WAVE, but not the PCM the agent decodes."""
    data = bytes(4 * 1600)
    fmt = struct.pack("<HHIIHH", 3, 1, 16_000, 64_000, 4, 32)
    chunks = (
        b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    )
    return b"RIFF" + struct.pack("<I", len(chunks)) + chunks


OVERSIZED = _form(("file", "big.wav", b"RIFF\x00\x00\x00\x00WAVE" + bytes(25 << 20)))
MULTIPART = {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}
REFUSED = [  # (case, body, headers, status, code, param)
    ("not multipart", b'{"file": "hello.wav"}', {"content-type": "application/json"}, 400, "INVALID_INPUT", "file"),
    ("no file", _form(("model", None, b"m")), MULTIPART, 400, "INVALID_INPUT", "file"),
    ("webm bytes", _form(("file", "a.webm", b"\x1a\x45\xdf\xa3" + bytes(64))), MULTIPART, 400, "INVALID_INPUT", "file"),
    ("a wav of float samples", _form(("file", "a.wav", _float_wav())), MULTIPART, 400, "INVALID_INPUT", "file"),
    ("a wav with no samples", _form(("file", "a.wav", wav(np.zeros(0)))), MULTIPART, 400, "INVALID_INPUT", "file"),
    ("a wav header alone", _form(("file", "a.wav", b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(32))), MULTIPART, 400, "INVALID_INPUT", "file"),
    ("an empty file", _form(("file", "a.wav", b"")), MULTIPART, 400, "INVALID_INPUT", "file"),
    ("a bad response_format", _form(("file", "a.wav", HELLO), ("response_format", None, b"xml")), MULTIPART, 400, "INVALID_INPUT", "response_format"),
    ("word timestamps", _form(("file", "a.wav", HELLO), ("timestamp_granularities[]", None, b"word")), MULTIPART, 400, "INVALID_INPUT", "timestamp_granularities"),
    ("a temperature out of range", _form(("file", "a.wav", HELLO), ("temperature", None, b"1.5")), MULTIPART, 400, "INVALID_INPUT", "temperature"),
    ("no closing boundary", _form(("file", "a.wav", HELLO))[:-30], MULTIPART, 400, "INVALID_INPUT", None),
    ("over the payload limit", OVERSIZED, MULTIPART, 413, "PAYLOAD_TOO_LARGE", None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "body", "headers", "status", "code", "param"), REFUSED, ids=[r[0] for r in REFUSED]
)
async def test_bad_transcription_requests_are_refused_and_leave_no_trace(
    speech_stack: ModelStack,
    case: str,
    body: bytes,
    headers: dict[str, str],
    status: int,
    code: str,
    param: str | None,
) -> None:
    response = await refused_leaving_no_trace(
        speech_stack.connection,
        speech_stack.gateway,
        TRANSCRIPTIONS,
        speech_stack.key,
        content=body,
        headers=headers,
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == (code, param)


async def test_a_format_other_than_wav_is_named_with_what_is_supported(speech_stack: ModelStack) -> None:
    response = await refused_leaving_no_trace(
        speech_stack.connection,
        speech_stack.gateway,
        TRANSCRIPTIONS,
        speech_stack.key,
        content=_form(("file", "a.wav", b"ID3\x04\x00" + bytes(64))),
        headers=MULTIPART,
    )
    assert response.json()["error"]["message"] == "`file` is MP3; supported: WAV (PCM)"


@pytest.mark.parametrize("response_format", ["json", "verbose_json"])
async def test_a_json_transcription_is_as_the_openapi_document_says(
    speech_stack: ModelStack, response_format: str
) -> None:
    response = await _post_form(
        speech_stack, ("file", "a.wav", TWO_PHRASES), ("response_format", None, response_format.encode())
    )
    conforms(response.json(), TranscriptionAnswer)
