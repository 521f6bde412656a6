"""Folding client events: state after each event, and tolerance of odd histories."""

from __future__ import annotations

from gateway.clients.evolve import evolve
from gateway.clients.model import ClientState
from streams.events.control import (
    ClientBoundToProject,
    ClientCreated,
    ClientLimitsChanged,
    CredentialIssued,
    CredentialRevoked,
    NodeEnabled,
)
from tests.unit.clients.builders import CLIENT, T0, later

CREATED = ClientCreated(
    client_id=CLIENT, name="app", scopes=("rag.embedding@1",), requests_per_minute=10, max_concurrency=2
)


def created() -> ClientState:
    state = evolve(None, CREATED)
    assert state is not None
    return state


def test_created_gives_an_enabled_client_without_credentials() -> None:
    state = created()
    assert (state.name, state.scopes, state.requests_per_minute, state.max_concurrency) == (
        "app",
        ("rag.embedding@1",),
        10,
        2,
    )
    assert state.enabled
    assert state.credentials == ()


def test_events_before_creation_are_ignored() -> None:
    assert evolve(None, CredentialRevoked(client_id=CLIENT, credential_id="c")) is None


def test_a_second_created_does_not_reset_the_client() -> None:
    state = evolve(
        created(),
        CredentialIssued(client_id=CLIENT, credential_id="c", key_sha256="a" * 64, key_prefix="mf_x"),
    )
    assert evolve(state, CREATED) == state


def test_limits_change_replaces_scopes_and_limits() -> None:
    state = evolve(
        created(),
        ClientLimitsChanged(
            client_id=CLIENT,
            scopes=("rag.reranking@1",),
            requests_per_minute=1,
            max_concurrency=1,
            priority=3,
        ),
    )
    assert state is not None
    assert (state.scopes, state.requests_per_minute, state.max_concurrency, state.priority) == (
        ("rag.reranking@1",),
        1,
        1,
        3,
    )


def test_issued_credential_expires_at_its_time() -> None:
    state = evolve(
        created(),
        CredentialIssued(
            client_id=CLIENT, credential_id="c", key_sha256="a" * 64, key_prefix="mf_x", expires_at=later(60)
        ),
    )
    assert state is not None
    (credential,) = state.credentials
    assert credential.usable_at(T0)
    assert not credential.usable_at(later(60))


def test_project_binding_and_foreign_events() -> None:
    state = evolve(created(), ClientBoundToProject(project_id="proj", client_id=CLIENT))
    assert state is not None
    assert state.project_id == "proj"
    assert evolve(state, NodeEnabled(node_id="n")) == state


def test_revoking_an_unknown_credential_changes_nothing() -> None:
    state = created()
    assert evolve(state, CredentialRevoked(client_id=CLIENT, credential_id="nope")) == state
