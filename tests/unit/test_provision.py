"""What provisioning reads from its environment and from the server's version."""

from __future__ import annotations

import pytest

from eventstore.errors import ServerTooOld
from eventstore.provision import REPLICAS_ENV, check_server_version, stream_replicas


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
