"""`POST /v1/embeddings` through the whole system: gateway, scheduler, agent, MiniLM."""

from __future__ import annotations

import asyncio
import base64
from datetime import UTC, datetime

import httpx
import msgspec
import numpy as np
import openai
import pytest

from eventstore.subscription import subscribe
from gateway.clients.usage import UsageMarks
from gateway.serving.acceptances import ACCEPTANCE_HOLD_S
from nodeagent.adapters.embedding import EmbeddingAdapter
from nodeagent.runtimes.base import RuntimeOptions
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from streams import subjects
from streams.contracts import EMBEDDING
from streams.envelope import new_id
from streams.events.requests import (
    Acceptance,
    ClientKeyUsed,
    RequestAccepted,
    RequestCompleted,
    RequestFailed,
    RequestRejected,
)
from streams.messages import InvokeRequest
from tests.integration.gateway.conftest import (
    Stack,
    another_deployment,
    key_issued,
    policy_while,
    stack_admin,
)
from tests.support.agents import MINILM
from tests.support.serving import events_until, probe, promote, register_artifacts

SENTENCES = ["A cat sits on the mat.", "Stock markets fell sharply today.", "ModelForge serves embeddings."]


def direct_embeddings(stack: Stack, texts: list[str]) -> np.ndarray:
    folder = stack.root / MINILM
    runtime = OnnxRuntimeCpu()
    runtime.load(folder / "model.onnx", RuntimeOptions())
    adapter = EmbeddingAdapter.from_model_dir(folder)
    batch = adapter.preprocess(texts)
    rows = adapter.postprocess(batch, runtime.run(batch.feeds))
    runtime.unload()
    return np.array([row.vector for row in rows])


def client_for(stack: Stack) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{stack.gateway.url}/v1", api_key=stack.key.key, max_retries=0)


async def test_the_openai_client_gets_the_engines_vectors_as_base64_by_default(stack: Stack) -> None:
    response = await client_for(stack).embeddings.create(model="all-MiniLM-L6-v2", input=SENTENCES)
    got = np.array([item.embedding for item in response.data])
    assert got.shape == (3, 384)
    np.testing.assert_allclose(got, direct_embeddings(stack, SENTENCES), atol=1e-5)
    assert response.usage.prompt_tokens > 0


async def test_the_openai_client_gets_the_same_vectors_as_floats(stack: Stack) -> None:
    response = await client_for(stack).embeddings.create(
        model="all-MiniLM-L6-v2", input="A cat sits on the mat.", encoding_format="float"
    )
    np.testing.assert_allclose(
        response.data[0].embedding, direct_embeddings(stack, SENTENCES[:1])[0], atol=1e-5
    )


async def test_base64_and_float_answers_carry_the_same_vectors_and_usage(stack: Stack) -> None:
    answers = [
        (await _embed(stack, stack.key.key, {"input": SENTENCES, "encoding_format": encoding})).json()
        for encoding in ("float", "base64")
    ]
    floats, packed = ([item["embedding"] for item in answer["data"]] for answer in answers)
    unpacked = [np.frombuffer(base64.b64decode(vector), dtype="<f4") for vector in packed]
    np.testing.assert_array_equal(np.asarray(floats, dtype="<f4"), np.stack(unpacked))
    assert answers[0]["usage"] == answers[1]["usage"]
    assert answers[0]["usage"]["prompt_tokens"] > len(SENTENCES)


async def test_concurrent_requests_each_get_their_own_vector(stack: Stack) -> None:
    client = client_for(stack)
    texts = [f"sentence number {i} about topic {i % 5}" for i in range(24)]
    responses = await asyncio.gather(
        *(client.embeddings.create(model="all-MiniLM-L6-v2", input=t) for t in texts)
    )
    expected = direct_embeddings(stack, texts)
    for response, want in zip(responses, expected, strict=True):
        np.testing.assert_allclose(response.data[0].embedding, want, atol=1e-5)


