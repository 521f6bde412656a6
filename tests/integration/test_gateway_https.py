"""`modelforge gateway` with MODELFORGE_HTTPS_CERT/_KEY serves HTTPS with that certificate: a
client that trusts the deployment's CA gets its answers, one that does not is refused."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gateway.https import HTTPS_CERT_ENV, HTTPS_KEY_ENV
from modelforge.certs_cli import make_certificates
from modelforge.devstack.processes import free_port, started, stop_pid, wait_for_port
from modelforge.pki import default_identities


def test_the_gateway_serves_https_with_the_certificate_its_settings_name(
    nats_url: str, tmp_path: Path
) -> None:
    certs = tmp_path / "certs"
    make_certificates(certs, default_identities())
    port, log = free_port(), tmp_path / "gateway.log"
    env = {
        **os.environ,
        "NATS_URL": nats_url,
        "MODELFORGE_HOME": str(tmp_path / "no-stack"),
        HTTPS_CERT_ENV: str(certs / "gateway-http" / "cert.pem"),
        HTTPS_KEY_ENV: str(certs / "gateway-http" / "key.pem"),
    }
    with log.open("wb") as out:
        gateway = subprocess.Popen(
            [sys.executable, "-m", "modelforge.cli", "gateway", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    started(gateway)  # (reaped through its Popen when stopped by pid)
    try:
        wait_for_port(port, gateway, log, timeout=120)
        trusting = ssl.create_default_context(cafile=certs / "ca" / "ca.pem")
        assert httpx.get(f"https://127.0.0.1:{port}/healthz", verify=trusting).status_code == 200
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"https://127.0.0.1:{port}/healthz")  # the system's CAs only
    finally:
        stop_pid(gateway.pid)
