"""The contracts' input checks every API dialect shares: what is refused at the edge, before
anything is recorded but the refusal (never by the agent after a lease was taken for it)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import NamedTuple

from gateway.http.edge import Edge
from gateway.http.image_header import ImageKind, image_kind, image_size
from gateway.serving.requests import RequestShape
from streams.codes import ServingError
from streams.contracts import MAX_IMAGE_SIDE_PX, CapabilityContract


def check_texts(
    texts: list[str], contract: CapabilityContract, param: str, too_large: str = "INVALID_INPUT"
) -> RequestShape:
    """The contract's limits on a list of texts; `too_large` is the code for texts over the total
    (the seed reports reranking's as RERANK_REQUEST_TOO_LARGE)."""
    limits = contract.limits
    if not texts:
        raise ServingError("INVALID_INPUT", f"`{param}` must not be empty", param=param)
    if len(texts) > limits.max_items:
        raise ServingError(
            "INVALID_INPUT", f"`{param}` has {len(texts)} items; at most {limits.max_items}", param=param
        )
    total = 0
    for index, text in enumerate(texts):
        if not text.strip():
            raise ServingError("INVALID_INPUT", f"`{param}[{index}]` is empty", param=param)
        if limits.max_chars_per_item and len(text) > limits.max_chars_per_item:
            raise ServingError(
                "INVALID_INPUT",
                f"`{param}[{index}]` has {len(text)} characters; at most {limits.max_chars_per_item}",
                param=param,
            )
        total += len(text)
    if limits.max_total_chars and total > limits.max_total_chars:
        raise ServingError(
            too_large,
            f"`{param}` totals {total} characters; at most {limits.max_total_chars}",
            param=param,
            http_status=413,
        )
    return RequestShape(items=len(texts), chars=total)


def check_rerank(
    query: str, documents: list[str], top_n: int | None, contract: CapabilityContract
) -> RequestShape:
    """A reranking call within the contract: a query, documents, and a `top_n` of at least one
    (more than there are documents returns them all)."""
    if not query.strip():
        raise ServingError("INVALID_INPUT", "`query` must not be empty", param="query")
    longest = contract.limits.max_chars_per_item
    if longest and len(query) > longest:
        raise ServingError(
            "INVALID_INPUT", f"`query` has {len(query)} characters; at most {longest}", param="query"
        )
    shape = check_texts(documents, contract, "documents", too_large="RERANK_REQUEST_TOO_LARGE")
    if top_n is not None and top_n < 1:
        raise ServingError("INVALID_INPUT", f"`top_n` must be at least 1, not {top_n}", param="top_n")
    return shape


def check_base64(
    items: list[str],
    contract: CapabilityContract,
    param: str,
    *,
    listed: bool,
    each: Callable[[bytes, str], None] | None = None,
) -> RequestShape:
    """Each item decodes as the agent will decode it; `listed`: `param` is a list (named by index);
    `each(decoded, where)` checks an item's bytes further (raising its refusal)."""
    if not items:
        raise ServingError("INVALID_INPUT", f"`{param}` must not be empty", param=param)
    if len(items) > contract.limits.max_items:
        raise ServingError(
            "INVALID_INPUT", f"`{param}` has {len(items)} items; at most {contract.limits.max_items}", param
        )
    for index, item in enumerate(items):
        where = f"`{param}[{index}]`" if listed else f"`{param}`"
        decoded = decoded_base64(item, where, param)
        if each is not None:
            each(decoded, where)
    return RequestShape(items=len(items), chars=sum(map(len, items)))


def decoded_base64(item: str, where: str, param: str, http_status: int | None = None) -> bytes:
    """`item`'s bytes, decoded as the agent will decode them; refused when it does not decode or
    holds nothing (`where` names it in the message)."""
    try:
        decoded = base64.b64decode(item, validate=True)
    except (binascii.Error, ValueError):
        raise ServingError(
            "INVALID_INPUT", f"{where} is not valid base64", param=param, http_status=http_status
        ) from None
    if not decoded:
        raise ServingError("INVALID_INPUT", f"{where} is empty", param=param, http_status=http_status)
    return decoded


def checked_dimensions(edge: Edge, capability: str, model: str, dimensions: int | None) -> int | None:
    """The `dimensions` to ask the agent for: None for the vectors as they are (not asked for, or
    asked for at their full size), else one of the sizes the deployment the call routes to declares
    its vectors may be truncated to; any other is refused."""
    if dimensions is None:
        return None
    deployment = edge.ctx.live.catalog.resolve(capability, model)
    space = deployment.embedding_space if deployment else None
    if space is not None and dimensions == space.dimension:
        return None
    allowed = space.truncatable_dimensions if space else ()
    if dimensions in allowed:
        return dimensions
    if dimensions < 1:
        problem = f"`dimensions` must be a positive number of components, not {dimensions}"
    else:
        problem = f"`dimensions` {dimensions} is not supported"
    if space is None:
        supported = "leave `dimensions` out (no embedding space is declared for this model)"
    elif allowed:
        supported = f"supported: {', '.join(map(str, (*allowed, space.dimension)))}"
    else:
        supported = f"this model's vectors cannot be truncated; leave it out or send {space.dimension}"
    raise ServingError("INVALID_INPUT", f"{problem}; {supported}", param="dimensions", http_status=400)


def checked_image(decoded: bytes, where: str, param: str, http_status: int | None = None) -> CheckedImage:
    """An image the agent can decode, as far as its first bytes tell: PNG or JPEG, each side within
    MAX_IMAGE_SIDE_PX where the header gives the size. Refused here, not by the agent after a lease."""
    kind = image_kind(decoded)
    if kind is None:
        raise ServingError(
            "INVALID_INPUT",
            f"{where} holds neither a PNG nor a JPEG image",
            param=param,
            http_status=http_status,
        )
    size = image_size(decoded)
    if size is not None and max(size) > MAX_IMAGE_SIDE_PX:
        raise ServingError(
            "INVALID_INPUT",
            f"{where} is {size[0]}x{size[1]} px; each side must be at most {MAX_IMAGE_SIDE_PX}",
            param=param,
            http_status=http_status,
        )
    return CheckedImage(kind, size)


class CheckedImage(NamedTuple):
    kind: ImageKind
    size: tuple[int, int] | None  # (width, height), where the header says
