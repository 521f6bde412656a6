"""Authentication and authorization over the in-memory client index (seed codes and statuses)."""

from __future__ import annotations

import pytest

from gateway.clients import keys
from gateway.clients.model import DisableClient, EnableClient, RevokeCredential, RotateCredential
from streams.codes import ServingError
from tests.unit.clients.builders import CLIENT, T0, Runner, bearer, create, later, new_key


def rejected(runner: Runner, header: str | None, status: int, at: object = T0) -> ServingError:
    with pytest.raises(ServingError) as caught:
        runner.index.authenticate(header, at)  # type: ignore[arg-type]
    assert caught.value.code == "CAPABILITY_NOT_AUTHORIZED"
    assert caught.value.http_status == status
    return caught.value


def test_a_valid_key_authenticates_as_its_client() -> None:
    runner = Runner()
    secret, command = create()
    runner.run(command)
    principal = runner.index.authenticate(bearer(secret), T0)
    assert principal.client_id == CLIENT
    assert principal.credential_id == "cred_first"
    assert principal.scopes == frozenset({"rag.embedding@1"})
    assert (principal.requests_per_minute, principal.max_concurrency, principal.priority) == (60, 4, 1)


@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer", "Bearer   ", "Basic abc", "Bearer sk_123", "Bearer mf_short", "mf_" + "a" * 43],
)
def test_missing_or_malformed_bearer_is_401(header: str | None) -> None:
    runner = Runner()
    runner.run(create()[1])
    rejected(runner, header, 401)


def test_an_unknown_well_formed_key_is_401() -> None:
    runner = Runner()
    runner.run(create()[1])
    rejected(runner, bearer(keys.new_key().secret), 401)


def test_a_revoked_key_is_401() -> None:
    runner = Runner()
    secret, command = create()
    runner.run(command)
    runner.run(RevokeCredential(CLIENT, "cred_first"))
    assert "revoked" in rejected(runner, bearer(secret), 401).message


def test_an_expired_key_is_401_from_its_expiry_on() -> None:
    runner = Runner()
    secret, command = create(expires_at=later(60))
    runner.run(command)
    runner.index.authenticate(bearer(secret), later(59))
    assert "expired" in rejected(runner, bearer(secret), 401, later(60)).message


def test_a_disabled_client_is_403_and_enabling_restores_it() -> None:
    runner = Runner()
    secret, command = create()
    runner.run(command)
    runner.run(DisableClient(CLIENT))
    rejected(runner, bearer(secret), 403)
    runner.run(EnableClient(CLIENT))
    assert runner.index.authenticate(bearer(secret), T0).client_id == CLIENT


def test_rotation_grace_keeps_the_old_key_until_grace_until_and_the_new_key_works_at_once() -> None:
    runner = Runner()
    old_secret, command = create()
    runner.run(command)
    new_secret, key = new_key("cred_second")
    runner.run(RotateCredential(CLIENT, key, grace_s=60), now=T0)
    assert runner.index.authenticate(bearer(new_secret), T0).credential_id == "cred_second"
    assert runner.index.authenticate(bearer(old_secret), later(59)).credential_id == "cred_first"
    rejected(runner, bearer(old_secret), 401, later(60))


def test_authorize_requires_the_exact_capability_at_version() -> None:
    runner = Runner()
    secret, command = create(scopes=("rag.embedding@1",))
    runner.run(command)
    principal = runner.index.authenticate(bearer(secret), T0)
    runner.index.authorize(principal, "rag.embedding@1")
    for other in ("rag.reranking@1", "rag.embedding@2", "rag.embedding"):
        with pytest.raises(ServingError) as caught:
            runner.index.authorize(principal, other)
        assert (caught.value.code, caught.value.http_status) == ("CAPABILITY_NOT_AUTHORIZED", 403)
