"""`POST /v1/audio/transcriptions`, OpenAI-compatible (the `openai` package's
`audio.transcriptions.create`, `curl -F file=@a.wav -F model=...`).

The form: `file` (the recording: WAV, the one format the contract carries, recognised by its
content, not its name), `model`, `language` (a deployment refuses one its model does not
transcribe), `prompt` (the text Whisper continues from; a CTC model, with no text context, refuses
one), `response_format` (`json`, `text`, `verbose_json`, `srt`, `vtt`), `temperature`
(0 to 1: Whisper samples above 0; a CTC model decodes greedily and refuses more than 0) and `timestamp_granularities[]`
(`segment`). Other fields are
ignored, as the JSON dialects ignore theirs.
"""

from __future__ import annotations

import base64
import io
import math
import re
import struct
import wave

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.edge import Edge
from gateway.http.flow import Prepared, Render, Route, run_decoded
from gateway.http.multipart import FormPart, parse_form, refusal
from gateway.http.subtitles import srt, vtt
from gateway.serving.requests import RequestShape, Served
from streams.contracts import (
    TRANSCRIPTION,
    CapabilityContract,
    TranscriptionInput,
    TranscriptionOutput,
    TranscriptSegment,
)

FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
GRANULARITIES = ("segment",)  # a CTC transcript is timed by segment; no word timings
_LANGUAGE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8}){0,3}")  # ISO 639 with a region
PLAIN_TEXT = "text/plain; charset=utf-8"  # what OpenAI answers `text`, `srt` and `vtt` with
_SUBTITLES = {"srt": srt, "vtt": vtt}
_output = msgspec.json.Decoder(TranscriptionOutput)

# Leading bytes of the formats OpenAI's API takes, to name what was sent instead of WAV.
_SIGNATURES = [
    (b"ID3", 0, "MP3"),
    (b"fLaC", 0, "FLAC"),
    (b"OggS", 0, "Ogg"),
    (b"\x1a\x45\xdf\xa3", 0, "WebM"),
    (b"ftyp", 4, "MP4/M4A"),
]


class TranscriptionForm(msgspec.Struct, frozen=True):
    audio: bytes
    model: str = ""
    language: str | None = None
    prompt: str | None = None
    response_format: str = "json"
    temperature: float | None = None


def audio_kind(data: bytes) -> str:
    """ "WAV", another format's name, or "" when the bytes are none that is known."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "WAV"
    if len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0:  # an MPEG audio frame, no tag
        return "MP3"
    return next((name for magic, at, name in _SIGNATURES if data[at : at + len(magic)] == magic), "")


def _one(fields: dict[str, list[FormPart]], name: str) -> str | None:
    """A text field's value (the last one sent), None when it is absent or empty."""
    parts = fields.get(name)
    return (parts[-1].text().strip() or None) if parts else None


def read_form(parts: list[FormPart]) -> TranscriptionForm:
    """The form's fields checked; INVALID_INPUT (400) naming the field otherwise."""
    fields: dict[str, list[FormPart]] = {}
    for part in parts:
        fields.setdefault(part.name.removesuffix("[]"), []).append(part)
    files = fields.get("file", [])
    if len(files) != 1:
        problem = "no `file`" if not files else f"{len(files)} parts named `file`"
        raise refusal(f"the form has {problem}; send one recording (-F file=@recording.wav)", "file")
    audio = files[0].data
    if not audio:
        raise refusal("`file` is empty", "file")
    kind = audio_kind(audio)
    if kind != "WAV":
        sent = f"is {kind}" if kind else "is not a recording in a known format"
        raise refusal(f"`file` {sent}; supported: WAV (PCM)", "file")
    _check_pcm(audio)
    response_format = _one(fields, "response_format") or "json"
    if response_format not in FORMATS:
        raise refusal(
            f"`response_format` {response_format!r} is not supported; supported: {', '.join(FORMATS)}",
            "response_format",
        )
    for granularity in fields.get("timestamp_granularities", []):
        if granularity.text() not in GRANULARITIES:
            raise refusal(
                f"`timestamp_granularities` {granularity.text()!r} is not supported; supported: segment",
                "timestamp_granularities",
            )
    if _one(fields, "stream") not in (None, "false"):
        raise refusal("streamed transcription is not supported; leave `stream` out", "stream")
    language = _one(fields, "language")
    if language is not None and not _LANGUAGE.fullmatch(language):
        raise refusal(f"`language` {language!r} is not a language code such as en", "language")
    return TranscriptionForm(
        audio=audio,
        model=_one(fields, "model") or "",
        language=language,
        prompt=_one(fields, "prompt"),
        response_format=response_format,
        temperature=_temperature(_one(fields, "temperature")),
    )


