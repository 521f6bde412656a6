"""A deployment's small PKI, in memory: a CA, and the certificates it signs for servers (NATS, the
gateway's HTTPS) and for client roles. `modelforge certs` writes them (modelforge/certs_cli.py).

Keys are ECDSA P-256: quick to make, and read by nats-server (Go), OpenSSL and uvicorn alike.
A server certificate may also authenticate as a client: a NATS server dials its cluster routes
with its own certificate, and a server with `verify: true` on routes asks for one.
"""

from __future__ import annotations

import ipaddress
from datetime import datetime, timedelta
from enum import StrEnum

import msgspec
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
LEAF_DAYS = 825  # the longest validity clients of the public web accept; renew with `certs --new-ca`
ORGANIZATION = "ModelForge"
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
NATS_SERVERS = ("nats-1", "nats-2", "nats-3")  # compose.yaml's hostnames
GATEWAY_HTTP = "gateway-http"  # the gateway's HTTPS certificate, for compose's `gateway` service
ROLES = ("provisioner", "gateway", "agent", "projector", "audit")  # deploy/nats/nats.conf's users


class Kind(StrEnum):
    SERVER = "server"
    CLIENT = "client"


class Identity(msgspec.Struct, frozen=True):
    name: str  # the certificate's common name and its folder
    kind: Kind
    hosts: tuple[str, ...] = ()  # a server's DNS names and IP addresses (subject alternative names)


class Issued(msgspec.Struct, frozen=True):
    cert_pem: bytes
    key_pem: bytes


def default_identities(
    extra_hosts: tuple[str, ...] = (), extra_clients: tuple[str, ...] = ()
) -> list[Identity]:
    """The three NATS servers and the gateway's HTTPS under compose's hostnames and the local ones,
    and a client certificate per role."""
    servers = [(name, name) for name in NATS_SERVERS] + [(GATEWAY_HTTP, "gateway")]
    return [
        *(Identity(name, Kind.SERVER, (host, *LOCAL_HOSTS, *extra_hosts)) for name, host in servers),
        *(Identity(role, Kind.CLIENT) for role in (*ROLES, *extra_clients)),
    ]


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _key_usage(signs_certificates: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
        key_agreement=False, key_cert_sign=signs_certificates, crl_sign=signs_certificates,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip


def new_authority(now: datetime, name: str = f"{ORGANIZATION} CA") -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))  # a little clock skew between machines
        .not_valid_after(now + timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _alternative_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def issue(authority: Issued, identity: Identity, now: datetime) -> Issued:
    """A certificate for `identity`, signed by `authority`."""
    ca_cert = x509.load_pem_x509_certificate(authority.cert_pem)
    ca_key = serialization.load_pem_private_key(authority.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey), "the CA's key is ours: ECDSA"
    key = ec.generate_private_key(ec.SECP256R1())
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if identity.kind is Kind.SERVER:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(identity.name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(min(now + timedelta(days=LEAF_DAYS), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if identity.hosts:
        names = [_alternative_name(host) for host in dict.fromkeys(identity.hosts)]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))
