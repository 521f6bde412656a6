"""The `tls {}` blocks of the nats-server configs we render (`up --cluster`, the test cluster), as
deploy/nats/nats.conf writes them: a server's certificate, its CA, and `verify` (a client, or a
route's peer, must present a certificate that CA signed)."""

from __future__ import annotations

from pathlib import Path

from modelforge.certs_cli import CA_FILE, CERT_FILE, KEY_FILE

HANDSHAKE_TIMEOUT_S = 2  # nats-server's default (0.5 s) is tight for a loaded machine


def tls_block(bundle: Path) -> str:
    """For a server's client port at top level, or for its routes inside `cluster {}`; `bundle` is
    the server's folder made by `modelforge certs`."""
    return (
        f'tls {{ cert_file: "{bundle / CERT_FILE}", key_file: "{bundle / KEY_FILE}", '
        f'ca_file: "{bundle / CA_FILE}", verify: true, timeout: {HANDSHAKE_TIMEOUT_S} }}\n'
    )
