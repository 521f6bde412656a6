"""The connection's header blocks are nats-py's own: parsed to the same dicts, sent as the same bytes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.aio.client import Client
from nats.errors import BadHeaderError

from eventstore.connection import OrderedFlushClient

_BLOCKS = [
    b"Nats-Msg-Id: abc\r\nMf-Event-Type: LeaseGranted\r\nMf-Actor: system:modelforge\r\n\r\n",
    b"Name:Value\r\nOther:\tspaced value  \r\n\r\n",
    b"no colon here\r\n\r\nKey: after an empty line\r\n",
    b"Bad Name: has a space\r\nGood: kept\r\n",
    b"\xc3\xa9t\xc3\xa9: non-ascii name\r\nValue: caf\xc3\xa9 \xff\xfe\r\n",
    b": empty name\r\nDup: one\r\nDup: two\r\n",
    b"",
    *(b"A" + bytes([c]) + b"B: v\r\n" for c in range(128) if c not in (10, 13, 58)),
]

_SENT: list[dict[str, Any] | None] = [
    None,
    {},
    {
        "Nats-Msg-Id": "0123abcd",
        "Mf-Event-Type": "LeaseGranted",
        "Mf-Occurred-At": "2026-12-04T05:30:00+00:00",
    },
    {"  Padded  ": "  value with spaces  ", "Multi": "line\r\nbreak\ninside"},
    {"": "blank names are skipped", "   ": "so are these", "Kept": "yes"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "Unicode": "café ✓"},
]


def test_header_blocks_parse_as_nats_py_parses_them() -> None:
    for block in _BLOCKS:
        assert OrderedFlushClient._parse_header_lines(block) == Client._parse_header_lines(block), block


async def _wire(client: Client, headers: dict[str, Any] | None) -> bytes:
    await client._send_publish("mf.subject", "_INBOX.reply", b'{"x": 1}', 8, headers)
    return b"".join(client._pending)


def test_published_messages_are_the_bytes_nats_py_sends() -> None:
    for headers in _SENT:
        ours = asyncio.run(_wire(OrderedFlushClient(), headers))
        theirs = asyncio.run(_wire(Client(), headers))
        assert ours == theirs, headers


def test_more_header_names_than_are_kept_are_still_sent_as_nats_py_sends_them() -> None:
    headers = {f"X-Name-{n}": f"value {n}" for n in range(600)}
    for sent in (headers, headers):  # the second time, the first names kept, the rest checked again
        ours = asyncio.run(_wire(OrderedFlushClient(), sent))
        assert ours == asyncio.run(_wire(Client(), sent))


@pytest.mark.parametrize("name", ["bad name", "colon:inside", "ünï"])
def test_an_invalid_header_name_is_refused_as_nats_py_refuses_it(name: str) -> None:
    for client in (OrderedFlushClient(), Client()):
        with pytest.raises(BadHeaderError):
            asyncio.run(_wire(client, {name: "v"}))
