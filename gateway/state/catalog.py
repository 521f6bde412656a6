"""The serving catalogue: deployments, artifact sets and nodes, folded from their events.

Pure: `evolve_catalog(catalog, event, at)` returns a new catalogue. The gateway resolves a
capability to a deployment and a deployment to the artifact files a node must load from here.
"""

from __future__ import annotations

import msgspec

from gateway.deployments.evolve import evolve_deployment
from gateway.deployments.model import DeploymentState
from gateway.deployments.routes import names_stable
from gateway.deployments.weights import RoutingKey, bucket_of, choose
from gateway.scheduler.fleet import accelerator_model
from gateway.scheduler.state import HardwareClass
from streams.events import control as c
from streams.events import serving as s
from streams.events.base import Event
from streams.events.identity import NodeCredentialsIssued, NodeCredentialsRevoked


class ArtifactSetInfo(msgspec.Struct, frozen=True, kw_only=True):
    artifact_set_id: str
    node_id: str
    root: str
    files: tuple[c.ArtifactFile, ...]
    capability: str
    verified: bool = False
    quarantined: bool = False
    manifest_sha256: str = ""


class NodeInfo(msgspec.Struct, frozen=True, kw_only=True):
    node_id: str
    accelerators: tuple[c.AcceleratorSpec, ...]
    hardware_fingerprint: str = ""
    runtimes: tuple[str, ...] = ()
    enabled: bool = True
    production_eligible: bool = True
    decommissioned: bool = False
    generation: int = 0
    lost: bool = False  # a gateway declared this generation gone (NodeLost); WorkerStarted ends it
    revoked: bool = False  # its NATS credentials were revoked (`nodes revoke`); new ones end it

    @property
    def schedulable(self) -> bool:
        return (
            self.enabled
            and self.production_eligible
            and not self.decommissioned
            and not self.lost
            and not self.revoked
        )

    def accelerator_model(self, accelerator_id: str) -> str:
        """The accelerator part of its hardware class ("" for an accelerator it does not have)."""
        for spec in self.accelerators:
            if spec.accelerator_id == accelerator_id:
                return accelerator_model(spec.kind, spec.name, spec.compute_capability)
        return ""


class ProbeFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What a candidate's resource envelope was measured on."""

    node_id: str
    hardware_fingerprint: str
    runtime: str
    accelerator_model: str = ""  # "" when the node was not registered when the probe completed
    precision: str = ""  # the candidate's runtime profile's


