"""Schemathesis over the gateway's own OpenAPI document, against a real gateway process (client
API with a valid key, admin API with the operator token): no answer is a server error, and every
answer conforms to the schema the document declares for it. CI-sized: a few examples an operation."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import APIOperation, Case
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from modelforge.devstack.nats_server import NatsServer
from tests.integration.gateway.conftest import ProcessStack, process_stack
from tests.integration.projections.helpers import migrated

OPERATOR_TOKEN = "operator-token-for-the-fuzzer"
EXAMPLES = 10  # an operation (besides its schema's examples): CI-sized; raise it to hunt


def start_projector(env: dict[str, str], log_dir: Path) -> subprocess.Popen[bytes]:
    with open(log_dir / "fuzz-projector.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "modelforge.cli", "projector", "--no-telemetry"],
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )


@pytest.fixture
async def fuzzed(
    module_nats: NatsServer, minilm_root: Path, scratch: Path, fresh_database: str
) -> AsyncIterator[ProcessStack]:
    """The stack, its gateway reading a read model that a projector process keeps current (the
    admin reads wait for their writes to be projected)."""
    await migrated(fresh_database)
    env = {"MODELFORGE_OPERATOR_TOKEN": OPERATOR_TOKEN, "DATABASE_URL": fresh_database}
    projector = await asyncio.to_thread(start_projector, {**env, "NATS_URL": module_nats.url}, scratch)
    try:
        async with process_stack(module_nats.url, minilm_root, scratch, env) as stack:
            yield stack
    finally:
        projector.terminate()
        await asyncio.to_thread(projector.wait, 60)


def fuzzer(api: APIOperation, authorization: str, calls: list[str], queried: set[str]) -> Callable[[], None]:
    """EXAMPLES generated calls of `api` (and those its schema gives), each checked and noted in
    `calls` (and in `queried` when it sent query parameters)."""

    @given(case=api.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def fuzz(case: Case) -> None:
        calls.append(api.label)
        if case.query:
            queried.add(api.label)
        case.call_and_validate(
            headers={"authorization": authorization},
            checks=[not_a_server_error, response_schema_conformance],
            timeout=30,
        )

    return fuzz


def test_no_server_errors_and_every_answer_conforms(fuzzed: ProcessStack) -> None:
    document = schemathesis.openapi.from_url(f"{fuzzed.url}/openapi.json")
    found: list[str] = []
    calls: list[str] = []
    queried: set[str] = set()
    with_query: set[str] = set()
    fuzzed_operations = 0
    for operation in document.get_all_operations():
        api = operation.ok()
        if not api.path.startswith(("/v1/", "/v2/", "/admin/")):
            continue  # /metrics (text), the console's files, the document itself
        secret = OPERATOR_TOKEN if api.path.startswith("/admin/") else fuzzed.key
        fuzzed_operations += 1
        if len(api.query):
            with_query.add(api.label)
        try:
            fuzzer(api, f"Bearer {secret}", calls, queried)()
        except (Exception, BaseExceptionGroup) as failure:  # every operation's finding, not the first one's
            found.append(f"{api.method.upper()} {api.path}: {str(failure)[:800]}")
    assert not found, "\n\n".join(found)
    assert len(set(calls)) == fuzzed_operations > 50  # every client and admin operation was called
    assert len(with_query) >= 5  # the admin reads' declared query parameters (limit, window_s, ...)
    assert queried == with_query  # were fuzzed too
