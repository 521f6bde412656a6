"""Operating deployments and nodes: drain, unload, residency and scheduler policy, experiment
routes, node enablement. Drain and unload refuse while requests run (`DEPLOYMENT_BUSY`); a
resident deployment's unload is planned on its accelerator as an eviction is, decided against its
leases (gateway/serving/unloading.py), then done by its agent and the outcome awaited there."""

from __future__ import annotations

import asyncio

from gateway.deployments.commands import (
    ChangeCaps,
    ChangeResidency,
    ChangeScaling,
    CompleteDrain,
    DrainDeployment,
    SetExperimentActive,
)
from gateway.deployments.decide import decide_deployment
from gateway.deployments.model import DeploymentState
from gateway.promotion import commands as cmd
from gateway.promotion.approvals import refresh_staleness
from gateway.promotion.context import PromotionContext
from gateway.promotion.decide import decide_node
from gateway.promotion.waiting import next_event
from gateway.scheduler.policy import PolicyInvalid, revise
from gateway.serving.evicting import unload_victims
from gateway.serving.jobs import publish_job
from gateway.serving.unloading import plan_unload
from streams.codes import ServingError
from streams.envelope import new_id
from streams.events import Event
from streams.events import control as c
from streams.events import serving as s
from streams.messages import DrainJob
from streams.subjects import Aggregate

A = Aggregate
POLICY_ID = "scheduler"


