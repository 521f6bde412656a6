"""Canary releases, the command side: a capability's routing weights, an experiment's rollback
policy, and what an operator (or a tripped guard) does with an experiment's share: promote it to
all of the traffic, pause it (share back to the stable deployment, kept loaded) or abort it (share
back, deactivated, unloaded).

The split is checked against every deployment (`check_weights`) and appended on the capability's
stable deployment with that aggregate's expected version (`Aggregates.execute`): of two replicas
whose guards trip together, one appends, the other decides again on the changed split and finds
nothing left to take back (`gateway.deployments.decide`)."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.deployments.commands import ChangeRoutingWeights, SetRollbackPolicy, TakeBackShare
from gateway.deployments.decide import decide_deployment
from gateway.deployments.guard import check_policy
from gateway.deployments.model import DeploymentState
from gateway.deployments.weights import check_weights
from gateway.operations.service import Operations
from gateway.promotion.context import PromotionContext
from gateway.promotion.model import ApprovalState
from streams.codes import ServingError
from streams.events import releases as r
from streams.subjects import Aggregate

A = Aggregate
UNLOAD_WAIT_S = 30.0  # for requests already on an aborted experiment to finish before it unloads


class Canary:
    def __init__(self, promotion: PromotionContext) -> None:
        self.promotion = promotion
        self.aggregates = promotion.aggregates

    async def set_weights(
        self, capability: str, weights: Mapping[str, object], sticky: bool = False, reason: str = ""
    ) -> DeploymentState:
        """Record the capability's split; returns its stable deployment, the split on it."""
        deployments = await self.promotion.deployments()
        stable = _stable_of(capability, deployments)
        checked = check_weights(stable, weights, deployments, await self._approved_candidates())
        command = ChangeRoutingWeights(stable.deployment_id, checked, sticky, reason)
        await self.aggregates.execute(A.DEPLOYMENT, stable.deployment_id, decide_deployment, command)
        await self.promotion.settle()
        return await self.promotion.deployment(stable.deployment_id)

    async def set_policy(self, experiment_id: str, policy: r.RollbackPolicy) -> DeploymentState:
        if await self.aggregates.get(A.DEPLOYMENT, experiment_id) is None:
            raise ServingError("EXPERIMENT_NOT_FOUND", f"no experiment {experiment_id!r}", "deployment_id")
        command = SetRollbackPolicy(experiment_id, check_policy(policy))
        await self.aggregates.execute(A.DEPLOYMENT, experiment_id, decide_deployment, command)
        await self.promotion.settle()
        return await self.promotion.deployment(experiment_id)

    async def set_share(
        self, experiment_id: str, weight: int, sticky: bool = False, reason: str = ""
    ) -> DeploymentState:
        """The experiment takes `weight` percent, the stable deployment the rest (any other
        experiment's share goes back to it)."""
        experiment, stable = await self._experiment(experiment_id)
        split = (
            {experiment_id: weight, stable.deployment_id: 100 - weight}
            if 0 <= weight <= 100
            else {experiment_id: weight}
        )
        return await self.set_weights(experiment.capability, split, sticky, reason)

    async def promote(self, experiment_id: str, reason: str = "") -> DeploymentState:
        """All of the capability's traffic to the experiment (weight 100). Making it the stable
        deployment is the promotion pipeline's (a production approval, `deployments promote`)."""
        experiment, stable = await self._experiment(experiment_id)
        return await self.set_weights(
            experiment.capability, {experiment_id: 100, stable.deployment_id: 0}, stable.sticky, reason
        )

    async def pause(self, experiment_id: str, reason: str = "") -> DeploymentState:
        """Weight 0, kept loaded and active (its route still reaches it)."""
        _, stable = await self._experiment(experiment_id)
        await self.take_back(stable.deployment_id, experiment_id, reason or "paused by an operator")
        return await self.promotion.deployment(stable.deployment_id)

    async def abort(self, experiment_id: str, reason: str = "") -> DeploymentState:
        """Weight 0, deactivated and unloaded."""
        _, stable = await self._experiment(experiment_id)
        await self.take_back(stable.deployment_id, experiment_id, reason or "aborted by an operator")
        await self.withdraw(experiment_id, reason or "aborted by an operator")
        return await self.promotion.deployment(stable.deployment_id)

    async def take_back(
        self, stable_id: str, experiment_id: str, reason: str, guard: r.GuardTrip | None = None
    ) -> bool:
        """The experiment's share back to the stable deployment; False: it had none (already taken)."""
        command = TakeBackShare(stable_id, experiment_id, reason, guard)
        events, _ = await self.aggregates.execute(A.DEPLOYMENT, stable_id, decide_deployment, command)
        await self.promotion.settle()
        return bool(events)

    async def withdraw(self, experiment_id: str, reason: str) -> None:
        """Deactivate the experiment (its route no longer reaches it) and unload every copy."""
        operations = Operations(self.promotion)
        await operations.set_experiment_active(experiment_id, False, reason)
        while await operations.unload_copy(experiment_id, wait_s=UNLOAD_WAIT_S) is not None:
            pass  # one copy per accelerator: until none is left

    async def _approved_candidates(self) -> set[str]:
        """Candidates holding a production approval that is neither revoked, stale nor expired."""
        approvals: dict[str, ApprovalState] = await self.aggregates.all(A.APPROVAL)
        now = self.promotion.now
        return {a.candidate_id for a in approvals.values() if a.kind == "production" and a.usable(now)}

    async def _experiment(self, experiment_id: str) -> tuple[DeploymentState, DeploymentState]:
        """The experiment and its capability's stable deployment."""
        deployments = await self.promotion.deployments()
        experiment = next((d for d in deployments if d.deployment_id == experiment_id), None)
        if experiment is None or experiment.channel != "experiment":
            raise ServingError("EXPERIMENT_NOT_FOUND", f"no experiment {experiment_id!r}", "deployment_id")
        return experiment, _stable_of(experiment.capability, deployments)


def _stable_of(capability: str, deployments: list[DeploymentState]) -> DeploymentState:
    stable = next(
        (d for d in deployments if d.capability == capability and d.channel == "stable" and not d.draining),
        None,
    )
    if stable is None:
        raise ServingError(
            "ROUTING_TARGET_INVALID",
            f"{capability} has no stable deployment taking traffic to split",
            "capability",
        )
    return stable
