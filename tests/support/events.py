"""Event builders for unit tests: only what a test is about is an argument."""

from __future__ import annotations

from datetime import datetime

from gateway.state.catalog import Catalog, evolve_catalog
from streams.events import control as c
from streams.events import serving as s
from streams.events.base import Event


def stable_deployment(
    deployment_id: str, envelope: s.ResourceEnvelope, residency: s.ResidencyPolicy | None = None
) -> s.DeploymentPromoted:
    """A stable `rag.embedding@1` deployment promoted with `envelope` (and `residency`)."""
    return s.DeploymentPromoted(
        deployment_id=deployment_id,
        capability="rag.embedding@1",
        candidate_id="c",
        approval_id="a",
        artifact_set_id="x",
        model_name="m",
        channel="stable",
        envelope=envelope,
        residency=residency or s.ResidencyPolicy(),
    )


def experiment_created(deployment_id: str, envelope: s.ResourceEnvelope) -> s.ExperimentCreated:
    """An experiment of `rag.embedding@1` measured at `envelope`, reached by its own id as route."""
    return s.ExperimentCreated(
        deployment_id=deployment_id,
        capability="rag.embedding@1",
        candidate_id="c",
        artifact_set_id="x",
        model_name=deployment_id,
        route=deployment_id,
        envelope=envelope,
    )


def dry_run_admitting(deployment_id: str = "dep-a", count: int = 1) -> s.PlacementDryRun:
    """A dry run of `deployment_id` whose plan would admit it on `acc-0`, counted `count` times."""
    return s.PlacementDryRun(
        accelerator_id="acc-0",
        deployment_id=deployment_id,
        verdict="ADMIT",
        reason_codes=(),
        decision_fingerprint="fp-plan",
        required_bytes=5,
        count=count,
    )


def lease_granted(
    lease_id: str,
    accelerator_id: str,
    expires_at: datetime,
    reserved_bytes: int = 5,
    deployment_id: str = "emb",
    request_id: str = "",
) -> s.LeaseGranted:
    """A lease of `deployment_id` on `accelerator_id`, held by `request_id` (else one named for it)."""
    return s.LeaseGranted(
        lease_id=lease_id,
        accelerator_id=accelerator_id,
        deployment_id=deployment_id,
        request_id=request_id or f"request-{lease_id}",
        client_id="c",
        reserved_bytes=reserved_bytes,
        expires_at=expires_at,
        decision_fingerprint="f",
    )


def residency_loaded(
    load_id: str,
    accelerator_id: str,
    measured_bytes: int,
    deployment_id: str = "emb",
    baseline_bytes: int = 0,
) -> s.ResidencyLoaded:
    """The agent's report that `deployment_id` loaded and holds `measured_bytes` above its baseline."""
    loaded = baseline_bytes + measured_bytes
    return s.ResidencyLoaded(
        load_id=load_id,
        accelerator_id=accelerator_id,
        deployment_id=deployment_id,
        generation=1,
        runtime="onnxruntime-cpu",
        baseline_bytes=baseline_bytes,
        loaded_bytes=loaded,
        peak_bytes=loaded,
        measured_bytes=measured_bytes,
        cold_load_ms=5,
    )


KEY_HASH = "secret-hash"  # what must never reach the read model or an audit reader


def credential_events() -> tuple[c.CredentialIssued, c.CredentialRotated]:
    """The two events that carry a credential's key hash (KEY_HASH)."""
    issued = c.CredentialIssued(client_id="c", credential_id="k1", key_sha256=KEY_HASH, key_prefix="mf_ab")
    rotated = c.CredentialRotated(
        client_id="c", old_credential_id="k1", new_credential_id="k2", key_sha256=KEY_HASH, key_prefix="mf_cd"
    )
    return issued, rotated


def catalog_of(*events: Event) -> Catalog:
    """The serving catalogue folded from `events`, in order."""
    catalog = Catalog()
    for event in events:
        catalog = evolve_catalog(catalog, event)
    return catalog
