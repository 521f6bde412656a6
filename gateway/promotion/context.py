"""What every command of the promotion pipeline works with: the serving context, the operator who
acts, the aggregates (each command loads its aggregate, decides, and appends with the loaded
version: `Aggregates.execute`) and how long to await an agent's job. Agent work (verify, probe,
unload) is a job on MF_WORK whose outcome event is awaited on the aggregate.

The loaders name one aggregate by id; a missing one is the stable error code of its gate.
"""

from __future__ import annotations

from datetime import datetime

from gateway.deployments.model import DeploymentState
from gateway.promotion.aggregates import Aggregates, checked_id
from gateway.promotion.decide import candidate_not_found
from gateway.promotion.model import ApprovalState, ArtifactSetState, CandidateState, NodeState, ProbeRecord
from gateway.serving.context import ServingContext
from streams.codes import ServingError
from streams.envelope import Actor
from streams.subjects import Aggregate

A = Aggregate


class PromotionContext:
    def __init__(self, ctx: ServingContext, actor: Actor, *, job_timeout_s: float = 180.0) -> None:
        self.ctx = ctx
        self.aggregates = Aggregates(ctx.store, actor)
        self.actor = actor
        self.job_timeout_s = job_timeout_s

    @property
    def now(self) -> datetime:
        return self.aggregates.clock()

    async def settle(self) -> None:
        """Read-your-writes for the live view: wait until it has applied this context's appends."""
        if self.aggregates.last_sequence:
            await self.ctx.live.wait_applied(self.aggregates.last_sequence, timeout=10.0)

    async def node(self, node_id: str) -> NodeState:
        node: NodeState | None = await self.aggregates.get(A.NODE, checked_id(node_id, "node id"))
        if node is None:
            raise ServingError("NO_ELIGIBLE_NODE", f"no node {node_id!r}", "node_id", http_status=404)
        return node

    async def node_judged(
        self, probe: ProbeRecord | None, arts: ArtifactSetState | None
    ) -> tuple[NodeState | None, bool]:
        """(the node, online now) for facts a gate judges: the probe's node, else the node that
        verified the artifact set; an unnamed or unknown node is none."""
        node_id = probe.node_id if probe else arts.node_id if arts else ""
        node: NodeState | None = await self.aggregates.get(A.NODE, node_id) if node_id else None
        return node, bool(node and self.ctx.live.node_live(node.node_id))

    async def artifact_set_at(self, artifact_set_id: str) -> tuple[ArtifactSetState, int]:
        """The set and its version: an agent's verdict is awaited after that version."""
        arts: ArtifactSetState | None
        arts, version = await self.aggregates.load(A.ARTIFACT_SET, artifact_set_id)
        if arts is None:
            raise ServingError(
                "ARTIFACT_INCOMPLETE",
                f"no artifact set {artifact_set_id!r}",
                "artifact_set_id",
                http_status=404,
            )
        return arts, version

    async def artifact_set(self, artifact_set_id: str) -> ArtifactSetState:
        return (await self.artifact_set_at(artifact_set_id))[0]

    async def candidate(self, candidate_id: str) -> CandidateState:
        candidate: CandidateState | None = await self.aggregates.get(A.CANDIDATE, candidate_id)
        if candidate is None:
            raise candidate_not_found(candidate_id)
        return candidate

    async def approval(self, approval_id: str) -> ApprovalState:
        approval: ApprovalState | None = await self.aggregates.get(A.APPROVAL, approval_id)
        if approval is None:
            raise ServingError("PRODUCTION_APPROVAL_NOT_FOUND", "unknown approval", "approval_id")
        return approval

    async def deployment(self, deployment_id: str) -> DeploymentState:
        deployment: DeploymentState | None = await self.aggregates.get(A.DEPLOYMENT, deployment_id)
        if deployment is None:
            raise ServingError("DEPLOYMENT_NOT_FOUND", f"no deployment {deployment_id!r}", "deployment_id")
        return deployment

    async def deployments(self) -> list[DeploymentState]:
        return list((await self.aggregates.all(A.DEPLOYMENT)).values())
