"""Small process helpers for the embedded stack: free ports, readiness, stopping by pid."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

# Ports are chosen below the kernel's ephemeral range: a port bind(0) picks comes from that range,
# which the kernel also hands to outgoing connections, so between our check and the server's bind
# a connection could take it (a cluster server once failed "bind: address already in use").
_LOWEST = 10_000
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _below_ephemeral() -> int:
    try:
        return int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def free_port() -> int:
    """A port nothing listens on now, outside the range outgoing connections are given."""
    top = _below_ephemeral()
    for _ in range(100):
        port = random.randrange(_LOWEST, top) if top > _LOWEST else 0
        if port and port_is_free(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # nothing found: any port
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether a server could listen on `port` now. As nats-server, PostgreSQL and uvicorn do, the
    probe sets SO_REUSEADDR: the connections a stopped server closed (TIME_WAIT, a minute) do not
    keep its port from it, only a listener does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_for_port(
    port: int, process: subprocess.Popen[bytes] | None, log: Path, timeout: float = 30.0
) -> None:
    """Block until something accepts on the port. A child process gives no readiness message,
    so this is the one bounded probe the dev stack makes; it fails fast if the child died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode}; see {log}:\n{tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout:.0f}s; see {log}:\n{tail(log)}")


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# The children this process started, by pid, each reaped through its own Popen. A Popen dropped
# while its process runs goes on polling that pid (its `__del__`, `subprocess._cleanup`); were the
# process reaped by `os.waitpid` here instead, its pid could come back to another child of this
# process (pids wrap), which that poll would then reap behind the back of whoever waits for it.
_children: dict[int, subprocess.Popen[bytes]] = {}


def started(process: subprocess.Popen[bytes]) -> int:
    """Keep `process`, a child to be stopped by pid (`stop_pid`), to reap it through: its pid.
    Those kept that have ended since are reaped now (as `subprocess` does at each new Popen)."""
    for pid, child in list(_children.items()):
        if child.poll() is not None:
            del _children[pid]
    _children[process.pid] = process
    return process.pid


def exited(pid: int) -> bool:
    """Whether process `pid` is gone: reaped here when it is this process's child (an exited child
    stays a zombie, which pid_alive counts as alive, until its parent reaps it)."""
    child = _children.get(pid)
    if child is not None:
        if child.poll() is None:
            return False
        del _children[pid]
        return True
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        done = 0
    return done == pid or not pid_alive(pid)


def stop_pid(pid: int, timeout: float = 15.0) -> bool:
    """SIGTERM, wait, then SIGKILL. Returns True if the process is gone."""
    if not pid_alive(pid):
        return True
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if exited(pid):
            return True
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return True
