"""A client's integration environment and purpose (the reference's fields): recorded at creation,
folded into its state, and checked as text."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

from gateway.clients.decide import decide
from gateway.clients.evolve import evolve
from streams import codec
from streams.codes import ServingError
from streams.events.control import ClientCreated
from tests.unit.clients.builders import T0, create


def _with(**fields: str) -> list[object]:
    _, command = create()
    return list(decide(None, dataclasses.replace(command, **fields), T0))


def test_create_records_the_integration_environment_and_purpose() -> None:
    created = _with(integration_environment=" staging ", purpose="search over the handbook")[0]

    assert isinstance(created, ClientCreated)
    assert (created.integration_environment, created.purpose) == ("staging", "search over the handbook")


def test_the_client_state_holds_its_integration_environment_and_purpose() -> None:
    created = _with(integration_environment="production", purpose="support answers")[0]
    assert isinstance(created, ClientCreated)

    state = evolve(None, created)

    assert state is not None
    assert (state.integration_environment, state.purpose) == ("production", "support answers")


@pytest.mark.parametrize("field", ["integration_environment", "purpose"])
def test_a_control_character_in_either_is_refused_invalid_input_naming_it(field: str) -> None:
    with pytest.raises(ServingError) as caught:
        _with(**{field: "a\x00b"})

    assert (caught.value.code, caught.value.param) == ("INVALID_INPUT", field)


def test_a_client_created_before_the_fields_existed_still_decodes_with_them_empty() -> None:
    old = {"client_id": "cl_old", "name": "old", "scopes": ["rag.embedding@1"],
           "requests_per_minute": 60, "max_concurrency": 4}  # fmt: skip

    created = codec.decode("ClientCreated", ClientCreated.schema_version, msgspec.json.encode(old))

    assert isinstance(created, ClientCreated)
    assert (created.integration_environment, created.purpose) == ("", "")
