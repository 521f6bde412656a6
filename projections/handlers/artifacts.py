"""Capability contracts and artifact sets -> rows."""

from __future__ import annotations

from projections.handlers.ops import Op, up
from streams.events import control as c
from streams.events.base import Event


def ops(event: Event, seq: int, at: str | None) -> list[Op] | None:
    """Rows for a contract's or an artifact set's event; None when the event is not one of this module's."""
    match event:
        case c.CapabilityContractRegistered():
            return [
                up(
                    "capability_contracts",
                    (event.capability,),
                    input_schema=event.input_schema,
                    output_schema=event.output_schema,
                    upgrade_class=event.upgrade_class,
                    limits=event.limits,
                    definition_sha256=event.definition_sha256,
                    registered_at=at,
                )
            ]
        case c.ArtifactSetRegistered():
            return [
                up(
                    "artifact_sets",
                    (event.artifact_set_id,),
                    name=event.name,
                    capability=event.capability,
                    node_id=event.node_id,
                    root=event.root,
                    files=event.files,
                    file_count=len(event.files),
                    total_bytes=sum(f.size for f in event.files),
                    risk_flags=event.risk_flags,
                    manifest_sha256=event.manifest_sha256,
                    source=event.source,
                    status="registered",
                    registered_at=at,
                    updated_at=at,
                )
            ]
        case c.ArtifactSetVerified():
            return [
                up(
                    "artifact_sets",
                    (event.artifact_set_id,),
                    status="verified",
                    manifest_sha256=event.manifest_sha256,
                    verified_bytes=event.verified_bytes,
                    failure_code=None,
                    failure_detail=None,
                    updated_at=at,
                )
            ]
        case c.ArtifactSetVerificationFailed():
            return [
                up(
                    "artifact_sets",
                    (event.artifact_set_id,),
                    status="verification_failed",
                    failure_code=event.code,
                    failure_detail=event.detail,
                    updated_at=at,
                )
            ]
        case c.ArtifactSetFetchProgressed():
            # For whoever waits on the fetching job; the set's row only shows it was touched.
            return [up("artifact_sets", (event.artifact_set_id,), updated_at=at)]
        case c.ArtifactSetQuarantined():
            return [
                up(
                    "artifact_sets",
                    (event.artifact_set_id,),
                    status="quarantined",
                    quarantine_reason=event.reason,
                    updated_at=at,
                )
            ]
    return None
