"""COPY text of created rows reads back as the upserts' JSON would."""

from __future__ import annotations

import pytest

from projections.copytext import NotCopyable, copy_text, fields_for


def test_values_are_formatted_as_json_would_give_them() -> None:
    fields = fields_for(["text", "bigint", "double precision", "boolean", "jsonb", "text"])
    text = copy_text([("a", 7, 1.5, True, ["x"], None), ("b", 0, float("inf"), False, None, "t")], fields)
    assert text == 'a\t7\t1.5\ttrue\t["x"]\t\\N\nb\t0\t\\N\tfalse\t\\N\tt\n'


def test_special_characters_are_escaped_field_by_field() -> None:
    fields = fields_for(["text", "text", "json"])
    text = copy_text([("tab\there", "back\\slash\nline\r", "a\tb")], fields)
    assert text == 'tab\\there\tback\\\\slash\\nline\\r\t"a\\\\tb"\n'


def test_a_value_copy_text_cannot_carry_is_refused() -> None:
    with pytest.raises(NotCopyable):
        copy_text([(("tuple",),)], fields_for(["text"]))
