"""Contract-level serving of one capability: contract input JSON in, contract output JSON out.

The adapters speak rows and tensors; a server here decodes the contract's input, submits its rows to
the deployment's dynamic batcher, checks the result against the contract (INVALID_OUTPUT otherwise)
and encodes the contract's output. Content is never logged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import msgspec
import numpy as np
import orjson
from numpy.typing import NDArray

from nodeagent.adapters.base import CapabilityAdapter, invalid_output, run_batch, run_rows
from nodeagent.adapters.embedding import (
    EmbeddingAdapter,
    EmbeddingResult,
    l2_normalize,
    unit_length,
    validate_embeddings,
)
from nodeagent.adapters.reranking import (
    RerankDocument,
    expected_ranking_length,
    rank_documents,
    validate_ranking,
)
from nodeagent.runtimes.base import Laned, Runs, Runtime
from nodeagent.worker.batching import DynamicBatcher
from streams import codes, contracts
from streams.codes import ServingError
from streams.messages import WorkerTimings

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")
# A lone request runs at once; requests that arrive while a batch runs form the next batch
# (natural batching): no latency is added when idle, and batches grow with the load.
BATCH_WAIT_S = 0.0
_TEST_TEXTS = ["ModelForge health check", "a second, longer sentence to embed for the warm-up"]
_TEST_PAIRS = [("health check", "the service answers health checks"), ("health check", "unrelated text")]


@dataclass(frozen=True)
class Timed(Generic[ResultT]):
    """One row's result plus the facts of the runtime call it shared."""

    result: ResultT
    batch_rows: int
    inference_ms: float
    tokens: int  # what the runtime was fed for this row


def timed_runner(
    adapter: CapabilityAdapter[ItemT, ResultT], runtime: Runs
) -> Callable[[Sequence[ItemT]], list[Timed[ResultT]]]:
    def run(items: Sequence[ItemT]) -> list[Timed[ResultT]]:
        started = time.perf_counter()
        batch, results = run_batch(adapter, runtime, items)
        elapsed = (time.perf_counter() - started) * 1000
        return [
            Timed(result, len(items), elapsed, tokens)
            for result, tokens in zip(results, batch.token_counts, strict=True)
        ]

    return run


def timed_batcher(
    adapter: CapabilityAdapter[ItemT, ResultT], runtime: Runtime, max_batch_size: int
) -> DynamicBatcher[ItemT, Timed[ResultT]]:
    """A batcher over the runtime, that runs batches in lanes where the runtime has them (the
    load sets how many)."""
    lane = timed_runner(adapter, runtime.lane) if isinstance(runtime, Laned) else None
    return DynamicBatcher(
        timed_runner(adapter, runtime), max_batch_size=max_batch_size, max_wait_s=BATCH_WAIT_S, run_lane=lane
    )


@dataclass(frozen=True)
class MeasuredOutput:
    """What a test inference produced, measured from its output rather than read from the model's
    config: the probe records it so the gateway can hold it against the candidate's declared
    profile (0 / False where the capability has no embedding space)."""

    dimension: int = 0
    normalized: bool = False


class CapabilityServer(Protocol):
    capability: str
    batcher: DynamicBatcher[Any, Any]  # every serve and check goes through it

    async def serve(self, payload: bytes, input_type: str = "") -> tuple[bytes, WorkerTimings]:
        """`input_type`: an embedding request's "query" | "document" (others ignore it)."""
        ...

    def test_inference(self) -> MeasuredOutput:
        """One blocking inference on fixed input, validated: warm-up, health and probe use it."""

    async def check(self) -> None:
        """The same fixed inference through the batcher, so it never races a serving runtime call."""

    async def close(self) -> None: ...


def decode_input(payload: bytes, input_type: type[Any]) -> Any:
    try:
        return msgspec.json.decode(payload, type=input_type)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise ServingError(codes.INVALID_INPUT.code, f"input breaks the contract: {error}") from None


