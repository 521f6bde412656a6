"""`up`'s gateway port: one another process holds refuses `up` before it starts anything, with the
port named, rather than starting a gateway that exits while readiness checks reach the other one."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from modelforge.devstack import stack
from modelforge.devstack.processes import free_port


def test_up_is_refused_with_the_port_named_when_another_process_holds_its_gateway_port(
    tmp_path: Path,
) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", free_port()))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(stack.StackRefused, match=f"port {port} for the gateway is taken"):
            stack.up(tmp_path, lambda url: None, lambda line: None, gateway_port=port)
    assert not (tmp_path / "stack.json").exists()  # nothing started, nothing recorded


def test_up_keeps_the_gateway_port_it_was_given(tmp_path: Path) -> None:
    state = stack.StackState()
    port = free_port()
    stack.choose_gateway_port(state, port)
    stack.choose_gateway_port(state, None)
    assert state.extra["gateway_url"] == f"http://127.0.0.1:{port}"