class Catalog(msgspec.Struct, frozen=True):
    deployments: dict[str, DeploymentState] = msgspec.field(default_factory=dict)
    artifact_sets: dict[str, ArtifactSetInfo] = msgspec.field(default_factory=dict)
    nodes: dict[str, NodeInfo] = msgspec.field(default_factory=dict)
    probes: dict[str, ProbeFacts] = msgspec.field(default_factory=dict)  # probe id -> what it ran on
    precisions: dict[str, str] = msgspec.field(default_factory=dict)  # candidate id -> its precision

    def measured_class(self, deployment: DeploymentState) -> HardwareClass | None:
        """The hardware class the deployment's envelope was measured on (None: not known)."""
        probe = self.probes.get(deployment.probe_id)
        if probe is None or not probe.accelerator_model:
            return None
        return HardwareClass(probe.accelerator_model, probe.runtime, probe.precision)

    def stale_envelope(self, deployment: DeploymentState) -> str | None:
        """Why the deployment's measured envelope no longer holds (the node it was measured on now
        registers other hardware, or lacks the runtime it was measured with), or None while it
        holds. Only the probe the envelope came from counts: measuring again means promoting the
        new measurement."""
        probe = self.probes.get(deployment.probe_id)
        node = self.nodes.get(probe.node_id) if probe else None
        if probe is None or node is None:
            return None
        if node.hardware_fingerprint != probe.hardware_fingerprint:
            return f"node {node.node_id}'s hardware changed since the probe measured it"
        if node.runtimes and probe.runtime not in node.runtimes:
            return f"runtime {probe.runtime} is no longer on node {node.node_id}"
        return None

    def unservable(self, deployment: DeploymentState) -> str | None:
        """Why the deployment's files may not be loaded or served (its artifact set is quarantined,
        or holds other files than it was promoted with), or None while they may. A set not in the
        catalogue is the load job's refusal (ARTIFACT_INCOMPLETE), not routing's."""
        artifacts = self.artifact_sets.get(deployment.artifact_set_id)
        if artifacts is None:
            return None
        if artifacts.quarantined:
            return f"artifact set {artifacts.artifact_set_id} of {deployment.deployment_id} is quarantined"
        if deployment.manifest_sha256 and deployment.manifest_sha256 != artifacts.manifest_sha256:
            return (
                f"artifact set {artifacts.artifact_set_id} holds other files than "
                f"{deployment.deployment_id} was promoted with"
            )
        return None

    def _routable(self, deployment: DeploymentState) -> bool:
        return deployment.active and not deployment.draining and self.unservable(deployment) is None

    def stable_for(self, capability: str) -> DeploymentState | None:
        """The capability's stable deployment that takes traffic (not draining, its files servable)."""
        for deployment in self.deployments.values():
            if (
                deployment.capability == capability
                and deployment.channel == "stable"
                and self._routable(deployment)
            ):
                return deployment
        return None

    def unavailable(self, capability: str) -> str:
        """Why no deployment serves the capability: what keeps its stable deployment from it, if any."""
        for deployment in self.deployments.values():
            if (
                deployment.capability == capability
                and deployment.channel == "stable"
                and not deployment.draining
            ):
                reason = self.unservable(deployment)
                if reason:
                    return f"no deployment serves {capability}: {reason}"
        return f"no deployment serves {capability}"

    def model_names(self, capability: str) -> list[str]:
        """The names a call to `capability` may give in `model` besides the capability's own: its
        stable deployment's model name and each experiment's route (not drained). Any other name
        is refused rather than served by the stable deployment: a vector from another model than
        the one named would be silently wrong."""
        return [
            d.model_name if d.channel == "stable" else d.route
            for d in self.deployments.values()
            if d.capability == capability and not d.drained and (d.channel == "stable" or d.route)
        ]

    def resolve(
        self, capability: str, model: str = "", key: RoutingKey | None = None
    ) -> DeploymentState | None:
        """An active experiment whose route the client named, else the stable deployment, or with
        `key` (a request being served) the deployment the stable one's weights send it to.
        Experiments are reached only through their route, never through a capability's or a stable
        deployment's model name: new routes cannot take those (gateway.deployments.routes), and an
        experiment an older log routed under one does not take the stable deployment's traffic."""
        if model:
            routed = next(
                (
                    d
                    for d in self.deployments.values()
                    if d.capability == capability
                    and d.channel == "experiment"
                    and d.route == model
                    and self._routable(d)
                ),
                None,
            )
            # the stable names are checked only where an experiment has the route (rare, and
            # every request names a model)
            if routed and not names_stable(model, self.deployments.values()):
                return routed
        stable = self.stable_for(capability)
        return self._weighted(stable, key) if stable and stable.weights and key else stable

    def _weighted(self, stable: DeploymentState, key: RoutingKey) -> DeploymentState:
        """The deployment of the split that takes this request; the stable one when the chosen
        experiment cannot take it now (deactivated, draining, its files unservable)."""
        bucket = bucket_of(stable.capability, key.for_split(stable.sticky))
        chosen = self.deployments.get(choose(stable.weights, stable.deployment_id, bucket))
        if chosen is None or chosen.capability != stable.capability or not self._routable(chosen):
            return stable
        return chosen

    def node_of_accelerator(self, accelerator_id: str) -> NodeInfo | None:
        for node in self.nodes.values():
            if any(a.accelerator_id == accelerator_id for a in node.accelerators):
                return node
        return None


def _with(catalog: Catalog, **changes: object) -> Catalog:
    return msgspec.structs.replace(catalog, **changes)


