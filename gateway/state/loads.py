"""Loads under way: requested on the books, not yet reported loaded or failed. Pure.

An agent reports every load job it receives (`ResidencyLoaded` or `ResidencyLoadFailed`); a restart
reconciles what it really holds. A load nobody reports on within the policy's
`load_timeout_seconds` (its job lost, its agent stuck) is ended on the books, so the deployment
does not stay LOADING for ever: requests waiting for it are answered, and the next one loads it
again. An agent that reports after all is still believed: its `ResidencyLoaded` makes it resident.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from streams.events import serving as s
from streams.events.base import Event

# A deployment whose load failed on an accelerator is not loaded there again, by a request or by
# the always-warm upkeep, until this long after: a failure that persists (its files missing on
# that node, a runtime that cannot load it) must not become a stream of loads.
LOAD_RETRY_S = 30.0


class PendingLoad(msgspec.Struct, frozen=True):
    requested: s.ResidencyLoadRequested
    requested_at: float  # POSIX seconds, when it was appended


class LoadFailure(msgspec.Struct, frozen=True):
    """A deployment's last failed load, and when it failed (an always-warm one is retried later)."""

    failed: s.ResidencyLoadFailed
    at: float  # POSIX seconds
    # the node's agent tried it and failed (not a job the gateway could not send, nor a timeout)
    by_agent: bool = False


class Outgrown(msgspec.Struct, frozen=True):
    """A load that measured more than its envelope reserved: the envelope (from probe `probe_id`)
    no longer holds for cold loads, until a new probe's measurement is promoted."""

    probe_id: str
    accelerator_id: str
    reserved_bytes: int
    measured_bytes: int

    def reason(self) -> str:
        return (
            f"a load on {self.accelerator_id} measured {self.measured_bytes} bytes, more than the "
            f"{self.reserved_bytes} its envelope reserved"
        )


def retry_at(failure: LoadFailure | None) -> float:
    """When a load that failed may be tried again (minus infinity: nothing failed)."""
    return failure.at + LOAD_RETRY_S if failure is not None else float("-inf")


def failed_recently(failures: Mapping[str, LoadFailure], deployment_id: str, now: float) -> tuple[str, ...]:
    """The accelerators a cold load of `deployment_id` must avoid now: where the agent failed its
    last load, until it may be tried again. (A job the gateway could not send says nothing of the
    node: the next request may load it there at once.)"""
    failure = failures.get(deployment_id)
    recent = failure is not None and failure.by_agent and retry_at(failure) > now
    return (failure.failed.accelerator_id,) if failure is not None and recent else ()


def outgrown(pending: Mapping[str, PendingLoad], loaded: s.ResidencyLoaded, probe_id: str) -> Outgrown | None:
    """What `loaded` says of its envelope, if it measured past the reservation its load made."""
    load = pending.get(loaded.load_id)
    if load is None or loaded.measured_bytes <= load.requested.required_bytes:
        return None
    return Outgrown(probe_id, loaded.accelerator_id, load.requested.required_bytes, loaded.measured_bytes)


def fold_loads(pending: dict[str, PendingLoad], event: Event, at: float) -> None:
    """Apply one accelerator event that occurred at `at` (in place: the live view's table)."""
    match event:
        case s.ResidencyLoadRequested():
            pending[event.load_id] = PendingLoad(event, at)
        case s.ResidencyLoaded() | s.ResidencyLoadFailed():
            pending.pop(event.load_id, None)
        case s.ResidencyReconciled():
            held = set(event.held)
            for load_id, item in list(pending.items()):
                load = item.requested
                if load.accelerator_id == event.accelerator_id and load.deployment_id not in held:
                    del pending[load_id]
        case _:
            pass


def loads_overdue(
    pending: Mapping[str, PendingLoad], now: float, timeout_s: float
) -> list[s.ResidencyLoadFailed]:
    """The failures to record for loads nobody reported on in time, by load id."""
    return [
        s.ResidencyLoadFailed(
            load_id=load_id,
            accelerator_id=item.requested.accelerator_id,
            deployment_id=item.requested.deployment_id,
            code="RESIDENCY_LOAD_FAILED",
            detail=f"no agent reported on the load within {timeout_s:g} s",
        )
        for load_id, item in sorted(pending.items())
        if item.requested_at + timeout_s <= now
    ]


def next_load_due(pending: Mapping[str, PendingLoad], timeout_s: float) -> float | None:
    """When the next load under way runs out of time (None: none is under way)."""
    return min((item.requested_at + timeout_s for item in pending.values()), default=None)