def check_items(count: int, limits: contracts.Limits) -> None:
    if not 1 <= count <= limits.max_items:
        raise ServingError(codes.INVALID_INPUT.code, f"between 1 and {limits.max_items} items are allowed")


def worker_timings(timed: Sequence[Timed[Any]], waited_ms: float, decode_ms: float) -> WorkerTimings:
    inference_ms = max((t.inference_ms for t in timed), default=0.0)
    return WorkerTimings(
        queue_ms=max(0.0, waited_ms - inference_ms),
        preprocess_ms=decode_ms,
        inference_ms=inference_ms,
        batch_size=max((t.batch_rows for t in timed), default=0),
    )


class ServedVectors(msgspec.Struct, frozen=True):
    """A request's rows as vectors, with the timings of their run and when it ended."""

    vectors: NDArray[Any]
    timed: list[Timed[Any]]
    timings: WorkerTimings
    ran: float


async def served_vectors(
    batcher: DynamicBatcher[ItemT, Timed[Any]],
    items: list[ItemT],
    dimensions: int | None,
    *,
    dimension: int,
    normalize: bool,
    started: float,
) -> ServedVectors:
    """The rows through the batcher (each vector checked against the contract with its batch),
    cut to the leading `dimensions` components asked for (Matryoshka truncation; the gateway admits
    only the sizes the deployment declares) and normalised again where the model's vectors are."""
    if dimensions is not None and not 1 <= dimensions <= dimension:
        raise ServingError(
            codes.INVALID_INPUT.code, f"`dimensions` must be between 1 and {dimension}", "dimensions"
        )
    decoded = time.perf_counter()
    timed = await batcher.submit(items)
    ran = time.perf_counter()
    vectors = np.stack([t.result.vector for t in timed])
    if dimensions is not None and dimensions < dimension:
        head = vectors[:, :dimensions]
        vectors = l2_normalize(head) if normalize else head
    timings = worker_timings(timed, (ran - decoded) * 1000, (decoded - started) * 1000)
    return ServedVectors(vectors, timed, timings, ran)


class VectorsReply(msgspec.Struct, frozen=True, omit_defaults=True):
    """An embedding output as a worker writes it (`contracts.EmbeddingRunOutput`, or, with no
    tokens, `contracts.VisionEmbeddingOutput`): the vectors as `float32_rows` wrote them."""

    embeddings: msgspec.Raw
    dimension: int
    input_tokens: int | None = None
    item_tokens: list[int] | None = None


def float32_rows(vectors: NDArray[np.float32]) -> msgspec.Raw:
    """Rows of float32 as JSON arrays of numbers, each the shortest text that reads back as the
    same float32 (orjson's). Written from float64 they take ~40 % more bytes (17 digits where 8-9
    say the same value): bytes the agent writes, NATS carries, the gateway reads and passes on, and
    the client parses (a reply of 32 MiniLM vectors: ~257 KB as float64 text, ~150 KB as float32)."""
    rows = np.ascontiguousarray(vectors, dtype=np.float32)
    return msgspec.Raw(orjson.dumps(rows, option=orjson.OPT_SERIALIZE_NUMPY))


def reply(output: object, timings: WorkerTimings, ran: float) -> tuple[bytes, WorkerTimings]:
    """The output as the invoke reply carries it, and the timings with the time encoding it took
    (`ran`: when the runtime call ended)."""
    body = msgspec.json.encode(output)
    return body, msgspec.structs.replace(timings, serialize_ms=(time.perf_counter() - ran) * 1000)


async def served_alone(
    batcher: DynamicBatcher[ItemT, Timed[Any]], row: ItemT, started: float, decoded: float
) -> tuple[bytes, WorkerTimings]:
    """One row (a page, a recording) through the batcher, its result checked with its batch and
    encoded as the reply."""
    timed = await batcher.submit([row])
    ran = time.perf_counter()
    return reply(
        timed[0].result, worker_timings(timed, (ran - decoded) * 1000, (decoded - started) * 1000), ran
    )


def measured_vectors(vectors: Sequence[NDArray[Any]]) -> MeasuredOutput:
    return MeasuredOutput(dimension=int(vectors[0].shape[0]), normalized=all(unit_length(v) for v in vectors))


