"""A nats-server with the `tls {}` block our configs render (verify on): only a client that trusts
the deployment's CA and presents a certificate it signed gets in; every client of ours does so
from the MODELFORGE_NATS_* settings, the projector's own reader included."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from eventstore.connection import connect
from modelforge.certs_cli import client_settings, make_certificates
from modelforge.devstack.nats_server import CONFIG, NatsServer, start_nats
from modelforge.devstack.nats_tls import tls_block
from modelforge.devstack.processes import stop_pid
from modelforge.pki import default_identities
from projections.source import RawNats


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("certs")
    make_certificates(folder, default_identities())
    return folder


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[NatsServer]:
    config = CONFIG + tls_block(certs / "nats-1")
    server = start_nats(tmp_path_factory.mktemp("nats-tls"), detach=False, config_text=config)
    yield server
    stop_pid(server.pid)


def _url(server: NatsServer, scheme: str = "tls") -> str:
    return f"{scheme}://127.0.0.1:{server.port}"


@pytest.mark.parametrize("scheme", ["tls", "nats"])
async def test_a_client_without_the_deployments_ca_is_refused(tls_server: NatsServer, scheme: str) -> None:
    # A nats:// URL does not get around it: the server requires TLS, and the client, trusting only
    # the system's CAs, refuses the server's certificate.
    with pytest.raises(ssl.SSLCertVerificationError):
        await nats.connect(_url(tls_server, scheme), allow_reconnect=False, connect_timeout=5)


async def test_a_client_that_trusts_the_ca_but_shows_no_certificate_is_refused(
    tls_server: NatsServer, certs: Path
) -> None:
    # The server ends the handshake: the client reads its alert, or finds the connection gone
    # (a reset, or a broken pipe when its next write comes after the close).
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await nats.connect(
            _url(tls_server), tls=ssl.create_default_context(cafile=certs / "ca" / "ca.pem"),
            allow_reconnect=False, connect_timeout=5,
        )  # fmt: skip
    assert "client didn't provide a certificate" in await asyncio.to_thread(Path(tls_server.log).read_text)


async def test_a_role_connects_with_the_certificate_its_settings_name(
    tls_server: NatsServer, certs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in client_settings(certs, "gateway").items():
        monkeypatch.setenv(name, value)
    connection = await connect(_url(tls_server), "tls-gateway", first_connect_s=10)
    try:
        reply = await connection.client.request("$JS.API.INFO", b"", timeout=5)
    finally:
        await connection.close()
    assert b'"type":"io.nats.jetstream.api.v1.account_info_response"' in reply.data


async def test_the_projectors_reader_speaks_tls_with_the_same_settings(
    tls_server: NatsServer, certs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in client_settings(certs, "projector").items():
        monkeypatch.setenv(name, value)
    raw = await RawNats.open(_url(tls_server, "nats"))  # upgraded as the server's INFO asks
    try:
        reply = await raw.request("$JS.API.INFO", b"")
    finally:
        await raw.close()
    assert reply["type"] == "io.nats.jetstream.api.v1.account_info_response"