def _check_pcm(audio: bytes) -> None:
    """The header the agent decodes a WAV by (PCM of 8 to 32 bits, a channel, a rate) and at least
    one whole frame of samples: a WAV it would refuse is refused here, before a lease is taken."""
    try:
        with wave.open(io.BytesIO(audio), "rb") as reader:
            channels, width, rate = reader.getnchannels(), reader.getsampwidth(), reader.getframerate()
            first = reader.readframes(1)
    except (wave.Error, EOFError, ValueError, struct.error):
        raise refusal(
            "`file` is a WAV that is not PCM or whose header is cut off; supported: WAV (PCM)", "file"
        ) from None
    if channels < 1 or rate < 1 or width not in (1, 2, 3, 4):
        raise refusal(
            "`file` is a WAV with no channels, no sample rate or samples of an unsupported width", "file"
        )
    if len(first) < channels * width:
        raise refusal("`file` is a WAV that holds no samples", "file")


def _temperature(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        temperature = float(value)
    except ValueError:
        temperature = math.nan
    if not 0.0 <= temperature <= 1.0:
        raise refusal(f"`temperature` must be a number from 0 to 1, not {value!r}", "temperature")
    return temperature


def parse_transcription(parts: list[FormPart], contract: CapabilityContract, route: Route) -> Prepared:
    # (`route` unused: no check here depends on the deployment the call is served by)
    form = read_form(parts)
    audio_base64 = base64.b64encode(form.audio).decode("ascii")
    payload = msgspec.json.encode(
        TranscriptionInput(
            audio_base64=audio_base64,
            language=form.language,
            prompt=form.prompt,
            temperature=form.temperature,
        )
    )
    shape = RequestShape(items=1, chars=len(audio_base64))
    # OpenAI answers a parameter the model cannot take (a `language` it does not know) with 400.
    return Prepared(payload, shape, _render(form), form.model, model_refusal_status=400)


def _render(form: TranscriptionForm) -> Render:
    def render(result: bytes, served: Served[bytes], request_id: str) -> object:
        output = _output.decode(result)
        if form.response_format == "text":
            return Response(f"{output.text}\n", media_type=PLAIN_TEXT)
        if subtitles := _SUBTITLES.get(form.response_format):
            return Response(subtitles(output.segments), media_type=PLAIN_TEXT)
        usage = {"type": "duration", "seconds": math.ceil(output.duration_s)}
        if form.response_format == "json":
            return {"text": output.text, "usage": usage}
        return {
            "task": "transcribe",
            "language": form.language,
            "duration": output.duration_s,
            "text": output.text,
            "segments": [_segment(number, s, form) for number, s in enumerate(output.segments)],
            "usage": usage,
        }

    return render


def _segment(number: int, segment: TranscriptSegment, form: TranscriptionForm) -> dict[str, object]:
    """OpenAI's segment fields; what a CTC model has no measure of (token ids, log-probabilities,
    compression, no-speech odds) is empty or 0."""
    return {
        "id": number,
        "seek": 0,
        "start": segment.start_s,
        "end": segment.end_s,
        "text": segment.text,
        "tokens": [],
        "temperature": form.temperature or 0.0,
        "avg_logprob": 0.0,
        "compression_ratio": 0.0,
        "no_speech_prob": 0.0,
    }


async def transcriptions(request: Request) -> Response:
    edge: Edge = request.app.state.edge
    content_type = request.headers.get("content-type")
    return await run_decoded(
        edge, request, TRANSCRIPTION, parse_transcription, lambda body: parse_form(body, content_type, "file")
    )
