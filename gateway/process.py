"""Assembling one gateway replica: connect, provision, fold the live state, open the edge."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from starlette.applications import Starlette

from eventstore.connection import Connection, connect
from eventstore.provision import provision
from eventstore.recorder import RequestRecorder
from eventstore.store import EventStore
from gateway.app import create_app
from gateway.clients.directory import ClientDirectory
from gateway.clients.limit_streams import provision_limits
from gateway.clients.limits import RequestLimiter
from gateway.contracts import ContractChanged, register_contracts
from gateway.http.edge import Edge
from gateway.operations.canary_guard import guard_canaries
from gateway.operators import operator_file_from_env
from gateway.promotion.context import PromotionContext
from gateway.scheduler.standby import StandbySlots
from gateway.serving.caps import DeploymentGate
from gateway.serving.context import COALESCE_AFTER, ServingContext
from gateway.serving.fleet_metrics import FleetMetrics
from gateway.serving.keeper import run_upkeep
from gateway.serving.queues import QueueBoard
from gateway.serving.refusal_log import flush_refusals
from gateway.state.live import LiveState
from gateway.state.snapshots import SnapshotWriter, start_live


@dataclass
class GatewayReplica:
    connection: Connection
    edge: Edge
    app: Starlette
    upkeep: asyncio.Task[None]
    stop: asyncio.Event
    queues: QueueBoard
    guards: asyncio.Task[None]  # the canaries' rollback guards (gateway.operations.canary_guard)
    snapshots: SnapshotWriter

    async def close(self) -> None:
        ctx = self.edge.ctx
        self.stop.set()  # the upkeep loop wakes on it
        ctx.closing.set()
        await self.upkeep
        await self.guards
        flush_refusals(ctx)
        await ctx.settle()
        await self.queues.close()
        if self.edge.fleet_metrics is not None:
            await self.edge.fleet_metrics.close()
        await self.snapshots.close()
        await ctx.live.stop()
        await self.edge.directory.close()
        await self.edge.read_models.close()
        await self.edge.limiter.close()
        await self.connection.close()


COALESCE_AFTER_ENV = "MODELFORGE_COALESCE_AFTER"


def coalesce_after_from_env() -> int:
    """Runs in flight for a deployment from which its embedding requests share runs (0: never);
    `gateway.serving.coalescing`."""
    value = os.environ.get(COALESCE_AFTER_ENV, "").strip()
    if not value:
        return COALESCE_AFTER
    if not value.isascii() or not value.isdigit():
        raise ValueError(f"{COALESCE_AFTER_ENV} must be a whole number of runs (0: never), not {value!r}")
    return int(value)


STANDBY_LEASES_ENV = "MODELFORGE_STANDBY_LEASES"


def standby_slots_from_env() -> int:
    """Requests each standby lease holds room for (0: no standby leases); `gateway.scheduler.standby`."""
    value = os.environ.get(STANDBY_LEASES_ENV, "").strip()
    if not value:
        return 0
    if not value.isascii() or not value.isdigit():
        raise ValueError(f"{STANDBY_LEASES_ENV} must be a whole number of slots (0: off), not {value!r}")
    return int(value)


async def start_replica(gateway_id: str, nats_url: str | None = None) -> GatewayReplica:
    """Ready to serve: state caught up with the event log, clients directory caught up."""
    connection = await connect(nats_url, f"gateway-{gateway_id}")
    await provision(connection.client)
    await provision_limits(connection.client)
    store = EventStore(connection)
    try:
        await register_contracts(store)  # a contract changed under its version stops the start here
    except ContractChanged:
        await connection.close()
        raise
    live = LiveState()
    await start_live(connection.client, live)  # from the latest snapshot, when there is one
    snapshots = SnapshotWriter(connection.client, live)
    snapshots.start()
    directory = ClientDirectory(connection.client)
    await directory.start()
    await directory.wait_ready(120)
    queues = QueueBoard(connection.client, gateway_id)
    limiter = RequestLimiter(connection.client)
    gate = DeploymentGate(limiter, connection.client)
    recorder = RequestRecorder(store)
    await recorder.open()
    ctx = ServingContext(
        store, live, connection.client, gateway_id, board=queues, gate=gate, recorder=recorder
    )
    ctx.coalescing.after = coalesce_after_from_env()
    if slots := standby_slots_from_env():
        ctx.standby = StandbySlots(slots)
        store.notes_leader = True
    live.listeners.append(ctx.wake_waiting)
    await queues.start()
    fleet_metrics = FleetMetrics(connection.client, live.node_live)
    await fleet_metrics.start()
    token = os.environ.get("MODELFORGE_OPERATOR_TOKEN", "")
    edge = Edge(
        ctx,
        directory,
        limiter,
        operator_token=token,
        operators=operator_file_from_env(),
        fleet_metrics=fleet_metrics,
    )
    edge.ready = True
    stop = asyncio.Event()
    upkeep = asyncio.create_task(run_upkeep(ctx, stop), name="residency-upkeep")
    guards = asyncio.create_task(guard_canaries(PromotionContext(ctx, ctx.actor), stop), name="canary-guards")
    return GatewayReplica(connection, edge, create_app(edge), upkeep, stop, queues, guards, snapshots)
