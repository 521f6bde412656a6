"""The five capability contracts: typed, versioned inputs and outputs with their limits.

A contract is the promise a client codes against; the gateway validates inputs against it and
agents validate outputs against it before replying. JSON schemas come from the Structs.
"""

from __future__ import annotations

from typing import Literal

import msgspec

# ---- inputs and outputs --------------------------------------------------------------------


class EmbeddingInput(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    texts: list[str]
    dimensions: int | None = None  # truncate (Matryoshka) where the deployment supports it
    normalize: bool = True


class EmbeddingOutput(msgspec.Struct, frozen=True):
    embeddings: list[list[float]]
    dimension: int
    input_tokens: int


class EmbeddingRunOutput(EmbeddingOutput, frozen=True):
    """What a worker answers for `rag.embedding@1`: the contract's output and each text's tokens,
    so that a gateway serving several requests in one run bills each its own. Not the published
    type: a published contract never changes, and its output schema admits the added field."""

    item_tokens: list[int] | None = None


class RerankInput(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    query: str
    documents: list[str]
    top_n: int | None = None


class RankedDocument(msgspec.Struct, frozen=True):
    index: int
    relevance_score: float


class RerankOutput(msgspec.Struct, frozen=True):
    results: list[RankedDocument]  # sorted by score, best first
    input_tokens: int


class OcrInput(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    image_base64: str
    mime_type: Literal["image/png", "image/jpeg"] = "image/png"


class OcrBlock(msgspec.Struct, frozen=True):
    text: str
    bbox: tuple[float, float, float, float]
    confidence: float


class OcrOutput(msgspec.Struct, frozen=True):
    text: str
    blocks: list[OcrBlock]


class VisionEmbeddingInput(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    images_base64: list[str]  # PNG or JPEG
    dimensions: int | None = None  # truncate (Matryoshka) where the deployment supports it
    normalize: bool = True


class VisionEmbeddingOutput(msgspec.Struct, frozen=True):
    embeddings: list[list[float]]
    dimension: int


class TranscriptionInput(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    audio_base64: str
    format: Literal["wav"] = "wav"
    language: str | None = None
    prompt: str | None = None  # text the decoder continues from (an encoder-decoder model's)
    temperature: float | None = None  # 0 or none: greedy decoding; above: sampling


class TranscriptSegment(msgspec.Struct, frozen=True):
    start_s: float
    end_s: float
    text: str


class TranscriptionOutput(msgspec.Struct, frozen=True):
    text: str
    segments: list[TranscriptSegment]
    duration_s: float


# ---- contracts -----------------------------------------------------------------------------


MAX_IMAGE_SIDE_PX = 4096  # an image's width and height, each 1..this (docs/reference-behaviour.md §2)


class Limits(msgspec.Struct, frozen=True):
    max_items: int
    max_chars_per_item: int = 0
    max_total_chars: int = 0
    max_request_bytes: int = 1 << 20
    default_timeout_ms: int = 30_000


class CapabilityContract(msgspec.Struct, frozen=True):
    name: str  # "rag.embedding"
    version: int
    input_type: type[msgspec.Struct]
    output_type: type[msgspec.Struct]
    limits: Limits
    upgrade_class: Literal["compatible", "reindex", "breaking"]
    description: str

    @property
    def capability(self) -> str:
        return f"{self.name}@{self.version}"

    def input_schema(self) -> dict[str, object]:
        return msgspec.json.schema(self.input_type)

    def output_schema(self) -> dict[str, object]:
        return msgspec.json.schema(self.output_type)


EMBEDDING = CapabilityContract(
    "rag.embedding",
    1,
    EmbeddingInput,
    EmbeddingOutput,
    Limits(max_items=256, max_chars_per_item=32_768, max_total_chars=524_288, max_request_bytes=4 << 20),
    "reindex",
    "Dense text embeddings for retrieval; vectors live in the deployment's embedding space.",
)
RERANKING = CapabilityContract(
    "rag.reranking",
    1,
    RerankInput,
    RerankOutput,
    Limits(max_items=1_000, max_chars_per_item=32_768, max_total_chars=2_097_152, max_request_bytes=8 << 20),
    "compatible",
    "Relevance scores of documents for a query (cross-encoder), sorted best first.",
)
OCR = CapabilityContract(
    "document.ocr",
    1,
    OcrInput,
    OcrOutput,
    Limits(max_items=1, max_request_bytes=20 << 20, default_timeout_ms=60_000),
    "compatible",
    "Text and line boxes from one page image (PNG or JPEG).",
)
VISION_EMBEDDING = CapabilityContract(
    "vision.embedding",
    1,
    VisionEmbeddingInput,
    VisionEmbeddingOutput,
    Limits(max_items=64, max_request_bytes=32 << 20),
    "reindex",
    "Image embeddings in the deployment's embedding space.",
)
TRANSCRIPTION = CapabilityContract(
    "speech.transcription",
    1,
    TranscriptionInput,
    TranscriptionOutput,
    Limits(max_items=1, max_request_bytes=25 << 20, default_timeout_ms=120_000),
    "compatible",
    "Speech to text from a WAV recording, with timed segments.",
)

CONTRACTS: dict[str, CapabilityContract] = {
    c.capability: c for c in (EMBEDDING, RERANKING, OCR, VISION_EMBEDDING, TRANSCRIPTION)
}


def contract_for(capability: str) -> CapabilityContract | None:
    return CONTRACTS.get(capability)
