"""Typed failures of the event store; each carries what a caller needs to decide."""

from __future__ import annotations

# JetStream's refusals of a publish whose expected last (subject) sequence did not hold: 10071 names
# the sequence found; 10164 names none. A replicated stream answers 10164 while another publish with
# an expected sequence on the same subjects is still in flight (and inside an atomic batch). Either
# is a lost race: read again and decide again.
WRONG_LAST_SEQUENCE_CODES = frozenset({10071, 10164})


class EventStoreError(Exception):
    code = "EVENT_STORE_ERROR"


class ConcurrencyConflict(EventStoreError):
    """Someone else appended first: reload the aggregate and decide again."""

    code = "CONCURRENCY_CONFLICT"

    def __init__(self, aggregate: str, aggregate_id: str, expected: int | str, actual: int) -> None:
        super().__init__(f"{aggregate}/{aggregate_id}: expected version {expected}, actual {actual}")
        self.aggregate = aggregate
        self.aggregate_id = aggregate_id
        self.expected = expected
        self.actual = actual


class EventRejected(EventStoreError):
    """Bad input caught before anything was published (payload, aggregate, id, size)."""

    code = "INVALID_EVENT"


class ServerTooOld(EventStoreError):
    code = "NATS_SERVER_TOO_OLD"

    def __init__(self, found: str, required: tuple[int, int, int]) -> None:
        need = ".".join(map(str, required))
        super().__init__(
            f"nats-server {found} is too old: ModelForge needs JetStream from nats-server >= {need} "
            "(atomic batch publish). Upgrade the server, or use the embedded one `./dev up` runs"
            " (NATS_URL unset, MODELFORGE_HOME the folder `up` used)."
        )
        self.found = found


class JetStreamUnavailable(EventStoreError):
    """JetStream did not answer in time (a new cluster that has not elected its meta leader)."""

    code = "JETSTREAM_UNAVAILABLE"


class StreamsNotProvisioned(EventStoreError):
    """The streams lack this version's configuration and this NATS user may not change them."""

    code = "STREAMS_NOT_PROVISIONED"

    def __init__(self, problems: list[str]) -> None:
        super().__init__(
            f"the streams are not provisioned for this version ({'; '.join(problems)}) and this NATS user"
            " may not create or update them: run `modelforge provision` as the provisioner user"
            " (compose.yaml: the provision service)"
        )
        self.problems = problems


class PublishFailed(EventStoreError):
    """The server refused the publish for a reason other than a version conflict."""

    code = "PUBLISH_FAILED"

    def __init__(self, subject: str, err_code: int, description: str) -> None:
        super().__init__(f"publish to {subject} refused: [{err_code}] {description}")
        self.err_code = err_code
        self.description = description
