"""Provision the streams idempotently, refusing a server too old for atomic batches."""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Mapping

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError, ServiceUnavailableError

from eventstore.errors import JetStreamUnavailable, ServerTooOld
from streams import configs

REPLICAS_ENV = "MODELFORGE_STREAM_REPLICAS"
JETSTREAM_READY_S = 60.0
NOT_READY_PAUSE_S = 0.5
log = logging.getLogger("modelforge.provision")


def parse_version(text: str) -> tuple[int, int, int]:
    match = re.match(r"v?(\d+)\.(\d+)\.(\d+)", text.strip())
    if not match:
        raise ValueError(f"cannot read a server version from {text!r}")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def check_server_version(text: str, required: tuple[int, int, int] = configs.MIN_SERVER_VERSION) -> None:
    if parse_version(text) < required:
        raise ServerTooOld(text, required)


def stream_replicas(environ: Mapping[str, str] = os.environ) -> int:
    """How many servers keep each stream: `MODELFORGE_STREAM_REPLICAS` (1 by default; 3 in a
    3-node cluster, so a stream survives losing a server)."""
    text = environ.get(REPLICAS_ENV, "1").strip()
    if not text.isdigit() or not 1 <= int(text) <= 5:
        raise ValueError(
            f"{REPLICAS_ENV} must be a whole number from 1 to 5 (JetStream's limit), not {text!r}"
        )
    return int(text)


async def provision(
    client: Client, replicas: int | None = None, request_max_age_days: float = 30.0
) -> list[str]:
    """Create or update every stream; returns the names. Safe to call from every process."""
    found = client.connected_server_version
    check_server_version(f"{found.major}.{found.minor}.{found.patch}")
    return await ensure_streams(
        client, configs.all_streams(replicas or stream_replicas(), request_max_age_days)
    )


async def ensure_streams(client: Client, stream_configs: list[StreamConfig]) -> list[str]:
    """Create each stream, or bring it to its configuration (replicas included); returns the names."""
    js = client.jetstream()
    await _jetstream_ready(js)
    names = []
    for config in stream_configs:
        assert config.name is not None
        await _ensure_stream(js, config)
        names.append(config.name)
    return names


async def _ensure_stream(
    js: JetStreamContext, config: StreamConfig, within_s: float = JETSTREAM_READY_S
) -> None:
    """Create or update one stream, asking again while a request goes unanswered.

    On a new cluster, every gateway replica provisions at once (compose starts them together):
    when two servers' requests to create the same replicated stream race, the cluster creates it
    once and may leave a request without a reply. Asked again, the stream is there (or still
    missing) and the answer comes; an update to the same configuration changes nothing."""
    assert config.name is not None
    loop = asyncio.get_running_loop()
    give_up = loop.time() + within_s
    while True:
        try:
            try:
                await js.stream_info(config.name)
            except NotFoundError:
                await js.add_stream(config)
            else:
                await js.update_stream(config)
            return
        except NatsTimeoutError as exc:
            if loop.time() >= give_up:
                raise JetStreamUnavailable(
                    f"creating or updating stream {config.name} got no answer within {within_s:.0f} s: {exc!r}"
                ) from None
            log.info("stream %s: no answer to create or update (%r), asking again", config.name, exc)


async def _jetstream_ready(js: JetStreamContext, within_s: float = JETSTREAM_READY_S) -> None:
    """A cluster answers JetStream requests only once it has elected its meta leader, seconds
    after its servers start: until then a request goes unanswered (each try waits for a reply)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + within_s
    while True:
        try:
            await js.account_info()
            return
        except (NatsTimeoutError, NoRespondersError, ServiceUnavailableError) as exc:
            if loop.time() >= give_up:
                raise JetStreamUnavailable(
                    f"JetStream did not answer within {within_s:.0f} s: {exc!r}"
                ) from None
            log.info("waiting for JetStream (%r)", exc)
            if not isinstance(exc, NatsTimeoutError):  # refused at once: do not spin
                await asyncio.sleep(NOT_READY_PAUSE_S)