async def test_a_completed_request_is_recorded_with_its_latency_breakdown(stack: Stack) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{stack.gateway.url}/v1/embeddings",
            json={"input": "hello", "model": "all-MiniLM-L6-v2"},
            headers={"authorization": f"Bearer {stack.key.key}"},
        )
    assert response.status_code == 200
    assert "server-timing" in response.headers
    body = response.json()
    assert body["latency"]["total_ms"] > 0
    assert body["request_id"] == response.headers["x-request-id"]
    event = await _request_event(stack, body["request_id"], RequestCompleted)
    assert event.latency.worker_inference_ms > 0
    assert event.usage.input_tokens > 0


async def _request_event(stack: Stack, request_id: str, kind: type) -> object:
    def wanted(event: object) -> bool:
        return isinstance(event, kind) and getattr(event, "request_id", None) == request_id

    return (await events_until(stack.connection, subjects.REQUESTS_STREAM, wanted))[-1]


BAD_INPUTS = [
    ("malformed json", b'{"input": "x"', 400, "INVALID_INPUT"),
    ("empty body", b"", 400, "INVALID_INPUT"),
    ("wrong type", b'{"input": 42, "model": "all-MiniLM-L6-v2"}', 422, "INVALID_INPUT"),
    ("empty list", b'{"input": [], "model": "all-MiniLM-L6-v2"}', 422, "INVALID_INPUT"),
    ("blank string", b'{"input": "   ", "model": "all-MiniLM-L6-v2"}', 422, "INVALID_INPUT"),
    ("token ids", b'{"input": [[101, 2023, 102]], "model": "all-MiniLM-L6-v2"}', 400, "INVALID_INPUT"),
    (
        "too many items",
        b'{"input": [' + b",".join([b'"x"'] * 300) + b'], "model": "all-MiniLM-L6-v2"}',
        422,
        "INVALID_INPUT",
    ),
    (
        "item too long",
        b'{"input": "' + b"a" * 40_000 + b'", "model": "all-MiniLM-L6-v2"}',
        422,
        "INVALID_INPUT",
    ),
    ("bad encoding", b'{"input": "x", "encoding_format": "int8"}', 422, "INVALID_INPUT"),
    ("unknown input type", b'{"input": "x", "input_type": "classification"}', 422, "INVALID_INPUT"),
    ("unsupported dimensions", b'{"input": "x", "dimensions": 128}', 400, "INVALID_INPUT"),
    ("oversized body", b'{"input": "' + b"a" * (5 << 20) + b'"}', 413, "PAYLOAD_TOO_LARGE"),
    ("unknown model", b'{"input": "x", "model": "text-embedding-ada-002"}', 404, "MODEL_NOT_FOUND"),
    ("another capability's model", b'{"input": "x", "model": "pp-ocrv4"}', 404, "MODEL_NOT_FOUND"),
]


