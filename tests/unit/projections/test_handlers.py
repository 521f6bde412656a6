"""Handlers are pure and total over the catalogue; folding a batch equals applying op by op."""

from __future__ import annotations

import random
from typing import Any

import msgspec

from gateway.scheduler import DEFAULT_POLICY
from projections.audit import audit_line
from projections.facts import Fact
from projections.handlers import Op, Pending, ops_for
from projections.migrate import migrations
from projections.source import Delivery, _ack_facts, parse_headers
from streams.events import CATALOGUE
from streams.events import control as c
from streams.events import requests as r
from streams.events import serving as s
from tests.catalogue_samples import sample
from tests.support.events import KEY_HASH, credential_events, dry_run_admitting, experiment_created


def test_every_catalogue_event_has_rows() -> None:
    for name, cls in CATALOGUE.items():
        rows = ops_for(sample(cls), 1, "2026-01-01T00:00:00+00:00")
        assert rows, name
        assert all(isinstance(op, Op) for op in rows)


def test_no_key_or_key_hash_reaches_a_client_row() -> None:
    for event in credential_events():
        assert KEY_HASH not in repr(ops_for(event, 1, None))


def test_the_audit_log_redacts_key_hashes_and_escapes_for_copy() -> None:
    issued = c.CredentialIssued(
        client_id="c", credential_id="k1", key_sha256="secret-hash", key_prefix="mf\tab\n"
    )
    fact = Fact(
        "MF_EVENTS",
        3,
        "mf.evt.client.c.CredentialIssued",
        {"Mf-Event-Type": "CredentialIssued"},
        issued,
        None,
        0,
    )
    line = audit_line(fact)
    assert "secret-hash" not in line
    assert "\n" not in line
    assert len(line.split("\t")) == 17


def simulate(ops: list[Op]) -> dict[Any, dict[str, Any]]:
    rows: dict[Any, dict[str, Any]] = {}
    for op in ops:
        row = rows.setdefault((op.table, op.key), {})
        row.update(op.set)
        for column, delta in (op.add or {}).items():
            row[column] = row.get(column, 0) + delta
    return rows


def apply_folded(batches: list[list[Op]]) -> dict[Any, dict[str, Any]]:
    rows: dict[Any, dict[str, Any]] = {}
    for batch in batches:
        pending = Pending()
        for op in batch:  # folding takes over an op's dicts: each run gets fresh ones, as from handlers
            pending.fold(Op(op.table, op.key, dict(op.set), dict(op.add) if op.add else None))
        for table, keyed in pending.tables.items():
            for key, (sets, adds) in keyed.items():
                row = rows.setdefault((table, key), {})
                row.update(sets)
                for column, delta in adds.items():
                    row[column] = row.get(column, 0) + delta
    return rows


def test_folding_gives_the_same_rows_wherever_batches_are_cut() -> None:
    rnd = random.Random(5)
    ops = []
    for _ in range(2000):
        key = (rnd.choice("abc"),)
        if rnd.random() < 0.5:
            ops.append(Op("t", key, {rnd.choice(["x", "y", "n"]): rnd.randint(0, 9)}))
        else:
            ops.append(Op("t", key, {"y": rnd.randint(0, 9)}, {"n": rnd.randint(1, 3)}))
    expected = simulate(ops)
    for _ in range(20):
        cuts = sorted(rnd.sample(range(1, len(ops)), rnd.randint(0, 30)))
        batches = [ops[a:b] for a, b in zip([0, *cuts], [*cuts, len(ops)], strict=True)]
        assert apply_folded(batches) == expected


def test_seeded_policy_defaults_equal_the_scheduler_defaults() -> None:
    text = "".join(sql for _, _, sql, _ in migrations())
    assert (
        f"VALUES (1, 0, {DEFAULT_POLICY.safety_reserve_min_bytes}, {DEFAULT_POLICY.safety_reserve_fraction}, "
        f"{DEFAULT_POLICY.telemetry_fresh_seconds})" in text
    )


def test_headers_and_ack_subjects_are_read_without_nats_py() -> None:
    block = b"NATS/1.0\r\nMf-Event-Type: ClientEnabled\r\nMf-Actor: operator:ann\r\n\r\n"
    assert parse_headers(block) == {"Mf-Event-Type": "ClientEnabled", "Mf-Actor": "operator:ann"}
    assert _ack_facts(b"$JS.ACK.MF_EVENTS.c1.1.42.7.1700000000000000000.3") == (42, 7, 1700000000000000000, 3)
    assert _ack_facts(b"$JS.ACK.dom.acchash.MF_EVENTS.c1.1.42.7.1700000000000000000.3.tok") == (
        42,
        7,
        1700000000000000000,
        3,
    )
    assert Delivery(1, "s", b"", b"{}", 0).seq == 1
    assert msgspec.json.decode(b"{}") == {}


def test_a_deployments_caps_are_on_its_row_and_an_experiment_starts_at_one_at_a_time() -> None:
    envelope = s.ResourceEnvelope(required_bytes=1, peak_bytes=1, per_request_bytes=1, cold_load_ms=1.0)
    [created] = ops_for(experiment_created("exp-1", envelope), 1, None)
    caps = s.DeploymentCaps(max_concurrency=3, max_queue_depth=0)
    [changed] = ops_for(s.DeploymentCapsChanged(deployment_id="exp-1", caps=caps), 2, None)
    assert (created.table, created.set["max_concurrency"], created.set["max_queue_depth"]) == (
        "deployments",
        1,
        64,
    )
    assert (changed.key, changed.set["max_concurrency"], changed.set["max_queue_depth"]) == (("exp-1",), 3, 0)


def test_a_dry_run_that_would_admit_is_a_placement_row_marked_a_dry_run_with_its_count() -> None:
    [row] = ops_for(dry_run_admitting(count=7), 9, None)
    assert (row.table, row.key, row.set["dry_run"], row.set["decisions"], row.set["verdict"]) == (
        "placements",
        (9,),
        True,
        7,
        "ADMIT",
    )


def test_a_key_use_sets_the_last_use_of_its_client_and_its_credential() -> None:
    used = r.ClientKeyUsed(client_id="cl_a", credential_id="cred_a", capability="rag.embedding@1")

    rows = {(op.table, op.key): op.set for op in ops_for(used, 9, "2030-01-01T12:00:00+00:00")}

    assert rows == {
        ("client_usage", ("cl_a",)): {"last_used_at": "2030-01-01T12:00:00+00:00"},
        ("credential_usage", ("cred_a",)): {"client_id": "cl_a", "last_used_at": "2030-01-01T12:00:00+00:00"},
    }


def test_a_client_row_holds_its_integration_environment_and_purpose() -> None:
    created = c.ClientCreated(
        client_id="cl_a", name="a", scopes=("rag.embedding@1",), requests_per_minute=60, max_concurrency=4,
        integration_environment="staging", purpose="handbook search",
    )  # fmt: skip

    (row,) = ops_for(created, 1, None)

    assert (row.set["integration_environment"], row.set["purpose"]) == ("staging", "handbook search")


def test_the_policy_row_holds_lab_paused_as_a_boolean() -> None:
    revised = c.SchedulerPolicyRevised(revision=2, settings={"lab_paused": 1.0})

    policy = next(op for op in ops_for(revised, 5, None) if op.table == "scheduler_policy")

    assert policy.set["lab_paused"] is True
