"""A lean JetStream reader for the projector and replay: one pull consumer on its own socket.

nats-py spends ~28 µs parsing the headers of each of our messages and creates a task per message
for async iteration, which caps a projector near 10k events/s on this machine (measured; see
bench/projection.py). The read side needs each stream once, in order, at volume, so this module
speaks the NATS text protocol directly for that one job: an ephemeral, ack-less pull consumer
starting at a sequence, long-poll pull requests kept ahead of consumption (a server-side wait,
never a sleep), and header blocks split without validation. Anything unexpected (gap, consumer
deleted, silence past the heartbeat) raises `SourceLost`; the caller resumes from its checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import uuid
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from typing import Any, cast
from urllib.parse import unquote, urlparse

import msgspec

from eventstore.connection import nats_url
from eventstore.tls import nats_tls
from projections.swell import swollen


class Delivery(msgspec.Struct, gc=False):  # a Struct: built per message, 3x cheaper than a NamedTuple
    seq: int  # stream sequence
    subject: str
    headers: bytes  # the raw header block ("NATS/1.0\r\nName: value\r\n...")
    data: bytes
    stored_ns: int  # server timestamp (ns since the epoch) when the stream stored it


class SourceLost(Exception):
    """The stream connection or consumer went away; resume from the last applied sequence."""


PULL_BATCH = 10_000
HEARTBEAT_S = 5.0
# A pull no server answers (503) right after the consumer was made is sent again for this long.
NO_RESPONDERS_S, NO_RESPONDERS_PAUSE_S = 10.0, 0.05
_CRLF = b"\r\n"


def parse_headers(block: bytes) -> dict[str, str]:
    """Our own header blocks only carry ASCII names and UTF-8 values: split, don't validate.

    (A plain loop: measured faster than a comprehension over map(str.partition) or a regex.)"""
    out: dict[str, str] = {}
    for line in block.decode("utf-8", "replace").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep:
            out[name] = value.strip()
    return out


def _server(url: str) -> tuple[str, int, dict[str, Any]]:
    parsed = urlparse(url if "://" in url else f"nats://{url}")
    options: dict[str, Any] = {}
    if parsed.username and parsed.password is not None:
        options = {"user": unquote(parsed.username), "pass": unquote(parsed.password)}
    elif parsed.username:
        options = {"auth_token": unquote(parsed.username)}
    return parsed.hostname or "127.0.0.1", parsed.port or 4222, options


class RawNats:
    """Just enough NATS: CONNECT, SUB, PUB, PING/PONG, and MSG/HMSG delivery to one handler.

    One coroutine at a time: `read_messages` hands whoever calls it every message in the socket (a
    request drops those not answering it), so two readers would take each other's replies; asyncio
    refuses the second one (RuntimeError). Every user opens its own: `read`, `last_sequence`,
    `stored_ns`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.buffer = bytearray()
        self.inbox = f"_INBOX.mfproj.{uuid.uuid4().hex}"
        self.pings = self.pongs = 0  # PINGs sent by `ping`, PONGs the server answered them with

    @classmethod
    async def open(cls, urls: str | None = None) -> RawNats:
        errors = []
        for url in (urls or nats_url()).split(","):
            host, port, auth = _server(url.strip())
            try:
                reader, writer = await asyncio.open_connection(host, port, limit=1 << 24)
                async with asyncio.timeout(5.0):  # not wait_for: see read_messages
                    info_line = await reader.readline()
            except (OSError, TimeoutError) as exc:
                errors.append(f"{url}: {exc}")
                continue
            info = json.loads(info_line.partition(b" ")[2] or b"{}")
            if info.get("tls_required"):  # as nats-py does: the INFO in the clear, then the handshake
                try:
                    async with asyncio.timeout(5.0):
                        await writer.start_tls(
                            nats_tls() or ssl.create_default_context(), server_hostname=host
                        )
                except (OSError, TimeoutError, ssl.SSLError) as exc:
                    writer.close()
                    errors.append(f"{url}: TLS handshake: {exc}")
                    continue
            connect = {
                "verbose": False,
                "pedantic": False,
                "headers": True,
                "no_responders": True,
                "protocol": 1,
                "name": "modelforge-projector-reader",
                "lang": "python",
                **auth,
            }
            writer.write(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
            raw = cls(reader, writer)
            raw.writer.write(f"SUB {raw.inbox}.* 1\r\n".encode())
            await writer.drain()
            async with asyncio.timeout(5.0):
                line = await reader.readline()
            if not line.startswith(b"PONG"):
                writer.close()
                raise SourceLost(f"{url}: {line.decode(errors='replace').strip()}")
            return raw
        raise SourceLost("cannot reach NATS: " + "; ".join(errors))

    def publish(self, subject: str, payload: bytes, reply: str) -> None:
        head = f"PUB {subject} {reply} {len(payload)}" if reply else f"PUB {subject} {len(payload)}"
        self.writer.write(head.encode() + _CRLF + payload + _CRLF)

    def ping(self) -> None:
        """Ask the server for a PONG: it comes after everything the server sent this connection
        before (`pongs` counts those read)."""
        self.writer.write(b"PING\r\n")
        self.pings += 1

    async def read_messages(self, timeout: float) -> list[tuple[str, bytes, bytes, bytes]]:
        """Every complete message now in the socket: (subject, reply, header block, payload);
        waits for one, or for a PONG (then the list may be empty)."""
        out: list[tuple[str, bytes, bytes, bytes]] = []
        pongs = self.pongs
        while not out and self.pongs == pongs:
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the read's data when
                # a cancellation arrives after the read completed (CPython gh-86296), and a reader
                # cancelled while messages arrive then follows its stream forever, while the
                # projector that cancelled it (e.g. on a moved checkpoint) waits for it to end.
                async with asyncio.timeout(timeout):
                    chunk = await self.reader.read(1 << 20)
            except TimeoutError:
                raise SourceLost(f"no data or heartbeat from NATS for {timeout:.0f} s") from None
            if not chunk:
                raise SourceLost("NATS closed the connection")
            self.buffer += chunk
            self._parse(out)
        return out

    def _parse(self, out: list[tuple[str, bytes, bytes, bytes]]) -> None:
        # One copy of the buffer per socket read; every field is sliced from it once.
        data = bytes(self.buffer)
        find, size, pos = data.find, len(data), 0
        while (end := find(_CRLF, pos)) >= 0:
            if data.startswith(b"HMSG ", pos) or data.startswith(b"MSG ", pos):
                parts = data[pos:end].split()
                headered = parts[0] == b"HMSG"
                start = end + 2
                stop = start + int(parts[-1])
                if size < stop + 2:
                    break
                split = start + int(parts[-2]) if headered else start
                reply = parts[3] if len(parts) == (6 if headered else 5) else b""
                out.append((parts[1].decode(), reply, data[start:split], data[split:stop]))
                pos = stop + 2
                continue
            if data.startswith(b"PING", pos):
                self.writer.write(b"PONG\r\n")
            elif data.startswith(b"PONG", pos):
                self.pongs += 1
            elif data.startswith(b"-ERR", pos):
                raise SourceLost(f"NATS error: {data[pos:end].decode(errors='replace')}")
            pos = end + 2
        del self.buffer[:pos]

    async def request_raw(self, subject: str, payload: bytes, timeout: float = 5.0) -> tuple[bytes, bytes]:
        """The reply's (header block, payload)."""
        token = uuid.uuid4().hex
        self.publish(subject, payload, f"{self.inbox}.{token}")
        await self.writer.drain()
        while True:
            for _subject, _reply, headers, data in await self.read_messages(timeout):
                if _subject.endswith(token):
                    if headers and b" 503" in headers.split(_CRLF, 1)[0]:
                        raise SourceLost(f"no responders for {subject}: is JetStream enabled?")
                    return headers, data

    async def request(self, subject: str, payload: bytes, timeout: float = 5.0) -> dict[str, Any]:
        _headers, data = await self.request_raw(subject, payload, timeout)
        reply: dict[str, Any] = json.loads(data)
        return reply

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


async def last_sequence(stream: str, urls: str | None = None) -> tuple[int, int]:
    """(first_seq, last_seq) of a stream now; (0, 0) when it does not exist."""
    raw = await RawNats.open(urls)
    try:
        reply = await raw.request(f"$JS.API.STREAM.INFO.{stream}", b"")
    finally:
        await raw.close()
    if "error" in reply:
        return 0, 0
    state = reply.get("state", {})
    return int(state.get("first_seq", 0)), int(state.get("last_seq", 0))


REPLICA_TRIES = 5  # a replica is picked at random per request


async def stored_ns(stream: str, seq: int, urls: str | None = None) -> int:
    """When the server stored message `seq` of `stream`, in ns since the epoch.

    A direct get (both event streams allow it): the projector's NATS user may read messages
    that way, not through `$JS.API.STREAM.MSG.GET` (deploy/nats/nats.conf). Any replica may
    answer one; `min_last_seq` makes one that has not stored `seq` yet refuse (412) rather than
    say it is not in the stream, and we ask again."""
    raw = await RawNats.open(urls)
    request = json.dumps({"seq": seq, "min_last_seq": seq}).encode()
    try:
        for _ in range(REPLICA_TRIES):
            headers, _data = await raw.request_raw(f"$JS.API.DIRECT.GET.{stream}", request)
            # "NATS/1.0 404 Message Not Found": the status after "NATS/1.0 "
            status = headers.split(_CRLF, 1)[0][9:].strip()
            if not status.startswith(b"412"):
                break
    finally:
        await raw.close()
    if status or not headers:
        reason = status.decode(errors="replace") or "no headers"
        raise SourceLost(f"{stream} sequence {seq} is not in the stream: {reason}")
    # RFC 3339 with up to nanoseconds, in UTC: "2026-12-01T00:11:11.123456789Z"
    whole, _, fraction = parse_headers(headers)["Nats-Time-Stamp"].rstrip("Z").partition(".")
    seconds = datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp()
    return int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])