@pytest.mark.parametrize(("case", "body", "status", "code"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
async def test_bad_input_is_refused_with_a_code_and_changes_no_state(
    stack: Stack, case: str, body: bytes, status: int, code: str
) -> None:
    js = stack.connection.client.jetstream()
    await stack.gateway.settled()  # earlier tests' lease releases are not this request's doing
    before = (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{stack.gateway.url}/v1/embeddings",
            content=body,
            headers={
                "authorization": f"Bearer {stack.key.key}",
                "content-type": "application/json",
            },
        )
    assert response.status_code == status, response.text
    request_id = response.headers["x-request-id"]
    error = response.json()["error"]
    assert error["code"] == code
    assert error["request_id"] == request_id
    assert set(error) >= {"code", "message", "type", "param", "request_id"}
    rejected = await _request_event(stack, request_id, RequestRejected)
    assert rejected.code == code  # type: ignore[attr-defined]
    assert (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq == before


@pytest.mark.parametrize("timeout", [b"\xb2", b"-5", b"soon", b"0"])  # \xb2: "²" in latin-1
async def test_a_timeout_header_that_is_not_a_positive_number_is_ignored(
    stack: Stack, timeout: bytes
) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{stack.gateway.url}/v1/embeddings",
            json={"input": "x"},
            headers={"authorization": f"Bearer {stack.key.key}", "x-request-timeout-ms": timeout},
        )
    assert response.status_code == 200, response.text


async def test_a_request_of_as_many_texts_as_the_contract_allows_is_answered_in_full(stack: Stack) -> None:
    texts = [f"sentence number {i} about cats and mats" for i in range(EMBEDDING.limits.max_items)]
    async with httpx.AsyncClient(timeout=120) as http:
        response = await http.post(
            f"{stack.gateway.url}/v1/embeddings",
            json={"input": texts},
            headers={"authorization": f"Bearer {stack.key.key}"},
        )
    assert response.status_code == 200, response.text
    assert len(response.content) > 1 << 20  # past NATS's default message size
    assert [item["index"] for item in response.json()["data"]] == list(range(len(texts)))


async def test_token_ids_are_refused_with_the_langchain_fix_named(stack: Stack) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{stack.gateway.url}/v1/embeddings",
            json={"input": [[1, 2, 3]], "model": "all-MiniLM-L6-v2"},
            headers={"authorization": f"Bearer {stack.key.key}"},
        )
    assert "check_embedding_ctx_length=False" in response.json()["error"]["message"]


async def test_an_unknown_model_is_refused_with_the_name_to_send_instead(stack: Stack) -> None:
    with pytest.raises(openai.NotFoundError) as refused:
        await client_for(stack).embeddings.create(model="text-embedding-ada-002", input="x")
    error = refused.value.body  # (the openai package keeps the error object)
    assert isinstance(error, dict)
    assert (error["code"], error["param"]) == ("MODEL_NOT_FOUND", "model")
    assert "'all-MiniLM-L6-v2'" in error["message"]


@pytest.mark.parametrize("named", ["rag.embedding@1", "rag.embedding", None])
async def test_a_call_naming_its_capability_or_no_model_is_answered_by_the_model_that_served_it(
    stack: Stack, named: str | None
) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{stack.gateway.url}/v1/embeddings",
            json={"input": "hello", "model": named},
            headers={"authorization": f"Bearer {stack.key.key}"},
        )
    assert response.status_code == 200, response.text
    assert response.json()["model"] == "all-MiniLM-L6-v2"


async def test_a_missing_key_is_401_and_a_missing_scope_is_403(stack: Stack) -> None:
    async with httpx.AsyncClient() as http:
        anonymous = await http.post(f"{stack.gateway.url}/v1/embeddings", json={"input": "x"})
        wrong_scope = await http.post(
            f"{stack.gateway.url}/v1/rerank",
            json={"query": "q", "documents": ["d"]},
            headers={"authorization": f"Bearer {stack.key.key}"},
        )
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "CAPABILITY_NOT_AUTHORIZED"
    assert wrong_scope.status_code == 403


async def test_models_lists_what_the_key_may_call(stack: Stack) -> None:
    models = await client_for(stack).models.list()
    assert [(m.id, m.capability) for m in models.data] == [("all-MiniLM-L6-v2", "rag.embedding@1")]  # type: ignore[attr-defined]


async def test_the_openai_client_retrieves_a_model_the_key_may_call_and_not_another(stack: Stack) -> None:
    client = client_for(stack)
    model = await client.models.retrieve("all-MiniLM-L6-v2")
    assert (model.id, model.capability) == ("all-MiniLM-L6-v2", "rag.embedding@1")  # type: ignore[attr-defined]
    with pytest.raises(openai.NotFoundError) as refused:
        await client.models.retrieve("pp-ocrv4")
    assert refused.value.code == "MODEL_NOT_FOUND"


async def test_a_capability_with_no_deployment_is_503_and_recorded_as_a_rejection(stack: Stack) -> None:
    issued = await key_issued(
        stack, f"rr-{new_id()[:6]}", ["rag.reranking@1"], requests_per_minute=100, max_concurrency=4
    )
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{stack.gateway.url}/v1/rerank",
            json={"query": "q", "documents": ["d"]},
            headers={"authorization": f"Bearer {issued.key}"},
        )
    request_id = response.headers["x-request-id"]
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "CAPABILITY_UNAVAILABLE"
    rejected = await _request_event(stack, request_id, RequestRejected)
    assert rejected.code == "CAPABILITY_UNAVAILABLE"  # type: ignore[attr-defined]


