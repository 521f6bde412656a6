"""A small synchronous client of the admin API (stdlib only), for the CLI and the bootstrap."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

URL_ENV = "MODELFORGE_GATEWAY_URL"
TOKEN_ENV = "MODELFORGE_OPERATOR_TOKEN"


class AdminError(Exception):
    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.details = details or {}  # the error's `details` (e.g. failed_gates), when it has them


class AdminClient:
    def __init__(self, url: str | None = None, token: str | None = None, operator: str = "cli") -> None:
        self.url = (url or os.environ.get(URL_ENV, "http://127.0.0.1:8080")).rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_ENV, "")
        self.operator = operator

    def call(self, method: str, path: str, body: object = None, timeout: float = 300.0) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}/admin/v1{path}", data=data, method=method)
        request.add_header("authorization", f"Bearer {self.token}")
        request.add_header("x-mf-operator", self.operator)
        if data is not None:
            request.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                error = json.loads(exc.read())["error"]
            except (ValueError, KeyError, TypeError):
                raise AdminError(exc.code, "HTTP_ERROR", str(exc)) from None
            details = error.get("details")
            raise AdminError(
                exc.code,
                error.get("code", ""),
                error.get("message", ""),
                details if isinstance(details, dict) else None,
            ) from None
        except urllib.error.URLError as exc:
            raise AdminError(0, "GATEWAY_UNREACHABLE", f"{self.url}: {exc.reason} (set {URL_ENV})") from None

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def post(self, path: str, body: object = None) -> Any:
        return self.call("POST", path, body if body is not None else {})
