"""The operator console: one static page (`/console`) whose script reads the admin API with the
operator token the operator types in. The page holds no data and needs no token to load; every
read it makes is an ordinary authenticated admin call, so it can show nothing the API would not.

The assets are read once at import. The content security policy lets the page run only its own
script and talk only to this gateway, so no data it displays can load or run anything else.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import Response

from gateway.http.operation import Operation

_ASSETS = resources.files("gateway.admin") / "console"
_TYPES = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "words.js": "text/javascript; charset=utf-8",
    "charts.js": "text/javascript; charset=utf-8",
    "dom.js": "text/javascript; charset=utf-8",
    "overview.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


def _asset(name: str) -> Operation:
    body = (_ASSETS / name).read_bytes()
    path = "/console" if name == "index.html" else f"/console/{name}"

    async def serve(request: Request) -> Response:
        return Response(body, headers=_HEADERS, media_type=_TYPES[name])

    return Operation(
        "GET",
        path,
        f"The operator console: {name}",
        serve,
        operation_id=f"console_{name.replace('.', '_')}",
        tag="console",
        response=str,
        response_media_type=_TYPES[name].split(";")[0],
    )


CONSOLE_OPERATIONS = [_asset(name) for name in _TYPES]
