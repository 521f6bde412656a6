"""The capability adapter interface: model-agnostic requests in, model tensors through, results out."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from nodeagent.runtimes.base import Runs, Tensor
from streams import codes
from streams.codes import ServingError

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")
ItemContraT = TypeVar("ItemContraT", contravariant=True)


@dataclass(frozen=True)
class PreparedBatch:
    """Runtime feeds for a batch of rows plus what postprocessing needs to know about them."""

    feeds: dict[str, Tensor]
    token_counts: tuple[int, ...]  # tokens actually fed per row (after truncation)

    @property
    def rows(self) -> int:
        return len(self.token_counts)


class CapabilityAdapter(Protocol[ItemContraT, ResultT]):
    """Turns rows of one capability into runtime feeds and runtime outputs back into rows."""

    capability: str

    def count_tokens(self, item: ItemContraT) -> int: ...

    def preprocess(self, items: Sequence[ItemContraT]) -> PreparedBatch: ...

    def postprocess(self, batch: PreparedBatch, outputs: Mapping[str, Tensor]) -> list[ResultT]: ...

    def validate_output(self, batch: PreparedBatch, results: Sequence[ResultT]) -> None: ...


def invalid_output(message: str) -> ServingError:
    return ServingError(codes.INVALID_OUTPUT.code, message)


def pick_output(outputs: Mapping[str, Tensor], name: str | None) -> Tensor:
    """The named output, or the only/first one when the adapter does not name it."""
    if name is not None:
        if name not in outputs:
            raise invalid_output(f"runtime returned no {name!r} output (got {sorted(outputs)})")
        return outputs[name]
    if not outputs:
        raise invalid_output("runtime returned no outputs")
    return next(iter(outputs.values()))


def run_batch(
    adapter: CapabilityAdapter[ItemT, ResultT], runtime: Runs, items: Sequence[ItemT]
) -> tuple[PreparedBatch, list[ResultT]]:
    """One runtime call for `items`: preprocess, run, postprocess, validate. Blocking. The prepared
    batch comes back with the results (its token counts are what each row was charged)."""
    batch = adapter.preprocess(items)
    outputs = runtime.run(batch.feeds)
    results = adapter.postprocess(batch, outputs)
    adapter.validate_output(batch, results)
    return batch, results


def run_rows(
    adapter: CapabilityAdapter[ItemT, ResultT], runtime: Runs, items: Sequence[ItemT]
) -> list[ResultT]:
    """`run_batch`'s results alone."""
    return run_batch(adapter, runtime, items)[1]


def batch_runner(
    adapter: CapabilityAdapter[ItemT, ResultT], runtime: Runs
) -> Callable[[Sequence[ItemT]], list[ResultT]]:
    """`run_rows` bound to one adapter and runtime: the function a DynamicBatcher calls."""

    def run(items: Sequence[ItemT]) -> list[ResultT]:
        return run_rows(adapter, runtime, items)

    return run
