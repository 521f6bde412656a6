"""Provision the streams idempotently, refusing a server too old for atomic batches.

A stream that already has this version's configuration is left alone, so a process whose NATS user
may only read stream info (a gateway in compose.yaml, where the `provisioner` user creates them)
starts without asking for a change it would be refused. When a change is needed and refused, the
error names what is missing or differs and says to run `modelforge provision`."""

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
from nats.js.errors import BadRequestError, NotFoundError, ServiceUnavailableError

from eventstore.errors import JetStreamUnavailable, ServerTooOld, StreamsNotProvisioned
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
    wanted = configs_for(replicas or 1)
    for config in wanted:
        try:
            await _ensure_stream(client, config, keep_replicas)
        except _Refused:
            problems = [p for c in wanted if (p := await _problem(client.jetstream(), c, keep_replicas))]
            raise StreamsNotProvisioned(problems or [f"{config.name}: changing it was refused"]) from None
    return [config.name or "" for config in wanted]


def drift(wanted: StreamConfig, found: StreamConfig) -> list[str]:
    """The settings `wanted` sets (those not left at nats-py's defaults) that `found` lacks."""
    mine, theirs = wanted.as_dict(), found.as_dict()
    return [
        field.name
        for field in dataclasses.fields(StreamConfig)
        if getattr(wanted, field.name) != field.default
        and mine.get(field.name) != theirs.get(field.name, field.default)
    ]


def _as_kept(config: StreamConfig, found: StreamConfig, keep_replicas: bool) -> StreamConfig:
    return dataclasses.replace(config, num_replicas=found.num_replicas) if keep_replicas else config


async def _problem(js: JetStreamContext, config: StreamConfig, keep_replicas: bool) -> str | None:
    """What keeps stream `config.name` from this version's configuration; None: nothing."""
    try:
        found = (await js.stream_info(config.name or "")).config
    except NotFoundError:
        return f"{config.name} is missing"
    differing = drift(_as_kept(config, found, keep_replicas), found)
    return f"{config.name} differs in {', '.join(differing)}" if differing else None


class _Refused(Exception):
    """NATS refused this user the stream's create or update (a permissions violation)."""


def _refused(client: Client, name: str) -> bool:
    # A refused publish is answered only by an -ERR, which nats-py keeps (lower-cased) as its last
    # error; the request itself times out.
    error = str(client.last_error or "").lower()
    return "permissions violation" in error and any(
        f'"$js.api.stream.{verb}.{name.lower()}"' in error for verb in ("create", "update")
    )


_NO_PEERS_FOR_PLACEMENT = 10005  # JetStream's JSClusterNoPeersErrF


async def _ensure_stream(
    client: Client, config: StreamConfig, keep_replicas: bool, within_s: float = JETSTREAM_READY_S
) -> None:
    """Create or update one stream, asking again while nothing answers, for up to `within_s`.

    A new cluster answers JetStream requests only once it has elected its meta leader, seconds
    after its servers start: until then a request goes unanswered or finds no responders. And when
    two replicas create the same replicated stream at once (compose starts the gateways together),
    the cluster creates it once and may leave one request without a reply. Asked again, the stream
    is there (or still missing) and the answer comes. A stream already as wanted is not updated.
    A create or update this user may not send raises _Refused."""
    name = config.name
    assert name is not None
    js = client.jetstream()
    loop = asyncio.get_running_loop()
    give_up = loop.time() + within_s

    async def create_or_update() -> None:
        try:
            try:
                found = (await js.stream_info(name)).config
            except NotFoundError:
                await js.add_stream(config)
            else:
                kept = _as_kept(config, found, keep_replicas)
                if drift(kept, found):
                    await js.update_stream(kept)
        except BadRequestError as exc:
            if exc.err_code != _NO_PEERS_FOR_PLACEMENT:
                raise
            # A new cluster's meta leader can answer before it has heard from every server: "no
            # suitable peers for placement, peer offline" for a stream on all three. Asked again
            # as while it elects (it failed a provisioning test in a repeat run once).
            raise ServiceUnavailableError(
                code=503, err_code=exc.err_code, description=exc.description
            ) from exc

    while True:
        try:
            await resend_while_leaderless(create_or_update, give_up - loop.time())
            return
        except (NatsTimeoutError, ServiceUnavailableError) as exc:  # the latter only once past give_up
            if _refused(client, name):
                raise _Refused(name) from None
            if loop.time() >= give_up:
                raise JetStreamUnavailable(
                    f"creating or updating stream {config.name} got no answer within {within_s:.0f} s: {exc!r}"
                ) from None
            log.info("stream %s: no answer to create or update (%r), asking again", config.name, exc)
