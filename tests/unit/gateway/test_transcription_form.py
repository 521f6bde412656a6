"""The OpenAI transcription form read from memory: multipart framing, the fields checked, the
recording recognised by its content, and subtitles rendered from timed segments. Pure: no I/O."""

from __future__ import annotations

import logging

import pytest

from gateway.http.multipart import MAX_FIELD_BYTES, MAX_PARTS, FormPart, parse_form
from gateway.http.subtitles import srt, timestamp, vtt
from gateway.http.transcriptions import audio_kind, read_form
from nodeagent.adapters.audio import silent_wav
from streams.codes import ServingError
from streams.contracts import TranscriptSegment
from tests.support.forms import Part, multipart

BOUNDARY = "b0undary"
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"
WAV = silent_wav(0.01)


def _form(*parts: Part) -> bytes:
    return multipart(BOUNDARY, *parts)


def _refusal(body: bytes, content_type: str = CONTENT_TYPE) -> ServingError:
    with pytest.raises(ServingError) as raised:
        read_form(parse_form(body, content_type, "file"))
    assert (raised.value.code, raised.value.http_status) == ("INVALID_INPUT", 400)
    return raised.value


def test_parts_come_back_in_order_with_names_filenames_and_bytes() -> None:
    body = _form(("file", "a.wav", b"\x00\r\n--x\xff"), ("model", None, b"whisper-1"))
    assert parse_form(body, CONTENT_TYPE, "file") == [
        FormPart("file", "a.wav", "", b"\x00\r\n--x\xff"),
        FormPart("model", None, "", b"whisper-1"),
    ]


@pytest.mark.parametrize("content_type", [None, "application/json", "multipart/form-data"])
def test_a_body_that_is_not_multipart_with_a_boundary_is_refused_naming_the_file_field(
    content_type: str | None,
) -> None:
    with pytest.raises(ServingError) as raised:
        parse_form(_form(("file", "a.wav", WAV)), content_type, "file")
    assert raised.value.param == "file"
    assert "multipart/form-data" in raised.value.message


def test_a_text_field_over_its_limit_is_refused_naming_it() -> None:
    error = _refusal(_form(("file", "a.wav", WAV), ("prompt", None, b"p" * (MAX_FIELD_BYTES + 1))))
    assert error.param == "prompt"


def test_a_file_part_is_bounded_by_the_body_limit_alone() -> None:
    (part,) = parse_form(_form(("file", "a.wav", bytes(MAX_FIELD_BYTES * 2))), CONTENT_TYPE, "file")
    assert len(part.data) == MAX_FIELD_BYTES * 2


def test_more_parts_than_a_form_has_are_refused() -> None:
    error = _refusal(_form(*[("extra", None, b"x")] * (MAX_PARTS + 1)))
    assert f"more than {MAX_PARTS} parts" in error.message


def test_a_part_without_a_name_is_refused() -> None:
    body = f"--{BOUNDARY}\r\nContent-Type: audio/wav\r\n\r\nx\r\n--{BOUNDARY}--\r\n".encode()
    assert "Content-Disposition" in _refusal(body).message


def test_a_body_cut_short_is_refused() -> None:
    assert "closing boundary" in _refusal(_form(("file", "a.wav", WAV))[:-12]).message


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (WAV, "WAV"),
        (b"ID3\x04\x00\x00", "MP3"),
        (b"\xff\xfb\x90\x64", "MP3"),
        (b"fLaC\x00\x00", "FLAC"),
        (b"OggS\x00\x02", "Ogg"),
        (b"\x1a\x45\xdf\xa3\x01", "WebM"),
        (b"\x00\x00\x00\x20ftypM4A ", "MP4/M4A"),
        (b"RIFF\x00\x00\x00\x00AVI ", ""),
        (b"hello", ""),
    ],
)
def test_a_recording_is_recognised_by_its_leading_bytes(data: bytes, kind: str) -> None:
    assert audio_kind(data) == kind


