"""The JSON bodies the client and operator routes answer with, as types: the OpenAPI document's
response schemas (`gateway.http.openapi`). The dialects build these bodies as dicts on the hot
path; `tests/integration/gateway/test_openapi_answers.py` (and the rerank, OCR and transcription
API tests) decode real answers into these types, so the two cannot drift apart unnoticed."""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar

import msgspec

from streams.contracts import CONTRACTS
from streams.errorspec import ErrorType
from streams.events.requests import LatencyBreakdown

Output = TypeVar("Output")


class ErrorDetail(msgspec.Struct):
    code: str  # one of streams.codes (the document lists them)
    message: str
    type: ErrorType
    param: str | None
    request_id: str | None
    details: dict[str, Any] | None = None


class ErrorBody(msgspec.Struct):
    """Every refusal and failure, on every route, is in this one shape."""

    error: ErrorDetail


class Served(msgspec.Struct):
    """What every served capability call adds to its dialect's body."""

    request_id: str
    latency: LatencyBreakdown


class TokenUsage(msgspec.Struct):
    prompt_tokens: int
    total_tokens: int


class EmbeddingItem(msgspec.Struct):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str  # str: little-endian float32 in base64 (`encoding_format`)


class EmbeddingAnswer(Served):
    object: Literal["list"]
    data: list[EmbeddingItem]
    model: str
    usage: TokenUsage


class RerankDocument(msgspec.Struct):
    text: str


class RerankResult(msgspec.Struct):
    index: int
    relevance_score: float
    document: RerankDocument | None = None  # with `return_documents`


class BilledUnits(msgspec.Struct):
    search_units: int


class RerankMeta(msgspec.Struct):
    billed_units: BilledUnits


class RerankAnswer(Served):
    id: str
    model: str
    results: list[RerankResult]
    usage: TokenUsage
    meta: RerankMeta


class PageDimensions(msgspec.Struct):
    dpi: int
    height: int
    width: int


class OcrLine(msgspec.Struct):
    text: str
    bbox: list[float]
    confidence: float


class OcrPage(msgspec.Struct):
    index: int
    markdown: str
    images: list[Any]
    dimensions: PageDimensions | None
    ocr_lines: list[OcrLine]


class OcrUsage(msgspec.Struct):
    pages_processed: int
    doc_size_bytes: int


class OcrAnswer(Served):
    pages: list[OcrPage]
    model: str
    document_annotation: None
    usage_info: OcrUsage


class DurationUsage(msgspec.Struct):
    type: Literal["duration"]
    seconds: int


class TranscriptionSegment(msgspec.Struct):
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float


class TranscriptionAnswer(Served):
    """`response_format` json: text and usage; verbose_json adds the rest (text, srt and vtt
    answer plain text)."""

    text: str
    usage: DurationUsage
    task: Literal["transcribe"] | None = None
    language: str | None = None
    duration: float | None = None
    segments: list[TranscriptionSegment] | None = None


class TranscriptionUpload(msgspec.Struct):
    """The multipart form of `POST /v1/audio/transcriptions` (OpenAI's)."""

    file: bytes  # the audio (WAV, 16 kHz mono best)
    model: str | None = None
    language: str | None = None
    response_format: Literal["json", "verbose_json", "text", "srt", "vtt"] = "json"
    temperature: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None


class ModelEntry(msgspec.Struct):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    capability: str
    available: bool
    dimensions: int | None


class ModelList(msgspec.Struct):
    object: Literal["list"]
    data: list[ModelEntry]


class InvokeAnswer(Served, Generic[Output]):
    capability: str
    deployment_id: str
    cold_start: bool
    output: Output  # the capability contract's output type


# one answer type per capability contract (`/v1/capabilities/{capability}:invoke`)
INVOKE_ANSWERS = tuple(InvokeAnswer[c.output_type] for c in CONTRACTS.values())  # type: ignore[name-defined]


class Health(msgspec.Struct):
    status: Literal["ok"]


class Readiness(msgspec.Struct):
    status: Literal["ready", "not_ready"]
    checks: dict[str, bool]
    applied_sequence: int
