"""`multipart/form-data` parsed from a body already in memory (read within its limit by
`gateway.http.body`). Starlette's `request.form()` spools file parts over 1 MB to a temporary file;
request content must never reach disk, so the parts are collected here as bytes, with
python-multipart's callback parser doing the framing."""

from __future__ import annotations

import logging

import msgspec
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from streams.codes import ServingError

MAX_PARTS = 32  # OpenAI's forms have a handful of fields: more is not a real client
MAX_FIELD_BYTES = 64 << 10  # a text field's value (a file part is bounded by the body limit alone)
MAX_PART_HEADERS = 8

# The parser logs a warning quoting the offending bytes of a malformed body: request content must
# reach no log, and the client gets the same words in its 400.
logging.getLogger("python_multipart").setLevel(logging.ERROR)


class FormPart(msgspec.Struct, frozen=True):
    name: str
    filename: str | None  # set on file parts (what `-F file=@a.wav` and the openai package send)
    content_type: str
    data: bytes

    def text(self) -> str:
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError:
            raise refusal(f"`{self.name}` is not UTF-8 text", self.name) from None


def refusal(message: str, param: str | None) -> ServingError:
    return ServingError("INVALID_INPUT", message, param=param, http_status=400)


def _boundary(content_type: str | None, param: str) -> bytes:
    kind, options = parse_options_header(content_type or "")
    boundary = options.get(b"boundary", b"")
    if kind != b"multipart/form-data" or not boundary:
        found = kind.decode("latin-1") or "no content type"
        raise refusal(
            f"the request is {found}; send multipart/form-data with the recording in `{param}` "
            f"(curl -F {param}=@recording.wav)",
            param,
        )
    return boundary


class _Collector:
    """The parser's callbacks: each part's headers and data, in order, bounded as they arrive."""

    def __init__(self) -> None:
        self.parts: list[FormPart] = []
        self.ended = False
        self._headers: dict[str, bytes] = {}
        self._field = bytearray()
        self._value = bytearray()
        self._chunks: list[bytes] = []
        self._size = 0
        self._name = ""
        self._filename: str | None = None

    def callbacks(self) -> dict[str, object]:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": lambda data, start, end: self._field.extend(data[start:end]),
            "on_header_value": lambda data, start, end: self._value.extend(data[start:end]),
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_part_end": self._part_end,
            "on_end": self._end,
        }

    def _part_begin(self) -> None:
        if len(self.parts) >= MAX_PARTS:
            raise refusal(f"the form has more than {MAX_PARTS} parts", None)
        self._headers, self._chunks, self._size = {}, [], 0

    def _header_end(self) -> None:
        self._headers[self._field.decode("latin-1").strip().lower()] = bytes(self._value).strip()
        self._field.clear()
        self._value.clear()

    def _headers_finished(self) -> None:
        kind, options = parse_options_header(self._headers.get("content-disposition"))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        if kind != b"form-data" or not name:
            raise refusal("a form part has no `Content-Disposition: form-data; name=...` header", None)
        filename = options.get(b"filename")
        self._name = name
        self._filename = None if filename is None else filename.decode("utf-8", "replace")

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        self._size += end - start
        if self._filename is None and self._size > MAX_FIELD_BYTES:
            raise refusal(f"`{self._name}` is longer than {MAX_FIELD_BYTES} bytes", self._name)
        self._chunks.append(data[start:end])

    def _part_end(self) -> None:
        content_type = self._headers.get("content-type", b"").decode("latin-1")
        data = b"".join(self._chunks)
        self.parts.append(FormPart(self._name, self._filename, content_type, data))

    def _end(self) -> None:
        self.ended = True


def parse_form(body: bytes, content_type: str | None, file_param: str) -> list[FormPart]:
    """The form's parts in order; INVALID_INPUT (400) for a body that is not a whole
    multipart/form-data message (`file_param` names the field the caller must send)."""
    boundary = _boundary(content_type, file_param)
    collector = _Collector()
    try:
        parser = MultipartParser(
            boundary,
            collector.callbacks(),  # type: ignore[arg-type]  # its TypedDict of callbacks
            max_header_count=MAX_PART_HEADERS,
        )
        parser.write(body)
        parser.finalize()
    except FormParserError as error:
        raise refusal(f"the multipart body is malformed: {error}", None) from None
    if not collector.ended:
        raise refusal("the multipart body ends before its closing boundary", None)
    return collector.parts