def test_the_form_defaults_to_json_and_takes_the_openai_fields() -> None:
    form = read_form(
        parse_form(
            _form(
                ("file", "a.mp3", WAV),  # the name is not what decides
                ("model", None, b"whisper-1"),
                ("language", None, b"en"),
                ("prompt", None, b"context"),
                ("temperature", None, b"0.2"),
                ("timestamp_granularities[]", None, b"segment"),
                ("stream", None, b"false"),
                ("chunking_strategy", None, b"auto"),
            ),
            CONTENT_TYPE,
            "file",
        )
    )
    assert (form.audio, form.model, form.language, form.response_format, form.temperature) == (
        WAV,
        "whisper-1",
        "en",
        "json",
        0.2,
    )


@pytest.mark.parametrize(
    ("field", "value", "param"),
    [
        ("response_format", b"xml", "response_format"),
        ("timestamp_granularities[]", b"word", "timestamp_granularities"),
        ("timestamp_granularities", b"sentence", "timestamp_granularities"),
        ("temperature", b"warm", "temperature"),
        ("temperature", b"-0.1", "temperature"),
        ("temperature", b"nan", "temperature"),
        ("language", b"english please", "language"),
        ("stream", b"true", "stream"),
        ("model", b"\xff", "model"),
    ],
)
def test_a_bad_field_is_refused_naming_it(field: str, value: bytes, param: str) -> None:
    assert _refusal(_form(("file", "a.wav", WAV), (field, None, value))).param == param


@pytest.mark.parametrize(
    "parts",
    [[("model", None, b"m")], [("file", "a.wav", WAV), ("file", "b.wav", WAV)], [("file", "a.wav", b"")]],
    ids=["no file", "two files", "empty file"],
)
def test_one_non_empty_file_is_required(parts: list[Part]) -> None:
    assert _refusal(_form(*parts)).param == "file"


def test_a_recording_in_another_format_is_refused_naming_it_and_wav() -> None:
    error = _refusal(_form(("file", "a.wav", b"OggS\x00\x02" + bytes(16))))
    assert (error.param, error.message) == ("file", "`file` is Ogg; supported: WAV (PCM)")


@pytest.mark.parametrize(
    ("seconds", "decimal", "text"),
    [(0.0, ",", "00:00:00,000"), (3_723.4567, ".", "01:02:03.457"), (59.9996, ",", "00:01:00,000")],
)
def test_timestamps_carry_hours_minutes_seconds_and_milliseconds(
    seconds: float, decimal: str, text: str
) -> None:
    assert timestamp(seconds, decimal) == text


SEGMENTS = [TranscriptSegment(0.2, 1.1, "good day"), TranscriptSegment(1.9, 2.5, "it's me")]


def test_srt_numbers_its_cues_with_comma_milliseconds() -> None:
    assert srt(SEGMENTS) == (
        "1\n00:00:00,200 --> 00:00:01,100\ngood day\n\n2\n00:00:01,900 --> 00:00:02,500\nit's me\n\n"
    )


def test_vtt_starts_with_its_header_and_uses_dot_milliseconds() -> None:
    assert vtt(SEGMENTS) == (
        "WEBVTT\n\n00:00:00.200 --> 00:00:01.100\ngood day\n\n00:00:01.900 --> 00:00:02.500\nit's me\n\n"
    )


def test_no_segments_render_as_empty_subtitles() -> None:
    assert (srt([]), vtt([])) == ("", "WEBVTT\n\n")


def test_a_malformed_body_reaches_no_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    bad_header = f"--{BOUNDARY}\r\nCont\x01ent: x\r\n\r\nsecret\r\n--{BOUNDARY}--\r\n".encode()
    for body in (bad_header, b"--wrong-boundary\r\n"):
        with pytest.raises(ServingError):
            parse_form(body, CONTENT_TYPE, "file")
    assert caplog.records == []  # the parser's warnings quote the body's bytes
