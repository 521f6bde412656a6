"""A deployment's state, folded from its events (`gateway.deployments.evolve`): what it serves,
on which channel, with which envelope and residency, and whether it still takes traffic."""

from __future__ import annotations

import msgspec

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

    @property
    def status(self) -> str:
        if self.drained:
            return "drained"
        if self.draining:
            return "draining"
        if self.channel == "stable":
            return "stable"
        return "active" if self.active else "inactive"