class EmbeddingServer:
    capability = contracts.EMBEDDING.capability

    def __init__(self, adapter: EmbeddingAdapter, runtime: Runtime, max_batch_size: int) -> None:
        self.adapter, self.runtime = adapter, runtime
        self.batcher: DynamicBatcher[str, Timed[EmbeddingResult]] = timed_batcher(
            adapter, runtime, max_batch_size
        )

    async def serve(self, payload: bytes, input_type: str = "") -> tuple[bytes, WorkerTimings]:
        started = time.perf_counter()
        request: contracts.EmbeddingInput = decode_input(payload, contracts.EmbeddingInput)
        check_items(len(request.texts), contracts.EMBEDDING.limits)
        config = self.adapter.config
        served = await served_vectors(
            self.batcher,
            self.adapter.typed(request.texts, input_type),
            request.dimensions,
            dimension=config.dimension,
            normalize=config.normalize,
            started=started,
        )
        output = VectorsReply(
            embeddings=float32_rows(served.vectors),
            dimension=served.vectors.shape[1],
            input_tokens=sum(t.result.token_count for t in served.timed),
            item_tokens=[t.result.token_count for t in served.timed],
        )
        return reply(output, served.timings, served.ran)

    def test_inference(self) -> MeasuredOutput:
        vectors = [r.vector for r in run_rows(self.adapter, self.runtime, _TEST_TEXTS)]
        self._validate(vectors)
        return measured_vectors(vectors)

    async def check(self) -> None:
        self._validate([t.result.vector for t in await self.batcher.submit(_TEST_TEXTS)])

    def _validate(self, vectors: Sequence[Any]) -> None:
        validate_embeddings(
            vectors,
            expected_count=len(_TEST_TEXTS),
            dimension=self.adapter.config.dimension,
            normalized=self.adapter.config.normalize,
        )

    async def close(self) -> None:
        await self.batcher.close()


class RerankServer:
    capability = contracts.RERANKING.capability

    def __init__(
        self, adapter: CapabilityAdapter[tuple[str, str], float], runtime: Runtime, max_batch_size: int
    ) -> None:
        self.adapter, self.runtime = adapter, runtime
        self.batcher: DynamicBatcher[tuple[str, str], Timed[float]] = timed_batcher(
            adapter, runtime, max_batch_size
        )

    async def serve(self, payload: bytes, input_type: str = "") -> tuple[bytes, WorkerTimings]:
        started = time.perf_counter()
        request: contracts.RerankInput = decode_input(payload, contracts.RerankInput)
        check_items(len(request.documents), contracts.RERANKING.limits)
        decoded = time.perf_counter()
        timed = await self.batcher.submit([(request.query, text) for text in request.documents])
        ran = time.perf_counter()
        documents = [RerankDocument(str(index), text) for index, text in enumerate(request.documents)]
        ranking = rank_documents(documents, [t.result for t in timed], request.top_n)
        validate_ranking(
            ranking,
            expected_ids={d.id for d in documents},
            expected_count=expected_ranking_length(len(documents), request.top_n),
        )
        output = contracts.RerankOutput(
            results=[contracts.RankedDocument(index=r.index, relevance_score=r.score) for r in ranking],
            input_tokens=sum(t.tokens for t in timed),  # counted by the batch, not tokenized again
        )
        return reply(output, worker_timings(timed, (ran - decoded) * 1000, (decoded - started) * 1000), ran)

    def test_inference(self) -> MeasuredOutput:
        _check_scores(run_rows(self.adapter, self.runtime, _TEST_PAIRS))
        return MeasuredOutput()

    async def check(self) -> None:
        _check_scores([t.result for t in await self.batcher.submit(_TEST_PAIRS)])

    async def close(self) -> None:
        await self.batcher.close()


def _check_scores(scores: Sequence[float]) -> None:
    if len(scores) != len(_TEST_PAIRS):
        raise invalid_output("reranker test inference returned the wrong number of scores")
