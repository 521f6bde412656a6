"""A deployment's state, folded from its events (`gateway.deployments.evolve`): what it serves,
on which channel, with which envelope and residency, and whether it still takes traffic."""

from __future__ import annotations

import msgspec

from streams.events import releases as r
from streams.events import serving as s


class DeploymentState(msgspec.Struct, frozen=True, kw_only=True):
    deployment_id: str
    capability: str
    candidate_id: str
    artifact_set_id: str
    model_name: str
    channel: str  # stable | experiment
    envelope: s.ResourceEnvelope
    residency: s.ResidencyPolicy
    embedding_space: s.EmbeddingSpace | None
    approval_id: str = ""
    route: str = ""
    active: bool = True
    draining: bool = False
    drained: bool = False
    max_batch_size: int = 32
    probe_id: str = ""  # the probe that measured `envelope`
    manifest_sha256: str = ""  # the artifact set's manifest it was promoted with: all it loads
    replicas: s.Replicas = s.Replicas()
    placement: s.PlacementKind = "binpack"
    # A stable deployment's split of its capability's traffic (deployment id -> percent; empty:
    # all of it here) and whether a client keeps its deployment (gateway.deployments.weights).
    weights: dict[str, int] = msgspec.field(default_factory=dict)
    sticky: bool = False
    rollback: r.RollbackPolicy | None = None  # an experiment's guards (gateway.deployments.guard)
    caps: s.DeploymentCaps = s.STABLE_CAPS  # an experiment's start as s.EXPERIMENT_CAPS

    @property
    def resident_floor(self) -> int:
        """Copies the residency upkeep keeps loaded: `replicas.min` when the deployment asks to
        stay resident (always-warm, or more than one copy), else none (loaded on demand)."""
        if self.residency.kind == "always_warm" or self.replicas.min > 1:
            return self.replicas.min
        return 0

    @property
    def status(self) -> str:
        if self.drained:
            return "drained"
        if self.draining:
            return "draining"
        if self.channel == "stable":
            return "stable"
        return "active" if self.active else "inactive"
