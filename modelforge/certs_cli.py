"""`modelforge certs DIR`: the deployment's CA and certificates on disk, a folder per identity.

    DIR/ca/ca.pem, ca-key.pem         the CA (its key never leaves this folder: keep it offline)
    DIR/<name>/ca.pem, cert.pem, key.pem   one server or client role: what it mounts, nothing more

Keys are written 0600. An existing CA is kept and signs only what is missing (a new node's client
certificate, say); `--new-ca` replaces it and every certificate under it.
"""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from eventstore.tls import CA_ENV, CERT_ENV, KEY_ENV
from modelforge.pki import Identity, Issued, default_identities, issue, new_authority

CA_FOLDER, CA_KEY_FILE = "ca", "ca-key.pem"
CA_FILE, CERT_FILE, KEY_FILE = "ca.pem", "cert.pem", "key.pem"


class CertificatesRefused(Exception):
    """What the folder holds does not allow the asked certificates (e.g. a CA without its key)."""


class Written(msgspec.Struct, frozen=True):
    path: Path
    kept: bool  # it was there already and is left as it was


def client_settings(folder: Path, name: str) -> dict[str, str]:
    """The TLS variables (eventstore/tls.py) that make a process connect as identity `name`."""
    bundle = folder / name
    return {CA_ENV: str(bundle / CA_FILE), CERT_ENV: str(bundle / CERT_FILE), KEY_ENV: str(bundle / KEY_FILE)}


def _write(path: Path, data: bytes, mode: int) -> None:
    """Replaces `path` whole, with `mode` from its first byte (a key is never readable by others)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(descriptor, "wb") as out:
        os.fchmod(out.fileno(), mode)  # the umask may have narrowed or the file predated this
        out.write(data)
    os.replace(partial, path)


def _authority(folder: Path, new_ca: bool, now: datetime) -> tuple[Issued | None, list[Written]]:
    """The CA to sign with (None: one without its key here) and what became of its files."""
    cert, key = folder / CA_FOLDER / CA_FILE, folder / CA_FOLDER / CA_KEY_FILE
    if cert.exists() and not new_ca:
        held = Issued(cert.read_bytes(), key.read_bytes()) if key.exists() else None
        return held, [Written(cert, kept=True)]
    made = new_authority(now)
    (folder / CA_FOLDER).mkdir(parents=True, exist_ok=True, mode=0o700)
    _write(key, made.key_pem, 0o600)
    _write(cert, made.cert_pem, 0o644)
    return made, [Written(cert, kept=False), Written(key, kept=False)]


def make_certificates(
    folder: Path, identities: list[Identity], *, new_ca: bool = False, now: datetime | None = None
) -> list[Written]:
    """Every identity's bundle, signed by the folder's CA (made first if there is none)."""
    now = now or datetime.now(UTC)
    authority, written = _authority(folder, new_ca, now)
    for identity in identities:
        bundle = folder / identity.name
        if not new_ca and (bundle / CERT_FILE).exists() and (bundle / KEY_FILE).exists():
            written.append(Written(bundle / CERT_FILE, kept=True))
            continue
        if authority is None:
            raise CertificatesRefused(
                f"{folder / CA_FOLDER / CA_KEY_FILE} is missing: the CA's key is needed to sign {identity.name}"
                " (bring it back, or make a new CA with --new-ca)"
            )
        issued = issue(authority, identity, now)
        _write(bundle / KEY_FILE, issued.key_pem, 0o600)
        _write(bundle / CERT_FILE, issued.cert_pem, 0o644)
        _write(bundle / CA_FILE, authority.cert_pem, 0o644)
        written += [Written(bundle / name, kept=False) for name in (CERT_FILE, KEY_FILE, CA_FILE)]
    return written


def _cmd_certs(args: argparse.Namespace) -> int:
    identities = default_identities(tuple(args.host), tuple(args.client))
    try:
        written = make_certificates(args.folder, identities, new_ca=args.new_ca)
    except CertificatesRefused as refused:
        print(f"modelforge certs: {refused}")
        return 2
    for entry in written:
        print(f"{'kept ' if entry.kept else 'wrote'}  {entry.path}")
    if any(entry.kept for entry in written):
        print("(kept: already there; --new-ca replaces the CA and every certificate)")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "certs", help="make the CA and the certificates of the NATS servers, the gateway and each role"
    )
    parser.add_argument("folder", type=Path, help="where to write them, e.g. ./deploy/certs")
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        help="one more DNS name or IP address for every server certificate",
    )
    parser.add_argument(
        "--client", action="append", default=[], help="one more client identity, e.g. a node's agent"
    )
    parser.add_argument("--new-ca", action="store_true", help="replace the CA and every certificate under it")
    parser.set_defaults(handler=_cmd_certs)
