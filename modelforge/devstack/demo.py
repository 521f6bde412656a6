"""After `up` has started the services: run the demo pipeline through the admin API and print
how to call the model."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from modelforge.devstack.processes import exited, tail

DEMO_KEY_FILE = "demo-key"


class GatewayNotUp(RuntimeError):
    """The gateway `up` started exited before it was ready (its port taken, say)."""


def wait_until_ready(url: str, pid: int, log: Path, timeout: float = 180.0) -> None:
    """The gateway (process `pid`) answers /readyz once its state has caught up with the event log.
    Its exit ends the wait: whatever answers on its port then is another process's."""
    deadline = time.monotonic() + timeout
    while True:
        if exited(pid):
            raise GatewayNotUp(f"the gateway (pid {pid}) exited; see {log}:\n{tail(log)}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=10) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)  # start-up only: the gateway gives no readiness message to wait on


def _wait_node_online(gateway_url: str, token: str, node_id: str, timeout: float = 120.0) -> None:
    """The agent registers and reports telemetry a moment after it starts."""
    from gateway.admin.client import AdminClient, AdminError

    admin = AdminClient(gateway_url, token, operator="up")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if admin.get(f"/nodes/{node_id}").get("online"):
                return
        except AdminError as exc:
            if exc.status != 404:
                raise
        time.sleep(0.2)  # start-up only, bounded
    raise RuntimeError(f"node {node_id} did not come online within {timeout:.0f}s; see the agent's log")


def kept_demo_key(home: Path, gateway_url: str) -> str | None:
    """The demo key an earlier `up` kept in `home`, while the gateway still takes it (not rotated,
    revoked or expired since): an application configured with it goes on working across restarts."""
    try:
        key = (home / DEMO_KEY_FILE).read_text().strip()
    except OSError:
        return None
    request = urllib.request.Request(f"{gateway_url}/v1/models", headers={"authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return key if response.status == 200 else None
    except urllib.error.HTTPError:
        return None  # 401/403: no longer valid


def keep_demo_key(home: Path, key: str) -> None:
    """Keep the key for the next `up`, readable by its owner alone."""
    path = home / DEMO_KEY_FILE
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(key + "\n")


def demo_key(nats_url: str, client_id: str) -> str:
    """A new key for the existing demo client, when none kept is valid (keys are shown once)."""
    from eventstore.connection import connect
    from eventstore.store import EventStore
    from gateway.clients.service import ClientService
    from streams.envelope import Actor, ActorKind

    async def rotate() -> str:
        connection = await connect(nats_url, "modelforge-up")
        try:
            service = ClientService(EventStore(connection), actor=Actor(ActorKind.OPERATOR, "up"))
            return (await service.rotate(client_id)).key
        finally:
            await connection.close()

    return asyncio.run(rotate())


def bootstrap(
    gateway_url: str,
    token: str,
    home: Path,
    node_id: str,
    nats_url: str,
    echo: Callable[[str], None],
) -> None:
    from modelforge.devstack.bootstrap import EMBEDDING, OCR, RERANKING, SPEECH, bootstrap_demo

    _wait_node_online(gateway_url, token, node_id)
    echo(
        "demo        pulling all-MiniLM-L6-v2 (embeddings, reranking), PP-OCRv4 and Whisper tiny.en and "
        "running them through the promotion pipeline ..."
    )
    result = bootstrap_demo(gateway_url, token, home / "artifacts", node_id, residency="always_warm")
    for step in result.get("steps", []):
        echo(f"            {step}")
    key = result.get("key") or kept_demo_key(home, gateway_url) or demo_key(nats_url, result["client_id"])
    keep_demo_key(home, key)
    _say_deployment(echo, result, EMBEDDING, "all-MiniLM-L6-v2")
    served: dict[str, dict[str, str]] = result.get("served", {})
    for capability, deployment in served.items():
        _say_deployment(echo, deployment, capability, deployment["model"])
    for capability, why in result.get("unserved", {}).items():
        echo(f"{capability} not served: {why}; `up` again once that is fixed")
    echo(f"demo key    {key}   (kept in {home / DEMO_KEY_FILE}; `up` again prints the same one)")
    body = json.dumps({"model": "all-MiniLM-L6-v2", "input": ["hello world"]})
    echo("try it:")
    echo(f"  curl -s {gateway_url}/v1/embeddings -H 'Authorization: Bearer {key}' \\")
    echo(f"       -H 'content-type: application/json' -d '{body}'")
    if RERANKING in served:
        query = {
            "model": served[RERANKING]["model"],
            "query": "pets",
            "documents": ["Stocks fell.", "My cat sleeps."],
        }
        echo("  # reranking (MiniLM as a bi-encoder: cosine of query and document embeddings)")
        echo(f"  curl -s {gateway_url}/v1/rerank -H 'Authorization: Bearer {key}' \\")
        echo(f"       -H 'content-type: application/json' -d '{json.dumps(query)}'")
    if OCR in served:
        page = {"type": "image_url", "image_url": "data:image/png;base64,%s"}
        document = json.dumps({"model": served[OCR]["model"], "document": page})
        echo("  # OCR: put your page's PNG path in place of page.png")
        echo(f"  printf '{document}' \"$(base64 -w0 page.png)\" | \\")
        echo(f"       curl -s {gateway_url}/v1/ocr -H 'Authorization: Bearer {key}' \\")
        echo("       -H 'content-type: application/json' -d @-")
    if SPEECH in served:
        echo("  # speech: put a WAV (PCM) recording's path in place of speech.wav")
        echo(f"  curl -s {gateway_url}/v1/audio/transcriptions -H 'Authorization: Bearer {key}' \\")
        echo(f"       -F model={served[SPEECH]['model']} -F file=@speech.wav -F response_format=verbose_json")
    echo(f"admin API   {gateway_url}/docs (token in {home / 'operator-token'})")
    echo(f"console     {gateway_url}/console (the same token)")


def _say_deployment(
    echo: Callable[[str], None], deployment: dict[str, Any], capability: str, model: str
) -> None:
    status = deployment.get("deployment_status", "")
    if status in ("drained", "draining"):  # an operator took it out of service: `up` leaves it so
        echo(f"deployment  {deployment['deployment_id']} is {status}: {model} does not serve; "
             "`deployments list` shows what does")  # fmt: skip
    else:
        echo(f"deployment  {deployment['deployment_id']} ({capability}, {model})")
