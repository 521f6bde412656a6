"""Refused loads: a tampered file or an escaping path loads nothing and says why with a stable code."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from nats.errors import NoRespondersError

from eventstore.connection import Connection
from streams import codes, subjects
from streams.events import serving as s
from tests.support.agents import (
    MINILM,
    AgentProcess,
    load_job,
    load_outcome,
    manifest_records,
    publish_job,
)


def flip_one_byte(path: Path, offset: int = 4096) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ 0xFF]))


async def refused_load(
    connection: Connection,
    agent: AgentProcess,
    deployment: str,
    folder: str,
    manifest: list[dict[str, object]],
) -> s.ResidencyLoadFailed:
    job = load_job(agent.node, deployment, folder, manifest)
    await publish_job(connection, job)
    outcome = await load_outcome(connection, job.accelerator_id, job.load_id)
    assert isinstance(outcome, s.ResidencyLoadFailed), outcome
    with pytest.raises(NoRespondersError):  # nothing serves it
        await connection.client.request(subjects.invoke_subject(agent.node, deployment), b"{}", timeout=5)
    return outcome


async def test_a_tampered_artifact_is_refused_as_not_verified(
    connection: Connection, serving_agent: AgentProcess, artifact_root: Path
) -> None:
    folder = artifact_root / "minilm-tampered"
    shutil.copytree(artifact_root / MINILM, folder)
    manifest = manifest_records(folder)
    flip_one_byte(folder / "model.onnx")  # after the manifest was made
    failed = await refused_load(connection, serving_agent, "dep-tampered", folder.name, manifest)
    assert failed.code == codes.ARTIFACT_NOT_VERIFIED.code


async def test_an_artifact_folder_outside_the_root_is_refused_as_path_invalid(
    connection: Connection, serving_agent: AgentProcess, minilm_manifest: list[dict[str, object]]
) -> None:
    failed = await refused_load(connection, serving_agent, "dep-escape", f"../{MINILM}", minilm_manifest)
    assert failed.code == codes.ARTIFACT_PATH_INVALID.code


async def test_a_manifest_path_that_escapes_the_set_is_refused_as_path_invalid(
    connection: Connection, serving_agent: AgentProcess, minilm_manifest: list[dict[str, object]]
) -> None:
    manifest = [
        *minilm_manifest,
        {"path": "../../etc/passwd", "sha256": "0" * 64, "size": 1, "format": "other"},
    ]
    failed = await refused_load(connection, serving_agent, "dep-escape-file", MINILM, manifest)
    assert failed.code == codes.ARTIFACT_PATH_INVALID.code


async def test_a_pickle_in_the_set_is_refused(
    connection: Connection, serving_agent: AgentProcess, artifact_root: Path
) -> None:
    folder = artifact_root / "minilm-pickle"
    shutil.copytree(artifact_root / MINILM, folder)
    (folder / "weights.pkl").write_bytes(b"\x80\x04K\x01.")
    failed = await refused_load(
        connection, serving_agent, "dep-pickle", folder.name, manifest_records(folder)
    )
    assert failed.code == codes.PICKLE_PRESENT.code
