"""An admin verb the API refuses prints the error's details (the gates that failed, ...) under its
message, so an operator sees why, not only the first code."""

from __future__ import annotations

import io
import json
import urllib.error
from email.message import Message
from typing import Any

import pytest

from gateway.admin import client as admin_client
from modelforge import cli

REFUSAL = {
    "error": {
        "code": "CANDIDATE_NOT_LAB_READY",
        "message": "the candidate is not lab_ready (registered)",
        "details": {"failed_gates": ["CANDIDATE_NOT_LAB_READY", "INVALID_OUTPUT"]},
    }
}


def test_a_refused_verb_prints_the_errors_details(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(request: Any, timeout: float) -> Any:
        body = io.BytesIO(json.dumps(REFUSAL).encode())
        raise urllib.error.HTTPError(request.full_url, 409, "Conflict", Message(), body)

    monkeypatch.setattr(admin_client.urllib.request, "urlopen", refuse)
    monkeypatch.setattr(cli, "_embedded_defaults", lambda command: None)
    monkeypatch.setenv("MODELFORGE_GATEWAY_URL", "http://127.0.0.1:9")
    verb = ["approvals", "production", "--candidate", "cand-bad", "--probe", "p1"]
    record = ["--review", "pinned wheels, hashes checked", "--reason", "release", "--approved-by", "alice"]
    assert cli.main([*verb, *record]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "error CANDIDATE_NOT_LAB_READY (409): the candidate is not lab_ready (registered)"
    assert err[1] == 'details {"failed_gates": ["CANDIDATE_NOT_LAB_READY", "INVALID_OUTPUT"]}'
