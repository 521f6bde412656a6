"""Provision the streams idempotently, refusing a server too old for atomic batches."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
from collections.abc import Callable, Mapping

from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError, ServiceUnavailableError

from eventstore.errors import JetStreamUnavailable, ServerTooOld
from eventstore.replies import resend_while_leaderless
from streams import configs

REPLICAS_ENV = "MODELFORGE_STREAM_REPLICAS"
JETSTREAM_READY_S = 60.0
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


def stream_replicas(environ: Mapping[str, str] = os.environ) -> int | None:
    """How many servers keep each stream: `MODELFORGE_STREAM_REPLICAS` (3 in a 3-node cluster, so a
    stream survives losing a server). None when unset: new streams get 1, existing ones keep theirs,
    so a command run without the setting (a CLI verb on an operator's laptop) never shrinks them."""
    text = environ.get(REPLICAS_ENV, "").strip()
    if not text:
        return None
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
    return await ensure_streams(client, lambda n: configs.all_streams(n, request_max_age_days), replicas)


async def ensure_streams(
    client: Client, configs_for: Callable[[int], list[StreamConfig]], replicas: int | None = None
) -> list[str]:
    """Create each stream `configs_for(replicas)` gives, or bring it to that configuration; returns
    the names. `replicas`: as given, else `stream_replicas()`; with neither, an existing stream
    keeps its own number."""
    replicas = replicas or stream_replicas()
    keep_replicas = replicas is None
    js = client.jetstream()
    names = []
    for config in configs_for(replicas or 1):
        assert config.name is not None
        await _ensure_stream(js, config, keep_replicas)
        names.append(config.name)
    return names


async def _ensure_stream(
    js: JetStreamContext, config: StreamConfig, keep_replicas: bool, within_s: float = JETSTREAM_READY_S
) -> None:
    """Create or update one stream, asking again while nothing answers, for up to `within_s`.

    A new cluster answers JetStream requests only once it has elected its meta leader, seconds
    after its servers start: until then a request goes unanswered or finds no responders. And when
    two replicas create the same replicated stream at once (compose starts the gateways together),
    the cluster creates it once and may leave one request without a reply. Asked again, the stream
    is there (or still missing) and the answer comes; an update to the same configuration changes
    nothing."""
    name = config.name
    assert name is not None
    loop = asyncio.get_running_loop()
    give_up = loop.time() + within_s

    async def create_or_update() -> None:
        try:
            info = await js.stream_info(name)
        except NotFoundError:
            await js.add_stream(config)
        else:
            kept = info.config.num_replicas if keep_replicas else config.num_replicas
            await js.update_stream(dataclasses.replace(config, num_replicas=kept))

    while True:
        try:
            await resend_while_leaderless(create_or_update, give_up - loop.time())
            return
        except (NatsTimeoutError, ServiceUnavailableError) as exc:  # the latter only once past give_up
            if loop.time() >= give_up:
                raise JetStreamUnavailable(
                    f"creating or updating stream {config.name} got no answer within {within_s:.0f} s: {exc!r}"
                ) from None
            log.info("stream %s: no answer to create or update (%r), asking again", config.name, exc)
