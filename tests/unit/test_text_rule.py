"""The text rule at the command edge (streams.text): any Unicode string, control characters, lone
surrogates and huge strings included, is either returned unchanged or refused INVALID_INPUT naming
its field; nothing in between."""

from __future__ import annotations

import unicodedata
from typing import Annotated

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams import text
from streams.codes import ServingError

# Every code point, surrogates (category Cs) included: hypothesis leaves them out by default.
any_char = st.characters(exclude_categories=())
any_text = st.text(any_char, max_size=300)
huge_text = st.builds(lambda c, n, tail: c * n + tail, any_char, st.integers(0, 50_000), any_text)
rules = st.sampled_from([text.NAME, text.REASON, text.LONG, text.PROSE, text.TextRule(3), text.TextRule(0)])


def allowed(value: str, rule: text.TextRule) -> bool:
    """The rule, said in Unicode's own terms: printable, within the length bound."""
    kept = "\n\t" if rule.multiline else ""
    return len(value) <= rule.max_length and all(
        ch in kept or unicodedata.category(ch) not in ("Cc", "Cs", "Zl", "Zp") for ch in value
    )


@given(st.one_of(any_text, huge_text), rules)
def test_any_text_is_returned_unchanged_or_refused_naming_its_field(value: str, rule: text.TextRule) -> None:
    try:
        result = text.check("field_x", value, rule)
    except ServingError as error:
        assert (error.code, error.param, error.http_status) == ("INVALID_INPUT", "field_x", 422)
        assert not allowed(value, rule)
    else:
        assert result is value
        assert allowed(value, rule)


@pytest.mark.parametrize("bad", ["a\x00b", "\x1b[31mred", "\x7f", "\x85", "a\u2028b", "\ud800", "\udfff x"])
def test_nul_escape_and_other_control_characters_and_lone_surrogates_are_refused(bad: str) -> None:
    with pytest.raises(ServingError) as refused:
        text.check("name", bad)
    assert refused.value.param == "name"


def test_a_multi_line_field_keeps_newlines_and_tabs_but_not_a_carriage_return() -> None:
    assert text.check("review", "line one\n\tline two", text.PROSE) == "line one\n\tline two"
    with pytest.raises(ServingError):
        text.check("review", "line one\r\n", text.PROSE)
    with pytest.raises(ServingError):
        text.check("name", "line one\nline two")


def test_printable_unicode_beyond_ascii_is_accepted() -> None:
    assert text.check("name", "Équipe 北京 🚀 نص") == "Équipe 北京 🚀 نص"


def test_a_refusal_names_the_character_and_never_echoes_the_text() -> None:
    with pytest.raises(ServingError) as refused:
        text.check("reason", "hunter2-secret\x00", text.REASON)
    assert "U+0000" in refused.value.message
    assert "hunter2" not in refused.value.message


class Inner(msgspec.Struct, frozen=True):
    note: Annotated[str, text.PROSE] = ""


class Body(msgspec.Struct, frozen=True, kw_only=True):
    name: str = ""
    reason: Annotated[str, text.REASON] = ""
    config: Annotated[dict[str, str], text.LONG] = {}
    tags: list[str] = []
    inner: Inner = Inner()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (Body(name="a\x00"), "name"),
        (Body(reason="x" * 1_001), "reason"),
        (Body(config={"key\x1b": "v"}), "config"),
        (Body(config={"k": "v\x00"}), "config"),
        (Body(tags=["ok", "\x00"]), "tags"),
        (Body(inner=Inner(note="a\x00")), "note"),
        (Body(name="x" * 257), "name"),
    ],
)
def test_every_string_of_a_body_is_checked_under_its_fields_rule(body: Body, field: str) -> None:
    with pytest.raises(ServingError) as refused:
        text.checked(body)
    assert refused.value.param == field


def test_a_body_within_its_fields_rules_is_returned_as_it_is() -> None:
    body = Body(name="n", reason="r" * 1_000, config={"path": "/" * 4_096}, inner=Inner(note="a\nb"))
    assert text.checked(body) is body
