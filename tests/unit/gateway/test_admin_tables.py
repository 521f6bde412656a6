"""The `list` verbs' tables: human units for bytes and times, names before ids, `(none)` for no
rows; `nodes drain` says what it unloaded and what is still busy, and exits 3 while any is."""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.admin import tables
from gateway.admin.nodes_cli import drain_incomplete, render_drain
from modelforge.cli import build_parser

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def test_bytes_read_in_binary_units() -> None:
    assert [tables.human_bytes(n) for n in (512, 1536, 90 * 2**20, 3 * 2**30)] == [
        "512 B",
        "1.5 KiB",
        "90.0 MiB",
        "3.0 GiB",
    ]


def test_durations_read_in_their_two_largest_units() -> None:
    assert [tables.human_duration(s) for s in (0, 42, 90, 3600, 90_061)] == [
        "0s",
        "42s",
        "1m 30s",
        "1h",
        "1d 1h",
    ]


def test_times_read_as_how_far_from_now() -> None:
    assert tables.human_when("2026-12-03T14:05:00+00:00", NOW) == "in 2h 5m"
    assert tables.human_when("2026-12-03T11:57:00Z", NOW) == "3m ago"
    assert tables.human_when(None, NOW) == "-"


def test_a_deployments_table_puts_the_model_name_before_the_id_with_its_size_in_units() -> None:
    row = {
        "deployment_id": "dep_0123456789",
        "model_name": "minilm",
        "capability": "rag.embedding@1",
        "channel": "stable",
        "route": "",
        "status": "stable",
        "health_status": "healthy",
        "residency": {"kind": "keep_warm", "keep_warm_ttl_s": 600.0},
        "envelope": {"required_bytes": 90 * 2**20},
        "replicas": {"min": 2, "max": 4},
        "placement": "spread",
        "caps": {"max_concurrency": 2, "max_queue_depth": 16},
    }
    header, rule, line = tables.table([row], tables.DEPLOYMENTS).splitlines()
    assert header.split() == [
        "MODEL", "DEPLOYMENT", "CAPABILITY", "CHANNEL", "STATUS", "HEALTH", "RESIDENCY", "REPLICAS", "CAPS", "NEEDS",
    ]  # fmt: skip
    assert set(rule) <= {"-", " "}
    assert line.split() == [
        "minilm",
        "dep_0123456789",
        "rag.embedding@1",
        "stable",
        "stable",
        "healthy",
        "keep_warm",
        "10m",
        "2-4",
        "spread",
        "2/16",
        "90.0",
        "MiB",
    ]


def test_a_nodes_table_says_cordoned_and_online_and_sizes_the_accelerators() -> None:
    row = {
        "node_id": "gpu-7",
        "enabled": False,
        "decommissioned": False,
        "online": True,
        "production_eligible": True,
        "accelerators": [{"accelerator_id": "gpu-7-gpu0", "kind": "gpu", "total_bytes": 80 * 2**30}],
        "runtimes": ["onnxruntime-gpu", "tensorrt"],
    }
    line = tables.table([row], tables.NODES).splitlines()[2]
    assert "gpu-7  " in line
    assert "cordoned" in line
    assert "yes" in line
    assert "gpu-7-gpu0 (gpu, 80.0 GiB)" in line
    assert "onnxruntime-gpu, tensorrt" in line


def test_an_approvals_table_shows_when_it_expires_relative_to_now() -> None:
    row = {
        "approval_id": "apr_1",
        "kind": "lab_execution",
        "candidate_id": "cand-a",
        "status": "approved",
        "expires_at": "2026-12-04T12:00:00+00:00",
        "approved_by": "",
        "node_ids": ["n1", "n2"],
    }
    line = tables.table([row], tables.approvals(NOW)).splitlines()[2]
    assert "in 1d" in line
    assert "n1, n2" in line


