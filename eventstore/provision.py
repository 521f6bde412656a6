"""Provision the streams idempotently, refusing a server too old for atomic batches."""

from __future__ import annotations

import re

from nats.aio.client import Client
from nats.js.errors import NotFoundError

from eventstore.errors import ServerTooOld
from streams import configs


def parse_version(text: str) -> tuple[int, int, int]:
    match = re.match(r"v?(\d+)\.(\d+)\.(\d+)", text.strip())
    if not match:
        raise ValueError(f"cannot read a server version from {text!r}")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def check_server_version(text: str, required: tuple[int, int, int] = configs.MIN_SERVER_VERSION) -> None:
    if parse_version(text) < required:
        raise ServerTooOld(text, required)


async def provision(client: Client, replicas: int = 1, request_max_age_days: float = 30.0) -> list[str]:
    """Create or update every stream; returns the names. Safe to call from every process."""
    found = client.connected_server_version
    check_server_version(f"{found.major}.{found.minor}.{found.patch}")
    js = client.jetstream()
    names = []
    for config in configs.all_streams(replicas, request_max_age_days):
        assert config.name is not None
        try:
            await js.stream_info(config.name)
        except NotFoundError:
            await js.add_stream(config)
        else:
            await js.update_stream(config)
        names.append(config.name)
    return names
