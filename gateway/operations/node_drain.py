"""A node's drain: cordon it (disabled, so placement puts nothing new there), then unload every
copy resident on its accelerators through the operator's unload. Each unload waits for its
copy's leases to end, all of them within one deadline; a copy whose requests still run then is
reported busy, never cut off. Cordoned, the node is not loaded again (an always-warm copy goes
elsewhere), so the drain unloads always-warm copies too."""

from __future__ import annotations

import time
from collections.abc import Mapping

import msgspec

from gateway.operations.service import Operations
from gateway.promotion import commands as cmd
from gateway.scheduler import AcceleratorState, ResidencyState
from streams.codes import ServingError


class Copy(msgspec.Struct, frozen=True, kw_only=True):
    accelerator_id: str
    deployment_id: str


class Unloaded(Copy, frozen=True, kw_only=True):
    reclaimed_bytes: int


class Refused(Copy, frozen=True, kw_only=True):
    code: str  # DEPLOYMENT_BUSY: requests still ran at the deadline; else why the unload failed
    message: str
    active_requests: int = 0


class NodeDrain(msgspec.Struct, frozen=True, kw_only=True):
    node_id: str
    unloaded: list[Unloaded]
    busy: list[Refused]
    failed: list[Refused]


def drain_targets(accelerators: Mapping[str, AcceleratorState], node_id: str) -> list[Copy]:
    """The copies a drain of `node_id` unloads: the residents of its accelerators, but those
    already unloading, in accelerator then deployment order."""
    return [
        Copy(accelerator_id=accelerator_id, deployment_id=resident.deployment_id)
        for accelerator_id, state in sorted(accelerators.items())
        if state.node_id == node_id
        for resident in state.residents
        if resident.state is not ResidencyState.UNLOADING
    ]


async def drain_node(operations: Operations, node_id: str, reason: str, wait_s: float) -> NodeDrain:
    await operations.promotion.node(node_id)  # NO_ELIGIBLE_NODE (404) before anything is recorded
    await operations.node(cmd.SetNodeEnabled(node_id, False, reason))
    deadline = time.monotonic() + wait_s
    unloaded: list[Unloaded] = []
    busy: list[Refused] = []
    failed: list[Refused] = []
    for copy in drain_targets(operations.ctx.live.accelerators, node_id):
        where = msgspec.structs.asdict(copy)
        try:
            left = max(0.0, deadline - time.monotonic())
            reclaimed = await operations.unload_copy(copy.deployment_id, copy.accelerator_id, left)
        except ServingError as refused:
            active = refused.details.get("active_requests", 0)
            row = Refused(
                **where,
                code=refused.code,
                message=refused.message,
                active_requests=active if isinstance(active, int) else 0,
            )
            (busy if refused.code == "DEPLOYMENT_BUSY" else failed).append(row)
            continue
        if reclaimed is not None:  # None: it went meanwhile (an upkeep unload, node loss)
            unloaded.append(Unloaded(**where, reclaimed_bytes=reclaimed))
    return NodeDrain(node_id=node_id, unloaded=unloaded, busy=busy, failed=failed)
