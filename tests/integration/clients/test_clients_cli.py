"""`modelforge clients …` against the real event store (run as a process, as an operator would)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid

# The subcommands as registered by gateway.admin.clients_cli, without the rest of `modelforge`.
RUN = (
    "import argparse, sys; from gateway.admin import clients_cli as cli; p = argparse.ArgumentParser(); "
    "s = p.add_subparsers(dest='command', required=True); cli.register(s); "
    "a = p.parse_args(sys.argv[1:]); sys.exit(a.handler(a))"
)


def clients(nats_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NATS_URL": nats_url}
    return subprocess.run(
        [sys.executable, "-c", RUN, "clients", *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_create_list_rotate_revoke_disable(nats_url: str) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    created = clients(nats_url, "create", "--name", name, "--scope", "rag.embedding@1", "--rpm", "30")
    assert created.returncode == 0, created.stderr
    key = re.search(r"api key\s+(mf_\S+)", created.stdout)
    client_id = re.search(r"client\s+(cl_\S+)", created.stdout)
    credential = re.search(r"credential\s+(cred_\S+)", created.stdout)
    assert key
    assert client_id
    assert credential

    listed = clients(nats_url, "list")
    assert listed.returncode == 0, listed.stderr
    assert name in listed.stdout
    assert key.group(1)[:10] in listed.stdout
    assert key.group(1) not in listed.stdout
    assert not re.search(r"\b[0-9a-f]{64}\b", listed.stdout)  # never a hash

    rotated = clients(nats_url, "rotate", name, "--grace-seconds", "60")
    assert rotated.returncode == 0, rotated.stderr
    assert "mf_" in rotated.stdout

    revoked = clients(nats_url, "revoke", client_id.group(1), credential.group(1))
    assert revoked.returncode == 0, revoked.stderr
    disabled = clients(nats_url, "disable", name)
    assert disabled.returncode == 0, disabled.stderr
    listed = clients(nats_url, "list")
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith(name)]
    assert row.split()[2] == "disabled"  # NAME CLIENT STATE …
    assert "revoked" in row
    as_json = clients(nats_url, "list", "--json")
    (mine,) = [c for c in json.loads(as_json.stdout) if c["name"] == name]
    assert mine["enabled"] is False
    assert [c["revoked"] for c in mine["credentials"]] == [True, False]


def test_limits_change_what_is_given_and_keep_the_rest(nats_url: str) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    created = clients(nats_url, "create", "--name", name, "--scope", "rag.embedding@1", "--rpm", "30")
    assert created.returncode == 0, created.stderr
    changed = clients(nats_url, "limits", name, "--concurrency", "9", "--priority", "2")
    assert changed.returncode == 0, changed.stderr
    assert "rpm=30  concurrency=9  priority=2" in changed.stdout
    refused = clients(nats_url, "limits", name, "--concurrency", "0")
    assert refused.returncode == 1
    assert "INVALID_INPUT" in refused.stderr


def test_errors_are_reported_with_their_code(nats_url: str) -> None:
    bad = clients(nats_url, "create", "--name", "x", "--scope", "nope@1")
    assert bad.returncode == 1
    assert "UNKNOWN_CAPABILITY" in bad.stderr
    missing = clients(nats_url, "disable", f"ghost-{uuid.uuid4().hex[:6]}")
    assert missing.returncode == 1
    assert "CLIENT_NOT_FOUND" in missing.stderr


def test_a_lifetime_that_is_no_number_of_days_is_an_error_with_its_code(nats_url: str) -> None:
    for days in ("nan", "inf", "1e9", "5e6"):  # no timedelta; a timedelta past the calendar
        name = f"cli-{uuid.uuid4().hex[:8]}"
        bad = clients(
            nats_url, "create", "--name", name, "--scope", "rag.embedding@1", "--expires-in-days", days
        )
        assert (bad.returncode, bad.stderr) == (1, bad.stderr.splitlines()[-1] + "\n"), bad.stderr
        assert "INVALID_INPUT" in bad.stderr
        assert name not in clients(nats_url, "list").stdout  # nothing recorded
