"""`modelforge certs`: a CA, server certificates for every name a client dials, client certificates
per role, keys only their owner reads, and a CA never replaced unasked."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from modelforge.certs_cli import CertificatesRefused, make_certificates
from modelforge.pki import ROLES, Identity, Kind, default_identities


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _names(cert: x509.Certificate) -> set[str]:
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(sans.get_values_for_type(x509.DNSName)) | {
        str(ip) for ip in sans.get_values_for_type(x509.IPAddress)
    }


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("certs")
    make_certificates(folder, default_identities(extra_hosts=("nats.example.org",)))
    return folder


def test_each_nats_server_is_named_as_compose_and_a_local_client_dial_it(certs: Path) -> None:
    for server in ("nats-1", "nats-2", "nats-3"):
        assert _names(_cert(certs / server / "cert.pem")) == {
            server, "localhost", "127.0.0.1", "::1", "nats.example.org"
        }  # fmt: skip


def test_the_gateways_https_certificate_names_compose_s_gateway_service(certs: Path) -> None:
    assert {"gateway", "localhost", "127.0.0.1"} <= _names(_cert(certs / "gateway-http" / "cert.pem"))


def test_every_certificate_is_signed_by_the_ca_each_bundle_carries(certs: Path) -> None:
    ca = _cert(certs / "ca" / "ca.pem")
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    bundles = [path.parent for path in certs.glob("*/cert.pem")]
    assert len(bundles) == 4 + len(ROLES)
    for bundle in bundles:
        _cert(bundle / "cert.pem").verify_directly_issued_by(ca)
        assert (bundle / "ca.pem").read_bytes() == (certs / "ca" / "ca.pem").read_bytes()


def test_a_role_certificate_authenticates_a_client_and_no_server(certs: Path) -> None:
    for role in ROLES:
        usage = _cert(certs / role / "cert.pem").extensions.get_extension_for_class(x509.ExtendedKeyUsage)
        assert list(usage.value) == [ExtendedKeyUsageOID.CLIENT_AUTH], role


def test_a_server_certificate_also_authenticates_its_server_to_its_cluster_routes(certs: Path) -> None:
    usage = _cert(certs / "nats-2" / "cert.pem").extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    assert set(usage.value) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}


def test_every_key_is_readable_by_its_owner_alone(certs: Path) -> None:
    keys = [*certs.glob("*/key.pem"), certs / "ca" / "ca-key.pem"]
    assert len(keys) == 5 + len(ROLES)
    for key in keys:
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    assert stat.S_IMODE((certs / "ca").stat().st_mode) == 0o700


def test_an_existing_ca_is_kept_and_signs_only_what_is_missing(tmp_path: Path) -> None:
    make_certificates(tmp_path, default_identities())
    ca, agent = (tmp_path / "ca" / "ca.pem").read_bytes(), (tmp_path / "agent" / "cert.pem").read_bytes()
    written = make_certificates(tmp_path, default_identities(extra_clients=("agent-node-2",)))
    assert (tmp_path / "ca" / "ca.pem").read_bytes() == ca
    assert (tmp_path / "agent" / "cert.pem").read_bytes() == agent
    assert {entry.path.parent.name for entry in written if not entry.kept} == {"agent-node-2"}
    _cert(tmp_path / "agent-node-2" / "cert.pem").verify_directly_issued_by(
        x509.load_pem_x509_certificate(ca)
    )


def test_a_new_ca_is_made_only_when_asked_and_reissues_everything_under_it(tmp_path: Path) -> None:
    make_certificates(tmp_path, default_identities())
    before = (tmp_path / "ca" / "ca.pem").read_bytes()
    make_certificates(tmp_path, default_identities(), new_ca=True)
    assert (tmp_path / "ca" / "ca.pem").read_bytes() != before
    ca = _cert(tmp_path / "ca" / "ca.pem")
    _cert(tmp_path / "nats-1" / "cert.pem").verify_directly_issued_by(ca)


def test_a_missing_certificate_is_refused_when_the_ca_key_was_taken_offline(tmp_path: Path) -> None:
    make_certificates(tmp_path, default_identities())
    (tmp_path / "ca" / "ca-key.pem").unlink()
    make_certificates(tmp_path, default_identities())  # nothing to sign: everything is kept
    with pytest.raises(CertificatesRefused, match=r"ca-key\.pem is missing"):
        make_certificates(tmp_path, [Identity("agent-node-3", Kind.CLIENT)])


def test_an_ip_address_is_named_as_an_address_not_a_dns_name(tmp_path: Path) -> None:
    make_certificates(tmp_path, [Identity("edge", Kind.SERVER, ("10.0.0.7",))])
    sans = _cert(tmp_path / "edge" / "cert.pem").extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert sans.value.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.7")]
    assert sans.value.get_values_for_type(x509.DNSName) == []
