"""Free ports for the servers the stack and the tests start."""

from __future__ import annotations

import socket
from pathlib import Path

from modelforge.devstack.processes import free_port, port_is_free


def test_a_free_port_is_below_the_range_outgoing_connections_are_given() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(10_000 <= port < low for port in ports)
    assert all(port_is_free(port) for port in ports)


def test_a_port_whose_server_stopped_is_free_while_its_closed_connections_wait() -> None:
    port = free_port()
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do
        server.bind(("127.0.0.1", port))
        server.listen()
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            accepted.close()  # the server closes first: its end waits in TIME_WAIT
            assert not port_is_free(port)  # listening
            client.recv(1)
    assert port_is_free(port)