class Operations:
    def __init__(self, promotion: PromotionContext) -> None:
        self.promotion = promotion
        self.ctx = promotion.ctx
        self.aggregates = promotion.aggregates

    def active_requests(self, deployment_id: str) -> int:
        return sum(
            1 for state in self.ctx.live.accelerators.values() for lease in state.leases
            if lease.deployment_id == deployment_id
        )  # fmt: skip

    async def drain(self, deployment_id: str, reason: str = "") -> tuple[DeploymentState, int]:
        """Stop routing, unload what is resident, mark drained. Returns (deployment, reclaimed).
        A replica that had not applied DeploymentDraining yet may still have leased it: the
        unload waits for such leases to end (up to the job timeout, else DEPLOYMENT_BUSY; the
        deployment stays draining and a later drain finishes it)."""
        command = DrainDeployment(deployment_id, self.active_requests(deployment_id), reason)
        await self.aggregates.execute(A.DEPLOYMENT, deployment_id, decide_deployment, command)
        await self.promotion.settle()
        reclaimed = 0
        planned = await plan_unload(self.ctx, deployment_id, "drain", self.promotion.job_timeout_s)
        if planned is not None:
            node_id, eviction, version = planned
            drain = DrainJob(
                job_id=new_id(), node_id=node_id, deployment_id=deployment_id,
                accelerator_id=eviction.accelerator_id, requested_by=str(self.promotion.actor),
            )  # fmt: skip
            await publish_job(self.ctx, drain, "drain")
            reclaimed = await self._unload(node_id, eviction, version)
        await self.aggregates.execute(
            A.DEPLOYMENT, deployment_id, decide_deployment, CompleteDrain(deployment_id)
        )
        await self.promotion.settle()
        return await self.promotion.deployment(deployment_id), reclaimed

    async def unload(self, deployment_id: str) -> tuple[bool, int]:
        """(was resident, reclaimed bytes); DEPLOYMENT_BUSY while a lease of it is held.
        DEPLOYMENT_ALWAYS_WARM for a copy the upkeep keeps loaded: unloading it would not last."""
        deployment = await self.promotion.deployment(deployment_id)
        if deployment.residency.kind == "always_warm" and deployment.active and not deployment.draining:
            raise ServingError(
                "DEPLOYMENT_ALWAYS_WARM",
                f"{deployment_id} is always-warm and would be loaded again at once: change its "
                "residency policy (on_demand or keep_warm) or drain it first",
            )
        reclaimed = await self.unload_copy(deployment_id)
        return reclaimed is not None, reclaimed or 0

    async def unload_copy(self, deployment_id: str, on: str | None = None, wait_s: float = 0.0) -> int | None:
        """Reclaimed bytes of the deployment's copy on accelerator `on` (wherever it is, when
        None), or None when not resident there. Waits up to `wait_s` for its leases to end, then
        DEPLOYMENT_BUSY."""
        planned = await plan_unload(self.ctx, deployment_id, "operator", wait_s, on)
        return None if planned is None else await self._unload(*planned)

    async def _unload(self, node_id: str, eviction: s.EvictionPlanned, version: int) -> int:
        """Send the planned eviction's unload job and await its outcome after `version`."""
        accelerator_id, (deployment_id,) = eviction.accelerator_id, eviction.victims
        await asyncio.shield(self.ctx.spawn(unload_victims(self.ctx, node_id, eviction)))
        outcome, sequence = await next_event(
            self.ctx.client,
            A.ACCELERATOR,
            accelerator_id,
            version,
            lambda e: (
                isinstance(e, s.ResidencyUnloaded | s.ResidencyUnloadFailed)
                and e.deployment_id == deployment_id
            ),
            self.promotion.job_timeout_s,
            "unload outcome",
        )
        await self.ctx.live.wait_applied(sequence, timeout=10.0)
        if isinstance(outcome, s.ResidencyUnloadFailed):
            raise ServingError("RESIDENCY_UNLOAD_FAILED", outcome.detail)
        assert isinstance(outcome, s.ResidencyUnloaded)
        return outcome.reclaimed_bytes

    async def change_residency(self, deployment_id: str, policy: s.ResidencyPolicy) -> DeploymentState:
        await self.aggregates.execute(
            A.DEPLOYMENT, deployment_id, decide_deployment, ChangeResidency(deployment_id, policy)
        )
        await self.promotion.settle()
        return await self.promotion.deployment(deployment_id)

    async def change_scaling(
        self, deployment_id: str, replicas: s.Replicas, placement: s.PlacementKind
    ) -> DeploymentState:
        command = ChangeScaling(deployment_id, replicas, placement)
        await self.aggregates.execute(A.DEPLOYMENT, deployment_id, decide_deployment, command)
        await self.promotion.settle()
        return await self.promotion.deployment(deployment_id)

    async def change_caps(self, command: ChangeCaps) -> DeploymentState:
        await self.aggregates.execute(A.DEPLOYMENT, command.deployment_id, decide_deployment, command)
        await self.promotion.settle()
        return await self.promotion.deployment(command.deployment_id)

    async def set_experiment_active(
        self, deployment_id: str, active: bool, reason: str = ""
    ) -> DeploymentState:
        if await self.aggregates.get(A.DEPLOYMENT, deployment_id) is None:
            raise ServingError("EXPERIMENT_NOT_FOUND", f"no experiment {deployment_id!r}", "deployment_id")
        command = SetExperimentActive(deployment_id, active, reason)
        await self.aggregates.execute(A.DEPLOYMENT, deployment_id, decide_deployment, command)
        await self.promotion.settle()
        return await self.promotion.deployment(deployment_id)

    async def node(self, command: cmd.NodeCommand) -> None:
        await self.aggregates.execute(A.NODE, command.node_id, decide_node, command)
        await refresh_staleness(self.promotion)
        await self.promotion.settle()

    async def revise_policy(self, changes: dict[str, float | bool]) -> c.SchedulerPolicyRevised | None:
        events, _ = await self.aggregates.execute(A.SCHEDULER_POLICY, POLICY_ID, decide_policy, changes)
        await self.promotion.settle()
        revised = events[0] if events else None
        return revised if isinstance(revised, c.SchedulerPolicyRevised) else None


def decide_policy(
    state: c.SchedulerPolicyRevised | None, changes: dict[str, float | bool], now: object
) -> list[Event]:
    """A revision the scheduler can run under, or INVALID_INPUT naming the setting (no event)."""
    base = dict(state.settings) if state else {}
    try:
        merged = revise(base, changes)
    except PolicyInvalid as invalid:
        raise ServingError("INVALID_INPUT", invalid.message, invalid.setting) from None
    if state is not None and merged == base:
        return []
    return [c.SchedulerPolicyRevised(revision=(state.revision if state else 0) + 1, settings=merged)]
