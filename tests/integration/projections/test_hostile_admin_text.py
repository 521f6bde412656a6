"""Hostile text (any Unicode, control characters, lone surrogates, huge strings) in every operator
text field of the real admin API, with a projector running: each call is refused 4xx or accepted,
and an accepted one is projected (a read-your-writes admin read answers fresh, not stale); then
the projection has no lag and no halt, and a replay rebuilds the live digest.

A property (hypothesis, CI-sized); the calls run in a worker thread with a synchronous client,
since the gateway and the projector run on this test's event loop."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

import httpx
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from modelforge.devstack.nats_server import NatsServer
from projections.replay import replay
from streams import text
from streams.codes import ServingError

from .helpers import projecting

EXAMPLES = 60  # CI-sized; raise it to hunt
SCOPE = "rag.embedding@1"


@dataclass(frozen=True)
class Field:
    """One operator text field: where it goes in a call, and the rule it must meet to be accepted."""

    name: str
    call: Callable[[str], tuple[str, dict[str, object]]]  # the value -> (path, body)
    rule: text.TextRule
    longest: int | None = None  # what is sent at most (a URL has a length limit of its own)


def segment(value: str) -> str:
    # Lone surrogates have no UTF-8: their bytes as Python would write them, percent-encoded.
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def fields(client_id: str, credential_id: str) -> list[Field]:
    fresh = lambda: uuid.uuid4().hex[:8]  # noqa: E731  a new project each time, so its owner is recorded
    return [
        Field("project name", lambda v: ("/projects", {"name": v}), text.NAME),
        Field("project owner", lambda v: ("/projects", {"name": f"owned-{fresh()}", "owner": v}), text.NAME),
        Field("client name", lambda v: ("/clients", {"name": v, "scopes": [SCOPE]}), text.NAME),
        Field("disable reason", lambda v: (f"/clients/{client_id}/disable", {"reason": v}), text.REASON),
        Field(
            "revoke reason",
            lambda v: (f"/clients/{client_id}/credentials/{credential_id}/revoke", {"reason": v}),
            text.REASON,
        ),
        Field("drain reason", lambda v: ("/deployments/dep-none/drain", {"reason": v}), text.REASON),
        Field("node reason", lambda v: ("/nodes/node-none", {"enabled": False, "reason": v}), text.REASON),
        Field("client id in a path", lambda v: (f"/clients/{segment(v)}/enable", {}), text.NAME, 1000),
        Field(
            "project id in a path", lambda v: (f"/projects/{segment(v)}/channels", {"capability": SCOPE}), text.NAME,
            1000,
        ),
    ]  # fmt: skip


anything = st.characters(codec=None, categories=None)  # surrogates included
controls = st.characters(max_codepoint=0x9F)
surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
piece = st.text(st.one_of(anything, controls, surrogates), max_size=40)
hostile = st.one_of(
    piece,
    st.text(max_size=300),  # mostly acceptable text: accepted calls are projected
    st.builds(lambda ch, n, tail: ch * n + tail, anything, st.integers(200, 300_000), piece),  # huge
)


def accepted(value: str, rule: text.TextRule) -> bool:
    try:
        text.check("value", value, rule)
    except ServingError:
        return False
    return True


def hostile_calls(admin_url: str, headers: dict[str, str], client_id: str, credential_id: str) -> int:
    """The property, run synchronously (in a worker thread); how many calls were accepted."""
    projected = []
    every = fields(client_id, credential_id)
    with httpx.Client(base_url=admin_url, headers=headers, timeout=60) as http:

        @settings(
            max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(st.sampled_from(every), hostile)
        @example(every[0], "a plain project")
        @example(every[0], "\x00")
        def refused_or_projected(field: Field, value: str) -> None:
            value = value[: field.longest]
            path, body = field.call(value)
            raw = json.dumps(body, ensure_ascii=True)  # lone surrogates travel as \\udXXX escapes
            response = http.post(path.lstrip("/"), content=raw, headers={"content-type": "application/json"})
            assert response.status_code < 500, (field.name, response.status_code, response.text[:300])
            if response.status_code >= 400:
                assert response.json()["error"]["code"], response.text[:300]
                return
            assert accepted(value, field.rule), (field.name, ascii(value[:80]))
            if field.name == "disable reason":
                assert http.post(f"clients/{client_id}/enable", json={}).status_code == 200
            # A read-model read waits for this gateway's last append to be projected (on the
            # projector's notification); answered without it, it says stale and why.
            fresh = http.get("integrations")
            assert fresh.status_code == 200, fresh.text[:300]
            assert "x-read-model-stale" not in fresh.headers, fresh.headers.get("x-read-model-stale-reason")
            projected.append(field.name)

        refused_or_projected()
    return len(projected)


async def test_hostile_operator_text_is_refused_or_projected_and_replays_the_same(
    admin: httpx.AsyncClient, private_nats: NatsServer, fresh_database: str
) -> None:
    async with projecting(fresh_database, private_nats.url):
        created = await admin.post("clients", json={"name": "target", "scopes": [SCOPE]})
        assert created.status_code == 200, created.text
        client_id = created.json()["client_id"]
        listed = {c["client_id"]: c for c in (await admin.get("clients")).json()}
        credential_id = listed[client_id]["credentials"][0]["credential_id"]
        headers = dict(admin.headers)
        projected = await asyncio.to_thread(
            hostile_calls, str(admin.base_url), headers, client_id, credential_id
        )
        assert projected > 0  # the property saw accepted text through to the read model, not only refusals

        status = (await admin.get("projection")).json()
        assert status["halted"] == []
        assert {s["stream"]: s["lag"] for s in status["streams"]} == {"MF_EVENTS": 0, "MF_REQUESTS": 0}

    rebuilt = await replay(fresh_database, private_nats.url, verify=True, progress=False)
    assert rebuilt.differences == []
    assert rebuilt.digest == rebuilt.live_digest
