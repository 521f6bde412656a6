"""The gateway's HTTPS settings: neither set is plain HTTP, a half-set or mismatched pair is named
before the gateway starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.https import HTTPS_CERT_ENV, HTTPS_KEY_ENV, HttpsSettingsInvalid, https_options
from modelforge.certs_cli import make_certificates
from modelforge.pki import default_identities


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("certs")
    make_certificates(folder, default_identities())
    return folder


def test_no_setting_serves_plain_http() -> None:
    assert https_options({}) == {}


def test_a_certificate_and_its_key_become_uvicorns_options(certs: Path) -> None:
    cert, key = str(certs / "gateway-http" / "cert.pem"), str(certs / "gateway-http" / "key.pem")
    assert https_options({HTTPS_CERT_ENV: cert, HTTPS_KEY_ENV: key}) == {
        "ssl_certfile": cert,
        "ssl_keyfile": key,
    }


def test_a_certificate_without_its_key_is_refused(certs: Path) -> None:
    with pytest.raises(HttpsSettingsInvalid, match="or neither"):
        https_options({HTTPS_CERT_ENV: str(certs / "gateway-http" / "cert.pem")})


def test_another_certificates_key_is_refused(certs: Path) -> None:
    settings = {
        HTTPS_CERT_ENV: str(certs / "gateway-http" / "cert.pem"),
        HTTPS_KEY_ENV: str(certs / "nats-1" / "key.pem"),
    }
    with pytest.raises(HttpsSettingsInvalid, match=HTTPS_KEY_ENV):
        https_options(settings)
