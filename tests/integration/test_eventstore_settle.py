"""`settle`: what a client sent before it has reached the server when it returns, so another
connection sees a subscription made just before (the agent's invoke interest before it announces a
model loaded)."""

from __future__ import annotations

from collections.abc import Iterable

from eventstore.connection import connect, settle
from streams.envelope import new_id


async def test_settle_pings_the_server_only_after_the_subscription_is_on_the_wire(nats_url: str) -> None:
    conn = await connect(nats_url, "settle-test")
    try:
        wire: list[bytes] = []
        transport = conn.client._transport
        assert transport is not None
        write, writelines = transport.write, transport.writelines

        def recorded_write(data: bytes) -> None:
            wire.append(bytes(data))
            write(data)

        def recorded_writelines(lines: Iterable[bytes]) -> None:
            lines = [bytes(line) for line in lines]
            wire.extend(lines)
            writelines(lines)

        transport.write = recorded_write  # type: ignore[method-assign]
        transport.writelines = recorded_writelines  # type: ignore[method-assign]
        subject = f"test.settle.{new_id()}"
        await conn.client.subscribe(subject)
        await settle(conn.client)
        # The server answers PINGs in order; the last one's PONG is what settle waited for.
        sub = next(i for i, data in enumerate(wire) if data.startswith(f"SUB {subject} ".encode()))
        last_ping = max(i for i, data in enumerate(wire) if data == b"PING\r\n")
        assert sub < last_ping
    finally:
        await conn.close()
