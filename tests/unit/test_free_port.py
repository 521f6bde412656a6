"""Free ports for the servers the stack and the tests start."""

from __future__ import annotations

from pathlib import Path

from modelforge.devstack.processes import free_port, port_is_free


def test_a_free_port_is_below_the_range_outgoing_connections_are_given() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(10_000 <= port < low for port in ports)
    assert all(port_is_free(port) for port in ports)
