"""Text as PostgreSQL can store it (projections.storable): NUL becomes U+FFFD, and nothing else
in the text changes."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from projections import storable
from projections.audit import audit_line
from projections.facts import Fact
from streams.events import control as c

# Backslashes, the letters of an escape and NUL, often: the cases an escape-aware scan can get wrong.
tricky = st.text(st.sampled_from(["\x00", "\\", "u", "0", "a", '"', "\ufffd", "é"]), max_size=40)
values = st.recursive(
    st.one_of(tricky, st.text(max_size=20), st.integers(), st.none()),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(tricky, inner, max_size=4),
    max_leaves=12,
)


def without_nul(value: object) -> object:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [without_nul(v) for v in value]
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    return value


@given(values)
def test_json_text_is_the_same_json_with_each_nul_made_u_fffd(value: object) -> None:
    stored = storable.json_text(msgspec.json.encode(value).decode())
    assert "\\u0000" not in stored.replace("\\\\", "")
    assert msgspec.json.decode(stored) == without_nul(value)


@given(st.text())
def test_plain_text_keeps_everything_but_nul(value: str) -> None:
    assert storable.plain(value) == value.replace("\x00", "\ufffd")


def test_an_audit_line_holds_no_nul_whether_escaped_or_raw() -> None:
    event = c.ClientDisabled(client_id="c", reason="a\x00b")
    fact = Fact("MF_EVENTS", 7, "mf.evt.client.c.Client\x00Disabled", {"Mf-Actor": "op\x00"}, event, None, 0)
    line = audit_line(fact)
    assert "\x00" not in line
    assert "\\\\u0000" not in line  # COPY text: a JSON escape's backslash is doubled
