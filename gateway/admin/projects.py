"""Admin endpoints for projects (register, bind to a channel, bind clients, project fit) and
integrations with their usage (service clients: `gateway.admin.clients`).

A project's clients are those whose project it is now, as this gateway's key directory holds
them: created with the project (`ClientCreated.project_id`) or bound to it later
(`ClientBoundToProject`), the later one winning. A binding answers once the directory holds it,
so the next request this gateway serves is held to it."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from gateway.admin.clients import applied_here
from gateway.admin.endpoint import ROWS, Call, Endpoint
from gateway.admin.pipeline import promotion
from gateway.admin.reads import INTEGRATIONS_SQL, fresh_for, percentile, requests_from_log, written_here
from gateway.clients.service import ClientService
from gateway.promotion.aggregates import Aggregates
from gateway.promotion.model import ProjectState
from gateway.promotion.projects import (
    BindChannel,
    BindClient,
    FitEvidence,
    ProjectCommand,
    RecordFit,
    RegisterProject,
    decide_project,
)
from streams.codes import ServingError
from streams.subjects import Aggregate

A = Aggregate


class NewProject(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    owner: str = ""


class Channel(msgspec.Struct, frozen=True, kw_only=True):
    capability: str
    channel: str = "stable"


class ClientRef(msgspec.Struct, frozen=True, kw_only=True):
    client_id: str


def project_id_for(name: str) -> str:
    return f"pr-{hashlib.sha256(name.strip().casefold().encode()).hexdigest()[:20]}"


def _clients_of(call: Call, project_id: str) -> list[str]:
    return [c.client_id for c in call.edge.directory.clients() if c.project_id == project_id]


def _view(call: Call, state: ProjectState) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(state)
    out["clients"] = _clients_of(call, state.project_id)
    out["fit"] = {cap: msgspec.to_builtins(e) for cap, e in state.fit.items()}
    return out


async def _run(call: Call, project_id: str, command: ProjectCommand, *, binding: bool = False) -> object:
    """Execute `command`; a `binding` (its events feed the key directory) answers once applied here."""
    aggregates: Aggregates = promotion(call).aggregates
    events, version = await aggregates.execute(A.PROJECT, project_id, decide_project, command)
    if binding and events:
        await applied_here(call, version)
    state = await aggregates.get(A.PROJECT, project_id)
    if state is None:
        raise ServingError("PROJECT_NOT_FOUND", f"no project {project_id!r}", "project_id")
    return _view(call, state)


async def register(call: Call) -> object:
    b: NewProject = call.body
    project_id = project_id_for(b.name)
    return await _run(call, project_id, RegisterProject(project_id, b.name, b.owner))


async def list_projects(call: Call) -> object:
    states: dict[str, ProjectState] = await promotion(call).aggregates.all(A.PROJECT)
    return [_view(call, s) for s in states.values()]


async def bind_channel(call: Call) -> object:
    b: Channel = call.body
    return await _run(call, call.path["project_id"], BindChannel(b.capability, b.channel), binding=True)


async def bind_client(call: Call) -> object:
    b: ClientRef = call.body
    known = await ClientService(call.edge.ctx.store).get(b.client_id) is not None
    return await _run(call, call.path["project_id"], BindClient(b.client_id, known), binding=True)


async def record_fit(call: Call) -> object:
    b: FitEvidence = call.body
    deployment = await promotion(call).aggregates.get(A.DEPLOYMENT, b.deployment_id)
    return await _run(call, call.path["project_id"], RecordFit(b, deployment))


async def integrations(call: Call) -> object:
    """Per project and bound client: volume, errors, p50/p95 latency and the VRAM it leased."""
    model = call.edge.read_models.get()
    if model is not None:
        await fresh_for(model, call)
        return await model.query(INTEGRATIONS_SQL)
    projects: dict[str, ProjectState] = await promotion(call).aggregates.all(A.PROJECT)
    await written_here(call)
    history = await requests_from_log(call.edge.ctx.client, 1_000_000, None)
    out = []
    for project in projects.values():
        for client_id in _clients_of(call, project.project_id):
            rows = [r for r in history if r["client_id"] == client_id]
            done = [float(r["latency"]["total_ms"]) for r in rows if r["status"] == "completed"]
            out.append(
                {
                    "project_id": project.project_id,
                    "project": project.name,
                    "client_id": client_id,
                    "requests": len(rows),
                    "errors": sum(1 for r in rows if r["status"] != "completed"),
                    "p50_ms": percentile(done, 0.5),
                    "p95_ms": percentile(done, 0.95),
                    "reserved_bytes": None,  # lease bytes per client live in the read model
                }
            )
    return out


ENDPOINTS = [
    Endpoint("POST", "/projects", "Register a project", register, NewProject, "projects"),
    Endpoint("GET", "/projects", "Projects", list_projects, tag="projects", response=ROWS),
    Endpoint("POST", "/projects/{project_id}/channels", "Bind to a capability channel", bind_channel, Channel, "projects"),
    Endpoint("POST", "/projects/{project_id}/clients", "Bind a client", bind_client, ClientRef, "projects"),
    Endpoint("POST", "/projects/{project_id}/fit", "Record project-fit evidence", record_fit, FitEvidence, "projects"),
    Endpoint("GET", "/integrations", "Integrations with usage", integrations, tag="projects", response=ROWS),
]  # fmt: skip
