"""A client bound to a project calls only what its project is bound to, through its channel."""

from __future__ import annotations

import pytest

from gateway.clients.model import ClientPrincipal
from streams.codes import ServingError
from streams.events.control import ClientBoundToProject, ProjectBoundToChannel
from tests.unit.clients.builders import CLIENT, T0, Runner, bearer, create

EMBEDDING, RERANKING = "rag.embedding@1", "rag.reranking@1"
BOTH = (EMBEDDING, RERANKING)


def client_of(project: str | None, scopes: tuple[str, ...] = BOTH) -> tuple[Runner, str]:
    runner = Runner()
    secret, command = create(scopes=scopes, project_id=project)
    runner.run(command)
    return runner, secret


def bind_channel(runner: Runner, project: str, capability: str, channel: str = "stable") -> None:
    runner.record_project(ProjectBoundToChannel(project_id=project, capability=capability, channel=channel))


def principal(runner: Runner, secret: str) -> ClientPrincipal:
    return runner.index.authenticate(bearer(secret), T0)


def refusal(runner: Runner, secret: str, capability: str) -> ServingError:
    with pytest.raises(ServingError) as caught:
        runner.index.authorize(principal(runner, secret), capability)
    return caught.value


def test_a_client_without_a_project_calls_every_capability_in_its_scopes() -> None:
    runner, secret = client_of(None)
    bind_channel(runner, "pr-a", EMBEDDING)
    for capability in BOTH:
        runner.index.authorize(principal(runner, secret), capability)


def test_a_project_bound_client_calls_the_capability_its_project_is_bound_to() -> None:
    runner, secret = client_of("pr-a")
    bind_channel(runner, "pr-a", EMBEDDING)
    runner.index.authorize(principal(runner, secret), EMBEDDING)


def test_a_project_bound_client_is_refused_a_scoped_capability_its_project_is_not_bound_to() -> None:
    runner, secret = client_of("pr-a")
    bind_channel(runner, "pr-a", EMBEDDING)
    refused = refusal(runner, secret, RERANKING)
    assert (refused.code, refused.http_status, refused.param) == (
        "PROJECT_CAPABILITY_NOT_BOUND",
        403,
        "model",
    )


def test_a_project_with_no_channels_leaves_its_clients_nothing_to_call() -> None:
    runner, secret = client_of("pr-a")
    assert refusal(runner, secret, EMBEDDING).code == "PROJECT_CAPABILITY_NOT_BOUND"


def test_a_capability_outside_the_scopes_is_refused_for_scope_before_the_project() -> None:
    runner, secret = client_of("pr-a", scopes=(EMBEDDING,))
    bind_channel(runner, "pr-a", RERANKING)
    assert refusal(runner, secret, RERANKING).code == "CAPABILITY_NOT_AUTHORIZED"


def test_binding_the_projects_channel_later_lets_its_client_call() -> None:
    runner, secret = client_of("pr-a")
    assert refusal(runner, secret, EMBEDDING).code == "PROJECT_CAPABILITY_NOT_BOUND"
    bind_channel(runner, "pr-a", EMBEDDING)
    runner.index.authorize(principal(runner, secret), EMBEDDING)


def test_a_later_client_binding_moves_the_client_to_the_other_projects_channels() -> None:
    runner, secret = client_of("pr-a")
    bind_channel(runner, "pr-a", EMBEDDING)
    bind_channel(runner, "pr-b", RERANKING)
    runner.record_project(ClientBoundToProject(project_id="pr-b", client_id=CLIENT))
    assert principal(runner, secret).project_id == "pr-b"
    runner.index.authorize(principal(runner, secret), RERANKING)
    assert refusal(runner, secret, EMBEDDING).code == "PROJECT_CAPABILITY_NOT_BOUND"


def test_binding_a_client_created_without_a_project_holds_it_to_the_projects_channels() -> None:
    runner, secret = client_of(None)
    bind_channel(runner, "pr-a", EMBEDDING)
    runner.record_project(ClientBoundToProject(project_id="pr-a", client_id=CLIENT))
    assert refusal(runner, secret, RERANKING).code == "PROJECT_CAPABILITY_NOT_BOUND"


def test_a_client_binding_keeps_the_clients_own_version() -> None:
    runner, _ = client_of(None)
    version = runner.index.client(CLIENT).version  # type: ignore[union-attr]
    runner.record_project(ClientBoundToProject(project_id="pr-a", client_id=CLIENT))
    assert runner.index.client(CLIENT).version == version  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("project", "channel", "requested", "served_by"),
    [
        (None, None, "trial", "trial"),  # no project: the model the client names
        ("pr-a", "stable", "trial", ""),  # the stable deployment, whatever the client names
        ("pr-a", "trial", "", "trial"),  # the project's experiment route
        ("pr-a", "trial", "other", "trial"),
    ],
)
def test_a_call_is_served_by_its_projects_channel(
    project: str | None, channel: str | None, requested: str, served_by: str
) -> None:
    runner, _ = client_of(project)
    if project is not None and channel is not None:
        bind_channel(runner, project, EMBEDDING, channel)
    assert runner.index.projects.route(project, EMBEDDING, requested) == served_by
