"""Properties over random command sequences: what no history can ever make true."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.clients.model import (
    ChangeLimits,
    Command,
    DisableClient,
    EnableClient,
    IssueCredential,
    RevokeCredential,
    RotateCredential,
)
from streams.codes import ServingError
from streams.events.control import CredentialRevoked, CredentialRotated
from tests.unit.clients.builders import CLIENT, T0, Runner, bearer, create, new_key

CREDENTIAL_IDS = [f"cred_{i}" for i in range(6)]

step = st.one_of(
    st.tuples(st.just("issue"), st.sampled_from(CREDENTIAL_IDS), st.none()),
    st.tuples(st.just("rotate"), st.sampled_from(CREDENTIAL_IDS), st.sampled_from([0.0, 5.0, 60.0])),
    st.tuples(st.just("revoke"), st.sampled_from(["cred_first", *CREDENTIAL_IDS]), st.none()),
    st.tuples(st.just("disable"), st.none(), st.none()),
    st.tuples(st.just("enable"), st.none(), st.none()),
    st.tuples(st.just("limits"), st.none(), st.integers(-1, 3)),
)


def command_for(kind: str, ident: str | None, arg: float | None) -> Command:
    if kind == "issue":
        assert ident is not None
        return IssueCredential(CLIENT, new_key(ident)[1])
    if kind == "rotate":
        assert ident is not None
        assert arg is not None
        return RotateCredential(CLIENT, new_key(ident)[1], grace_s=arg)
    if kind == "revoke":
        assert ident is not None
        return RevokeCredential(CLIENT, ident)
    if kind == "disable":
        return DisableClient(CLIENT)
    if kind == "enable":
        return EnableClient(CLIENT)
    return ChangeLimits(CLIENT, max_concurrency=int(arg or 0))


def secrets_by_credential() -> dict[str, str]:
    return {cid: new_key(cid)[0] for cid in CREDENTIAL_IDS} | {"cred_first": create()[0]}


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(step, max_size=25), probe=st.integers(0, 600))
def test_a_revoked_credential_never_authenticates(
    steps: list[tuple[str, str | None, float | None]], probe: int
) -> None:
    runner = Runner()
    runner.run(create()[1])
    now = T0
    revoked: set[str] = set()
    for kind, ident, arg in steps:
        now += timedelta(seconds=1)
        try:
            events = runner.run(command_for(kind, ident, arg), now=now)
        except ServingError:
            continue
        for event in events:
            if isinstance(event, CredentialRevoked):
                revoked.add(event.credential_id)
            if isinstance(event, CredentialRotated) and event.grace_until is None:
                revoked.add(event.old_credential_id)
    secrets = secrets_by_credential()
    at: datetime = now + timedelta(seconds=probe)
    for credential_id in revoked:
        try:
            runner.index.authenticate(bearer(secrets[credential_id]), at)
        except ServingError as error:
            assert error.code == "CAPABILITY_NOT_AUTHORIZED"
            assert error.http_status == 401
        else:
            raise AssertionError(f"revoked credential {credential_id} authenticated")


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(step, max_size=25))
def test_a_refused_command_changes_nothing_and_the_state_stays_well_formed(
    steps: list[tuple[str, str | None, float | None]],
) -> None:
    runner = Runner()
    runner.run(create()[1])
    for kind, ident, arg in steps:
        before = (runner.state, len(runner.events))
        try:
            runner.run(command_for(kind, ident, arg))
        except ServingError:
            assert (runner.state, len(runner.events)) == before
        assert runner.state is not None
        ids = [c.credential_id for c in runner.state.credentials]
        assert len(ids) == len(set(ids))
        assert runner.state.max_concurrency > 0
        assert runner.state.requests_per_minute > 0
