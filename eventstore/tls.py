"""The TLS settings of every NATS connection we open, from the environment: one place builds the
ssl context the gateway, agent, projector, audit reader and the CLI verbs all use.

MODELFORGE_NATS_CA names the CA file that signed the servers' certificates (unset: the system's
CAs, for a server with a public certificate); MODELFORGE_NATS_CERT and MODELFORGE_NATS_KEY the
client certificate and key a server that verifies clients (`verify: true`) asks for. With none
set, a `tls://` URL still gets TLS against the system's CAs and a `nats://` one gets plain TCP,
unless the server requires TLS (nats-py then upgrades with the system's CAs).
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Mapping

CA_ENV = "MODELFORGE_NATS_CA"
CERT_ENV = "MODELFORGE_NATS_CERT"
KEY_ENV = "MODELFORGE_NATS_KEY"


class _UpgradedConnectionsEof(logging.Filter):
    """asyncio warns that a stream's EOF handling "has no effect when using ssl" whenever a peer
    closes a connection that was upgraded to TLS after it opened (NATS sends its INFO in the clear
    first, so every TLS connection is one). The stream closes all the same: say nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "eof_received() has no effect when using ssl" not in record.getMessage()


logging.getLogger("asyncio").addFilter(_UpgradedConnectionsEof())


class TlsSettingsInvalid(ValueError):
    """A TLS variable names a file that cannot be used; says which and why."""

    code = "NATS_TLS_SETTINGS_INVALID"


def nats_tls(environ: Mapping[str, str] = os.environ) -> ssl.SSLContext | None:
    """The client context the TLS variables describe, or None when none is set."""
    ca, cert, key = (environ.get(name, "").strip() for name in (CA_ENV, CERT_ENV, KEY_ENV))
    if not (ca or cert or key):
        return None
    if bool(cert) != bool(key):
        raise TlsSettingsInvalid(f"set both {CERT_ENV} and {KEY_ENV} (a client certificate needs its key)")
    try:
        context = ssl.create_default_context(cafile=ca or None)
    except (OSError, ssl.SSLError) as bad:
        raise TlsSettingsInvalid(f"{CA_ENV}={ca}: {bad}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert:
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as bad:
            raise TlsSettingsInvalid(f"{CERT_ENV}={cert}, {KEY_ENV}={key}: {bad}") from None
    return context
