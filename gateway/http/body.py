"""Reading a request body with its size limit enforced before the body is fully read, and within
a time limit (a client that declares more than it sends must not hold the request open forever)."""

from __future__ import annotations

import asyncio
import gc
from typing import TypeAlias, TypeVar

import msgspec
from starlette.requests import ClientDisconnect, Request

from streams.codes import ServingError

T = TypeVar("T")
# A JSON body as decoded, before a dialect converts it into its typed request.
JsonValue: TypeAlias = dict[str, "JsonValue"] | list["JsonValue"] | str | int | float | bool | None

BODY_TIMEOUT_S = 30.0  # the default for a body with no capability deadline of its own (admin calls)


async def read_limited(request: Request, limit: int, timeout_s: float = BODY_TIMEOUT_S) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large(limit)
                chunks.append(chunk)
    except TimeoutError:
        raise ServingError(
            "REQUEST_TIMEOUT",
            f"the request body did not arrive within {timeout_s:g} s",
            http_status=408,
            details={"received_bytes": size},
        ) from None
    except ClientDisconnect:
        raise ServingError(
            "REQUEST_CANCELLED", "the client closed the connection before sending the whole body"
        ) from None
    return b"".join(chunks)


def too_large(limit: int) -> ServingError:
    return ServingError("PAYLOAD_TOO_LARGE", f"the request body is larger than {limit} bytes")


def decode_json(body: bytes) -> JsonValue:
    """The body as JSON: an object, array, string, number, bool or null (a dialect converts it)."""
    if not body:
        raise ServingError("INVALID_INPUT", "the request body is empty; send a JSON object", http_status=400)
    # No cyclic collection while msgspec recurses: one that came due at the depth of a deeply nested
    # body would run other objects' finalizers (Python code) with the interpreter's recursion budget
    # all but spent, and they would fail (a RecursionError each, reported as unraisable).
    collecting = gc.isenabled()
    gc.disable()
    try:
        value: JsonValue = msgspec.json.decode(body)
        return value
    except msgspec.DecodeError as exc:
        raise ServingError(
            "INVALID_INPUT", f"the request body is not valid JSON: {exc}", http_status=400
        ) from None
    except RecursionError:  # msgspec's guard against a stack overflow: arrays or objects nested deeply
        raise ServingError(
            "INVALID_INPUT", "the request body nests arrays or objects too deeply", http_status=400
        ) from None
    finally:
        if collecting:
            gc.enable()


def convert(raw: object, type_: type[T], what: str, *, strict: bool = True) -> T:
    """Typed decode with the offending field named in `param` (`strict=False`: strings are read
    as the field's type, as a query string needs)."""
    try:
        return msgspec.convert(raw, type_, strict=strict)
    except msgspec.ValidationError as exc:
        text = str(exc)
        param = (
            text.rsplit("at `$.", 1)[-1].rstrip("`").split("[")[0].split(".")[0] if "at `$." in text else None
        )
        raise ServingError("INVALID_INPUT", f"invalid {what}: {text}", param=param) from None
