"""The OpenAPI document covers every route of the gateway's app, client and admin, with the
schemas of what each takes and answers, and is a valid OpenAPI 3.1 document."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest
from openapi_spec_validator import validate
from starlette.routing import Route
from starlette.testclient import TestClient

from gateway.admin.endpoint import PREFIX
from gateway.admin.routes import ENDPOINTS, admin_operations
from gateway.app import CLIENT_OPERATIONS, create_app
from gateway.http.edge import Edge
from gateway.http.openapi import DOCS_OPERATIONS
from streams.codes import ERROR_CODES

APP = create_app(cast(Edge, None))  # the document needs no serving state
OPERATIONS = [*CLIENT_OPERATIONS, *admin_operations(), *DOCS_OPERATIONS]
# as served: the JSON the document is encoded to
SPEC: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(APP.state.openapi))


def routes() -> Iterator[tuple[str, str]]:
    for route in APP.routes:
        assert isinstance(route, Route)
        for method in sorted(route.methods or ()):
            if method != "HEAD":  # Starlette's own, with every GET
                yield method.lower(), re.sub(r"{(\w+):\w+}", r"{\1}", route.path)


def operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in SPEC["paths"].items():
        for method, operation in methods.items():
            yield method, path, operation


def refs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def test_every_route_of_the_app_is_in_the_document() -> None:
    served = set(routes())
    documented = {(method, path) for method, path, _ in operations()}
    assert served == documented
    assert ("post", "/v1/embeddings") in served
    assert ("get", f"{PREFIX}/deployments") in served


def test_the_document_is_valid_openapi_3_1() -> None:
    assert SPEC["openapi"] == "3.1.0"
    validate(SPEC)


def test_every_reference_resolves() -> None:
    for ref in set(refs(SPEC)):
        node: Any = SPEC
        for part in ref.removeprefix("#/").split("/"):
            assert part in node, ref
            node = node[part]


def test_every_operation_describes_its_answer_with_a_schema() -> None:
    for method, path, operation in operations():
        (success,) = [answer for status, answer in operation["responses"].items() if status.startswith("2")]
        (content,) = success["content"].values()
        assert content["schema"], (method, path)


@pytest.mark.parametrize(
    ("path", "schema"),
    [
        ("/v1/embeddings", "OpenAIEmbeddingRequest"),
        ("/v1/rerank", "RerankRequest"),
        ("/v2/rerank", "RerankRequest"),
        ("/v1/ocr", "MistralOcrRequest"),
        ("/v1/audio/transcriptions", "TranscriptionUpload"),
    ],
)
def test_a_client_route_taking_a_body_has_its_request_schema(path: str, schema: str) -> None:
    (content,) = SPEC["paths"][path]["post"]["requestBody"]["content"].values()
    assert content["schema"] == {"$ref": f"#/components/schemas/{schema}"}


def test_invoking_a_capability_takes_any_contracts_input() -> None:
    body = SPEC["paths"]["/v1/capabilities/{capability}:invoke"]["post"]["requestBody"]
    names = {ref.rsplit("/", 1)[-1] for ref in refs(body)}
    assert names == {
        "EmbeddingInput",
        "RerankInput",
        "OcrInput",
        "VisionEmbeddingInput",
        "TranscriptionInput",
    }


def test_every_admin_route_taking_a_body_has_its_request_schema() -> None:
    for endpoint in ENDPOINTS:
        operation = SPEC["paths"][PREFIX + endpoint.path][endpoint.method.lower()]
        if endpoint.body is None:
            assert "requestBody" not in operation
        else:
            (content,) = operation["requestBody"]["content"].values()
            assert content["schema"] == {"$ref": f"#/components/schemas/{endpoint.body.__name__}"}


def test_declared_constraints_are_in_the_schemas() -> None:
    schemas = SPEC["components"]["schemas"]
    assert schemas["LabApproval"]["properties"]["expires_in_s"]["exclusiveMinimum"] == 0
    temperature = schemas["TranscriptionUpload"]["properties"]["temperature"]["anyOf"][0]
    assert (temperature["minimum"], temperature["maximum"]) == (0, 1)


def test_every_operation_describes_its_errors_in_the_one_shape() -> None:
    error = {"$ref": "#/components/schemas/ErrorBody"}
    for name in ("ClientError", "ServerError", "Unauthorized"):
        assert SPEC["components"]["responses"][name]["content"]["application/json"]["schema"] == error
    for method, path, operation in operations():
        assert {"4XX", "5XX"} <= set(operation["responses"]), (method, path)
    detail = SPEC["components"]["schemas"]["ErrorDetail"]
    assert set(detail["required"]) == {"code", "message", "type", "param", "request_id"}
    assert detail["properties"]["code"]["enum"] == list(ERROR_CODES)


def test_every_query_parameter_a_route_reads_is_declared_with_its_constraints() -> None:
    """A route reads its query only through its declared Struct (`decode_query`), and the document
    lists each of that Struct's fields: a parameter read any other way, or left out, fails here."""
    for source in Path("gateway").rglob("*.py"):
        code = source.read_text()
        read = code.count("query_params")
        decoded = len(re.findall(r"decode_query\(request\.query_params, [\w.]+\)", code))
        assert read == decoded, f"{source} reads query parameters outside gateway.http.query.decode_query"
    for o in OPERATIONS:
        parameters = SPEC["paths"][re.sub(r"{(\w+):\w+}", r"{\1}", o.path)][o.method.lower()]["parameters"]
        declared = {p["name"]: p for p in parameters if p["in"] == "query"}
        fields = msgspec.structs.fields(o.query) if o.query is not None else ()
        assert set(declared) == {f.name for f in fields}, o.path
        for f in fields:
            assert declared[f.name]["schema"]["default"] == f.default, (o.path, f.name)
            assert declared[f.name]["required"] is False


@pytest.mark.parametrize(
    ("path", "name", "low", "high", "default"),
    [
        (f"{PREFIX}/requests", "limit", 1, 1000, 100),
        (f"{PREFIX}/scheduler/evictions", "limit", 1, 1000, 50),
        (f"{PREFIX}/traffic", "window_s", 60, 7 * 24 * 3600, 3600),
        (f"{PREFIX}/traffic", "step_s", 1, 3600, 60),
        ("/readyz", "applied", 0, None, 0),
    ],
)
def test_a_query_parameter_is_declared_with_type_bounds_and_default(
    path: str, name: str, low: int, high: int | None, default: int
) -> None:
    (parameter,) = [p for p in SPEC["paths"][path]["get"]["parameters"] if p["name"] == name]
    assert parameter["in"] == "query"
    schema = parameter["schema"]
    assert (schema["type"], schema["minimum"], schema.get("maximum"), schema["default"]) == (
        "integer",
        low,
        high,
        default,
    )


@pytest.mark.parametrize("query", ["applied=abc", "applied=-1", "clients_applied=1.5", "peers_queued=%00"])
def test_a_malformed_query_parameter_is_refused_with_the_input_code(query: str) -> None:
    answer = TestClient(APP).get(f"/readyz?{query}")
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "INVALID_INPUT"
    assert answer.json()["error"]["param"] == query.split("=")[0]


def test_the_docs_page_lists_a_routes_query_parameters_with_their_bounds() -> None:
    page = TestClient(APP).get("/docs").text
    assert "<code>window_s</code> (integer, 60–604800, default 3600)" in page
    assert "<code>client_id</code> (string, default &#x27;&#x27;)" in page
