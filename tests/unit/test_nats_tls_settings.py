"""The MODELFORGE_NATS_* settings every client builds its TLS from: none set is plain TCP, a
half-set or unreadable one is named, never silently ignored."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from eventstore.tls import CA_ENV, CERT_ENV, KEY_ENV, TlsSettingsInvalid, nats_tls
from modelforge.certs_cli import client_settings, make_certificates
from modelforge.pki import Identity, Kind


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("certs")
    make_certificates(folder, [Identity("agent", Kind.CLIENT)])
    return folder


def test_no_setting_means_no_context_of_ours() -> None:
    assert nats_tls({}) is None


def test_a_roles_settings_give_a_context_that_checks_the_server_against_the_ca(certs: Path) -> None:
    context = nats_tls(client_settings(certs, "agent"))
    assert context is not None
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname
    assert [ca["subject"] for ca in context.get_ca_certs()] == [
        ((("organizationName", "ModelForge"),), (("commonName", "ModelForge CA"),))
    ]


def test_a_certificate_without_its_key_is_named(certs: Path) -> None:
    settings = client_settings(certs, "agent")
    del settings[KEY_ENV]
    with pytest.raises(TlsSettingsInvalid, match=KEY_ENV):
        nats_tls(settings)


def test_a_ca_file_that_is_not_there_is_named(tmp_path: Path) -> None:
    with pytest.raises(TlsSettingsInvalid, match=CA_ENV):
        nats_tls({CA_ENV: str(tmp_path / "missing.pem")})


def test_a_key_that_is_not_the_certificates_is_named(certs: Path, tmp_path: Path) -> None:
    make_certificates(tmp_path, [Identity("other", Kind.CLIENT)])
    settings = {**client_settings(certs, "agent"), KEY_ENV: str(tmp_path / "other" / "key.pem")}
    with pytest.raises(TlsSettingsInvalid, match=CERT_ENV):
        nats_tls(settings)