async def test_dimensions_a_deployment_declares_give_its_vectors_cut_and_normalised_again(
    stack: Stack,
) -> None:
    artifacts = await register_artifacts(stack.store, stack.node, stack.root, MINILM)
    measured = await probe(stack.connection, stack.node, artifacts, stack.root)
    await promote(stack.store, artifacts, measured, route="minilm-mrl", truncatable_dimensions=(128,))
    async with httpx.AsyncClient(timeout=60) as http:
        ready = await http.get(f"{stack.gateway.url}/readyz", params={"applied": stack.store.last_sequence})
        assert ready.status_code == 200
        cut = await client_for(stack).embeddings.create(
            model="minilm-mrl", input=SENTENCES[0], dimensions=128, encoding_format="float"
        )
        refused = await http.post(
            f"{stack.gateway.url}/v1/embeddings",
            json={"input": "x", "model": "minilm-mrl", "dimensions": 64},
            headers={"authorization": f"Bearer {stack.key.key}"},
        )
    head = direct_embeddings(stack, [SENTENCES[0]])[0][:128]
    vector = np.array(cut.data[0].embedding)
    assert vector.shape == (128,)
    np.testing.assert_allclose(vector, head / np.linalg.norm(head), atol=1e-5)
    assert refused.status_code == 400
    assert "supported: 128" in refused.json()["error"]["message"]


async def _embed(stack: Stack, key: str, body: dict[str, object]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=60) as http:
        return await http.post(
            f"{stack.gateway.url}/v1/embeddings", json=body, headers={"authorization": f"Bearer {key}"}
        )


async def test_an_input_type_is_sent_to_the_agent_with_the_invoke_and_recorded(stack: Stack) -> None:
    invokes = await stack.connection.client.subscribe(
        subjects.invoke_subject(stack.node, stack.deployment_id)
    )
    await stack.connection.client.flush()  # the server holds the copy's interest before the request
    try:
        # "passage": NVIDIA's name for a document
        response = await _embed(
            stack, stack.key.key, {"input": "How long do llamas live?", "input_type": "passage"}
        )
        assert response.status_code == 200, response.text
        request_id = response.headers["x-request-id"]
        sent = msgspec.json.decode((await invokes.next_msg(timeout=30)).data, type=InvokeRequest)
        while sent.request_id != request_id:  # (another test's request)
            sent = msgspec.json.decode((await invokes.next_msg(timeout=30)).data, type=InvokeRequest)
    finally:
        await invokes.unsubscribe()
    assert sent.input_type == "document"
    assert (await _acceptance(stack, request_id)).input_type == "document"


async def _acceptance(stack: Stack, request_id: str) -> RequestAccepted | Acceptance:
    """The request's acceptance, as a record of its own or carried by its end event."""

    def ended(event: object) -> bool:
        return isinstance(event, RequestCompleted | RequestFailed) and event.request_id == request_id

    seen = await events_until(stack.connection, subjects.REQUESTS_STREAM, ended)
    end = seen[-1]
    assert isinstance(end, RequestCompleted | RequestFailed)
    alone = [e for e in seen if isinstance(e, RequestAccepted) and e.request_id == request_id]
    assert len(alone) + (end.accepted is not None) == 1  # once, either way
    return alone[0] if alone else end.accepted  # type: ignore[return-value]


async def test_a_request_that_ends_while_its_acceptance_is_held_is_one_record_that_carries_it(
    stack: Stack,
) -> None:
    assert stack.gateway.replica is not None
    acceptances = stack.gateway.replica.edge.ctx.acceptances
    acceptances.hold_s = 600.0  # (held for as long as the request could take)
    sent_at = datetime.now(UTC)
    try:
        response = await _embed(stack, stack.key.key, {"input": "How long do llamas live?"})
    finally:
        acceptances.hold_s = ACCEPTANCE_HOLD_S
    answered_at = datetime.now(UTC)
    assert response.status_code == 200, response.text
    acceptance = await _acceptance(stack, response.json()["request_id"])
    assert isinstance(acceptance, Acceptance)
    assert acceptance.gateway_id == stack.gateway.replica.edge.ctx.gateway_id
    assert acceptance.items == 1
    assert len(acceptance.input_sha256) == 64
    assert sent_at <= acceptance.accepted_at <= answered_at  # when it was accepted, not recorded