def _ack_facts(reply: bytes) -> tuple[int, int, int, int]:
    """(stream seq, consumer seq, timestamp ns, pending) from a JetStream ack subject (v1 or v2)."""
    tokens = reply.split(b".")
    offset = 2 if len(tokens) == 9 else 4
    return (
        int(tokens[offset + 3]),
        int(tokens[offset + 4]),
        int(tokens[offset + 5]),
        int(tokens[offset + 6]),
    )


async def _held(transport: asyncio.ReadTransport, hold: asyncio.Event) -> None:
    """Leave the socket unread until `hold` is set, or until enough waits in it that nats-server
    could stall on it (`projections.swell`): then what waits is read, and the hold goes on."""
    transport.pause_reading()
    waits = [asyncio.ensure_future(hold.wait()), asyncio.ensure_future(swollen(transport))]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
        await asyncio.wait(waits)  # the socket's mark put back before it is read again
        transport.resume_reading()


async def read(
    stream: str,
    from_sequence: int,
    until_sequence: int | None = None,
    urls: str | None = None,
    hold: asyncio.Event | None = None,
) -> AsyncGenerator[list[Delivery], None]:
    """Messages of `stream` from `from_sequence` on, in chunks as they arrive, in order, no gaps.

    With `until_sequence` it ends after that sequence (or when nothing is left); without, it
    follows the stream forever, waiting server-side for new messages.

    Following, the first chunk is the stream's backlog at the start, whole (however many socket
    reads it takes, up to `PULL_BATCH` a chunk), and is handed over even when empty: a follower
    that has yielded once has caught up with what the stream held when it started.

    `hold`: while it is clear when the next chunk is asked for, the socket is left unread (what
    arrives waits in the kernel's buffer: no wake-up per message) until `projections.swell` finds
    the buffer filling; once it is set, or so found, the next chunk is everything that arrived
    meanwhile, up to a PING's PONG, and is handed over even when empty.
    """
    if until_sequence is not None and until_sequence < from_sequence:
        return
    raw = await RawNats.open(urls)
    name = f"mfproj_{uuid.uuid4().hex[:16]}"
    try:
        config = {
            "stream_name": stream,
            "config": {
                "name": name,
                "deliver_policy": "by_start_sequence",
                "opt_start_seq": max(1, from_sequence),
                "ack_policy": "none",
                "replay_policy": "instant",
                "inactive_threshold": 60_000_000_000,
                "mem_storage": True,
                "num_replicas": 1,
                "max_waiting": 16,
            },
        }
        created = await raw.request(f"$JS.API.CONSUMER.CREATE.{stream}.{name}", json.dumps(config).encode())
        if "error" in created:
            raise SourceLost(f"cannot create a consumer on {stream}: {created['error']}")
        pull_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}"
        loop = asyncio.get_running_loop()
        give_up = loop.time() + NO_RESPONDERS_S
        expires_ns = int(4 * HEARTBEAT_S * 1e9)
        pull = json.dumps(
            {"batch": PULL_BATCH, "expires": expires_ns, "idle_heartbeat": int(HEARTBEAT_S * 1e9)}
        )
        outstanding = 0
        last_cseq = 0
        # How much of what the stream held from `from_sequence` on when the consumer was made is
        # still to come (a follower's first chunk is all of it); the last delivery's pending bounds
        # it, should the stream lose messages meanwhile.
        backlog = int(created.get("num_pending", 0)) if until_sequence is None else 0
        if until_sequence is None and backlog == 0:
            yield []  # the stream held nothing: caught up at once
        held = False  # the chunk being read is what arrived while held: handed over even if empty
        while True:
            if hold is not None and not hold.is_set():
                await _held(cast(asyncio.ReadTransport, raw.writer.transport), hold)
                raw.ping()
                held = True
            if pull_wanted(outstanding):
                raw.publish(pull_subject, pull.encode(), f"{raw.inbox}.pull")
                outstanding += PULL_BATCH
            await raw.writer.drain()
            chunk: list[Delivery] = []
            done = False
            while True:  # one read, or as many as the backlog or (after a hold) the PONG takes
                for subject, reply, headers, data in await raw.read_messages(3 * HEARTBEAT_S):
                    if not reply:
                        if headers[9:12] == b"503" and loop.time() < give_up:
                            # No responders: on a cluster the consumer's interest reaches this server
                            # a moment after its creation was answered. That pull went nowhere: again.
                            outstanding -= PULL_BATCH
                            await asyncio.sleep(NO_RESPONDERS_PAUSE_S)
                            continue
                        outstanding -= _status(headers, stream)
                        continue
                    seq, cseq, ts, pending = _ack_facts(reply)
                    if cseq != last_cseq + 1:
                        raise SourceLost(f"{stream}: consumer sequence jumped from {last_cseq} to {cseq}")
                    last_cseq = cseq
                    outstanding -= 1
                    if until_sequence is not None and seq > until_sequence:
                        done = True
                        break
                    chunk.append(Delivery(seq, subject, headers, data, ts))
                    backlog = min(backlog - 1, pending)
                    if until_sequence is not None and (seq >= until_sequence or pending == 0):
                        done = True
                        break
                # (No pull left waiting, one having expired: the next is sent before reading on.)
                caught_up = raw.pongs >= raw.pings and backlog <= 0
                if done or caught_up or len(chunk) >= PULL_BATCH or outstanding <= 0:
                    break
            if chunk or held:
                held = False
                yield chunk
            if done:
                return
    finally:
        # The consumer is not deleted: the server removes it once idle for its inactive threshold.
        # The projector's user may delete no consumer (a name is one token: one it could delete,
        # it could delete any, a gateway's included).
        await raw.close()


def pull_wanted(outstanding: int) -> bool:
    """Whether to send a pull of `PULL_BATCH` with `outstanding` messages asked for and not come.

    A second pull only once the first is half taken: enough to keep messages coming at volume,
    while an idle reader keeps one pull waiting (the server sends each waiting pull its heartbeats,
    and each expiry is a message and a new pull)."""
    return outstanding <= PULL_BATCH // 2


def _status(headers: bytes, stream: str) -> int:
    """Handle a status message; returns how many requested messages it releases."""
    first, _, rest = headers.partition(_CRLF)
    code = first[9:12]
    if code == b"100":  # idle heartbeat (or flow control): proof of life
        return 0
    if code in (b"408", b"404"):  # a pull request expired: its unfilled part is released
        pending = parse_headers(b"x\r\n" + rest).get("Nats-Pending-Messages", "0")
        return int(pending) if pending.isdigit() else 0
    raise SourceLost(f"{stream}: {first.decode(errors='replace')} {rest.decode(errors='replace').strip()}")
