"""What a connection writes to its socket, write by write, for tests of what goes out together."""

from __future__ import annotations

from collections.abc import Iterable

from eventstore.connection import Connection


def recorded_writes(conn: Connection) -> list[list[bytes]]:
    """Every write `conn` makes to its socket from now on, each the commands written together."""
    wire: list[list[bytes]] = []
    transport = conn.client._transport
    assert transport is not None
    write, writelines = transport.write, transport.writelines

    def recorded_write(data: bytes) -> None:
        wire.append([bytes(data)])
        write(data)

    def recorded_writelines(lines: Iterable[bytes]) -> None:
        lines = [bytes(line) for line in lines]
        wire.append(lines)
        writelines(lines)

    transport.write = recorded_write  # type: ignore[method-assign]
    transport.writelines = recorded_writelines  # type: ignore[method-assign]
    return wire
