"""What one error code is: its default HTTP status, its OpenAI-style type, a description.

Pure module: no I/O. The catalogue of codes itself is `streams.codes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

ErrorType = Literal[
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "rate_limit_error",
    "server_error",
    "timeout_error",
    "not_found_error",
    "conflict_error",
]

ERROR_TYPES: Final[frozenset[str]] = frozenset(get_args(ErrorType))


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    """One catalogue entry: the code, its default HTTP status, its OpenAI-style type, a description.

    ``from_seed`` is False for codes this project added beyond the reference implementation.
    """

    code: str
    http_status: int
    type: ErrorType
    description: str
    from_seed: bool = True


def error_type_for_status(status: int) -> ErrorType:
    """The OpenAI-style error type that matches an HTTP status (used when a raiser overrides it)."""
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 404:
        return "not_found_error"
    if status == 409:
        return "conflict_error"
    if status == 429:
        return "rate_limit_error"
    if status in (408, 504):
        return "timeout_error"
    if 400 <= status < 500:
        return "invalid_request_error"
    return "server_error"


def spec(code: str, status: int, description: str, *, from_seed: bool = True) -> ErrorSpec:
    return ErrorSpec(code, status, error_type_for_status(status), description, from_seed)
