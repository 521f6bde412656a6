"""What provisioning reads from its environment and from the server's version."""

from __future__ import annotations

import dataclasses

import pytest

from eventstore.errors import ServerTooOld
from eventstore.provision import REPLICAS_ENV, check_server_version, drift, stream_replicas
from streams import configs


def test_no_replica_setting_is_none_so_existing_streams_keep_theirs() -> None:
    assert stream_replicas({}) is None


def test_stream_replicas_come_from_the_environment() -> None:
    assert stream_replicas({REPLICAS_ENV: "3"}) == 3


@pytest.mark.parametrize("text", ["0", "6", "three", "-1"])
def test_a_replica_count_jetstream_cannot_keep_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=REPLICAS_ENV):
        stream_replicas({REPLICAS_ENV: text})


def test_a_server_without_atomic_batches_is_refused() -> None:
    with pytest.raises(ServerTooOld, match=r"2\.9\.25"):
        check_server_version("2.9.25")
    check_server_version("v2.12.1")


def test_a_stream_as_the_server_reports_it_back_has_no_drift() -> None:
    wanted = configs.requests_stream()
    # the server fills in what the configuration leaves to it (a default duplicate window, limits)
    found = dataclasses.replace(wanted, max_msgs=-1, max_bytes=-1, max_consumers=-1, duplicate_window=120.0)
    assert drift(wanted, found) == []


def test_a_setting_this_version_sets_differently_is_drift() -> None:
    found = configs.requests_stream(max_age_days=7.0, replicas=3)
    assert drift(configs.requests_stream(), found) == ["max_age", "num_replicas"]
