"""The error-code catalogue is stable, well-formed and carried by ServingError."""

from __future__ import annotations

import re

import pytest

from streams import codes
from streams.codes import ERROR_CODES, ServingError
from streams.errorspec import ERROR_TYPES, ErrorSpec

UPPER_SNAKE = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*$")

# Codes the reference implementation uses and clients already depend on, with their seed status.
SEED_DEFAULTS = {
    "CAPABILITY_NOT_AUTHORIZED": 401,
    "RATE_LIMITED": 429,
    "QUEUE_FULL": 429,
    "INVALID_INPUT": 422,
    "INVALID_OUTPUT": 502,
    "ARTIFACT_NOT_VERIFIED": 409,
    "PICKLE_PRESENT": 409,
    "REQUEST_TIMEOUT": 504,
    "CAPABILITY_UNAVAILABLE": 503,
    "RERANK_REQUEST_TOO_LARGE": 413,
    "PRODUCTION_APPROVAL_NOT_FOUND": 404,
}
REQUIRED_EXTRA = {
    "ARTIFACT_PATH_INVALID",
    "RESIDENCY_UNLOAD_FAILED",
    "NO_ELIGIBLE_NODE",
    "PAYLOAD_TOO_LARGE",
    "UNKNOWN_CAPABILITY",
}


def test_every_code_is_upper_snake_keyed_by_itself_and_an_error_status() -> None:
    assert len(ERROR_CODES) >= 50
    for key, spec in ERROR_CODES.items():
        assert isinstance(spec, ErrorSpec)
        assert key == spec.code
        assert UPPER_SNAKE.match(spec.code), spec.code
        assert 400 <= spec.http_status <= 599, spec
        assert spec.type in ERROR_TYPES, spec
        assert spec.description.strip()


def test_module_constants_are_unique_and_all_catalogued() -> None:
    constants = [value for value in vars(codes).values() if isinstance(value, ErrorSpec)]
    names = [spec.code for spec in constants]
    assert len(names) == len(set(names))
    assert set(names) == set(ERROR_CODES)
    for spec in constants:
        assert getattr(codes, spec.code) is spec


def test_seed_codes_keep_their_status_and_required_codes_exist() -> None:
    for code, status in SEED_DEFAULTS.items():
        assert ERROR_CODES[code].http_status == status, code
    assert set(ERROR_CODES) >= REQUIRED_EXTRA
    assert ERROR_CODES["RATE_LIMITED"].type == "rate_limit_error"
    assert ERROR_CODES["REQUEST_TIMEOUT"].type == "timeout_error"
    assert ERROR_CODES["CAPABILITY_NOT_AUTHORIZED"].type == "authentication_error"


def test_serving_error_carries_its_spec() -> None:
    error = ServingError("QUEUE_FULL", "capability queue is full", param="model")
    assert error.spec is ERROR_CODES["QUEUE_FULL"]
    assert error.http_status == 429
    assert error.type == "rate_limit_error"
    assert error.param == "model"
    assert str(error) == "capability queue is full"
    body = error.to_body("req-1")
    assert body == {
        "error": {
            "code": "QUEUE_FULL",
            "message": "capability queue is full",
            "type": "rate_limit_error",
            "param": "model",
            "request_id": "req-1",
        }
    }


def test_status_override_changes_status_and_type_but_not_spec() -> None:
    error = ServingError("CAPABILITY_NOT_AUTHORIZED", "capability scope is not granted", http_status=403)
    assert error.http_status == 403
    assert error.type == "permission_error"
    assert error.spec.http_status == 401
    too_big = ServingError("INVALID_INPUT", "payload too large", "input", http_status=413)
    assert too_big.type == "invalid_request_error"


def test_unknown_code_and_bad_status_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown error code"):
        ServingError("NOT_A_CODE", "x")
    with pytest.raises(ValueError, match="4xx or 5xx"):
        ServingError("QUEUE_FULL", "x", http_status=200)
