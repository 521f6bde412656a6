"""Client commands: what each one records, and what each refuses without recording anything."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gateway.clients.decide import decide
from gateway.clients.model import (
    ChangeLimits,
    CreateClient,
    DisableClient,
    EnableClient,
    IssueCredential,
    RevokeCredential,
    RotateCredential,
)
from streams.codes import ServingError
from streams.events.control import (
    ClientCreated,
    ClientDisabled,
    ClientEnabled,
    ClientLimitsChanged,
    CredentialIssued,
    CredentialRevoked,
    CredentialRotated,
)
from tests.unit.clients.builders import CLIENT, T0, Runner, create, later, new_key


def created_runner() -> Runner:
    runner = Runner()
    runner.run(create()[1])
    return runner


def refused(runner: Runner, command: object, code: str) -> ServingError:
    before = (runner.state, len(runner.events))
    with pytest.raises(ServingError) as caught:
        runner.run(command)  # type: ignore[arg-type]
    assert caught.value.code == code
    assert (runner.state, len(runner.events)) == before
    return caught.value


def test_create_records_the_client_and_its_first_credential_hash() -> None:
    _, command = create(scopes=("rag.reranking@1", "rag.embedding@1", "rag.embedding@1"))
    events = decide(None, command, T0)
    assert [type(e) for e in events] == [ClientCreated, CredentialIssued]
    created, issued = events
    assert isinstance(created, ClientCreated)
    assert isinstance(issued, CredentialIssued)
    assert created.scopes == ("rag.embedding@1", "rag.reranking@1")
    assert (created.requests_per_minute, created.max_concurrency, created.priority) == (60, 4, 1)
    assert issued.key_sha256 == command.first_key.key_sha256
    assert len(issued.key_sha256) == 64


def test_create_refuses_a_name_already_taken() -> None:
    refused(created_runner(), create()[1], "CLIENT_EXISTS")


@pytest.mark.parametrize(
    ("scopes", "code"),
    [
        ((), "INVALID_INPUT"),
        (("rag.embedding",), "INVALID_INPUT"),
        (("rag.embedding@v1",), "INVALID_INPUT"),
        (("@1",), "INVALID_INPUT"),
        (("rag.embedding@2",), "UNKNOWN_CAPABILITY"),
        (("chat.completion@1",), "UNKNOWN_CAPABILITY"),
    ],
)
def test_create_refuses_scopes_that_name_no_contract(scopes: tuple[str, ...], code: str) -> None:
    refused(Runner(), create(scopes=scopes)[1], code)


@pytest.mark.parametrize(("rpm", "concurrency"), [(0, 1), (-5, 1), (10, 0), (10, -1)])
def test_create_refuses_non_positive_limits(rpm: int, concurrency: int) -> None:
    error = refused(Runner(), create(rpm=rpm, concurrency=concurrency)[1], "INVALID_INPUT")
    assert error.http_status == 422


def test_create_refuses_a_blank_name_and_a_key_that_already_expired() -> None:
    _, command = create()
    refused(Runner(), CreateClient(CLIENT, "  ", command.scopes, 1, 1, command.first_key), "INVALID_INPUT")
    refused(Runner(), create(expires_at=T0)[1], "INVALID_INPUT")


def test_commands_on_an_unknown_client_are_refused_as_not_found() -> None:
    error = refused(Runner(), DisableClient(CLIENT), "CLIENT_NOT_FOUND")
    assert error.http_status == 404


def test_revoking_an_unknown_credential_is_refused() -> None:
    refused(created_runner(), RevokeCredential(CLIENT, "cred_nope"), "CREDENTIAL_NOT_FOUND")


@pytest.mark.parametrize(
    "command", [RevokeCredential(CLIENT, "cred_first", "x" * 1001), DisableClient(CLIENT, "x" * 1001)]
)
def test_a_reason_longer_than_a_note_is_refused(command: object) -> None:
    refused(created_runner(), command, "INVALID_INPUT")


@pytest.mark.parametrize(
    "command", [RevokeCredential(CLIENT, "cred_first", "leak\x00"), DisableClient(CLIENT, "\x1b[2J")]
)
def test_a_reason_with_a_control_character_is_refused_on_every_path_not_only_the_api(command: object) -> None:
    # The CLI (`modelforge clients disable --reason`) decides here without the admin API's body check.
    assert refused(created_runner(), command, "INVALID_INPUT").param == "reason"


def test_revoking_twice_records_one_revocation() -> None:
    runner = created_runner()
    assert [type(e) for e in runner.run(RevokeCredential(CLIENT, "cred_first", "leaked"))] == [
        CredentialRevoked
    ]
    assert runner.run(RevokeCredential(CLIENT, "cred_first")) == []
    assert runner.state is not None
    assert runner.state.credentials[0].revoked


def test_rotation_without_grace_retires_the_old_key_at_once() -> None:
    runner = created_runner()
    _, key = new_key("cred_second")
    (rotated,) = runner.run(RotateCredential(CLIENT, key))
    assert isinstance(rotated, CredentialRotated)
    assert (rotated.old_credential_id, rotated.new_credential_id, rotated.grace_until) == (
        "cred_first",
        "cred_second",
        None,
    )
    assert runner.state is not None
    old, new = runner.state.credentials
    assert old.revoked
    assert not new.revoked


def test_rotation_with_grace_keeps_the_old_key_until_grace_until() -> None:
    runner = created_runner()
    _, key = new_key("cred_second")
    (rotated,) = runner.run(RotateCredential(CLIENT, key, grace_s=300), now=T0)
    assert isinstance(rotated, CredentialRotated)
    assert rotated.grace_until == T0 + timedelta(seconds=300)
    assert runner.state is not None
    old = runner.state.credentials[0]
    assert old.usable_at(later(299))
    assert not old.usable_at(later(300))


def test_rotation_refuses_a_negative_grace_and_a_reused_credential_id() -> None:
    runner = created_runner()
    refused(runner, RotateCredential(CLIENT, new_key("cred_x")[1], grace_s=-1), "INVALID_INPUT")
    refused(runner, RotateCredential(CLIENT, new_key("cred_first")[1]), "STATE_CONFLICT")


def test_rotating_a_named_credential_needs_it_active() -> None:
    runner = created_runner()
    runner.run(RevokeCredential(CLIENT, "cred_first"))
    refused(
        runner,
        RotateCredential(CLIENT, new_key("cred_y")[1], credential_id="cred_first"),
        "CREDENTIAL_NOT_FOUND",
    )
    refused(
        runner,
        RotateCredential(CLIENT, new_key("cred_z")[1], credential_id="cred_unknown"),
        "CREDENTIAL_NOT_FOUND",
    )


def test_rotating_a_client_with_every_key_revoked_issues_it_a_new_one() -> None:
    runner = created_runner()
    runner.run(RevokeCredential(CLIENT, "cred_first"))
    refused(runner, RotateCredential(CLIENT, new_key("cred_x")[1], grace_s=-1), "INVALID_INPUT")
    (issued,) = runner.run(RotateCredential(CLIENT, new_key("cred_x")[1], grace_s=60))
    assert isinstance(issued, CredentialIssued)
    assert runner.state is not None
    assert runner.state.current_credential() == runner.state.credential("cred_x")
    assert runner.state.credential("cred_first").revoked  # type: ignore[union-attr]


def test_issuing_a_second_credential_keeps_the_first() -> None:
    runner = created_runner()
    (issued,) = runner.run(IssueCredential(CLIENT, new_key("cred_second")[1]))
    assert isinstance(issued, CredentialIssued)
    assert runner.state is not None
    assert [c.credential_id for c in runner.state.credentials] == ["cred_first", "cred_second"]


def test_disable_and_enable_are_recorded_once_each() -> None:
    runner = created_runner()
    assert [type(e) for e in runner.run(DisableClient(CLIENT, "abuse"))] == [ClientDisabled]
    assert runner.run(DisableClient(CLIENT)) == []
    assert runner.state is not None
    assert not runner.state.enabled
    assert [type(e) for e in runner.run(EnableClient(CLIENT))] == [ClientEnabled]
    assert runner.run(EnableClient(CLIENT)) == []


def test_changing_limits_records_the_full_new_limits_and_nothing_when_unchanged() -> None:
    runner = created_runner()
    (changed,) = runner.run(ChangeLimits(CLIENT, requests_per_minute=5))
    assert isinstance(changed, ClientLimitsChanged)
    assert (changed.requests_per_minute, changed.max_concurrency, changed.scopes) == (
        5,
        4,
        ("rag.embedding@1",),
    )
    assert runner.run(ChangeLimits(CLIENT, requests_per_minute=5)) == []
    refused(runner, ChangeLimits(CLIENT, max_concurrency=0), "INVALID_INPUT")
    refused(runner, ChangeLimits(CLIENT, scopes=("nope@1",)), "UNKNOWN_CAPABILITY")