async def test_an_acceptance_recorded_before_its_request_ends_is_not_carried_again(stack: Stack) -> None:
    assert stack.gateway.replica is not None
    acceptances = stack.gateway.replica.edge.ctx.acceptances
    acceptances.hold_s = 0.0  # (recorded as the request is accepted)
    try:
        response = await _embed(stack, stack.key.key, {"input": "How long do llamas live?"})
    finally:
        acceptances.hold_s = ACCEPTANCE_HOLD_S
    assert response.status_code == 200, response.text
    acceptance = await _acceptance(stack, response.json()["request_id"])
    assert isinstance(acceptance, RequestAccepted)
    assert acceptance.gateway_id == stack.gateway.replica.edge.ctx.gateway_id


async def test_a_served_request_records_its_keys_use(stack: Stack) -> None:
    fresh = await key_issued(stack, f"used-{new_id()[:6]}", ["rag.embedding@1"])
    response = await _embed(stack, fresh.key, {"input": "hello"})
    assert response.status_code == 200, response.text

    used = await events_until(
        stack.connection,
        subjects.REQUESTS_STREAM,
        lambda e: isinstance(e, ClientKeyUsed) and e.credential_id == fresh.credential_id,
    )

    assert used[-1].client_id == fresh.client_id  # type: ignore[attr-defined]


async def test_a_request_the_rate_limit_refuses_is_no_use_of_the_key(stack: Stack) -> None:
    fresh = await key_issued(stack, f"limited-{new_id()[:6]}", ["rag.embedding@1"], requests_per_minute=1)
    assert stack.gateway.replica is not None
    edge = stack.gateway.replica.edge
    marks, edge.usage = edge.usage, UsageMarks(interval_s=0)  # every use recorded, not one a minute
    statuses: list[int] = []
    try:
        while 429 not in statuses:
            assert len(statuses) < 3, statuses  # (a new minute frees one more, at most)
            statuses.append((await _embed(stack, fresh.key, {"input": "hello"})).status_code)
        await stack.gateway.settled()
    finally:
        edge.usage = marks

    uses = [e for e in await _requests_stream(stack) if isinstance(e, ClientKeyUsed)]

    assert 200 in statuses
    assert len([e for e in uses if e.credential_id == fresh.credential_id]) == statuses.count(200)


async def _requests_stream(stack: Stack) -> list[object]:
    """Every event MF_REQUESTS holds now."""
    last = (await stack.connection.client.jetstream().stream_info(subjects.REQUESTS_STREAM)).state.last_seq
    events: list[object] = []
    async with asyncio.timeout(30):
        async for record in subscribe(stack.connection.client, 1, stream=subjects.REQUESTS_STREAM):
            events.append(record.event)
            if record.sequence >= last:
                return events
    return events


async def test_lab_work_is_refused_lab_paused_while_the_policy_pauses_it_and_production_is_served(
    stack: Stack,
) -> None:
    await another_deployment(stack, "minilm-paused", "paused")
    async with policy_while(stack, {"lab_paused": True}):
        lab = await _embed(stack, stack.key.key, {"input": "x", "model": "paused"})
        production = await _embed(stack, stack.key.key, {"input": "x"})

    assert (lab.status_code, lab.json()["error"]["code"]) == (503, "LAB_PAUSED")
    assert production.status_code == 200, production.text


async def test_a_deployment_loaded_and_serving_reads_as_healthy_in_the_admin_api(stack: Stack) -> None:
    served = await _embed(stack, stack.key.key, {"input": "x"})
    assert served.status_code == 200, served.text

    async with stack_admin(stack, "operator-token-for-health") as admin:
        shown = (await admin.get(f"/deployments/{stack.deployment_id}")).json()
        listed = {d["deployment_id"]: d for d in (await admin.get("/deployments")).json()}

    assert shown["health_status"] == "healthy"
    assert listed[stack.deployment_id]["health_status"] == "healthy"
