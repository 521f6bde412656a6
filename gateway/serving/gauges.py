"""The gauges of the live view, computed when Prometheus scrapes (a custom collector): queue
depth, background writes, per accelerator the books (resident, leased, schedulable bytes,
leases) and the pressure level on them, and this gateway's standby leases (`standby_gauges`).

Projection lag is not here: it is an async read of the read model and the streams, made by the
`/metrics` handler (`gateway.http.projection_metrics`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.scheduler import account
from gateway.scheduler.standby import StandbySlots
from gateway.scheduler.state import SEVERITY

if TYPE_CHECKING:
    from gateway.serving.context import ServingContext


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


class LiveGauges(Collector):
    def __init__(self, ctx: ServingContext) -> None:
        self._ctx = ctx

    def collect(self) -> Iterator[Metric]:
        ctx = self._ctx
        live = ctx.live
        yield _gauge(
            "modelforge_applied_event_sequence",
            "The last event-stream sequence folded into this gateway's live view",
            live.applied,
        )
        yield _gauge(
            "modelforge_queued_requests", "Requests waiting for capacity on this gateway", ctx.queued
        )
        yield _gauge(
            "modelforge_queued_requests_all_gateways",
            "Requests waiting for capacity on every gateway, as this one hears them",
            ctx.queue_depth(),
        )
        yield _gauge(
            "modelforge_background_writes",
            "Writes begun off a response's path (lease releases, request events) not finished yet",
            len(ctx.background),
        )
        yield _gauge(
            "modelforge_event_log_leaderless",
            "1 while this gateway finds the event log (MF_EVENTS) with no leader: no lease can be "
            "appended, and warm requests run under standby leases where it holds them",
            1 if ctx.store.leaderless.is_set() else 0,
        )
        yield from _accelerators(ctx)
        yield from standby_gauges(ctx.standby)


def standby_gauges(slots: StandbySlots | None) -> list[Metric]:
    """This gateway's standby leases (`gateway.scheduler.standby`), per deployment and accelerator:
    the memory each books and its requests' slots, all and in use. No families at all where
    standby leases are off (`slots` None)."""
    if slots is None:
        return []
    labels = ["deployment", "accelerator"]
    booked = GaugeMetricFamily(
        "modelforge_standby_lease_bytes",
        "Memory this gateway's standby leases book ahead for warm requests while the event log has no leader",
        labels=labels,
    )
    held = GaugeMetricFamily(
        "modelforge_standby_slots", "Requests this gateway's standby leases hold room for", labels=labels
    )
    in_use = GaugeMetricFamily(
        "modelforge_standby_slots_in_use",
        "Requests running under this gateway's standby leases",
        labels=labels,
    )
    for lease in sorted(slots.held.values(), key=lambda h: h.lease_id):
        values = [lease.deployment_id, lease.accelerator_id]
        booked.add_metric(values, lease.reserved_bytes)
        held.add_metric(values, slots.slots)
        in_use.add_metric(values, slots.slots - slots.free(lease.lease_id))
    return [booked, held, in_use]


def _accelerators(ctx: ServingContext) -> Iterator[Metric]:
    live = ctx.live
    now = time.time()
    labels = ["accelerator", "node"]
    resident = GaugeMetricFamily(
        "modelforge_accelerator_resident_bytes",
        "Memory of the models resident on the accelerator",
        labels=labels,
    )
    leased = GaugeMetricFamily(
        "modelforge_accelerator_leased_bytes",
        "Memory reserved by leases and not yet in use (outstanding)",
        labels=labels,
    )
    schedulable = GaugeMetricFamily(
        "modelforge_accelerator_schedulable_bytes",
        "Memory placement may still give out: total less safety reserve and what is committed",
        labels=labels,
    )
    leases = GaugeMetricFamily(
        "modelforge_accelerator_leases", "Leases on the accelerator's books", labels=labels
    )
    pressure = GaugeMetricFamily(
        "modelforge_accelerator_pressure_level",
        "Pressure level on the books: 0 normal, 1 elevated, 2 high, 3 critical",
        labels=labels,
    )
    for state in live.schedulable_accelerators(now):
        budget = account(state, live.policy, now)
        values = [state.accelerator_id, state.node_id]
        resident.add_metric(values, budget.resident_bytes)
        leased.add_metric(values, budget.leased_bytes)
        schedulable.add_metric(values, budget.schedulable_bytes)
        leases.add_metric(values, len(state.leases))
        pressure.add_metric(values, SEVERITY[state.pressure.level])
    yield from (resident, leased, schedulable, leases, pressure)
