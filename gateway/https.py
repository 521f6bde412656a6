"""Optional HTTPS for the gateway's HTTP edge: MODELFORGE_HTTPS_CERT and MODELFORGE_HTTPS_KEY name
a server certificate and its key (`modelforge certs` makes `gateway-http/` for compose's
`gateway`); unset, the gateway speaks plain HTTP (behind an operator's TLS-terminating proxy)."""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping

HTTPS_CERT_ENV = "MODELFORGE_HTTPS_CERT"
HTTPS_KEY_ENV = "MODELFORGE_HTTPS_KEY"


class HttpsSettingsInvalid(ValueError):
    """Only one of the two is set, or the files are not a certificate and its key."""


def https_options(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """uvicorn's ssl_certfile/ssl_keyfile, checked now: a bad file is named before the gateway
    connects to anything, not when its first client arrives."""
    cert, key = environ.get(HTTPS_CERT_ENV, "").strip(), environ.get(HTTPS_KEY_ENV, "").strip()
    if not (cert or key):
        return {}
    if not (cert and key):
        raise HttpsSettingsInvalid(f"set both {HTTPS_CERT_ENV} and {HTTPS_KEY_ENV}, or neither")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as bad:
        raise HttpsSettingsInvalid(f"{HTTPS_CERT_ENV}={cert}, {HTTPS_KEY_ENV}={key}: {bad}") from None
    return {"ssl_certfile": cert, "ssl_keyfile": key}