def evolve_catalog(catalog: Catalog, event: Event) -> Catalog:
    deployments, artifacts, nodes = catalog.deployments, catalog.artifact_sets, catalog.nodes
    match event:
        case (
            s.DeploymentPromoted()
            | s.ExperimentCreated()
            | s.ExperimentActivated()
            | s.ExperimentDeactivated()
            | s.DeploymentDraining()
            | s.DeploymentDrained()
            | s.ResidencyPolicyChanged()
            | s.DeploymentScalingChanged()
            | s.RoutingWeightsChanged()
            | s.RollbackPolicyChanged()
            | s.DeploymentCapsChanged()
        ):
            # One fold of the deployment aggregate serves the promotion pipeline and serving alike.
            updated = evolve_deployment(deployments.get(event.deployment_id), event, 0)
            if updated is None:
                return catalog
            promoted_from = artifacts.get(updated.artifact_set_id)
            if isinstance(event, s.DeploymentPromoted | s.ExperimentCreated) and promoted_from:
                # A promotion from before deployments kept their manifest binds the set's as it stood.
                updated = msgspec.structs.replace(
                    updated, manifest_sha256=updated.manifest_sha256 or promoted_from.manifest_sha256
                )
            return _with(catalog, deployments={**deployments, event.deployment_id: updated})
        case c.ArtifactSetRegistered():
            previous_art = artifacts.get(event.artifact_set_id)
            art = ArtifactSetInfo(
                artifact_set_id=event.artifact_set_id,
                node_id=event.node_id,
                root=event.root,
                files=event.files,
                capability=event.capability,
                quarantined=bool(previous_art and previous_art.quarantined),  # registering never lifts it
                manifest_sha256=event.manifest_sha256,
            )
            return _with(catalog, artifact_sets={**artifacts, event.artifact_set_id: art})
        case c.ArtifactSetVerified() | c.ArtifactSetQuarantined():
            current_art = artifacts.get(event.artifact_set_id)
            if current_art is None:
                return catalog
            flag = {"verified": True} if isinstance(event, c.ArtifactSetVerified) else {"quarantined": True}
            updated_art = msgspec.structs.replace(current_art, **flag)
            return _with(catalog, artifact_sets={**artifacts, event.artifact_set_id: updated_art})
        case c.ProbeCompleted():
            probed_on = nodes.get(event.node_id)
            facts = ProbeFacts(
                node_id=event.node_id,
                hardware_fingerprint=event.hardware_fingerprint,
                runtime=event.runtime,
                accelerator_model=probed_on.accelerator_model(event.accelerator_id) if probed_on else "",
                precision=catalog.precisions.get(event.candidate_id, ""),
            )
            return _with(catalog, probes={**catalog.probes, event.probe_id: facts})
        case c.CandidateRegistered():
            precision = event.runtime_profile.get("precision", "")
            return _with(catalog, precisions={**catalog.precisions, event.candidate_id: precision})
        case c.NodeRegistered():
            # A node registering again (it restarted on changed hardware or runtimes) keeps what
            # operators decided about it: enabled, eligible, decommissioned, and its generation.
            node = msgspec.structs.replace(
                nodes.get(event.node_id) or NodeInfo(node_id=event.node_id, accelerators=()),
                accelerators=event.accelerators,
                hardware_fingerprint=event.hardware_fingerprint,
                runtimes=event.runtimes,
            )
            return _with(catalog, nodes={**nodes, event.node_id: node})
        case NodeCredentialsIssued() | NodeCredentialsRevoked() if event.node_id in nodes:
            revoked = isinstance(event, NodeCredentialsRevoked)
            node = msgspec.structs.replace(nodes[event.node_id], revoked=revoked)
            return _with(catalog, nodes={**nodes, event.node_id: node})
        case (
            c.NodeEnabled()
            | c.NodeDisabled()
            | c.NodeProductionEligibilityChanged()
            | c.NodeDecommissioned()
            | c.NodeLost()
            | (c.WorkerStarted())
        ):
            current_node = nodes.get(event.node_id)
            if current_node is None:
                return catalog
            match event:
                case c.NodeEnabled():
                    node = msgspec.structs.replace(current_node, enabled=True)
                case c.NodeDisabled():
                    node = msgspec.structs.replace(current_node, enabled=False)
                case c.NodeProductionEligibilityChanged():
                    node = msgspec.structs.replace(current_node, production_eligible=event.eligible)
                case c.NodeDecommissioned():
                    node = msgspec.structs.replace(current_node, decommissioned=True)
                case c.NodeLost():  # (a declaration about an older generation changes nothing)
                    node = msgspec.structs.replace(
                        current_node, lost=current_node.lost or (event.generation == current_node.generation)
                    )
                case _:
                    node = msgspec.structs.replace(current_node, generation=event.generation, lost=False)
            return _with(catalog, nodes={**nodes, event.node_id: node})
        case _:
            return catalog