def test_a_clients_table_shows_key_prefixes_and_their_state_never_more() -> None:
    row = {
        "client_id": "cl_1",
        "name": "search",
        "enabled": False,
        "scopes": ["rag.embedding@1"],
        "requests_per_minute": 60,
        "max_concurrency": 4,
        "priority": 0,
        "project_id": None,
        "credentials": [
            {"key_prefix": "mf_abc", "revoked": True, "grace_until": None, "expires_at": None},
            {
                "key_prefix": "mf_def",
                "revoked": False,
                "grace_until": None,
                "expires_at": "2026-12-03T13:00:00Z",
            },
        ],
    }
    line = tables.table([row], tables.clients(NOW)).splitlines()[2]
    assert line.startswith("search")
    assert "disabled" in line
    assert "mf_abc… revoked; mf_def… active, expires in 1h" in line


def test_candidates_artifact_sets_and_projects_tables_count_what_they_hold() -> None:
    candidate = {
        "candidate_id": "cand-a",
        "capability": "rag.embedding@1",
        "artifact_set_id": "minilm-1",
        "status": "lab_ready",
        "probes": [{}, {}],
    }
    assert tables.table([candidate], tables.CANDIDATES).splitlines()[2].split() == [
        "cand-a",
        "rag.embedding@1",
        "minilm-1",
        "lab_ready",
        "2",
    ]
    artifact_set = {
        "name": "minilm",
        "artifact_set_id": "minilm-1",
        "capability": "rag.embedding@1",
        "node_id": "n1",
        "status": "verified",
        "total_bytes": 22 * 2**20,
        "files": [{}, {}, {}],
    }
    line = tables.table([artifact_set], tables.ARTIFACT_SETS).splitlines()[2]
    assert line.split() == ["minilm", "minilm-1", "rag.embedding@1", "n1", "verified", "22.0", "MiB", "3"]
    project = {
        "name": "search",
        "project_id": "prj_1",
        "owner": "",
        "channels": {"rag.embedding@1": "stable"},
        "clients": ["cl_1"],
    }
    assert tables.table([project], tables.PROJECTS).splitlines()[2].split() == [
        "search",
        "prj_1",
        "-",
        "rag.embedding@1=stable",
        "1",
    ]


def test_no_rows_read_as_none() -> None:
    assert tables.table([], tables.PROJECTS) == "(none)"


def test_a_drain_reports_what_it_unloaded_and_what_is_still_busy_and_exits_3() -> None:
    drain = {
        "node_id": "gpu-7",
        "unloaded": [
            {"accelerator_id": "gpu-7-gpu0", "deployment_id": "dep-a", "reclaimed_bytes": 3 * 2**20}
        ],
        "busy": [
            {
                "accelerator_id": "gpu-7-gpu0",
                "deployment_id": "dep-b",
                "code": "DEPLOYMENT_BUSY",
                "message": "2 requests are running",
                "active_requests": 2,
            }
        ],
        "failed": [],
    }
    text = render_drain(drain)
    assert "unloaded  dep-a on gpu-7-gpu0 (3.0 MiB reclaimed)" in text
    assert "busy      dep-b on gpu-7-gpu0 (2 requests still running)" in text
    assert "not drained yet" in text
    assert drain_incomplete(drain) == 3
    assert drain_incomplete({**drain, "busy": []}) == 0


def test_the_drain_verb_takes_a_reason_and_a_wait() -> None:
    args = build_parser().parse_args(["nodes", "drain", "gpu-7", "--reason", "kernel", "--wait-s", "30"])
    assert (args.node, args.reason, args.wait_s) == ("gpu-7", "kernel", 30.0)


def test_every_list_verb_keeps_json_for_scripts() -> None:
    parser = build_parser()
    for resource in ("nodes", "deployments", "candidates", "approvals", "artifacts", "projects", "clients"):
        assert parser.parse_args([resource, "list", "--json"]).json is True
    assert parser.parse_args(["operators", "list", "--json"]).json is True
